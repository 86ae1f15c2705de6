//! Heartbeat: keeps the leases of every job this pool holds alive.
//!
//! The in-flight table is filled by the fetcher at claim time (so jobs
//! claimed but not yet started are covered too) and emptied by the settler
//! once a job's outcome is durable. Every interval, one
//! [`Storage::heartbeat`] call extends all of them; a lease reported lost
//! cancels that job's token, and the executor drops its handler (another
//! worker may hold the job now). A job whose handler already finished is
//! still extended until its outcome is written, but its loss is not news:
//! usually the heartbeat merely raced the settler's write of its ack.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::failure::Failure;
use crate::job::{JobId, LeaseRef, LeaseToken};
use crate::storage::Storage;

/// One held lease and the token that stops its handler.
#[derive(Debug)]
struct Held {
    token: LeaseToken,
    cancel: CancellationToken,
    /// The handler is done; the outcome waits for the settler.
    finished: bool,
}

/// The leases this pool holds. A std mutex: every critical section is a
/// few map operations and none spans an `.await`.
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    map: Mutex<HashMap<JobId, Held>>,
}

impl Inflight {
    fn lock(&self) -> MutexGuard<'_, HashMap<JobId, Held>> {
        // A panic while holding this lock cannot leave the map half-changed
        // (single inserts and removes), so a poisoned lock is still usable.
        self.map.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts tracking a claimed job. When this pool still tracks an
    /// earlier lease of the same job (lost, handed back, and claimed again
    /// by this pool before a heartbeat noticed), that lease is gone: its
    /// handler is cancelled as a lost lease's would be, or it would hold
    /// its executor until it finished by itself.
    pub(crate) fn insert(&self, lease: LeaseRef, cancel: CancellationToken) {
        let earlier = self.lock().insert(lease.id, Held { token: lease.token, cancel, finished: false });
        if let Some(earlier) = earlier.filter(|h| h.token != lease.token && !h.finished) {
            tracing::warn!(job = %lease.id, "lease lost and the job claimed again by this pool: cancelling the earlier run");
            earlier.cancel.cancel();
        }
    }

    /// Stops tracking a job (its outcome is durable, or its lease is gone).
    /// Only removes the entry of the same claim.
    pub(crate) fn remove(&self, lease: LeaseRef) {
        let mut map = self.lock();
        if map.get(&lease.id).is_some_and(|h| h.token == lease.token) {
            map.remove(&lease.id);
        }
    }

    /// Marks a job whose handler finished (its outcome is on its way).
    pub(crate) fn finish(&self, lease: LeaseRef) {
        if let Some(held) = self.lock().get_mut(&lease.id).filter(|h| h.token == lease.token) {
            held.finished = true;
        }
    }

    /// How many leases are held.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn snapshot(&self) -> Vec<LeaseRef> {
        self.lock().iter().map(|(id, h)| LeaseRef { id: *id, token: h.token }).collect()
    }

    /// Forgets the jobs whose lease the storage reported lost (of `sent`,
    /// the leases that heartbeat presented), cancels the handlers still
    /// running, and returns their ids. A job claimed again by this pool
    /// since the snapshot holds a new lease: that one is not touched.
    fn lose(&self, lost: &[JobId], sent: &[LeaseRef]) -> Vec<JobId> {
        let sent: HashMap<JobId, LeaseToken> = sent.iter().map(|l| (l.id, l.token)).collect();
        let mut map = self.lock();
        let mut running = Vec::new();
        for id in lost {
            if map.get(id).is_none_or(|h| sent.get(id) != Some(&h.token)) {
                continue;
            }
            if let Some(held) = map.remove(id).filter(|h| !h.finished) {
                held.cancel.cancel();
                running.push(*id);
            }
        }
        running
    }
}

/// Extends every held lease once per `interval` until `halt` fires. Errors
/// are logged and retried at the next beat: with the default interval of a
/// third of the lease, two beats may fail before a lease is at risk. A
/// fatal error is reported and ends the beating.
pub(crate) async fn run<S: Storage>(
    storage: Arc<S>,
    inflight: Arc<Inflight>,
    interval: Duration,
    lease: Duration,
    halt: CancellationToken,
    failure: Arc<Failure>,
) {
    loop {
        tokio::select! {
            _ = halt.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let leases = inflight.snapshot();
        if leases.is_empty() {
            continue;
        }
        match storage.heartbeat(&leases, lease).await {
            Ok(lost) if lost.is_empty() => tracing::trace!(held = leases.len(), "leases extended"),
            Ok(lost) => {
                let running = inflight.lose(&lost, &leases);
                if !running.is_empty() {
                    tracing::warn!(
                        lost = ?running,
                        "lease lost for {} running job(s): cancelling their handlers (another worker may run them)",
                        running.len()
                    );
                }
            }
            Err(error) if error.is_fatal() => {
                failure.report("heartbeat", error);
                return;
            }
            Err(error) => {
                tracing::warn!(%error, held = leases.len(), "heartbeat failed; retrying at the next beat");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(id: JobId) -> LeaseRef {
        LeaseRef { id, token: LeaseToken::new() }
    }

    #[test]
    fn a_job_claimed_again_keeps_its_new_lease_when_the_old_one_is_reported_lost() {
        let inflight = Inflight::default();
        let id = JobId(uuid::Uuid::now_v7());
        let (old, new) = (lease(id), lease(id));
        let (old_run, new_run) = (CancellationToken::new(), CancellationToken::new());
        inflight.insert(old, old_run.clone());
        let sent = inflight.snapshot();
        // Lost, handed back and claimed again by this pool before the beat answered.
        inflight.insert(new, new_run.clone());
        assert!(old_run.is_cancelled(), "the earlier run is cancelled when the job is claimed again");
        assert!(inflight.lose(&[id], &sent).is_empty(), "the report is about the old lease");
        assert!(!new_run.is_cancelled());
        assert_eq!(inflight.snapshot(), vec![new]);
        // A report about the lease held now does cancel it.
        assert_eq!(inflight.lose(&[id], &[new]), vec![id]);
        assert!(new_run.is_cancelled());
        assert_eq!(inflight.len(), 0);
    }
}
