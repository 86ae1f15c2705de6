//! The values the core [`Storage`](super::Storage) operations take and
//! return.

use std::time::Duration;

use tokio::sync::watch;

use crate::clock::Timestamp;
use crate::control::QueueLimits;
use crate::error::{Error, Result};
use crate::id::{JobId, LeaseToken};
use crate::job::{Job, LeaseRef, QueueName};
use crate::state::State;

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

/// What [`Storage::claim`](super::Storage::claim) answers: the jobs it
/// took and, when it took fewer than asked while claimable jobs of an asked
/// queue were left, the limit that held them back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClaimAnswer {
    /// The jobs taken, now Running under the claim's token, in claim order.
    pub jobs: Vec<Job>,
    /// `Some` when the claim came back short of its limit because a
    /// queue's or a key's limits held back claimable jobs, not because the
    /// queues were drained: the worker pool then claims again sooner than
    /// its poll interval (docs/CONTRACT.md, "claim", the limited answer).
    /// `None` for a claim that took its limit, a drained queue, or a
    /// paused one.
    pub limited: Option<Limited>,
}

impl ClaimAnswer {
    /// An answer with `jobs` and no limit reported.
    pub fn jobs(jobs: Vec<Job>) -> Self {
        ClaimAnswer { jobs, limited: None }
    }
}

impl From<Vec<Job>> for ClaimAnswer {
    fn from(jobs: Vec<Job>) -> Self {
        ClaimAnswer::jobs(jobs)
    }
}

/// Which limit held back the claimable jobs a short claim left
/// ([`ClaimAnswer::limited`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limited {
    /// A concurrency limit (a queue's or a key's) held back at least one of
    /// them, or the backend did not tell the limits apart: one more can
    /// start when a Running job of that queue or key leaves Running.
    Concurrency,
    /// Only rate limits held them back: none can start before `until`, the
    /// earliest instant (storage clock) at which one of the windows that
    /// held them back lets one more start.
    Rate {
        /// When the earliest of those windows has room again.
        until: Timestamp,
    },
}

impl Limited {
    /// The answer for a claim held back by both: a concurrency limit wins
    /// (a slot may free before any window), else the earlier window.
    pub fn and(self, other: Limited) -> Limited {
        match (self, other) {
            (Limited::Rate { until: a }, Limited::Rate { until: b }) => Limited::Rate { until: a.min(b) },
            _ => Limited::Concurrency,
        }
    }

    /// `a.and(b)` over options: what a claim reports when `a` and `b` are
    /// what two of its parts (queues, keys) found.
    pub fn merge(a: Option<Limited>, b: Option<Limited>) -> Option<Limited> {
        match (a, b) {
            (Some(a), Some(b)) => Some(a.and(b)),
            (a, None) => a,
            (None, b) => b,
        }
    }
}

/// What a queue's or a key's `limits` say of one more start after a claim,
/// with `running` Running jobs and `started` starts in the window, the
/// oldest of them at `oldest` (the claim's own counted): `None` when they
/// allow it, else the [`Limited`] a short claim
/// reports. A full concurrency answers `Concurrency` even when the window
/// is full too; a full window whose oldest start is unknown answers
/// `Concurrency`, which the pool polls for.
pub fn held_by(limits: &QueueLimits, running: u64, started: u64, oldest: Option<Timestamp>) -> Option<Limited> {
    if limits.concurrency.is_some_and(|n| running >= u64::from(n)) {
        return Some(Limited::Concurrency);
    }
    let rate = limits.rate.filter(|r| started >= u64::from(r.limit))?;
    Some(match oldest {
        Some(oldest) => Limited::Rate { until: crate::clock::add(oldest, rate.period) },
        None => Limited::Concurrency,
    })
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
