//! The worker pool: claims jobs from any [`Storage`] and runs your handlers.
//!
//! The guide for handler authors (the outcomes, what a handler may do,
//! fatal errors) is on [`WorkerPool`], where it renders; this module's own
//! docs are for whoever changes the pool.
//!
//! # How the pool is built
//!
//! A fixed set of tasks, one module per role, and no task per job:
//!
//! - [`fetcher`]: claims batches sized to the free slots; wakes on
//!   [`Storage::subscribe`] or after the jittered poll interval.
//!   [`prefetch`] decides how many claimed jobs may wait.
//! - [`executor`]: `concurrency` long-lived tasks pulling
//!   claimed jobs from a channel and running their handlers.
//! - [`settler`]: batches outcomes into one
//!   [`Storage::settle`] call.
//! - [`heartbeat`]: extends every held lease in one call per
//!   interval; cancels the jobs whose lease was lost. It runs on a thread
//!   of its own with the storage's own connections, so handlers that
//!   block their threads cannot starve it.
//! - [`maintenance`]: promote, recover and retention purges, and the
//!   sampling of the store's gauges ([`crate::observe`]), run by the one
//!   pool per store that holds the "maintenance" role
//!   ([`RoleStorage::elect`](crate::storage::RoleStorage::elect)).
//! - [`periodic`]: periodic jobs ([`WorkerPool::periodic`]): one task,
//!   only when periodic jobs are declared, running a [`PeriodicRunner`]
//!   round every second on every pool (no election:
//!   [`PeriodicStorage::fire`](crate::storage::PeriodicStorage::fire) keeps
//!   one job per tick).
//!
//! Each run is a `jq.job` span that the handler's future runs in, linked
//! to the trace context the job was enqueued with; see
//! [`WorkerPool::observe`].
//! - [`handle`]: the [`WorkerHandle`] and the graceful
//!   shutdown sequence.
//!
mod cancel;
mod config;
mod durable;
mod executor;
mod failure;
mod fetcher;
mod handle;
mod handler;
mod heartbeat;
mod maintenance;
mod pace;
mod periodic;
mod pool;
mod prefetch;
mod retention;
mod settler;

pub use durable::{DurableContext, Waited};
pub use fetcher::LIMITED_POLL_INTERVAL;
pub use handle::WorkerHandle;
pub use handler::{HandlerError, HandlerResult, JobContext};
pub use periodic::{PeriodicRunner, Round};
pub use pool::WorkerPool;
pub use retention::{DEFAULT_KEEP_CANCELLED, DEFAULT_KEEP_COMPLETED, DEFAULT_KEEP_DEAD, Retention};
