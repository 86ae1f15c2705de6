//! Periodic jobs: one task per pool (none without periodic jobs) that runs a
//! [`PeriodicRunner`] round every periodic job interval, until the pool stops.
//!
//! Every pool that declares periodic jobs runs it; no election is involved:
//! [`PeriodicStorage::fire`](crate::storage::PeriodicStorage::fire) lets exactly one pool store each tick's job.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::failure::Failure;
use super::{ErrorBackoff, jitter};
use crate::periodic::PeriodicRunner;
use crate::storage::Storage;

/// What the periodic job task needs.
pub(crate) struct Cron<S> {
    pub(crate) storage: Arc<S>,
    pub(crate) scheduler: PeriodicRunner,
    /// See `WorkerPool::periodic_interval`.
    pub(crate) interval: Duration,
    pub(crate) stop: CancellationToken,
    pub(crate) failure: Arc<Failure>,
}

impl<S: Storage> Cron<S> {
    /// Rounds until `stop`. A round is never dropped halfway by the stop:
    /// each step is one atomic call, so dropping between steps is safe, and
    /// the loop checks `stop` only between rounds.
    pub(crate) async fn run(self) {
        let mut backoff = ErrorBackoff::default();
        while !self.stop.is_cancelled() {
            let wait = match self.scheduler.run_once(&*self.storage).await {
                Ok(_) => {
                    backoff.reset();
                    jitter(self.interval, 0.1)
                }
                Err(error) if error.is_fatal() => {
                    self.failure.report("schedules", error);
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, "reading the schedules failed; retrying");
                    backoff.next_delay()
                }
            };
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}
