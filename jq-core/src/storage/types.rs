//! The values the core [`Storage`](super::Storage) operations take and
//! return.

use std::time::Duration;

use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::id::{JobId, LeaseToken};
use crate::job::{LeaseRef, QueueName};
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
