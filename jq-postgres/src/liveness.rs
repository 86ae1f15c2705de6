//! Liveness: how a connection that went silent is noticed and dropped.
//!
//! A server that vanished without FIN or RST (a failover, a NAT that forgot
//! the connection) leaves sockets that neither answer nor fail: a statement
//! sent on one waits forever, and so does sqlx's own check of a connection
//! handed back mid-statement (it pings it on release, without a deadline),
//! which keeps its pool slot too. So:
//!
//! - every storage call is bounded by [`PostgresConfig::response_timeout`](crate::PostgresConfig::response_timeout)
//!   ([`Cuts::timed`]); one that runs out fails with the retryable
//!   `Unavailable`, and so does one its caller drops;
//! - such a cut marks every connection opened before it as suspect: the
//!   pools' hooks ([`Cuts::guard`]) close them when they are handed back
//!   or next taken, instead of pinging them, so the pools open new ones at
//!   once (a healthy connection among them costs one reconnect);
//! - the wake-up listener pings its connection when it has heard nothing
//!   for a while (`wake.rs`).
//!
//! A timed-out call may have been applied: the storage contract already
//! covers the resend (a claim resent with its token, a settlement that
//! finds the job settled).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use jq_core::{Error, Result};
use sqlx::Postgres;
use sqlx::pool::PoolOptions;

use crate::error::BACKEND;

/// When calls were last cut short; shared by a storage's pools.
#[derive(Debug)]
pub(crate) struct Cuts {
    base: Instant,
    /// Nanoseconds after `base` of the last cut; 0 before the first.
    last: AtomicU64,
}

impl Cuts {
    pub(crate) fn new() -> Arc<Cuts> {
        Arc::new(Cuts { base: Instant::now(), last: AtomicU64::new(0) })
    }

    /// A call was cut short now: every connection opened until now is suspect.
    pub(crate) fn cut(&self) {
        let now = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1);
        self.last.fetch_max(now, Ordering::Relaxed);
    }

    /// True for a connection of this `age` opened before the last cut.
    fn suspect(&self, age: Duration) -> bool {
        let last = self.last.load(Ordering::Relaxed);
        if last == 0 {
            return false;
        }
        let opened = Instant::now().checked_sub(age).unwrap_or(self.base);
        let opened = u64::try_from(opened.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX);
        opened <= last
    }

    /// Pool options that close a suspect connection when it is handed
    /// back or taken, instead of pinging or using it.
    pub(crate) fn guard(self: &Arc<Self>, options: PoolOptions<Postgres>) -> PoolOptions<Postgres> {
        let on_acquire = self.clone();
        let on_release = self.clone();
        options
            .before_acquire(move |_, meta| {
                let keep = !on_acquire.suspect(meta.age);
                Box::pin(async move { Ok(keep) })
            })
            .after_release(move |_, meta| {
                let keep = !on_release.suspect(meta.age);
                Box::pin(async move { Ok(keep) })
            })
    }

    /// Runs one storage call with a deadline of `timeout`. When it runs
    /// out, or the caller drops this future before the call answered, the
    /// call's connection is marked suspect before it is dropped.
    pub(crate) async fn timed<T>(&self, timeout: Duration, call: impl Future<Output = Result<T>>) -> Result<T> {
        let mut call = std::pin::pin!(call);
        // Declared after `call`, so dropped before it: the mark is made
        // before the connection goes back to its pool.
        let mut armed = Armed(Some(self));
        let answer = tokio::time::timeout(timeout, call.as_mut()).await;
        match answer {
            Ok(answer) => {
                armed.0 = None;
                answer
            }
            Err(_) => Err(Error::Unavailable {
                backend: BACKEND,
                source: format!(
                    "no answer from PostgreSQL within {timeout:?} (response_timeout): the connection is dropped; \
                     the call may or may not have been applied"
                )
                .into(),
            }),
        }
    }
}

/// Marks a cut when dropped while still armed.
struct Armed<'a>(Option<&'a Cuts>);

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        if let Some(cuts) = self.0 {
            cuts.cut();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_cut_makes_older_connections_suspect_and_newer_ones_not() {
        let cuts = Cuts::new();
        assert!(!cuts.suspect(Duration::from_secs(3600)), "no cut yet");
        let slow = cuts.timed(Duration::from_millis(1), std::future::pending::<Result<()>>()).await;
        assert!(matches!(slow, Err(Error::Unavailable { .. })), "{slow:?}");
        assert!(cuts.suspect(Duration::from_secs(1)), "opened before the cut");
        assert!(!cuts.suspect(Duration::ZERO), "opened now, after the cut");
        let quick = cuts.timed(Duration::from_secs(10), async { Ok(7) }).await;
        assert_eq!(quick.ok(), Some(7));
    }

    #[tokio::test]
    async fn a_call_dropped_by_its_caller_is_a_cut() {
        let cuts = Cuts::new();
        {
            let call = cuts.timed(Duration::from_secs(10), std::future::pending::<Result<()>>());
            let dropped = tokio::time::timeout(Duration::from_millis(1), call).await;
            assert!(dropped.is_err());
        }
        assert!(cuts.suspect(Duration::from_secs(1)));
    }
}
