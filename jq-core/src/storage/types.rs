//! The values the core [`Storage`](super::Storage) operations take and
//! return.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::job::{Job, JobId, LeaseRef, LeaseToken, QueueName, State};

/// What [`Storage::claim`](super::Storage::claim) is asked for.
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

    /// [`Error::InvalidInput`](crate::Error::InvalidInput) when the worker
    /// name has a NUL character, which PostgreSQL cannot store
    /// (the contract's "Text from outside"). Every backend checks it before
    /// claiming.
    pub fn check(&self) -> Result<()> {
        crate::text::check_no_nul("worker", &self.worker)
    }
}

/// What happens to a claimed job. Sent in batches to [`Storage::settle`](super::Storage::settle).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Ack: the run succeeded. Running -> Completed.
    Ack,
    /// Nack: the run failed. Records `error` against the current attempt;
    /// with attempts left the job goes to Scheduled at `now + delay`
    /// (Pending when `delay` is zero), else to Dead.
    Nack {
        /// What went wrong.
        error: String,
        /// The backoff, chosen by the caller's [`Backoff`](crate::Backoff).
        delay: Duration,
    },
    /// Bury: the job can never succeed (bad input, a payload that does not
    /// decode). Records `error` and goes straight to Dead.
    Bury {
        /// What went wrong.
        error: String,
    },
    /// Ack with a result: like [`Outcome::Ack`], and stores `result` with
    /// the completed job in the same step. Only a backend with
    /// [`Capability::Workflows`](super::Capability::Workflows) takes it;
    /// the worker pool sends it only there. Every other backend answers the
    /// item with [`Error::Unsupported`](crate::Error::Unsupported) and
    /// changes nothing.
    AckWith {
        /// What the handler returned, JSON.
        result: crate::job::Payload,
    },
    /// Release: hands the job back without counting the attempt: Running ->
    /// Pending (`delay` zero: graceful shutdown) or Scheduled at
    /// `now + delay` (a handler's [`HandlerError::release`](crate::HandlerError::release)).
    /// No error is recorded: a release is not a failure.
    Release {
        /// When the job becomes claimable again, from now.
        delay: Duration,
    },
    /// Cancel: the run stopped on a stored cancel request
    /// ([`CancelStorage::request_cancel`](super::CancelStorage::request_cancel)).
    /// Running -> Cancelled, finished now; no error is recorded and the job
    /// is not retried, whatever attempts it has left.
    Cancel,
}

/// What [`Storage::heartbeat`](super::Storage::heartbeat) answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Beat {
    /// Jobs whose lease was lost (stale token, or no longer Running):
    /// nothing was extended for them.
    pub lost: Vec<JobId>,
    /// Jobs whose lease was extended and that hold a cancel request: the
    /// pool stops their runs and settles them with [`Outcome::Cancel`].
    /// Always empty on a backend without [`Capability::Cancellation`](crate::storage::Capability::Cancellation).
    pub cancel: Vec<JobId>,
}

impl Beat {
    /// Only lost leases, no cancel request (a backend without cancellation).
    pub fn lost(lost: Vec<JobId>) -> Self {
        Beat { lost, cancel: Vec::new() }
    }
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
/// [`Error::LeaseLost`](crate::Error::LeaseLost) when the token was stale
/// (nothing changed).
pub type Settled = Result<State>;

/// Which jobs [`Storage::list`](super::Storage::list) returns. Results are ordered by id
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
    counts: [u64; 7],
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
/// charts; see [`ThroughputStorage::throughput`](super::ThroughputStorage::throughput).
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
    /// [`ThroughputStorage::throughput`](super::ThroughputStorage::throughput) over jobs in memory: the reference the
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

/// A signal that work may have arrived; see [`Storage::subscribe`](super::Storage::subscribe). The
/// value is a counter that only matters by changing.
pub type WorkSignal = watch::Receiver<u64>;

/// Refuses a purge of a state that is not terminal (`InvalidInput`): only
/// Completed, Dead and Cancelled jobs may be purged. Every backend's
/// `purge` starts with it, so the refusal reads the same everywhere.
pub fn check_purge_state(state: State) -> Result<()> {
    if state.is_terminal() {
        Ok(())
    } else {
        Err(Error::invalid("purge state", format!("{state} is not terminal: purge completed, dead or cancelled jobs")))
    }
}
