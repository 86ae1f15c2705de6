//! The `Storage` trait: the only thing a backend implements.
//!
//! # Contract
//!
//! `docs/CONTRACT.md` in the repository is the full text; `jq-testkit`
//! makes it executable. In short, for every backend:
//!
//! - "now" is the backend's [`Clock`](crate::Clock), never the server's, so
//!   a test can move time without sleeping.
//! - A job is *claimable* when it is Pending, or Scheduled with
//!   `run_at <= now`, and its queue was asked for.
//! - Every change to a claimed job presents the claim's [`LeaseToken`]. A
//!   token that is not the job's current one, or a job that is no longer
//!   Running, changes nothing and reports [`LeaseLost`].
//! - A lease is valid while `now < expires_at`. An expired lease still
//!   fences (ack with it works) until [`Storage::recover`] or another claim
//!   takes the job: recovery is what ends a lease, not the clock alone.
//! - Nothing leaves the store except by [`Storage::purge`].
//! - A claim is idempotent under its [`ClaimRequest::token`]: a claim whose
//!   answer was lost is sent again with the same token and `resend` set,
//!   and gets the jobs the first attempt took instead of taking more.
//! - A claim hands over everything it took: once jobs are Running under
//!   its token, no later failure inside the same call drops them (a job it
//!   could not finish handling stays Running, is logged, and recover hands
//!   it on); it returns an error only when it claimed nothing.
//! - Named roles ([`Storage::elect`]) are leases with a token too: one
//!   holder per role at a time, by the storage's clock.
//! - A periodic job's step ([`Storage::fire`]) is a compare-and-set on its
//!   cursor that stores the tick's jobs in the same atomic step: one job
//!   per (periodic job, tick), with no leader.
//!
//! [`LeaseToken`]: crate::LeaseToken
//! [`LeaseLost`]: crate::Error::LeaseLost

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::clock::{Clock, Timestamp};
use crate::control::{QueueInfo, QueueLimits};
use crate::error::{Error, Result};
use crate::job::{Job, JobId, LeaseRef, LeaseToken, QueueName, State};
use crate::periodic::{Fire, FireOutcome, PeriodicInfo};

/// What [`Storage::claim`] is asked for.
#[derive(Clone, Debug)]
pub struct ClaimRequest {
    /// Queues to take from; jobs of other queues are never returned.
    pub queues: Vec<QueueName>,
    /// At most this many jobs.
    pub limit: usize,
    /// How long the lease lasts before a heartbeat must extend it.
    pub lease: Duration,
    /// The claimer's name, recorded in the lease for operators.
    pub worker: String,
    /// The lease token of every job this claim takes: made fresh for each
    /// claim ([`LeaseToken::new`]) and never used for another one, except
    /// to send the same claim again (see `resend`). Fencing is per job id
    /// and token, so jobs sharing a claim's token are still fenced apart.
    pub token: LeaseToken,
    /// True when this exact request was sent before and its answer was lost
    /// (an error came back, possibly after the claim took effect). A claim
    /// whose token already holds Running jobs then returns those (in claim
    /// order) and claims nothing more; one whose token holds none claims as
    /// usual. With `false` the backend may skip that lookup: the token is
    /// new.
    pub resend: bool,
}

impl ClaimRequest {
    /// A first attempt at a claim, with a fresh token.
    pub fn new(queues: Vec<QueueName>, limit: usize, lease: Duration, worker: impl Into<String>) -> Self {
        ClaimRequest { queues, limit, lease, worker: worker.into(), token: LeaseToken::new(), resend: false }
    }
}

/// A bid for a named role; see [`Storage::elect`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Election {
    /// The role: 1 to 128 bytes of `A-Z a-z 0-9 _ - . :` (like a queue
    /// name), e.g. `"maintenance"`.
    pub role: String,
    /// The candidate's token: made once per candidate (a pool) and kept
    /// for every renewal; it is what proves the role is still its own.
    pub token: LeaseToken,
    /// The candidate's name, shown to operators ([`Storage::leaders`]).
    pub holder: String,
    /// How long the role is held from now without a renewal; above zero.
    pub ttl: Duration,
}

impl Election {
    /// Checks the role name and the ttl: [`Error::InvalidInput`] otherwise.
    pub fn check(&self) -> Result<()> {
        check_role(&self.role)?;
        if self.ttl.is_zero() {
            return Err(Error::invalid("election ttl", "0 s: a role must be held for some time"));
        }
        Ok(())
    }
}

/// Checks a role name (the rules of a queue name): [`Error::InvalidInput`]
/// when it is empty, longer than 128 bytes, or has another character.
pub fn check_role(role: &str) -> Result<()> {
    QueueName::new(role)
        .map(drop)
        .map_err(|_| Error::invalid("role", format!("{role:?}: use 1 to 128 bytes of letters, digits and _ - . :")))
}

/// Who holds a role, as [`Storage::leaders`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The role.
    pub role: String,
    /// The holder's name ([`Election::holder`]).
    pub holder: String,
    /// When the role is free unless renewed; a past instant means the
    /// holder stopped renewing and anyone may take it.
    pub expires_at: Timestamp,
}

/// What happens to a claimed job. Sent in batches to [`Storage::complete`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Running -> Completed.
    Ack,
    /// Records `error` against the current attempt; with attempts left the
    /// job goes to Scheduled at `now + delay` (Pending when `delay` is zero),
    /// else to Dead.
    Nack {
        /// What went wrong.
        error: String,
        /// The backoff, chosen by the caller's [`Backoff`](crate::Backoff).
        delay: Duration,
    },
    /// Records `error` and goes straight to Dead (a permanent failure, a
    /// poison payload).
    Bury {
        /// What went wrong.
        error: String,
    },
    /// Hands the job back without counting the attempt: Running -> Pending
    /// (`delay` zero: graceful shutdown) or Scheduled at `now + delay`
    /// (a handler's release). No error is recorded.
    Release {
        /// When the job becomes claimable again, from now.
        delay: Duration,
    },
}

/// One fenced state change of a claimed job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settlement {
    /// The job and the token of the claim that holds it.
    pub lease: LeaseRef,
    /// What to do with it.
    pub outcome: Outcome,
}

/// The answer for one [`Settlement`]: the state the job moved to, or
/// [`Error::LeaseLost`] when the token was stale (nothing changed).
pub type Settled = Result<State>;

/// Which jobs [`Storage::list`] returns. Results are ordered by id
/// (creation order); page with `after`.
#[derive(Clone, Debug, Default)]
pub struct JobFilter {
    /// Only this queue.
    pub queue: Option<QueueName>,
    /// Only this state.
    pub state: Option<State>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only ids greater than this (the last id of the previous page).
    pub after: Option<JobId>,
    /// At most this many; 0 means [`JobFilter::DEFAULT_LIMIT`].
    pub limit: usize,
}

impl JobFilter {
    /// Page size when `limit` is 0.
    pub const DEFAULT_LIMIT: usize = 100;

    /// The effective page size.
    pub fn page_size(&self) -> usize {
        if self.limit == 0 { Self::DEFAULT_LIMIT } else { self.limit }
    }

    /// True when `job` passes the queue, state, kind and `after` filters.
    pub fn matches(&self, job: &Job) -> bool {
        self.queue.as_ref().is_none_or(|q| *q == job.queue)
            && self.state.is_none_or(|s| s == job.state)
            && self.kind.as_ref().is_none_or(|k| *k == job.kind)
            && self.after.is_none_or(|a| job.id > a)
    }
}

/// Job counts per state of one queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateCounts {
    counts: [u64; 6],
}

impl StateCounts {
    /// The count of `state`.
    pub fn get(&self, state: State) -> u64 {
        self.counts[state_index(state)]
    }

    /// Sets the count of `state`.
    pub fn set(&mut self, state: State, n: u64) {
        self.counts[state_index(state)] = n;
    }

    /// Adds `n` to the count of `state`.
    pub fn add(&mut self, state: State, n: u64) {
        self.counts[state_index(state)] += n;
    }

    /// All jobs of the queue.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

fn state_index(state: State) -> usize {
    State::ALL.iter().position(|s| *s == state).unwrap_or(0)
}

/// Counts by queue and state. Queues with no job are absent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Per queue.
    pub queues: BTreeMap<String, StateCounts>,
}

impl Stats {
    /// The count of `state` over every queue.
    pub fn total(&self, state: State) -> u64 {
        self.queues.values().map(|c| c.get(state)).sum()
    }
}

/// The jobs of one queue that finished in one minute, for throughput
/// charts; see [`Storage::throughput`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Throughput {
    /// The queue.
    pub queue: String,
    /// The minute's first instant (UTC, whole minute).
    pub minute: Timestamp,
    /// Jobs that reached Completed in it.
    pub completed: u64,
    /// Jobs that reached Dead in it.
    pub dead: u64,
}

impl Throughput {
    /// [`Storage::throughput`] over jobs in memory: the reference the
    /// conformance suite holds backends to, and what an in-memory backend
    /// can return as it is.
    pub fn tally<'a>(jobs: impl IntoIterator<Item = &'a Job>, since: Timestamp) -> Vec<Throughput> {
        let since = minute_of(since);
        let mut counts: BTreeMap<(String, Timestamp), (u64, u64)> = BTreeMap::new();
        for job in jobs {
            let Some(finished) = job.finished_at.filter(|t| *t >= since) else { continue };
            let entry = counts.entry((job.queue.as_str().to_owned(), minute_of(finished))).or_default();
            match job.state {
                State::Completed => entry.0 += 1,
                State::Dead => entry.1 += 1,
                _ => {}
            }
        }
        counts
            .into_iter()
            .filter(|(_, (completed, dead))| completed + dead > 0)
            .map(|((queue, minute), (completed, dead))| Throughput { queue, minute, completed, dead })
            .collect()
    }
}

/// The start of the minute `t` falls in.
pub fn minute_of(t: Timestamp) -> Timestamp {
    let micros = t.timestamp_micros();
    crate::clock::from_micros(micros - micros.rem_euclid(60_000_000))
}

/// A signal that work may have arrived; see [`Storage::subscribe`]. The
/// value is a counter that only matters by changing.
pub type WorkSignal = watch::Receiver<u64>;

/// A job store. Implement this (twenty-three methods) and run
/// `jq_testkit::conformance!` against it to get a backend.
///
/// Every method is one atomic step as seen by other callers; concurrency
/// and crash safety are the backend's job, not the caller's.
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// Stores every job of the batch, or none (an error stores nothing).
    ///
    /// - Each job is checked first: its payload against the backend's size
    ///   limit ([`Error::PayloadTooLarge`]).
    /// - A backend that cannot store a batch over several queues in one
    ///   atomic step refuses it with [`Error::CrossSlotBatch`] before
    ///   storing anything (Redis Cluster, when the queues' keys live in
    ///   different hash slots); every other backend takes any batch.
    /// - `run_at` of `None` or `<= now` gives Pending, else Scheduled.
    ///   `attempts` starts at 0, `created_at` is now.
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
    /// - Takes nothing from a paused queue, and no more from a queue than
    ///   its limits allow ([`Storage::set_limits`]), checked in the same
    ///   atomic step; a job held back is not changed. Each claim that asks
    ///   for a controlled queue records its worker as having seen the
    ///   control ([`Storage::queues`]).
    /// - A resend ([`ClaimRequest::resend`]) whose token already holds
    ///   Running jobs returns exactly those and claims nothing.
    /// - Everything taken is returned: a failure after jobs became Running
    ///   under the token (burying a corrupt row, one chunk or slot of
    ///   several) is logged, the jobs concerned stay Running for recover,
    ///   and the others are returned. An error means nothing was claimed
    ///   (or its answer was lost: resend with the same token).
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Job>>;

    /// Applies a batch of fenced outcomes; see [`Outcome`].
    ///
    /// Items apply in order, each fenced on its own: a later item on the
    /// same job sees the earlier one's effect (`[Release, Ack]` on one lease
    /// gives `Ok(Pending)` then `LeaseLost`). One stale token gives
    /// `Err(LeaseLost)` at its place and does not stop the others. The
    /// outer error is for the backend failing as a whole. Errors are
    /// recorded with the job's current attempt number. A job whose
    /// attempts reached `max_attempts` goes to Dead on `Retry`.
    async fn settle(&self, batch: Vec<Settlement>) -> Result<Vec<Settled>>;

    /// Extends each valid lease to `now + lease` and returns the ids whose
    /// lease was lost (stale token, or job no longer Running).
    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<Vec<JobId>>;

    /// Makes due Scheduled jobs (`run_at <= now`) Pending and returns how
    /// many it moved. Idempotent; concurrent promoters move each job once.
    async fn promote(&self) -> Result<u64>;

    /// Running jobs whose lease expired (`expires_at <= now`) go back to
    /// Pending, or to Dead when no attempts are left, with an error
    /// "lease expired" recorded for the lost attempt. Returns how many.
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

    /// Jobs that reached Completed or Dead at or after the minute `since`
    /// falls in, counted per queue and per minute of their `finished_at`
    /// (UTC); one entry per (queue, minute) with any, ordered by queue then
    /// minute. Cancelled jobs are not counted; a job retried after dying
    /// counts where it finishes last; jobs already purged are gone. Reads
    /// the finished-jobs index: its cost grows with the jobs finished in
    /// the range, not with the store.
    async fn throughput(&self, since: Timestamp) -> Result<Vec<Throughput>>;

    /// Dead -> Pending (run_at now, lease cleared, errors kept). The job
    /// gets one more attempt: `max_attempts` becomes at least
    /// `attempts + 1`. Other states give [`Error::InvalidState`].
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

    /// Takes or renews the lease of `election.role`: when the role is free,
    /// its lease expired (`expires_at <= now`), or it is held with
    /// `election.token` already, it becomes held with that token until
    /// `now + ttl` and the answer is `true`; when another token holds it
    /// unexpired, nothing changes and the answer is `false`.
    ///
    /// Atomic: of concurrent contenders for a free role exactly one wins.
    /// A holder whose lease expired and was taken over gets `false` on its
    /// next renewal. [`Error::InvalidInput`] for a bad role or a zero ttl.
    async fn elect(&self, election: &Election) -> Result<bool>;

    /// Frees `role` at once when it is held with `token`; does nothing
    /// otherwise (another holder, or nobody).
    async fn resign(&self, role: &str, token: LeaseToken) -> Result<()>;

    /// Every role with a holder (expired or not), by role name.
    async fn leaders(&self) -> Result<Vec<Leader>>;

    /// One step of a recurring periodic job, atomically: when the stored row
    /// is the one `fire` expects (no row for `expected: None`; else the
    /// cursor equal to `expected` and the trigger equal to
    /// `expected_trigger`), the row becomes [`Fire::applied`] (cursor moved,
    /// counters added, trigger cleared, `declared_at` now) and the
    /// jobs are stored as [`Storage::enqueue`] stores them, in the same
    /// step, and the answer is [`FireOutcome::Fired`] with their ids.
    /// Otherwise nothing changes and the answer is [`FireOutcome::Moved`].
    ///
    /// This is what makes a tick's job exactly one, whatever the number of
    /// pools: of concurrent steps from the same row, one wins; a step whose
    /// answer was lost and is sent again finds the cursor moved.
    /// [`Error::InvalidInput`] for a bad name or a job of another queue
    /// than `fire.queue`; [`Error::PayloadTooLarge`] as for enqueue
    /// (nothing stored either way).
    async fn fire(&self, fire: &Fire) -> Result<FireOutcome>;

    /// Every stored periodic job, by name.
    async fn periodic(&self) -> Result<Vec<PeriodicInfo>>;

    /// Asks for one run of periodic job `name` now: sets its trigger to
    /// now unless one is pending (requests coalesce). The next pool that
    /// declares the periodic job stores the job (only code can build it), with
    /// the request's instant as its tick. [`Error::PeriodicNotFound`] when
    /// no such periodic job is stored.
    async fn trigger(&self, name: &str) -> Result<()>;

    /// Pauses (`true`) or resumes (`false`) `queue`, stored in the backend
    /// so that every claimer of every process honours it and it outlives
    /// restarts. While paused, claims take none of its jobs; enqueue still
    /// stores them and running jobs finish. Pausing a paused queue keeps its
    /// `paused_at`; resuming wakes the claimers ([`Storage::subscribe`]).
    /// Works on a queue that holds no job yet.
    async fn set_paused(&self, queue: &QueueName, paused: bool) -> Result<()>;

    /// Replaces `queue`'s limits ([`QueueLimits`]; `QueueLimits::none()`
    /// lifts both), checked inside every claim's atomic step: at most
    /// `concurrency` of its jobs Running (counted from their leases, so a
    /// job whose lease expired keeps its slot until recover ends it), and
    /// at most `rate.limit` starts in any window `(t - period, t]` of the
    /// storage's clock, across every claimer. A job a limit holds back is
    /// not touched. [`Error::InvalidInput`] when [`QueueLimits::check`]
    /// fails.
    async fn set_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<()>;

    /// Every queue that holds a job or has a control, by name, with its
    /// pause, its limits, and which claimers met its control
    /// ([`QueueInfo::seen`]).
    async fn queues(&self) -> Result<Vec<QueueInfo>>;

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
}

use crate::job::NewJob;

/// Conveniences over [`Storage`] for one job at a time. Implemented for
/// every storage; backends never implement it.
#[async_trait]
pub trait StorageExt: Storage {
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
            .unwrap_or_else(|| Err(Error::Backend { backend: "storage", source: "complete returned no result".into() }))
    }

    /// Running -> Completed.
    async fn ack(&self, lease: LeaseRef) -> Result<()> {
        self.settle_one(lease, Outcome::Ack).await.map(drop)
    }

    /// Records the error; Scheduled after `delay` with attempts left, else Dead.
    async fn nack(&self, lease: LeaseRef, error: impl Into<String> + Send, delay: Duration) -> Result<State> {
        self.settle_one(lease, Outcome::Nack { error: error.into(), delay }).await
    }

    /// Records the error and goes to Dead.
    async fn bury(&self, lease: LeaseRef, error: impl Into<String> + Send) -> Result<()> {
        self.settle_one(lease, Outcome::Bury { error: error.into() }).await.map(drop)
    }

    /// Running -> Pending without counting the attempt.
    async fn release(&self, lease: LeaseRef) -> Result<()> {
        self.settle_one(lease, Outcome::Release { delay: Duration::ZERO }).await.map(drop)
    }
}

impl<S: Storage + ?Sized> StorageExt for S {}

#[async_trait]
impl<S: Storage + ?Sized> Storage for std::sync::Arc<S> {
    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        (**self).enqueue(jobs).await
    }
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Job>> {
        (**self).claim(request).await
    }
    async fn settle(&self, batch: Vec<Settlement>) -> Result<Vec<Settled>> {
        (**self).settle(batch).await
    }
    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<Vec<JobId>> {
        (**self).heartbeat(leases, lease).await
    }
    async fn promote(&self) -> Result<u64> {
        (**self).promote().await
    }
    async fn recover(&self) -> Result<u64> {
        (**self).recover().await
    }
    async fn get(&self, id: JobId) -> Result<Job> {
        (**self).get(id).await
    }
    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        (**self).list(filter).await
    }
    async fn stats(&self) -> Result<Stats> {
        (**self).stats().await
    }
    async fn throughput(&self, since: Timestamp) -> Result<Vec<Throughput>> {
        (**self).throughput(since).await
    }
    async fn retry(&self, id: JobId) -> Result<()> {
        (**self).retry(id).await
    }
    async fn cancel(&self, id: JobId) -> Result<()> {
        (**self).cancel(id).await
    }
    async fn purge(&self, state: State, older_than: Timestamp) -> Result<u64> {
        (**self).purge(state, older_than).await
    }
    async fn elect(&self, election: &Election) -> Result<bool> {
        (**self).elect(election).await
    }
    async fn resign(&self, role: &str, token: LeaseToken) -> Result<()> {
        (**self).resign(role, token).await
    }
    async fn leaders(&self) -> Result<Vec<Leader>> {
        (**self).leaders().await
    }
    async fn fire(&self, fire: &Fire) -> Result<FireOutcome> {
        (**self).fire(fire).await
    }
    async fn periodic(&self) -> Result<Vec<PeriodicInfo>> {
        (**self).periodic().await
    }
    async fn trigger(&self, name: &str) -> Result<()> {
        (**self).trigger(name).await
    }
    async fn set_paused(&self, queue: &QueueName, paused: bool) -> Result<()> {
        (**self).set_paused(queue, paused).await
    }
    async fn set_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<()> {
        (**self).set_limits(queue, limits).await
    }
    async fn queues(&self) -> Result<Vec<QueueInfo>> {
        (**self).queues().await
    }
    fn subscribe(&self) -> Option<WorkSignal> {
        (**self).subscribe()
    }
    fn clock(&self) -> Clock {
        (**self).clock()
    }
}
