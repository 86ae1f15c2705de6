//! [`Client`]: what an application holds to enqueue jobs, look at them, and
//! build its worker pool.

use jq_core::periodic::PeriodicInfo;
use jq_core::storage::{CancelAnswer, Capability, Leader, Storage, StorageExt};
use jq_core::{
    Clock, Error, IntoJob, Job, JobFilter, JobId, KeyReport, NewJob, QueueInfo, QueueLimits, QueueName, Result, State,
    Stats, Throughput, Timestamp, WorkerPool,
};
use tracing::Instrument;

use crate::backend::Backend;
use crate::tx::Transactional;

/// The user's handle on a job store: enqueue typed jobs (alone, in batches,
/// or inside your own database transaction), read and manage them, and
/// build the worker pool that runs them. Cheap to clone.
///
/// `S` is the storage underneath: a [`Backend`] when it came from
/// [`crate::connect`], or any [`Storage`] you give [`Client::new`] (a backend
/// crate's storage, your own backend, `jq_testkit::MemoryStorage` in tests).
/// The backend interface ([`Storage`]: claim, settle, recover, ...) stays
/// underneath; [`Client::storage`] reaches it when you need it. A call that
/// needs a capability the storage lacks (queue controls on a core-only
/// backend) fails with [`Error::Unsupported`].
///
/// Every job is built with the storage's clock, so a `delay` counts from the
/// store's "now" (a [`jq_core::ManualClock`] in tests).
#[derive(Clone, Debug)]
pub struct Client<S = Backend> {
    storage: S,
}

impl<S: Storage> Client<S> {
    /// A client over `storage`.
    pub fn new(storage: S) -> Self {
        Client { storage }
    }

    /// The storage underneath.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The storage's clock: the "now" of delays, leases and retention.
    pub fn clock(&self) -> Clock {
        self.storage.clock()
    }

    /// Enqueues one job: a [`jq_core::JobType`] value (its type's queue and
    /// attempts), or a [`jq_core::JobBuilder`] from `NewJob::typed(&value)`
    /// with options (`delay`, `run_at`, `priority`, `queue`,
    /// `max_attempts`, `unique_key`). Returns its id; with a unique key
    /// that a live job of the queue holds, that job's id and nothing stored.
    pub async fn enqueue(&self, job: impl IntoJob) -> Result<JobId> {
        let job = job.into_job(self.storage.clock().now())?;
        let span = tracing::debug_span!("jq.enqueue", jobs = 1);
        first(self.storage.enqueue(vec![job]).instrument(span).await?)
    }

    /// Enqueues every job of `jobs`, all or none, in one round trip; one id
    /// per job, in order.
    pub async fn enqueue_many<J: IntoJob>(&self, jobs: impl IntoIterator<Item = J>) -> Result<Vec<JobId>> {
        let jobs = self.build(jobs)?;
        let span = tracing::debug_span!("jq.enqueue", jobs = jobs.len());
        self.storage.enqueue(jobs).instrument(span).await
    }

    /// Enqueues one job inside your own transaction (`tx`): the job exists if
    /// and only if you commit it, and this store's workers are woken by the
    /// commit, never before it and never by a rollback.
    ///
    /// The same call on both SQL backends, `client.enqueue_tx(&mut tx,
    /// job).await`:
    ///
    /// - SQLite: `tx` is a `&mut jq::sqlite::rusqlite::Transaction` on the
    ///   store's file. rusqlite is synchronous, so the job is written when
    ///   the call returns and its future is already complete: in
    ///   synchronous code (inside `spawn_blocking`) take the result with
    ///   `.into_inner()` instead of `.await`. Begin the transaction with
    ///   `TransactionBehavior::Immediate` and give the connection a busy
    ///   timeout. The wake-up uses the connection's commit, rollback and WAL
    ///   hooks (see `jq::sqlite::SqliteStorage::enqueue_tx`).
    /// - PostgreSQL: `tx` is a `&mut jq::postgres::sqlx::Transaction<Postgres>`
    ///   on the store's database. The NOTIFY that wakes workers is part of
    ///   the transaction.
    ///
    /// See [`Transactional`].
    pub fn enqueue_tx<X: Transactional<S>>(&self, tx: X, job: impl IntoJob) -> X::Output<JobId> {
        let job = job.into_job(self.storage.clock().now()).map(|j| vec![j]);
        tx.enqueue_in(&self.storage, job, first)
    }

    /// [`Client::enqueue_tx`] for a batch: one id per job, in order.
    pub fn enqueue_many_tx<X: Transactional<S>, J: IntoJob>(
        &self,
        tx: X,
        jobs: impl IntoIterator<Item = J>,
    ) -> X::Output<Vec<JobId>> {
        tx.enqueue_in(&self.storage, self.build(jobs), Ok)
    }

    /// One job, or [`Error::NotFound`]. Decode its payload with
    /// `job.payload.decode::<T>()`.
    pub async fn get(&self, id: JobId) -> Result<Job> {
        self.storage.get(id).await
    }

    /// One page of jobs matching `filter`, by ascending id; page with
    /// `filter.after` set to the last id of the previous page.
    pub async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        self.storage.list(filter).await
    }

    /// Job counts by queue and state.
    pub async fn stats(&self) -> Result<Stats> {
        self.storage.stats().await
    }

    /// Completed and dead jobs per queue and minute since `since`: what a
    /// throughput chart draws. See [`ThroughputStorage::throughput`](jq_core::storage::ThroughputStorage::throughput).
    pub async fn throughput(&self, since: Timestamp) -> Result<Vec<Throughput>> {
        self.storage.require_throughput()?.throughput(since).await
    }

    /// Cancels a job, from any process: a Scheduled or Pending one at once
    /// ([`CancelAnswer::Cancelled`]); a Running one is asked to stop
    /// ([`CancelAnswer::Requested`]): the pool running it hears of it from
    /// its next heartbeat (within about a second at default settings),
    /// tells the handler through [`JobContext::cancellation`](jq_core::JobContext::cancellation), drops it
    /// after its stop grace, and the job ends Cancelled, not retried (or
    /// Completed, when the handler succeeded first). A job already
    /// finished is left alone and its state returned
    /// ([`CancelAnswer::Finished`]): a cancel that came too late, or one
    /// sent again after a lost answer. Safe to send again.
    ///
    /// On a storage without [`Capability::Cancellation`](jq_core::storage::Capability::Cancellation)
    /// only jobs that have not started can be cancelled: another state
    /// gives [`Error::InvalidState`].
    pub async fn cancel(&self, id: JobId) -> Result<CancelAnswer> {
        self.cancel_because(id, "").await
    }

    /// [`Client::cancel`] with a reason stored with the request of a
    /// running job (shown by `jqctl get` and the dashboard).
    pub async fn cancel_because(&self, id: JobId, reason: &str) -> Result<CancelAnswer> {
        let answer = match self.storage.capabilities().cancellation {
            Some(cancels) => cancels.request_cancel(id, reason).await?,
            None => {
                self.storage.cancel(id).await?;
                CancelAnswer::Cancelled
            }
        };
        // For the cancelled counter's labels; a cancel is rare, and a job
        // purged in between is simply not counted. A running job is
        // counted by the pool that stops it.
        if answer == CancelAnswer::Cancelled
            && let Ok(job) = self.storage.get(id).await
        {
            jq_core::observe::cancelled(&job.queue, &job.kind);
        }
        Ok(answer)
    }

    /// Sends signal `name` with `payload` (any serializable value) to
    /// durable job `id`: kept until a [`DurableContext::wait_for`](jq_core::DurableContext::wait_for)
    /// of that name takes it (each signal once, oldest first), and a job
    /// waiting for it runs again at once. [`Error::NotFound`] for an
    /// unknown job, [`Error::InvalidState`] for a finished one,
    /// [`Error::DurableLimit`] for a payload over
    /// [`MAX_STEP_RESULT_BYTES`](jq_core::durable::MAX_STEP_RESULT_BYTES);
    /// [`Error::Unsupported`] on a storage without durable jobs.
    pub async fn signal<T: serde::Serialize + ?Sized>(&self, id: JobId, name: &str, payload: &T) -> Result<()> {
        let payload = jq_core::Payload::of(payload)?;
        self.storage.require_durable()?.signal(id, name, &payload).await
    }

    /// A durable job's journal: its steps with their instants, the wait it
    /// is in and its signals not taken yet (empty for a plain job).
    pub async fn journal(&self, id: JobId) -> Result<jq_core::durable::Journal> {
        self.storage.require_durable()?.journal(id).await
    }

    /// Gives a Dead job one more attempt (Dead -> Pending, errors kept);
    /// another state gives [`Error::InvalidState`].
    pub async fn retry(&self, id: JobId) -> Result<()> {
        self.storage.retry(id).await
    }

    /// Retries every Dead job, or those of `queue`; returns the ids retried.
    /// Pages through the dead jobs; one retried or purged by someone else
    /// meanwhile is skipped, not an error.
    pub async fn retry_dead(&self, queue: Option<&QueueName>) -> Result<Vec<JobId>> {
        retry_dead(&self.storage, queue).await
    }

    /// Deletes the jobs in the terminal `state` that finished before
    /// `older_than`; returns how many. The pool can do this for you:
    /// [`WorkerPool::retention`].
    pub async fn purge(&self, state: State, older_than: Timestamp) -> Result<u64> {
        self.storage.purge(state, older_than).await
    }

    /// Every periodic job the store knows (declared by a pool at some
    /// point), by name: cursor, last job, missed ticks; see
    /// [`PeriodicInfo::is_orphaned`] for one no pool declares any more.
    pub async fn periodic(&self) -> Result<Vec<PeriodicInfo>> {
        self.storage.require_periodic()?.periodic().await
    }

    /// Triggers one job of periodic job `name` now. Only code can build a
    /// periodic job's job, so the trigger is stored and the next round of a
    /// pool that declares it (within about a second while one runs)
    /// enqueues the job, with the trigger's instant as its tick. Triggers
    /// made before it did coalesce into one job.
    /// [`Error::PeriodicNotFound`] when no pool ever declared it here.
    pub async fn trigger(&self, name: &str) -> Result<()> {
        self.storage.require_periodic()?.trigger(name).await
    }

    /// Pauses `queue` in the store: every worker pool of every process stops
    /// claiming from it within one poll interval (at once where the
    /// backend's wake-up reaches it); running jobs finish, enqueue still
    /// works, and the pause outlives restarts. [`Error::InvalidInput`] for
    /// a bad queue name.
    pub async fn pause(&self, queue: &str) -> Result<()> {
        self.storage.require_controls()?.set_paused(&QueueName::new(queue)?, true).await
    }

    /// Resumes a paused queue and wakes the idle workers.
    pub async fn resume(&self, queue: &str) -> Result<()> {
        self.storage.require_controls()?.set_paused(&QueueName::new(queue)?, false).await
    }

    /// Replaces `queue`'s limits across every worker: at most
    /// `concurrency` of its jobs Running, at most `rate` starts per window
    /// (sliding). `QueueLimits::none()` lifts them.
    pub async fn limit(&self, queue: &str, limits: QueueLimits) -> Result<()> {
        self.storage.require_controls()?.set_limits(&QueueName::new(queue)?, &limits).await
    }

    /// Sets the limits of `key`'s jobs in `queue` across every worker
    /// (`Some(key)`: that key's override; `None`: the queue's default for
    /// every key without one). `QueueLimits::none()` as an override makes
    /// the key unlimited; as the default, lifts it. [`Error::Unsupported`]
    /// on a store without keyed jobs ([`Capability::Keys`]).
    pub async fn set_key_limits(&self, queue: &str, key: Option<&str>, limits: QueueLimits) -> Result<()> {
        self.storage.require_keys()?.set_key_limits(&QueueName::new(queue)?, key, &limits).await
    }

    /// Removes `key`'s override in `queue`: it follows the queue's default
    /// again.
    pub async fn clear_key_limits(&self, queue: &str, key: &str) -> Result<()> {
        self.storage.require_keys()?.clear_key_limits(&QueueName::new(queue)?, key).await
    }

    /// `queue`'s key limits (default and overrides) and its `top` busiest
    /// keys with their Running and Pending jobs.
    pub async fn keys(&self, queue: &str, top: usize) -> Result<KeyReport> {
        self.storage.require_keys()?.keys(&QueueName::new(queue)?, top).await
    }

    /// Every queue with a job or a control: pause, limits, and which
    /// workers met its control.
    pub async fn queues(&self) -> Result<Vec<QueueInfo>> {
        self.storage.require_controls()?.queues().await
    }

    /// Creates or upgrades the store's schema where the backend has one
    /// and returns how many migrations were applied: PostgreSQL applies
    /// its migrations in one transaction under an advisory lock
    /// (concurrent calls are safe); SQLite migrates its file when it
    /// opens it and Redis has no schema, so for them it does nothing and
    /// returns 0. Run it once per deployment.
    pub async fn migrate(&self) -> Result<usize> {
        self.storage.migrate().await
    }

    /// Who holds each named role (the pool maintaining the store holds
    /// "maintenance"); see [`RoleStorage::leaders`](jq_core::storage::RoleStorage::leaders).
    pub async fn leaders(&self) -> Result<Vec<Leader>> {
        self.storage.require_roles()?.leaders().await
    }

    /// The optional capabilities the store declares; a call that needs one
    /// it lacks fails with [`Error::Unsupported`].
    pub fn capabilities(&self) -> Vec<Capability> {
        self.storage.capabilities().declared()
    }

    /// A worker pool over this client's store, with the pool's defaults and
    /// the store's clock; register handlers, then `start()` it.
    pub fn worker_pool(&self) -> WorkerPool<S>
    where
        S: Clone,
    {
        WorkerPool::new(self.storage.clone())
    }

    fn build<J: IntoJob>(&self, jobs: impl IntoIterator<Item = J>) -> Result<Vec<NewJob>> {
        let now = self.storage.clock().now();
        jobs.into_iter().map(|j| j.into_job(now)).collect()
    }
}

impl<S: Storage> From<S> for Client<S> {
    fn from(storage: S) -> Self {
        Client::new(storage)
    }
}

/// The id of a one-job batch.
fn first(ids: Vec<JobId>) -> Result<JobId> {
    ids.into_iter().next().ok_or_else(|| Error::Backend { backend: "storage", source: "enqueue returned no id".into() })
}

/// [`Client::retry_dead`].
async fn retry_dead<S: Storage + ?Sized>(storage: &S, queue: Option<&QueueName>) -> Result<Vec<JobId>> {
    let mut filter = JobFilter { queue: queue.cloned(), state: Some(State::Dead), limit: 1000, ..JobFilter::default() };
    let mut retried = Vec::new();
    loop {
        let page = storage.list(&filter).await?;
        for job in &page {
            match storage.retry(job.id).await {
                Ok(()) => retried.push(job.id),
                Err(Error::InvalidState { .. } | Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        match page.last() {
            Some(last) if page.len() == filter.page_size() => filter.after = Some(last.id),
            _ => return Ok(retried),
        }
    }
}
