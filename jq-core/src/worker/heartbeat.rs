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
//!
//! The heartbeat runs on a thread of its own, with connections of its own
//! ([`Storage::independent`]): a handler that blocks its thread (a
//! synchronous call in an async handler) stalls every task of that runtime
//! thread, and when all of them are blocked, every socket that runtime
//! drives; the leases must not depend on it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::cancel::RunControl;
use super::failure::Failure;
use super::pace::ErrorBackoff;
use crate::id::{JobId, LeaseToken};
use crate::job::LeaseRef;
use crate::storage::{ProgressReport, Storage};

/// One held lease and the control that stops its handler.
#[derive(Debug)]
struct Held {
    token: LeaseToken,
    /// The run's stop signals and pending progress.
    control: Arc<RunControl>,
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
    pub(crate) fn insert(&self, lease: LeaseRef, control: Arc<RunControl>) {
        let earlier = self.lock().insert(lease.id, Held { token: lease.token, control, finished: false });
        if let Some(earlier) = earlier.filter(|h| h.token != lease.token && !h.finished) {
            tracing::warn!(job = %lease.id, "lease lost and the job claimed again by this pool: cancelling the earlier run");
            earlier.control.lose();
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

    /// Passes the storage's cancel requests (of `sent`, the leases that
    /// heartbeat presented) to the runs still going, and returns the ids
    /// of those that had not heard of it yet.
    fn request_cancel(&self, ids: &[JobId], sent: &[LeaseRef]) -> Vec<JobId> {
        let sent: HashMap<JobId, LeaseToken> = sent.iter().map(|l| (l.id, l.token)).collect();
        let map = self.lock();
        ids.iter()
            .filter(|id| {
                map.get(id)
                    .filter(|h| !h.finished && sent.get(id) == Some(&h.token))
                    .is_some_and(|h| h.control.request_cancel())
            })
            .copied()
            .collect()
    }

    /// The progress reported since the last beat by runs still going, with
    /// the control to put a value back into when sending it fails.
    fn take_progress(&self) -> Vec<(ProgressReport, Arc<RunControl>)> {
        let map = self.lock();
        map.iter()
            .filter_map(|(id, h)| {
                let value = h.control.take_progress()?;
                Some((ProgressReport { lease: LeaseRef { id: *id, token: h.token }, value }, h.control.clone()))
            })
            .collect()
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
                held.control.lose();
                running.push(*id);
            }
        }
        running
    }
}

/// What the heartbeat needs.
pub(crate) struct Heartbeat<S> {
    pub(crate) storage: Arc<S>,
    pub(crate) inflight: Arc<Inflight>,
    pub(crate) interval: Duration,
    pub(crate) lease: Duration,
    /// Stops the beating (the last step of the shutdown).
    pub(crate) halt: CancellationToken,
    pub(crate) failure: Arc<Failure>,
}

impl<S: Storage> Heartbeat<S> {
    /// Starts the heartbeat on a thread of its own, with a one-thread tokio
    /// runtime and the storage's [`Storage::independent`] handle (or, for a
    /// storage that has none, a clone), so that handlers blocking every
    /// thread of the application's runtime cannot starve the leases: the
    /// connections of that runtime would stall with it. The receiver
    /// completes when the heartbeat has stopped. Falls back to a task on
    /// the current runtime if no thread can be started.
    pub(crate) fn start(self) -> oneshot::Receiver<()> {
        let (done, stopped) = oneshot::channel();
        // Logs of the heartbeat go where the pool's go, also when the
        // application set its subscriber for its own thread only.
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
        let handoff = Arc::new(Mutex::new(Some((self, done))));
        let spawned = match runtime {
            Ok(runtime) => {
                let mine = handoff.clone();
                std::thread::Builder::new().name("jq-heartbeat".to_owned()).spawn(move || {
                    let taken = mine.lock().unwrap_or_else(|e| e.into_inner()).take();
                    if let Some((heartbeat, done)) = taken {
                        tracing::dispatcher::with_default(&dispatch, || runtime.block_on(heartbeat.run_own()));
                        let _ = done.send(());
                    }
                })
            }
            Err(error) => Err(error),
        };
        if let Err(error) = spawned {
            let taken = handoff.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some((heartbeat, done)) = taken {
                tracing::warn!(%error, "cannot start the heartbeat's own thread; it runs on the pool's runtime");
                tokio::spawn(async move {
                    heartbeat.run(None).await;
                    let _ = done.send(());
                });
            }
        }
        stopped
    }

    /// On the heartbeat's thread: opens the storage's own handle, then beats.
    async fn run_own(self) {
        // Bounded, so a store that cannot be reached now delays the leases
        // little: the shared handle serves then. A third of the lease at
        // least, as before the interval dropped to a second for cancels: a
        // slow connect must not leave the beats on the shared connections.
        let bound = self.interval.max(self.lease / 3);
        let own = tokio::select! {
            _ = self.halt.cancelled() => return,
            own = tokio::time::timeout(bound, S::independent(&self.storage)) => own.ok().flatten(),
        };
        self.run(own).await;
    }

    /// Extends every held lease once per `interval` until `halt` fires,
    /// through `own` if given, else the shared storage. A failed beat is
    /// tried again after a short backoff, not a whole interval: with the
    /// default interval of a third of the lease, a beat that waited out a
    /// dead connection's timeout still has time to reach the store on a
    /// new one. A fatal error is reported and ends the beating; a halt
    /// drops a beat in flight (extending a lease is idempotent).
    async fn run(self, own: Option<S>) {
        let own = own.map(Arc::new);
        let storage = own.as_ref().unwrap_or(&self.storage);
        let mut errors = ErrorBackoff::default();
        let mut wait = self.interval;
        loop {
            tokio::select! {
                _ = self.halt.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            wait = self.interval;
            let leases = self.inflight.snapshot();
            if leases.is_empty() {
                continue;
            }
            self.send_progress(storage).await;
            let beat = tokio::select! {
                _ = self.halt.cancelled() => return,
                beat = storage.heartbeat(&leases, self.lease) => beat,
            };
            match beat {
                Ok(beat) => {
                    errors.reset();
                    if !beat.cancel.is_empty() {
                        let news = self.inflight.request_cancel(&beat.cancel, &leases);
                        if !news.is_empty() {
                            tracing::info!(jobs = ?news, "cancel requested for {} running job(s): stopping them", news.len());
                        }
                    }
                    if beat.lost.is_empty() {
                        tracing::trace!(held = leases.len(), "leases extended");
                        continue;
                    }
                    let running = self.inflight.lose(&beat.lost, &leases);
                    if !running.is_empty() {
                        tracing::warn!(
                            lost = ?running,
                            "lease lost for {} running job(s): cancelling their handlers (another worker may run them)",
                            running.len()
                        );
                    }
                }
                Err(error) if error.is_fatal() => {
                    self.failure.report("heartbeat", error);
                    return;
                }
                Err(error) => {
                    wait = errors.next_delay().min(self.interval);
                    tracing::warn!(%error, held = leases.len(), retry_in = ?wait, "heartbeat failed; retrying");
                }
            }
        }
    }
}

impl<S: Storage> Heartbeat<S> {
    /// Stores the progress reported since the last beat, in one call, on a
    /// storage with [`CancelStorage`](crate::storage::CancelStorage) (the
    /// pool refuses `progress` on others, so nothing waits there). A value
    /// that could not be sent waits for the next beat, unless a newer one
    /// came; a stale lease's value is dropped.
    async fn send_progress(&self, storage: &S) {
        let pending = self.inflight.take_progress();
        if pending.is_empty() {
            return;
        }
        let Some(cancels) = storage.capabilities().cancellation else { return };
        let reports: Vec<ProgressReport> = pending.iter().map(|(r, _)| r.clone()).collect();
        let sent = tokio::select! {
            _ = self.halt.cancelled() => return,
            sent = cancels.progress(&reports) => sent,
        };
        if let Err(error) = sent {
            tracing::warn!(%error, jobs = reports.len(), "storing progress failed; trying again at the next beat");
            for (report, control) in pending {
                control.restore_progress(report.value);
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
        let abort = CancellationToken::new();
        let old_run = Arc::new(RunControl::new(&abort));
        inflight.insert(old, old_run.clone());
        let sent = inflight.snapshot();
        // Lost, handed back and claimed again by this pool before the beat answered.
        let new_run = Arc::new(RunControl::new(&abort));
        inflight.insert(new, new_run.clone());
        assert!(inflight.request_cancel(&[id], &sent).is_empty(), "a cancel heard for the old lease");
        assert!(!new_run.is_cancel_requested());
        assert_eq!(inflight.request_cancel(&[id], &[new]), vec![id]);
        assert!(new_run.is_cancel_requested() && !new_run.is_lost());
        assert!(old_run.is_lost(), "the earlier run is cancelled when the job is claimed again");
        assert!(inflight.lose(&[id], &sent).is_empty(), "the report is about the old lease");
        assert!(!new_run.is_lost());
        assert_eq!(inflight.snapshot(), vec![new]);
        // A report about the lease held now does cancel it.
        assert_eq!(inflight.lose(&[id], &[new]), vec![id]);
        assert!(new_run.is_lost());
        assert_eq!(inflight.len(), 0);
    }
}
