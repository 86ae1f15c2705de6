//! jq-redis: the Redis storage backend of jq.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use jq_redis::{RedisConfig, RedisStorage};
//! let storage = RedisStorage::connect(RedisConfig::new("redis://127.0.0.1:6379").prefix("myapp")).await?;
//! # let _ = storage; Ok(()) }
//! ```
//!
//! Every state change is one Lua script (`src/lua/*.lua`), so it is atomic
//! on the server: enqueue (with uniqueness), claim, settle (ack, nack,
//! bury, release; one call per batch), heartbeat (one call per batch),
//! promote, recover, retry, cancel, purge, and the workflow's (store a
//! workflow; the release of a finished step's children runs in the script
//! that finished it). Every claim writes a lease (a
//! token and an expiry) on the job and indexes it by expiry, so a
//! worker that dies loses nothing: `recover` hands its jobs on once the
//! lease expires. "Now" comes from the configured `jq_core::Clock`, passed to
//! every script, never from Redis's `TIME`.
//!
//! The key layout, and how operations that know only a job id find its
//! queue, are documented in [`schema`]. Promote, recover and purge move at most
//! 1,000 (purge 10,000) jobs per script call and loop while a call was full.
//!
//! [`RedisStorage::connect`] refuses a server whose `maxmemory-policy`
//! evicts keys ([`RedisError::Evicting`]): it would drop jobs when full.
//! It also refuses a prefix whose key layout it does not know: a newer
//! one ([`RedisError::LayoutTooNew`]) or an unreleased development
//! build's ([`RedisError::DevelopmentLayout`]); see [`schema`], "The layout
//! marker".
//!
//! Wake-up: the scripts that make a job Pending `PUBLISH` on `<prefix>:wake`;
//! [`jq_core::storage::Storage::subscribe`] starts one pub/sub connection per storage
//! handle that bumps the returned watch channel, and reconnects with backoff
//! when it drops (the worker pool's polling covers the gap).
//!
//! Connections: a `redis::aio::ConnectionManager`, which reconnects by
//! itself; while the server is unreachable, operations return
//! `jq_core::Error::Unavailable` and the worker pool backs off. A call
//! waits at most [`RedisConfig::response_timeout`] (10 s) for its reply,
//! and a call that timed out drops its connection, so the next opens a
//! new one (the redis crate alone would retry on the same silent socket
//! forever); opening one is bounded too, so a call takes at most twice the
//! response timeout. Every socket has TCP keepalive
//! ([`RedisConfig::keepalive`]). The worker pool's heartbeat uses a handle
//! with a connection of its own ([`jq_core::storage::Storage::independent`]).
//!
//! # Durability
//!
//! Redis keeps jobs in memory; what survives a crash depends on the server's
//! persistence settings, not on jq. With the common `appendonly yes` and
//! `appendfsync everysec`, a crash of the server (or of its machine) can
//! lose about the last second of writes: enqueued jobs can vanish, and an
//! ack can be undone so that a finished job runs again. With RDB snapshots
//! only, minutes can be lost. For the strongest guarantee set `appendonly
//! yes` and `appendfsync always` in `redis.conf` (or `CONFIG SET appendfsync
//! always`): every write is fsynced before Redis answers, at a large cost in
//! throughput. Replication is asynchronous: a replica promoted after a
//! primary's crash may lack the last writes the primary acknowledged (`WAIT`
//! narrows the window but does not close it). Handlers should therefore be
//! idempotent, as they must be anyway because a job whose lease expires runs
//! again. Where losing an acknowledged enqueue is unacceptable, use the
//! PostgreSQL or SQLite backend.
//!
//! # Redis Cluster
//!
//! [`RedisConfig::cluster`] connects to a Redis Cluster (through
//! `redis::cluster_async::ClusterConnection`, which follows `MOVED`/`ASK`
//! and reconnects per node); [`RedisConfig::new`] to a single server
//! (through a `ConnectionManager`). Both sit behind one connection enum,
//! so the hot path stays statically dispatched.
//!
//! All keys of one queue share a hash tag, so every per-queue script runs
//! on one slot. What differs on Cluster:
//!
//! - an enqueue batch stays one script call, so it is stored whole or not
//!   at all; a batch whose queues live in different hash slots cannot be
//!   one call and is refused with `jq_core::Error::BatchNotAtomic` before
//!   anything is stored (enqueue one batch per queue instead);
//! - a workflow is one script call too: its queues must share one hash
//!   slot (one queue, or queue names with one hash tag `{tag}name`), else
//!   `enqueue_workflow` refuses it with `BatchNotAtomic` (see [`schema`],
//!   "Workflows"); on a single server it may span any queues;
//! - a settle or heartbeat batch over several queues becomes one script
//!   call per queue, sent concurrently (each item is fenced on its own
//!   anyway);
//! - a claim over several queues peeks at each queue (`lua/peek.lua`), merges
//!   the peeks in claim order, then claims from each queue its share of the
//!   first `limit`, so the global order holds;
//! - lookups that pipeline over queues (get, stats, locating a job by id)
//!   become concurrent single commands, since a Cluster pipeline must stay
//!   in one slot; the registry `SADD` is its own call before the enqueue;
//! - wake-up: `PUBLISH` (called by the scripts) is broadcast to every node
//!   of a cluster, so the listener subscribes on one node's plain connection
//!   and moves to the next seed node when that one fails.
//!
//! `tests/cluster.rs` starts a three-node cluster on loopback ports and runs
//! the whole conformance and property suites through it.
//!
//! # Performance
//!
//! Redis runs the scripts on one thread, so the server's time per job is what
//! limits throughput: every `redis.call` costs about 1 to 3 microseconds on a
//! small machine whatever it does, and each string it hands Lua is
//! interned. The scripts therefore make as few calls per job as they can:
//! a queue's jobs are fields of three hashes (see [`schema`]), so a claim of
//! 128 jobs reads them with one `HMGET` per hash and leases them with one
//! `HSET`, an ack batch reads the states with one `HMGET` and writes them
//! with one `HSET`, and every index moves in bulk. The lease fields are left
//! in a job's state once it stops running (readers ignore them then; the
//! next claim overwrites them). Everything that does not depend on stored
//! data (run_at, Pending or Scheduled, the ready member, the lease expiry)
//! is computed by the client, and numbers reach `redis.call` as strings
//! (a Lua number is formatted with `%.17g`). Enqueue re-adds a queue to
//! the registry at most once a second per handle rather than on every call.
//! `examples/server_cost.rs` reads the server's own accounting per
//! operation; `scripts/redis-instructions.sh` counts its instructions per
//! job, a figure that repeats across sittings.

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
mod eviction;
mod headroom;
mod keyed;
mod liveness;
mod maintenance;
mod owners;
mod periodic;
pub mod raw;
mod row;
pub mod schema;
mod scripts;
mod settle;
mod storage;
mod wake;
mod workflow;

pub use config::{DEFAULT_KEEPALIVE, DEFAULT_RESPONSE_TIMEOUT, RedisConfig};
pub use error::RedisError;
pub(crate) use liveness::Conn;
pub use schema::{Keys, LAYOUT};
pub use storage::RedisStorage;
pub(crate) use storage::{Inner, duration_micros};
