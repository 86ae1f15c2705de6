//! A stored job, as a backend reads it back ([`Job`]), with its lease,
//! its failed attempts and its cancel request: the job's read model.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::name::QueueName;
use super::payload::Payload;
use super::priority::Priority;
use crate::clock::Timestamp;
use crate::id::{JobId, LeaseToken};
use crate::state::State;
use crate::trace::TraceContext;

/// A claim's hold on a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The claim's token; every later state change must present it.
    pub token: LeaseToken,
    /// Who claimed it (a worker's name, for operators; not used for fencing).
    pub worker: String,
    /// When the lease runs out unless a heartbeat extends it.
    pub expires_at: Timestamp,
}

/// One failed attempt of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptError {
    /// The attempt number that failed (1 for the first claim).
    pub attempt: u32,
    /// When the failure was recorded.
    pub at: Timestamp,
    /// What went wrong.
    pub message: String,
}

/// A stored job, as read back from a backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// Its id.
    pub id: JobId,
    /// The queue it waits in.
    pub queue: QueueName,
    /// Which handler runs it.
    pub kind: String,
    /// Its arguments, JSON.
    pub payload: Payload,
    /// Its priority.
    pub priority: Priority,
    /// Its state.
    pub state: State,
    /// How many times it has been claimed (a release gives one back).
    pub attempts: u32,
    /// How many claims it is allowed in all.
    pub max_attempts: u32,
    /// Not claimable before this instant.
    pub run_at: Timestamp,
    /// When it was enqueued.
    pub created_at: Timestamp,
    /// When it reached a terminal state.
    pub finished_at: Option<Timestamp>,
    /// The current lease, while Running.
    pub lease: Option<Lease>,
    /// Every failure, oldest first.
    pub errors: Vec<AttemptError>,
    /// Its uniqueness key, if any.
    pub unique_key: Option<String>,
    /// Its key, if any: the per-key limits and the fair rotation between
    /// keys apply to it ([`JobBuilder::key`](crate::JobBuilder::key)).
    pub key: Option<String>,
    /// The trace context of the span that enqueued it; every run's span
    /// links to it.
    pub trace: Option<TraceContext>,
    /// How long one attempt may run before the pool stops it (`None`: the
    /// kind's or the pool's limit); see [`JobBuilder::timeout`](crate::JobBuilder::timeout).
    pub timeout: Option<Duration>,
    /// A stored request to stop the job while it runs
    /// ([`CancelStorage::request_cancel`](crate::storage::CancelStorage::request_cancel)).
    pub cancel_requested: Option<CancelRequest>,
    /// The latest progress its handler reported (JSON text), kept after it
    /// finishes ([`JobContext::progress`](crate::JobContext::progress)).
    pub progress: Option<String>,
}

/// A request to cancel a running job, stored on the job until it ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelRequest {
    /// When it was first asked for (a resend keeps the first instant).
    pub at: Timestamp,
    /// Why, as the operator said it (may be empty).
    pub reason: String,
}

impl Job {
    /// The lease token of a claimed job.
    pub fn token(&self) -> Option<LeaseToken> {
        self.lease.as_ref().map(|l| l.token)
    }

    /// A reference to the current lease, for heartbeats and settlements.
    pub fn lease_ref(&self) -> Option<LeaseRef> {
        self.token().map(|token| LeaseRef { id: self.id, token })
    }
}

/// A job id with the token of the claim that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaseRef {
    /// The job.
    pub id: JobId,
    /// The claim's token.
    pub token: LeaseToken,
}
