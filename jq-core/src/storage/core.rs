//! The core trait every backend implements ([`Storage`]: the job
//! lifecycle and its reads, and an accessor per capability), and the
//! conveniences over it ([`StorageExt`]).

use std::time::Duration;

use async_trait::async_trait;

use super::cancel::CancelStorage;
use super::capability::{Capability, ControlStorage, PeriodicStorage, RoleStorage, ThroughputStorage, unsupported};
use super::keys::KeyStorage;
use super::types::{Beat, ClaimRequest, Outcome, Settled, Settlement, WorkSignal};
use super::workflow::WorkflowStorage;
use crate::clock::{Clock, Timestamp};
use crate::error::{Error, Result};
use crate::id::JobId;
use crate::job::{Job, LeaseRef, NewJob};
use crate::read::{JobFilter, Stats};
use crate::state::State;

/// A job store: the core every backend implements (twelve operations on
/// jobs and a clock), plus an accessor per optional [capability](Capability)
/// (none by default). Run `jq_testkit::conformance!` against an
/// implementation to check it keeps the contract.
///
/// Every operation is one atomic step as seen by other callers; concurrency
/// and crash safety are the backend's job, not the caller's.
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// Stores every job of the batch, or none (an error stores nothing).
    ///
    /// - Each job is checked first: its payload against the backend's size
    ///   limit ([`Error::PayloadTooLarge`]).
    /// - A backend that cannot store a batch over several queues in one
    ///   atomic step refuses it with [`Error::BatchNotAtomic`] before
    ///   storing anything (Redis Cluster, when the queues' keys live in
    ///   different hash slots); every other backend takes any batch.
    /// - `run_at` of `None` or `<= now` gives Pending, else Scheduled.
    ///   `attempts` starts at 0, `created_at` is now.
    /// - A job whose id is already stored is not stored again; its id is
    ///   returned and the stored job is left as it is.
    /// - A job whose `unique_key` matches a non-terminal job of the same
    ///   queue (already stored, or earlier in the same batch) is not stored;
    ///   the existing job's id is returned in its place. When several live
    ///   jobs share the key (see [`Storage::retry`]), the smallest id.
    ///
    /// Returns one id per input job, in input order.
    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>>;

    /// Atomically moves up to `limit` claimable jobs of the asked queues to
    /// Running, each with a fresh lease (`attempts + 1`, the request's
    /// token, `expires_at = now + lease`), and returns them.
    ///
    /// - Order: priority high to low, then `run_at`, then id.
    /// - A job whose lease is held is never returned to a second claimer,
    ///   however many claimers run at once; a claim never waits on jobs
    ///   another claimer is taking.
    /// - Never returns more than `limit` jobs; `limit` 0 returns none.
    /// - With [`ControlStorage`]: takes nothing from a paused queue, and no
    ///   more from a queue than its limits allow, checked in the same
    ///   atomic step; a job held back is not changed.
    /// - With [`KeyStorage`]: a keyed job is taken only when its key's
    ///   limits allow it, and a queue's keys are taken in turn (the
    ///   contract's "Keyed jobs"); jobs without a key keep the order above.
    /// - A resend ([`ClaimRequest::resend`]) whose token already holds
    ///   Running jobs returns exactly those and claims nothing.
    /// - Everything taken is returned: a failure after jobs became Running
    ///   under the token is logged, the jobs concerned stay Running for
    ///   recover, and the others are returned. An error means nothing was
    ///   claimed (or its answer was lost: resend with the same token).
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Job>>;

    /// Applies a batch of fenced outcomes (ack, nack, bury, release); see
    /// [`Outcome`].
    ///
    /// Items apply in order, each fenced on its own: a later item on the
    /// same job sees the earlier one's effect (`[Release, Ack]` on one lease
    /// gives `Ok(Pending)` then `LeaseLost`). One stale token gives
    /// `Err(LeaseLost)` at its place and does not stop the others. The
    /// outer error is for the backend failing as a whole. Errors are
    /// recorded with the job's current attempt number. A job whose
    /// attempts reached `max_attempts` goes to Dead on a nack.
    async fn settle(&self, batch: Vec<Settlement>) -> Result<Vec<Settled>>;

    /// Extends each valid lease to `now + lease` and returns the ids whose
    /// lease was lost (stale token, or job no longer Running) in
    /// [`Beat::lost`], and, with [`CancelStorage`], the ids of extended jobs
    /// holding a cancel request in [`Beat::cancel`] (a backend without it
    /// answers [`Beat::lost`]).
    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<Beat>;

    /// Makes due Scheduled jobs (`run_at <= now`) Pending and returns how
    /// many it moved. Idempotent; concurrent promoters move each job once.
    async fn promote(&self) -> Result<u64>;

    /// Running jobs whose lease expired (`expires_at <= now`) go back to
    /// Pending, or to Dead when no attempt is left, with an error
    /// "lease expired" recorded for the lost attempt; one holding a cancel
    /// request ([`CancelStorage`]) goes to Cancelled instead, with no
    /// error. Returns how many.
    /// Idempotent, safe from many processes at once, and never overwrites a
    /// job that a concurrent ack just finished. An expired job whose stored
    /// fields recover cannot use goes to Dead with the reason (counted too),
    /// and does not stop the others.
    async fn recover(&self) -> Result<u64>;

    /// One job, or [`Error::NotFound`].
    async fn get(&self, id: JobId) -> Result<Job>;

    /// One page of jobs matching `filter`, by ascending id.
    ///
    /// A stored job that cannot be decoded is left out (logged at error
    /// level with its id and the reason; [`Storage::get`] of it gives
    /// [`Error::Corrupt`]) and the page is filled from the jobs after it:
    /// a page shorter than its size still means there are no more.
    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>>;

    /// Counts by queue and state; agrees with [`Storage::list`]. Jobs whose
    /// stored queue or state cannot be read are left out and logged.
    async fn stats(&self) -> Result<Stats>;

    /// An operator's retry: Dead -> Pending (run_at now, lease cleared,
    /// errors kept). The job gets one more attempt: `max_attempts` becomes
    /// at least `attempts + 1`. Other states give [`Error::InvalidState`].
    ///
    /// Allowed even when a newer live job of the queue holds the job's
    /// unique key: both then hold it, enqueue of the key answers with the
    /// smaller id, and the key stays taken until the last of them is
    /// terminal.
    async fn retry(&self, id: JobId) -> Result<()>;

    /// Scheduled or Pending -> Cancelled. Other states give
    /// [`Error::InvalidState`]; an unknown id [`Error::NotFound`].
    async fn cancel(&self, id: JobId) -> Result<()>;

    /// Deletes every job in the terminal `state` that finished before
    /// `older_than`, and returns how many. A non-terminal state gives
    /// [`Error::InvalidInput`]. Backends delete in bounded batches (a
    /// statement or script per batch, looping until none is left) so no
    /// single write holds locks or the WAL for long.
    async fn purge(&self, state: State, older_than: Timestamp) -> Result<u64>;

    /// Creates or upgrades the backend's schema where it has one, and
    /// returns how many migrations were applied; safe to call concurrently
    /// and again. The default does nothing and returns 0 (a backend with
    /// no schema, or one that migrates when it opens).
    async fn migrate(&self) -> Result<usize> {
        Ok(0)
    }

    /// A signal that changes when work may have arrived (a same-process
    /// enqueue, a NOTIFY, a pub/sub message), or `None` when the backend has
    /// none; the pool then polls.
    fn subscribe(&self) -> Option<WorkSignal> {
        None
    }

    /// Another handle on the same store whose connections are its own,
    /// opened by the tokio runtime that first uses them; `None` (the
    /// default) when this storage's calls do not depend on the runtime that
    /// made it (in memory, or on threads of its own, like SQLite's).
    ///
    /// The worker pool heartbeats on a thread of its own, so that handlers
    /// that block the application's runtime threads cannot starve the
    /// leases. A tokio socket is driven by the runtime that opened it: if
    /// the heartbeat shared the application's connections, it would stall
    /// with them. A backend on tokio sockets returns a handle here, called
    /// once per pool on the heartbeat's thread, that shares this handle's
    /// settings and caches but opens its connections there.
    async fn independent(&self) -> Option<Self>
    where
        Self: Sized,
    {
        None
    }

    /// The clock this storage takes "now" from. The worker pool uses it too
    /// (retention cut-offs), so a storage on a [`ManualClock`](crate::ManualClock)
    /// moves the whole pool's time.
    fn clock(&self) -> Clock;

    /// Named roles ([`Capability::Roles`]), when the backend has them.
    fn as_roles(&self) -> Option<&dyn RoleStorage> {
        None
    }

    /// Periodic jobs ([`Capability::Periodic`]), when the backend has them.
    fn as_periodic(&self) -> Option<&dyn PeriodicStorage> {
        None
    }

    /// Queue controls ([`Capability::Controls`]), when the backend has them.
    fn as_controls(&self) -> Option<&dyn ControlStorage> {
        None
    }

    /// Throughput per minute ([`Capability::Throughput`]), when the backend
    /// has it.
    fn as_throughput(&self) -> Option<&dyn ThroughputStorage> {
        None
    }

    /// Cancelling running jobs and their progress
    /// ([`Capability::Cancellation`]), when the backend has it.
    fn as_cancellation(&self) -> Option<&dyn CancelStorage> {
        None
    }

    /// Results and dependencies ([`Capability::Workflows`]), when the
    /// backend has them.
    fn as_workflows(&self) -> Option<&dyn WorkflowStorage> {
        None
    }

    /// Keyed jobs ([`Capability::Keys`]), when the backend has them. A
    /// backend without them refuses keyed jobs ([`refuse_keys`](super::refuse_keys)).
    fn as_keys(&self) -> Option<&dyn KeyStorage> {
        None
    }
}

/// Conveniences over [`Storage`]: one job at a time, the capabilities as
/// results. Implemented for every storage; backends never implement it.
#[async_trait]
pub trait StorageExt: Storage {
    /// Every capability this storage declares, in [`Capability::ALL`]'s
    /// order.
    fn capabilities(&self) -> Vec<Capability> {
        Capability::ALL.into_iter().filter(|c| c.of(self)).collect()
    }

    /// [`Storage::as_roles`], or [`Error::Unsupported`].
    fn require_roles(&self) -> Result<&dyn RoleStorage> {
        self.as_roles().ok_or_else(|| unsupported(Capability::Roles))
    }

    /// [`Storage::as_periodic`], or [`Error::Unsupported`].
    fn require_periodic(&self) -> Result<&dyn PeriodicStorage> {
        self.as_periodic().ok_or_else(|| unsupported(Capability::Periodic))
    }

    /// [`Storage::as_controls`], or [`Error::Unsupported`].
    fn require_controls(&self) -> Result<&dyn ControlStorage> {
        self.as_controls().ok_or_else(|| unsupported(Capability::Controls))
    }

    /// [`Storage::as_throughput`], or [`Error::Unsupported`].
    fn require_throughput(&self) -> Result<&dyn ThroughputStorage> {
        self.as_throughput().ok_or_else(|| unsupported(Capability::Throughput))
    }

    /// [`Storage::as_cancellation`], or [`Error::Unsupported`].
    fn require_cancellation(&self) -> Result<&dyn CancelStorage> {
        self.as_cancellation().ok_or_else(|| unsupported(Capability::Cancellation))
    }

    /// [`Storage::as_workflows`], or [`Error::Unsupported`].
    fn require_workflows(&self) -> Result<&dyn WorkflowStorage> {
        self.as_workflows().ok_or_else(|| unsupported(Capability::Workflows))
    }

    /// [`Storage::as_keys`], or [`Error::Unsupported`].
    fn require_keys(&self) -> Result<&dyn KeyStorage> {
        self.as_keys().ok_or_else(|| unsupported(Capability::Keys))
    }

    /// Enqueues one job and returns its id (the existing job's id when a
    /// unique key matched).
    async fn enqueue_one(&self, job: NewJob) -> Result<JobId> {
        let mut ids = self.enqueue(vec![job]).await?;
        ids.pop().ok_or_else(|| Error::Backend { backend: "storage", source: "enqueue returned no id".into() })
    }

    /// Applies one outcome; `Err(LeaseLost)` when the token is stale.
    async fn settle_one(&self, lease: LeaseRef, outcome: Outcome) -> Result<State> {
        let mut results = self.settle(vec![Settlement { lease, outcome }]).await?;
        results
            .pop()
            .unwrap_or_else(|| Err(Error::Backend { backend: "storage", source: "settle returned no result".into() }))
    }

    /// Ack: Running -> Completed.
    async fn ack(&self, lease: LeaseRef) -> Result<()> {
        self.settle_one(lease, Outcome::Ack).await.map(drop)
    }

    /// Nack: records the error; Scheduled after `delay` with attempts left,
    /// else Dead.
    async fn nack(&self, lease: LeaseRef, error: impl Into<String> + Send, delay: Duration) -> Result<State> {
        self.settle_one(lease, Outcome::Nack { error: error.into(), delay }).await
    }

    /// Bury: records the error and goes to Dead now.
    async fn bury(&self, lease: LeaseRef, error: impl Into<String> + Send) -> Result<()> {
        self.settle_one(lease, Outcome::Bury { error: error.into() }).await.map(drop)
    }

    /// Release: Running -> Pending without counting the attempt.
    async fn release(&self, lease: LeaseRef) -> Result<()> {
        self.settle_one(lease, Outcome::Release { delay: Duration::ZERO }).await.map(drop)
    }
}

impl<S: Storage + ?Sized> StorageExt for S {}

impl Capability {
    /// True when `storage` declares this capability.
    pub fn of<S: Storage + ?Sized>(self, storage: &S) -> bool {
        match self {
            Capability::Roles => storage.as_roles().is_some(),
            Capability::Periodic => storage.as_periodic().is_some(),
            Capability::Controls => storage.as_controls().is_some(),
            Capability::Throughput => storage.as_throughput().is_some(),
            Capability::Cancellation => storage.as_cancellation().is_some(),
            Capability::Workflows => storage.as_workflows().is_some(),
            Capability::Keys => storage.as_keys().is_some(),
        }
    }
}
