//! [`FaultyStorage`]: any storage, with failures injected where a test says.
//!
//! A failure comes in one of two shapes ([`When`]): *before* the call (the
//! inner storage is not called: nothing happened, as when the server was
//! unreachable) or *after its effect* (the inner storage did the work, and
//! the answer is replaced by an error: as when the connection dropped
//! while the reply was on its way). The second is the hard one: the caller
//! cannot tell it from the first, and must not lose what the call did.
//!
//! ```
//! use jq_core::{Error, Storage};
//! use jq_testkit::faults::{FaultyStorage, Operation, When};
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let storage = FaultyStorage::new(jq_testkit::MemoryStorage::new());
//! storage.fail(Operation::Stats, 2, When::AfterEffect); // the 2nd stats call
//! assert!(storage.stats().await.is_ok());
//! assert!(matches!(storage.stats().await, Err(Error::Unavailable { .. })));
//! assert!(storage.stats().await.is_ok());
//! assert_eq!((storage.calls(Operation::Stats), storage.injected()), (3, 1));
//! # });
//! ```
//!
//! Clones share the counters and the planned faults, so a test keeps one
//! clone and hands another to a worker pool. Calls are numbered per
//! operation from 1, in the order they start.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use jq_core::{
    ClaimRequest, Clock, Election, Error, Fire, FireOutcome, Job, JobFilter, JobId, Leader, LeaseRef, LeaseToken,
    NewJob, PeriodicInfo, QueueInfo, QueueLimits, QueueName, Result, Settled, Settlement, State, Stats, Storage,
    Throughput, Timestamp, WorkSignal,
};

/// A method of [`Storage`] (all but `subscribe`, which cannot fail).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// [`Storage::enqueue`].
    Enqueue,
    /// [`Storage::claim`].
    Claim,
    /// [`Storage::complete`].
    Settle,
    /// [`Storage::heartbeat`].
    Heartbeat,
    /// [`Storage::promote`].
    Promote,
    /// [`Storage::recover`].
    Recover,
    /// [`Storage::get`].
    Get,
    /// [`Storage::list`].
    List,
    /// [`Storage::stats`].
    Stats,
    /// [`Storage::throughput`].
    Throughput,
    /// [`Storage::retry`].
    Retry,
    /// [`Storage::cancel`].
    Cancel,
    /// [`Storage::purge`].
    Purge,
    /// [`Storage::elect`].
    Elect,
    /// [`Storage::resign`].
    Resign,
    /// [`Storage::leaders`].
    Leaders,
    /// [`Storage::fire`].
    Fire,
    /// [`Storage::periodic jobs`].
    Periodic,
    /// [`Storage::trigger`].
    Trigger,
    /// [`Storage::set_paused`].
    SetPaused,
    /// [`Storage::set_limits`].
    SetLimits,
    /// [`Storage::queues`].
    Queues,
}

impl Operation {
    /// Every operation.
    pub const ALL: [Operation; 22] = [
        Operation::Enqueue,
        Operation::Claim,
        Operation::Settle,
        Operation::Heartbeat,
        Operation::Promote,
        Operation::Recover,
        Operation::Get,
        Operation::List,
        Operation::Stats,
        Operation::Throughput,
        Operation::Retry,
        Operation::Cancel,
        Operation::Purge,
        Operation::Elect,
        Operation::Resign,
        Operation::Leaders,
        Operation::Fire,
        Operation::Periodic,
        Operation::Trigger,
        Operation::SetPaused,
        Operation::SetLimits,
        Operation::Queues,
    ];

    fn index(self) -> usize {
        Self::ALL.iter().position(|o| *o == self).unwrap_or(0)
    }
}

/// Where an injected failure strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// The inner storage is not called.
    Before,
    /// The inner storage is called, then its answer is replaced by the error.
    AfterEffect,
}

/// Makes the error a fault returns.
type MakeError = Arc<dyn Fn() -> Error + Send + Sync>;

struct Fault {
    operation: Operation,
    nth: u64,
    when: When,
    error: MakeError,
}

#[derive(Default)]
struct Faults {
    calls: [AtomicU64; Operation::ALL.len()],
    injected: AtomicU64,
    planned: Mutex<Vec<Fault>>,
}

impl Faults {
    fn planned(&self) -> MutexGuard<'_, Vec<Fault>> {
        self.planned.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A [`Storage`] that forwards every call to `S`, counts the calls per
/// [`Operation`], and fails the ones a test planned ([`FaultyStorage::fail`]).
/// Cheap to clone when `S` is; clones share counters and plans.
#[derive(Clone)]
pub struct FaultyStorage<S> {
    inner: S,
    faults: Arc<Faults>,
}

impl<S> fmt::Debug for FaultyStorage<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyStorage").field("injected", &self.injected()).finish_non_exhaustive()
    }
}

impl<S> FaultyStorage<S> {
    /// `inner` with no fault planned.
    pub fn new(inner: S) -> Self {
        FaultyStorage { inner, faults: Arc::default() }
    }

    /// The wrapped storage (its calls are not counted).
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Fails the `nth` call of `operation` (1 is the first call this
    /// wrapper and its clones ever see) with a retryable
    /// [`Error::Unavailable`] from backend `"fault"`.
    pub fn fail(&self, operation: Operation, nth: u64, when: When) {
        self.fail_with(operation, nth, when, move || Error::Unavailable {
            backend: "fault",
            source: format!("injected fault: {operation:?} call {nth}, {when:?}").into(),
        });
    }

    /// Fails the next call of `operation`; returns its number.
    pub fn fail_next(&self, operation: Operation, when: When) -> u64 {
        let nth = self.calls(operation) + 1;
        self.fail(operation, nth, when);
        nth
    }

    /// Fails the `nth` call of `operation` with the error `error` makes
    /// (a fatal one, say).
    pub fn fail_with(
        &self,
        operation: Operation,
        nth: u64,
        when: When,
        error: impl Fn() -> Error + Send + Sync + 'static,
    ) {
        self.faults.planned().push(Fault { operation, nth, when, error: Arc::new(error) });
    }

    /// How many calls of `operation` have started.
    pub fn calls(&self, operation: Operation) -> u64 {
        self.faults.calls[operation.index()].load(Ordering::SeqCst)
    }

    /// How many planned faults have struck.
    pub fn injected(&self) -> u64 {
        self.faults.injected.load(Ordering::SeqCst)
    }

    /// Counts a call and takes the fault planned for it, if any.
    fn start(&self, operation: Operation) -> Option<(When, Error)> {
        let nth = self.faults.calls[operation.index()].fetch_add(1, Ordering::SeqCst) + 1;
        let mut planned = self.faults.planned();
        let i = planned.iter().position(|f| f.operation == operation && f.nth == nth)?;
        let fault = planned.swap_remove(i);
        drop(planned);
        self.faults.injected.fetch_add(1, Ordering::SeqCst);
        tracing::debug!(?operation, nth, when = ?fault.when, "injecting a storage fault");
        Some((fault.when, (fault.error)()))
    }
}

/// Runs `$call` on the inner storage unless a fault planned for this call
/// of `$op` says otherwise.
macro_rules! faulty {
    ($self:ident, $op:expr, $call:expr) => {{
        match $self.start($op) {
            None => $call.await,
            Some((When::Before, error)) => Err(error),
            Some((When::AfterEffect, error)) => {
                let _ = $call.await;
                Err(error)
            }
        }
    }};
}

#[async_trait]
impl<S: Storage> Storage for FaultyStorage<S> {
    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        faulty!(self, Operation::Enqueue, self.inner.enqueue(jobs))
    }
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Job>> {
        faulty!(self, Operation::Claim, self.inner.claim(request))
    }
    async fn settle(&self, batch: Vec<Settlement>) -> Result<Vec<Settled>> {
        faulty!(self, Operation::Settle, self.inner.settle(batch))
    }
    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<Vec<JobId>> {
        faulty!(self, Operation::Heartbeat, self.inner.heartbeat(leases, lease))
    }
    async fn promote(&self) -> Result<u64> {
        faulty!(self, Operation::Promote, self.inner.promote())
    }
    async fn recover(&self) -> Result<u64> {
        faulty!(self, Operation::Recover, self.inner.recover())
    }
    async fn get(&self, id: JobId) -> Result<Job> {
        faulty!(self, Operation::Get, self.inner.get(id))
    }
    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        faulty!(self, Operation::List, self.inner.list(filter))
    }
    async fn stats(&self) -> Result<Stats> {
        faulty!(self, Operation::Stats, self.inner.stats())
    }
    async fn throughput(&self, since: Timestamp) -> Result<Vec<Throughput>> {
        faulty!(self, Operation::Throughput, self.inner.throughput(since))
    }
    async fn retry(&self, id: JobId) -> Result<()> {
        faulty!(self, Operation::Retry, self.inner.retry(id))
    }
    async fn cancel(&self, id: JobId) -> Result<()> {
        faulty!(self, Operation::Cancel, self.inner.cancel(id))
    }
    async fn purge(&self, state: State, older_than: Timestamp) -> Result<u64> {
        faulty!(self, Operation::Purge, self.inner.purge(state, older_than))
    }
    async fn elect(&self, election: &Election) -> Result<bool> {
        faulty!(self, Operation::Elect, self.inner.elect(election))
    }
    async fn resign(&self, role: &str, token: LeaseToken) -> Result<()> {
        faulty!(self, Operation::Resign, self.inner.resign(role, token))
    }
    async fn leaders(&self) -> Result<Vec<Leader>> {
        faulty!(self, Operation::Leaders, self.inner.leaders())
    }
    async fn fire(&self, fire: &Fire) -> Result<FireOutcome> {
        faulty!(self, Operation::Fire, self.inner.fire(fire))
    }
    async fn periodic(&self) -> Result<Vec<PeriodicInfo>> {
        faulty!(self, Operation::Periodic, self.inner.periodic())
    }
    async fn trigger(&self, name: &str) -> Result<()> {
        faulty!(self, Operation::Trigger, self.inner.trigger(name))
    }
    async fn set_paused(&self, queue: &QueueName, paused: bool) -> Result<()> {
        faulty!(self, Operation::SetPaused, self.inner.set_paused(queue, paused))
    }
    async fn set_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<()> {
        faulty!(self, Operation::SetLimits, self.inner.set_limits(queue, limits))
    }
    async fn queues(&self) -> Result<Vec<QueueInfo>> {
        faulty!(self, Operation::Queues, self.inner.queues())
    }
    fn subscribe(&self) -> Option<WorkSignal> {
        self.inner.subscribe()
    }
    fn clock(&self) -> Clock {
        self.inner.clock()
    }
}
