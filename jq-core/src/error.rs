//! The one error type of jq-core, shared by every `Storage` implementation.
//! The top of the ground: it names the ids, the states and the
//! capabilities, and nothing above them (`tests/layers.rs` keeps it so).

use crate::capability::{Capability, DurableLimit};
use crate::id::{JobId, WorkflowId};
use crate::state::State;

/// A boxed error from a driver (rusqlite, sqlx, redis, ...).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Shorthand for results whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in jq-core and in a storage backend.
///
/// Callers match on variants, never on messages. Messages say what was wrong
/// and, where there is one, what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A queue name is empty, too long, or has a character outside
    /// `A-Z a-z 0-9 _ - . :` (braces only around a leading hash tag `{tag}`).
    #[error(
        "queue name {name:?} is invalid: {reason}; use 1 to 128 bytes of letters, digits and _ - . :, optionally after \
         a hash tag {{tag}}"
    )]
    InvalidQueue {
        /// The rejected name.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Some other argument is out of range (kind, unique key, max attempts,
    /// limit, a purge of a non-terminal state, ...).
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// Which argument.
        what: &'static str,
        /// What is wrong with it and what would be accepted.
        reason: String,
    },
    /// The payload could not be turned into JSON, or is not valid JSON.
    #[error("payload is not valid JSON: {0}")]
    InvalidPayload(String),
    /// The serialized payload is larger than the backend's configured limit.
    /// Nothing was stored.
    #[error(
        "payload is {size} bytes, over the limit of {limit} bytes; store large data elsewhere and enqueue a reference to it"
    )]
    PayloadTooLarge {
        /// Size of the serialized payload in bytes.
        size: usize,
        /// The configured limit in bytes.
        limit: usize,
    },
    /// No job has this id.
    #[error("job {id} not found")]
    NotFound {
        /// The id asked for.
        id: JobId,
    },
    /// The lease token is stale: the lease expired and the job was recovered
    /// or claimed again, or the job was already completed. Nothing changed.
    #[error(
        "job {id}: lease lost (it expired and the job was handed on, or the job already finished); nothing was changed"
    )]
    LeaseLost {
        /// The job whose lease was lost.
        id: JobId,
    },
    /// The job is in a state that does not allow the operation
    /// (cancel a running job, retry a completed one, ...).
    #[error("job {id} is {state}: cannot {operation}")]
    InvalidState {
        /// The job.
        id: JobId,
        /// Its current state.
        state: State,
        /// What was attempted.
        operation: &'static str,
    },
    /// A stored job could not be decoded (hand-edited row, foreign writer,
    /// schema drift). Other jobs are unaffected.
    #[error("job {id:?} is corrupt in storage: {reason}")]
    Corrupt {
        /// The job, when its id itself could be read.
        id: Option<JobId>,
        /// What could not be decoded.
        reason: String,
    },
    /// The backend could not be reached or dropped the connection. Retrying
    /// later may succeed; the worker pool backs off and carries on.
    #[error("{backend} is unavailable: {source}")]
    Unavailable {
        /// Which backend ("sqlite", "postgres", "redis", ...).
        backend: &'static str,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// The store cannot work until someone acts, and no retry can help:
    /// the backend's own error (`source`) says what happened and what to
    /// do (PostgreSQL: jq's tables were never migrated; SQLite: the writer
    /// thread died). The worker pool logs it once, shuts down and hands it
    /// to [`WorkerHandle::wait`](crate::WorkerHandle::wait).
    #[error("{backend} cannot go on: {source}")]
    Fatal {
        /// Which backend.
        backend: &'static str,
        /// The backend's error, with what to do about it.
        #[source]
        source: BoxError,
    },
    /// An enqueue batch spans queues that this backend cannot write in one
    /// atomic step (Redis Cluster: queues whose keys live in different hash
    /// slots). Nothing was stored.
    #[error(
        "a batch over queues {queues:?} cannot be stored atomically here ({reason}); nothing was stored: enqueue one batch per queue"
    )]
    BatchNotAtomic {
        /// The queues of the batch, sorted.
        queues: Vec<String>,
        /// Why this backend cannot store them in one step.
        reason: String,
    },
    /// The storage lacks an optional capability the call needs (a backend
    /// that implements only the core [`Storage`](crate::storage::Storage)).
    #[error(
        "this store does not support {capability}: its backend does not implement {}",
        capability.trait_name()
    )]
    Unsupported {
        /// The capability it lacks.
        capability: Capability,
    },
    /// No periodic job of this name is stored (`jqctl periodic trigger` of a name no
    /// pool ever declared).
    #[error("periodic job {name:?} not found: no worker pool has declared it on this store")]
    PeriodicNotFound {
        /// The name asked for.
        name: String,
    },
    /// A handler's result is larger than the configured cap
    /// ([`DEFAULT_MAX_RESULT_BYTES`](crate::workflow::DEFAULT_MAX_RESULT_BYTES)
    /// unless set otherwise). Nothing was stored.
    #[error(
        "result is {size} bytes, over the limit of {limit} bytes; store large data elsewhere and return a reference to it"
    )]
    ResultTooLarge {
        /// Size of the serialized result in bytes.
        size: usize,
        /// The configured limit in bytes.
        limit: usize,
    },
    /// A wait for a job to finish ran out of time; the job is still
    /// `state`. Nothing was changed.
    #[error("job {id} did not finish in time: it is still {state}")]
    WaitTimedOut {
        /// The job waited for.
        id: JobId,
        /// Its state when the wait gave up.
        state: State,
    },
    /// No workflow has this id.
    #[error("workflow {id} not found")]
    WorkflowNotFound {
        /// The id asked for.
        id: WorkflowId,
    },
    /// A durable job's write went over one of the contract's limits
    /// ("Durable jobs": a step's result, the steps of a job, the bytes of
    /// its journal). Nothing was stored.
    #[error("{limit} over the limit: {size}, at most {max}; keep large data elsewhere and record a reference to it")]
    DurableLimit {
        /// Which limit.
        limit: DurableLimit,
        /// What the write would make it.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A durable job's journal does not hold what its code asks for at
    /// this place: the code changed under a running job (a step renamed,
    /// moved or removed), or a write came for a place already taken.
    /// Nothing was stored.
    #[error(
        "job {id}: journal mismatch at entry {index}: the code asks for {asked}, the journal holds {}",
        recorded.as_deref().unwrap_or("nothing there")
    )]
    JournalMismatch {
        /// The job.
        id: JobId,
        /// The entry's place in the journal, from 0.
        index: u32,
        /// What the code asked for (`step "charge"`, `sleep`, ...).
        asked: String,
        /// What the journal holds there (`None` past its end).
        recorded: Option<String>,
    },
    /// Any other error from the backend's driver.
    #[error("{backend} error: {source}")]
    Backend {
        /// Which backend.
        backend: &'static str,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// True when the same call may succeed later (the backend was unreachable
    /// or busy); the worker pool retries such errors with backoff.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unavailable { .. })
    }

    /// True when no retry can succeed until someone acts (migrates the
    /// schema, restarts the process): the worker pool logs it once, shuts
    /// down and hands it to [`WorkerHandle::wait`](crate::WorkerHandle::wait).
    pub fn is_fatal(&self) -> bool {
        matches!(self, Error::Fatal { .. })
    }

    /// Builds an [`Error::InvalidInput`].
    pub fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidInput { what, reason: reason.into() }
    }
}
