//! jq-sqlite: the embedded default storage backend of jq.
//!
//! ```no_run
//! # fn main() -> Result<(), jq_sqlite::SqliteError> {
//! let storage = jq_sqlite::SqliteStorage::open(jq_sqlite::SqliteConfig::new("jobs.db"))?;
//! # let _ = storage; Ok(()) }
//! ```
//!
//! # Design
//!
//! - WAL journal, `synchronous = NORMAL` (no fsync per commit; a power cut
//!   can lose the last commits, never corrupt the file), a busy timeout
//!   (default 5 s).
//! - One writer per storage: an OS thread owning the only write connection,
//!   fed by a channel. Queued writes are group-committed: up to 256 commands
//!   share one `BEGIN IMMEDIATE` transaction, each in its own savepoint.
//!   Claims run there too, so a claim is one transaction that picks
//!   candidates from a partial index in claim order and takes them with
//!   the claim's lease token.
//! - Keyed jobs wait in their own partial index
//!   (`jobs_keyed_waiting`: by a marker that only keyed moves
//!   write, so plain jobs' state changes never touch it): a claim probes
//!   it once per asked queue, in the statement that reads the queue's
//!   control, and only a queue with keyed jobs gets
//!   a rotation (`rotation.rs`: a skip scan from a cursor per priority,
//!   under per-key limits), merged with the plain jobs in the same
//!   transaction.
//! - Reads (get, list, stats, leaders) use at most
//!   [`SqliteConfig::readers`] read connections on the blocking thread
//!   pool (more reads at once wait for one); WAL lets them run beside the
//!   writer.
//! - A writer command that panics is rolled back and answered with an
//!   error; the writer carries on. If the writer thread ends anyway, every
//!   call gets the fatal [`jq_core::Error::Fatal`].
//! - Several processes may share one file: each has its own writer; SQLite's
//!   write lock (`BEGIN IMMEDIATE` + busy timeout) serialises them. A busy
//!   timeout that runs out gives [`jq_core::Error::Unavailable`].
//! - The schema is versioned with `PRAGMA user_version` (version 1 is
//!   0.1's); [`schema`] holds the versions, and opening a file brings it
//!   to the newest. A file of an unreleased development build, or of a
//!   newer jq-sqlite, is refused, never migrated.
//! - [`SqliteStorage::subscribe`](jq_core::storage::Storage::subscribe) is bumped
//!   after commits that make work claimable in this process, including a
//!   caller's own transaction that used [`SqliteStorage::enqueue_tx`];
//!   other processes are seen at the next poll.
//! - When the WAL grows over [`SqliteConfig::checkpoint_wal_bytes`]
//!   (64 MiB), the writer runs `PRAGMA wal_checkpoint(TRUNCATE)`; it looks
//!   at most every 2 s and after every purge.

#![deny(missing_docs)]

mod admin;
mod cancel;
mod claim;
mod config;
mod control;
mod counts;
mod durable;
mod election;
mod enqueue;
mod error;
mod keyed;
mod maintenance;
mod periodic;
mod rotation;
mod row;
pub mod schema;
mod settle;
mod storage;
mod wake;
mod workflow;
mod writer;

pub use config::SqliteConfig;
pub use error::SqliteError;
/// The rusqlite this crate is built with, for [`SqliteStorage::enqueue_tx`].
pub use rusqlite;
pub use storage::SqliteStorage;
