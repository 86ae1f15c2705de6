//! jq: a background-job queue for Rust. This is the crate to depend on (the
//! package `jq-queue`, whose library is `jq`: `cargo add jq-queue`, then
//! `use jq::...`); pick the backends with Cargo features:
//!
//! | feature | backend | URL |
//! |---|---|---|
//! | `sqlite` (default) | a SQLite file, no server ([`sqlite`]) | `sqlite://jobs.db`, `sqlite::memory:` |
//! | `postgres` | PostgreSQL ([`postgres`]) | `postgres://user@host:5432/db?schema=jq` |
//! | `redis` | Redis ([`redis`]) | `redis://host:6379?prefix=jq` |
//!
//! A backend left out is not compiled at all (no rusqlite without `sqlite`,
//! no sqlx without `postgres`, no redis without `redis`), and [`connect`]
//! refuses its URL with [`SetupError::NotCompiled`], naming the feature.
//!
//! ```
//! use std::time::Duration;
//! use jq::{HandlerResult, JobContext, JobType, NewJob, Priority};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct SendEmail { to: String }
//!
//! impl JobType for SendEmail {
//!     const KIND: &'static str = "send_email";
//!     const QUEUE: &'static str = "mail";
//! }
//!
//! async fn send_email(job: SendEmail, _ctx: JobContext) -> HandlerResult {
//!     println!("mail to {}", job.to);
//!     Ok(())
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = jq::connect("sqlite::memory:").await?;
//! client.migrate().await?; // creates jq's schema on PostgreSQL; nothing to do here
//!
//! let now = client.enqueue(SendEmail { to: "a@example.com".into() }).await?;
//! let later = client
//!     .enqueue(NewJob::typed(&SendEmail { to: "b@example.com".into() }).priority(Priority::High).delay(Duration::from_secs(60)))
//!     .await?;
//!
//! let pool = client.worker_pool().register::<SendEmail, _, _>(send_email).start()?;
//! # while !client.get(now).await?.state.is_terminal() { tokio::time::sleep(Duration::from_millis(10)).await; }
//! pool.shutdown().await?; // stop claiming, finish or hand back what runs
//! assert_eq!(client.get(later).await?.state, jq::State::Scheduled);
//! # Ok(()) }
//! ```
//!
//! # What is here
//!
//! The root holds what an application uses:
//!
//! - [`connect`] / [`connect_with`]: a [`Client`] over the store a URL names
//!   ([`BackendUrl`] has the forms). PostgreSQL is not migrated by
//!   connecting: call [`Client::migrate`] once per deployment (it does
//!   nothing on SQLite, which migrates its file when it opens it, and on
//!   Redis).
//! - [`Client`]: typed enqueue ([`Client::enqueue`], [`Client::enqueue_many`]),
//!   enqueue inside your own transaction ([`Client::enqueue_tx`], the same
//!   call on SQLite and PostgreSQL), `get`/`list`/`stats`/`cancel`/`retry`/
//!   `purge`, queue controls, key limits, periodic jobs, and
//!   [`Client::worker_pool`].
//! - Jobs: [`JobType`], [`NewJob`], [`Job`], [`State`], [`Priority`].
//! - Handlers and the pool: [`WorkerPool`] (its docs are the handler
//!   guide: every outcome, what a handler may do, fatal errors),
//!   [`HandlerResult`], [`HandlerError`] (the outcomes besides `Ok`: nack,
//!   bury, release), [`JobContext`].
//! - [`Error`] for operations, [`SetupError`] for connecting.
//!
//! Three modules hold the rest, each item reachable by one path:
//!
//! - [`periodic`]: periodic jobs (a cron expression or an interval, one job
//!   per tick, however many pools run).
//! - [`storage`]: what a backend author implements (the core
//!   [`storage::Storage`] and the optional capabilities), what wrappers
//!   use ([`storage::Wrapper`]), and the low-level calls the pool makes.
//!   [`Backend`] is a [`storage::Storage`] over whichever backend a URL
//!   named; a backend of your own works everywhere a built-in one does:
//!   `Client::new(my_storage)`.
//! - [`observe`]: the metrics' names and the store's gauges.
//! - One module per compiled backend: [`sqlite`], [`postgres`], [`redis`].
//!
//! The words are those of the repository's `docs/GLOSSARY.md`; the
//! semantics every backend keeps are in its `docs/CONTRACT.md`, which
//! `jq-testkit` checks. The guides (backends, periodic jobs, queue
//! controls, observability, the dashboard, operations) are in its `docs/`.

#![deny(missing_docs)]

mod backend;
mod client;
mod enqueued;
mod error;
mod flows;
mod tx;
mod url;

pub use backend::{Backend, ConnectOptions};
pub use client::Client;
pub use enqueued::EnqueuedWorkflow;
pub use error::SetupError;
pub use tx::{Transactional, TransactionalWorkflows};
pub use url::BackendUrl;

pub use jq_core::storage::CancelAnswer;
pub use jq_core::{
    AttemptError, Backoff, BoxError, CancelRequest, Clock, ConstantBackoff, DEFAULT_KEEP_CANCELLED,
    DEFAULT_KEEP_COMPLETED, DEFAULT_KEEP_DEAD, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_QUEUE,
    DurableContext, Error, ExponentialBackoff, HandlerError, HandlerResult, IntoJob, Job, JobBuilder, JobContext,
    JobFilter, JobId, JobType, KeyInfo, KeyLimit, KeyReport, Lease, ManualClock, NewJob, Payload, Priority, QueueInfo,
    QueueLimits, QueueName, Rate, Result, Retention, Seen, State, StateCounts, Stats, Throughput, Timestamp,
    TraceContext, UniqueRule, Waited, WorkerHandle, WorkerPool,
};
pub use jq_core::{durable, observe, periodic, storage, workflow};

/// The SQLite backend (feature `sqlite`), with the `rusqlite` it is built
/// with (`jq::sqlite::rusqlite`) for [`Client::enqueue_tx`].
#[cfg(feature = "sqlite")]
pub use jq_sqlite as sqlite;

/// The PostgreSQL backend (feature `postgres`), with the `sqlx` it is built
/// with (`jq::postgres::sqlx`) for [`Client::enqueue_tx`].
#[cfg(feature = "postgres")]
pub use jq_postgres as postgres;

/// The Redis backend (feature `redis`).
#[cfg(feature = "redis")]
pub use jq_redis as redis;

/// A [`Client`] over the store `url` names, with each backend's defaults.
/// See [`BackendUrl`] for the URL forms and [`Backend::open`] for what
/// opening does on each backend (PostgreSQL is not migrated).
pub async fn connect(url: &str) -> Result<Client, SetupError> {
    Ok(Client::new(Backend::connect(url).await?))
}

/// [`connect`] with settings ([`ConnectOptions`]: a clock, the payload
/// limit, PostgreSQL's pool size, ...); a setting that does not apply to
/// the backend the URL names is refused ([`SetupError::InvalidOption`]).
pub async fn connect_with(url: &str, options: &ConnectOptions) -> Result<Client, SetupError> {
    Ok(Client::new(Backend::connect_with(url, options).await?))
}
