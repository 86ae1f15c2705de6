//! Maintenance: promote due Scheduled jobs, recover expired leases, and purge
//! finished jobs past their retention.
//!
//! Three independent jittered loops inside one task. Each operation is
//! idempotent and safe from many processes at once, so every pool runs them;
//! an error is logged and the next round tries again.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::jitter;
use crate::clock::Timestamp;
use crate::job::State;
use crate::storage::Storage;

/// What maintenance needs.
pub(crate) struct Maintenance<S> {
    pub(crate) storage: Arc<S>,
    pub(crate) promote_interval: Duration,
    pub(crate) recover_interval: Duration,
    pub(crate) purge_interval: Duration,
    /// (terminal state, how long to keep it); `None` keeps forever.
    pub(crate) retention: Vec<(State, Option<Duration>)>,
    pub(crate) stop: CancellationToken,
}

impl<S: Storage> Maintenance<S> {
    /// Runs the three loops until `stop` fires.
    pub(crate) async fn run(self) {
        let work = async {
            tokio::join!(self.promote_loop(), self.recover_loop(), self.purge_loop());
        };
        tokio::select! {
            _ = self.stop.cancelled() => {}
            _ = work => {}
        }
    }

    async fn promote_loop(&self) {
        loop {
            match self.storage.promote().await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(promoted = n, "due scheduled jobs made pending"),
                Err(error) => tracing::warn!(%error, "promote failed; retrying next round"),
            }
            tokio::time::sleep(jitter(self.promote_interval, 0.2)).await;
        }
    }

    async fn recover_loop(&self) {
        loop {
            match self.storage.recover().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(recovered = n, "jobs with expired leases handed back"),
                Err(error) => tracing::warn!(%error, "recover failed; retrying next round"),
            }
            tokio::time::sleep(jitter(self.recover_interval, 0.2)).await;
        }
    }

    async fn purge_loop(&self) {
        if self.retention.iter().all(|(_, keep)| keep.is_none()) {
            return;
        }
        loop {
            // First round after one interval: a restart loop must not turn
            // into a purge loop.
            tokio::time::sleep(jitter(self.purge_interval, 0.2)).await;
            for &(state, keep) in &self.retention {
                let Some(keep) = keep else { continue };
                let older_than = before(self.storage.clock().now(), keep);
                match self.storage.purge(state, older_than).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(purged = n, %state, "finished jobs past retention deleted"),
                    Err(error) => tracing::warn!(%error, %state, "purge failed; retrying next round"),
                }
            }
        }
    }
}

/// `now - keep`, saturating at the earliest instant.
fn before(now: Timestamp, keep: Duration) -> Timestamp {
    chrono::Duration::from_std(keep).ok().and_then(|d| now.checked_sub_signed(d)).unwrap_or(Timestamp::MIN_UTC)
}
