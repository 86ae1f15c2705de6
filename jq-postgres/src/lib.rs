//! jq-postgres: the PostgreSQL storage backend of jq, on sqlx.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use jq_core::storage::Storage;
//! use jq_postgres::{PostgresConfig, PostgresStorage};
//! let storage = PostgresStorage::connect(PostgresConfig::new("postgres://postgres@127.0.0.1:5432/postgres")).await?;
//! storage.migrate().await?; // once per deployment; idempotent
//! # Ok(()) }
//! ```
//!
//! - All objects live in one schema (default `jq`, see
//!   [`PostgresConfig::schema`]), so several applications can share a
//!   database. [`PostgresStorage::migrate`] creates or upgrades it; it never
//!   runs on its own.
//! - Claims lock rows with `FOR UPDATE SKIP LOCKED` in a CTE that walks a
//!   partial index of the claimable jobs in claim order, each priority from
//!   where this storage's last claim left it, so a long transaction
//!   elsewhere (which keeps every claimed job's old index entry) does not
//!   make each claim slower than the last. The claim runs on connections
//!   of its own ([`PostgresConfig::claim_connections`]) that plan it once,
//!   when they open. Every later change is one UPDATE guarded on state and
//!   lease token, batched with `unnest`.
//! - [`PostgresStorage::enqueue_tx`] / [`PostgresStorage::enqueue_in`]
//!   enqueue inside the caller's transaction: the job exists if and only if
//!   the caller commits.
//! - Wake-up: enqueues `NOTIFY` a channel named after the schema; the
//!   signal of [`jq_core::storage::Storage::subscribe`] is fed by a
//!   `LISTEN`ing connection started on first use, which reconnects with
//!   backoff (workers keep polling meanwhile).
//! - Behind a connection pooler in transaction mode (PgBouncer), set
//!   [`PostgresConfig::transaction_pooler`]: statements are unnamed, each
//!   runs in a transaction of its own, and the listener connects to
//!   [`PostgresConfig::listen_url`] (or workers poll). See the
//!   repository's `docs/backends.md`.
//! - "Now" is always the configured [`jq_core::Clock`], sent as a parameter;
//!   the server's `now()` is never used.
//! - Every storage call waits at most [`PostgresConfig::response_timeout`]
//!   (10 s) for the server; one that runs out fails as retryable, and its
//!   connection, with every connection opened before it, is dropped rather
//!   than reused: a server that vanished without FIN or RST (a failover, a
//!   NAT) is noticed within one response timeout, and the next call opens
//!   new connections. The listener pings a connection silent for as long.
//!   The worker pool's heartbeat uses a handle of its own
//!   ([`jq_core::storage::Storage::independent`]: two connections of its own).
//!
//! Errors: setup returns [`PostgresError`]; storage operations return
//! [`jq_core::Error`], with `Unavailable` (retryable) for a refused, reset or
//! closed connection, a pool timeout, a server shutdown, a statement
//! timeout or a call that got no answer within the response timeout, and the fatal `SchemaMissing` when jq's tables are not there
//! (SQLSTATE 42P01 or 3F000: the schema was never migrated, or is older
//! than this build; run [`PostgresStorage::migrate`] or `jqctl migrate`).

#![deny(missing_docs)]

mod admin;
mod cancel;
mod claim;
mod config;
mod control;
mod durable;
mod election;
mod enqueue;
mod error;
mod failover;
mod headroom;
mod hints;
mod keyed;
mod liveness;
mod maintenance;
mod periodic;
mod pooler;
mod row;
mod rules;
mod schema;
mod settle;
mod storage;
mod wake;
mod workflow;

pub use config::{MAX_SCHEMA_BYTES, PostgresConfig};
pub use error::{PostgresError, SchemaPart};
pub use schema::{FUNCTIONS_VERSION, SCHEMA_VERSION};
/// The sqlx this crate is built with, for [`PostgresStorage::enqueue_tx`]
/// and [`PostgresStorage::from_pool`].
pub use sqlx;
pub(crate) use storage::Inner;
pub use storage::PostgresStorage;
