//! jq-core: the job model, the [`Storage`] trait every backend implements,
//! and the worker pool that runs typed handlers over any storage.
//!
//! The semantics every backend keeps are in the repository's
//! `docs/CONTRACT.md`; `jq-testkit` checks them.

pub mod backoff;
pub mod clock;
pub mod control;
pub mod error;
pub mod job;
pub mod observe;
pub mod periodic;
pub mod storage;
pub mod trace;
pub mod worker;

pub use backoff::{Backoff, ConstantBackoff, ExponentialBackoff};
pub use clock::{Clock, ManualClock, Timestamp};
pub use control::{QueueInfo, QueueLimits, Rate, Seen};
pub use error::{BoxError, Error, Result};
pub use job::{
    AttemptError, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_QUEUE, IntoJob, Job, JobBuilder, JobId,
    JobType, Lease, LeaseRef, LeaseToken, NewJob, Payload, Priority, QueueName, State,
};
pub use periodic::{Fire, FireOutcome, MissedPolicy, Periodic, PeriodicBuilder, PeriodicInfo, PeriodicRunner};
pub use storage::{
    ClaimRequest, Election, JobFilter, Leader, Outcome, Settled, Settlement, StateCounts, Stats, Storage, StorageExt,
    Throughput, WorkSignal,
};
pub use trace::TraceContext;
pub use worker::{HandlerError, HandlerResult, JobContext, WorkerHandle, WorkerPool};
