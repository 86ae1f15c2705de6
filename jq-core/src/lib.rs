//! jq-core: the job model, the [`storage::Storage`] trait every backend
//! implements, and the worker pool that runs typed handlers over any
//! storage. Applications use the facade crate, `jq-queue` on crates.io
//! (its library is named `jq`), which re-exports this one.
//!
//! - The root holds what an application uses: jobs ([`JobType`],
//!   [`NewJob`], [`Job`]), handlers ([`HandlerError`], [`JobContext`]),
//!   the pool ([`WorkerPool`]), queue controls ([`QueueLimits`]), keyed
//!   jobs ([`KeyReport`]), reads
//!   ([`Stats`], [`JobFilter`]), time ([`Clock`]) and errors ([`Error`]).
//! - [`periodic`]: periodic jobs (a cron expression or an interval, one job
//!   per tick).
//! - [`durable`]: durable jobs' journal, its entries and limits (the
//!   handler's side is [`DurableContext`]).
//! - [`storage`]: what a backend author implements and calls: the core
//!   trait, the capabilities, [`storage::Wrapper`] for wrappers.
//! - [`observe`]: the metrics' names and the store's gauges.
//!
//! The words are the glossary's (`docs/GLOSSARY.md` in the repository);
//! the semantics every backend keeps are in its `docs/CONTRACT.md`, and
//! `jq-testkit` checks them.
//!
//! The modules read bottom-up, in four layers, each importing only its own
//! and the ones below (`tests/layers.rs` checks it, and that no module
//! imports one that imports it back):
//!
//! 1. The ground: the ids ([`JobId`], [`WorkflowId`](workflow::WorkflowId)),
//!    [`State`], [`Capability`](storage::Capability) and the [`Clock`]
//!    name nothing else; the [`Error`] names them (and their text forms
//!    fail with it).
//! 2. The model: jobs, queue controls, keys, workflow plans, periodic
//!    jobs' declarations and stored rows, the read types ([`Stats`],
//!    [`JobFilter`]), the trace context.
//! 3. The traits: [`storage`], over the model.
//! 4. The pool: the worker pool with the periodic jobs' rounds, and
//!    [`observe`], over the traits.

#![deny(missing_docs)]

mod backoff;
mod capability;
mod clock;
mod control;
pub mod durable;
mod error;
mod id;
mod job;
mod keys;
pub mod observe;
mod parse;
pub mod periodic;
mod read;
mod redact;
mod state;
pub mod storage;
mod text;
mod trace;
mod worker;
pub mod workflow;

pub use backoff::{Backoff, ConstantBackoff, ExponentialBackoff};
pub use clock::{Clock, ManualClock, Timestamp};
pub use control::{QueueInfo, QueueLimits, Rate, Seen};
pub use error::{BoxError, Error, Result};
pub use id::JobId;
pub use job::{
    AttemptError, CancelRequest, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_QUEUE, IntoJob, Job,
    JobBuilder, JobType, Lease, MAX_TIMEOUT, MAX_UNIQUE_WINDOW, NewJob, Payload, Priority, QueueName, UniqueRule,
    check_timeout,
};
pub use keys::{KeyInfo, KeyLimit, KeyReport};
pub use read::{JobFilter, StateCounts, Stats, Throughput};
pub use state::State;
pub use trace::TraceContext;
pub use worker::{
    DEFAULT_KEEP_CANCELLED, DEFAULT_KEEP_COMPLETED, DEFAULT_KEEP_DEAD, DurableContext, HandlerError, HandlerResult,
    JobContext, LIMITED_POLL_INTERVAL, Retention, Waited, WorkerHandle, WorkerPool,
};
