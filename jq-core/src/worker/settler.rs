//! Settler: records the executors' outcomes, many per storage call.
//!
//! It takes whatever outcomes are queued (up to [`MAX_BATCH`]) and writes
//! them with one [`Storage::settle`]. A stale lease (`LeaseLost`) is
//! logged, not an error: the lease expired and the job was handed on. A
//! failing storage is retried with a bounded backoff; an outcome is never
//! dropped silently. Only when the shutdown's flush budget runs out does it
//! give up, naming each job at error level (its lease then expires and
//! recovery runs it again). A fatal error ([`Error::is_fatal`]) is not
//! retried: it is reported (the pool shuts down) and the batch's outcomes
//! are logged as not recorded.
//!
//! After each batch the storage answered, it bumps the `settled` counter:
//! the jobs of the batch have left Running, so the slots they held under a
//! queue's or a key's concurrency limit are free, and a fetcher whose last
//! claim such a limit cut short claims again at once.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::failure::Failure;
use super::heartbeat::Inflight;
use super::pace::ErrorBackoff;
use crate::error::Error;
use crate::job::LeaseRef;
use crate::observe::JobMetrics;
use crate::storage::{Outcome, Settlement, Storage};

/// Most outcomes written by one storage call.
pub const MAX_BATCH: usize = 256;

/// One outcome to record.
pub(crate) struct Finished {
    pub(crate) lease: LeaseRef,
    pub(crate) outcome: Outcome,
    /// Where to count the recorded state (`None`: observation off).
    pub(crate) metrics: Option<Arc<JobMetrics>>,
}

/// How many outcomes may wait for the settler. Executors free their slot
/// once their outcome is queued here, so the fetcher claims again while the
/// previous batch is being written; a full queue (a slow or failing storage)
/// makes executors wait with their slots, and claiming stops.
pub(crate) fn backlog(concurrency: usize) -> usize {
    concurrency.max(MAX_BATCH)
}

/// Writes outcomes until every sender is gone and the queue is empty.
pub(crate) async fn run<S: Storage>(
    storage: Arc<S>,
    mut finished: mpsc::Receiver<Finished>,
    inflight: Arc<Inflight>,
    settled: watch::Sender<u64>,
    give_up: CancellationToken,
    failure: Arc<Failure>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while finished.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let span = tracing::debug_span!("jq.settle", jobs = batch.len());
        write(&*storage, &batch, &give_up, &failure).instrument(span).await;
        for done in batch.drain(..) {
            inflight.remove(done.lease);
        }
        // Written (or given up on): either way the fetcher may look again.
        settled.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// Writes one batch, retrying the storage until it answers or `give_up`.
async fn write<S: Storage>(storage: &S, batch: &[Finished], give_up: &CancellationToken, failure: &Failure) {
    let settlements: Vec<Settlement> =
        batch.iter().map(|f| Settlement { lease: f.lease, outcome: f.outcome.clone() }).collect();
    let mut errors = ErrorBackoff::default();
    loop {
        // The shutdown's flush budget bounds a call in flight too: a store
        // that does not answer must not hold the shutdown. The call may
        // have been applied or not; either way the job is safe (Completed,
        // or recovered and run again once its lease expires).
        let answer = tokio::select! {
            answer = storage.settle(settlements.clone()) => answer,
            _ = give_up.cancelled() => {
                not_recorded(&settlements);
                return;
            }
        };
        match answer {
            Ok(results) => {
                if results.len() != settlements.len() {
                    tracing::error!(
                        sent = settlements.len(),
                        answered = results.len(),
                        "storage answered a different number of settlements than it was sent"
                    );
                }
                for ((settlement, result), finished) in settlements.iter().zip(results).zip(batch) {
                    let id = settlement.lease.id;
                    match result {
                        Ok(state) => {
                            if let Some(metrics) = &finished.metrics {
                                metrics.recorded(&settlement.outcome, state);
                            }
                            tracing::debug!(job = %id, %state, outcome = ?settlement.outcome, "recorded")
                        }
                        Err(Error::LeaseLost { .. }) => tracing::warn!(
                            job = %id,
                            outcome = ?settlement.outcome,
                            "lease lost before the outcome was recorded: the job was handed on, or an earlier send \
                             of this outcome was applied and its answer lost (a broken connection, a failover); \
                             outcome dropped"
                        ),
                        Err(error) => {
                            tracing::error!(job = %id, %error, outcome = ?settlement.outcome, "outcome refused")
                        }
                    }
                }
                return;
            }
            Err(error) if error.is_fatal() => {
                let jobs: Vec<String> = settlements.iter().map(|c| c.lease.id.to_string()).collect();
                tracing::error!(
                    jobs = %jobs.join(","),
                    "outcomes NOT recorded (fatal storage error): their leases will expire and recovery will run \
                     the jobs again"
                );
                failure.report("settler", error);
                return;
            }
            Err(error) => {
                let delay = errors.next_delay();
                tracing::warn!(%error, jobs = settlements.len(), retry_in = ?delay, "recording outcomes failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = give_up.cancelled() => {
                        not_recorded(&settlements);
                        return;
                    }
                }
            }
        }
    }
}

/// Logs each outcome the shutdown gave up on.
fn not_recorded(settlements: &[Settlement]) {
    for settlement in settlements {
        tracing::error!(
            job = %settlement.lease.id,
            outcome = ?settlement.outcome,
            "shutting down with the storage failing: outcome NOT recorded; the lease will expire and recovery will run the job again"
        );
    }
}
