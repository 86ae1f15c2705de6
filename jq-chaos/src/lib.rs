//! jq-chaos: fault injection against real worker processes and real
//! servers, checked from an audit trail.
//!
//! - [`servers`]: private PostgreSQL and Redis servers that a test may kill
//!   and restart without disturbing anyone else.
//! - [`audit`]: the JSON-lines trail every worker process appends to, one
//!   record when a handler starts and one when it finishes.
//! - [`checker`]: reads the trail and the store and says whether any job was
//!   lost and how every repeated run is explained.
//! - [`scenario`]: the chaos run (kill workers, restart the server) and the
//!   load run (producers against a worker, memory sampled).
//! - [`storm`]: drains under connection trouble: every jq connection
//!   ended every 100 ms (a storm), every connection slot of the server
//!   taken and held (a starve).
//! - [`failover`]: a drain while the PostgreSQL primary crashes and its
//!   streaming replica is promoted (synchronous and asynchronous).
//! - [`pressure`]: hours under pressure on PostgreSQL: a steady enqueue
//!   rate through phases of a session idle in a transaction and of
//!   REPEATABLE READ readers, per bucket jobs/s, pickup latency, dead
//!   tuples and sizes.
//! - [`memory`]: resident memory of processes, from `/proc`.
//!
//! The worker process is the `jq-chaos-worker` binary of this crate.
//! `JQ_CHAOS_SOAK=1` turns the short runs CI does into long ones.

pub mod audit;
pub mod checker;
pub mod failover;
pub mod memory;
pub mod pressure;
pub mod scenario;
pub mod servers;
pub mod storm;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jq_core::storage::Storage;
use jq_core::{Error, JobType};
use serde::{Deserialize, Serialize};

/// The job every chaos worker runs: a sequence number and nothing else.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ChaosJob {
    /// Position in the producer's sequence (for humans reading a trail).
    pub seq: u64,
}

impl JobType for ChaosJob {
    const KIND: &'static str = "chaos";
    const QUEUE: &'static str = "chaos";
}

/// True when `JQ_CHAOS_SOAK` asks for the long runs.
pub fn soak() -> bool {
    std::env::var("JQ_CHAOS_SOAK").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Which backend a run attacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file shared by every worker process.
    Sqlite,
    /// A private PostgreSQL server.
    Postgres,
    /// A private Redis server with an fsync-always append-only file.
    Redis,
}

impl Backend {
    /// The lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::Redis => "redis",
        }
    }
}

/// Where a backend's jobs live: what a worker process is told and what the
/// harness connects to.
#[derive(Clone, Debug)]
pub enum Target {
    /// A SQLite database file.
    Sqlite {
        /// The file.
        path: PathBuf,
    },
    /// A PostgreSQL database and schema.
    Postgres {
        /// `postgres://...`
        url: String,
        /// The schema holding the jobs.
        schema: String,
    },
    /// A Redis server and key prefix.
    Redis {
        /// `redis://...`
        url: String,
        /// The key prefix.
        prefix: String,
    },
}

/// A storage of any backend, behind one type.
pub type AnyStorage = Arc<dyn Storage>;

impl Target {
    /// The worker binary's arguments that select this target.
    pub fn worker_args(&self) -> Vec<String> {
        match self {
            Target::Sqlite { path } => vec!["--sqlite".into(), path.display().to_string()],
            Target::Postgres { url, schema } => {
                vec!["--postgres".into(), url.clone(), "--schema".into(), schema.clone()]
            }
            Target::Redis { url, prefix } => vec!["--redis".into(), url.clone(), "--prefix".into(), prefix.clone()],
        }
    }

    /// Opens a storage handle on the target (PostgreSQL: without migrating;
    /// see [`Target::migrate`]).
    pub async fn connect(&self) -> Result<AnyStorage, Error> {
        let boxed = |e: &dyn std::fmt::Display, backend| Error::Unavailable { backend, source: e.to_string().into() };
        Ok(match self {
            Target::Sqlite { path } => Arc::new(
                jq_sqlite::SqliteStorage::open(
                    jq_sqlite::SqliteConfig::new(path).busy_timeout(Duration::from_secs(10)),
                )
                .map_err(|e| boxed(&e, "sqlite"))?,
            ),
            Target::Postgres { url, schema } => Arc::new(
                jq_postgres::PostgresStorage::connect(
                    jq_postgres::PostgresConfig::new(url.clone()).schema(schema.clone()).max_connections(4),
                )
                .await
                .map_err(|e| boxed(&e, "postgres"))?,
            ),
            Target::Redis { url, prefix } => Arc::new(
                jq_redis::RedisStorage::connect(jq_redis::RedisConfig::new(url.clone()).prefix(prefix.clone()))
                    .await
                    .map_err(|e| boxed(&e, "redis"))?,
            ),
        })
    }

    /// Creates the PostgreSQL schema (nothing to do for the others).
    pub async fn migrate(&self) -> Result<(), Error> {
        if let Target::Postgres { url, schema } = self {
            let storage = jq_postgres::PostgresStorage::connect(
                jq_postgres::PostgresConfig::new(url.clone()).schema(schema.clone()),
            )
            .await
            .map_err(|e| Error::Unavailable { backend: "postgres", source: e.to_string().into() })?;
            storage
                .migrate()
                .await
                .map_err(|e| Error::Backend { backend: "postgres", source: e.to_string().into() })?;
            storage.close().await;
        }
        Ok(())
    }

    /// [`Target::connect`], retried for up to `patience` (the server may be
    /// restarting).
    pub async fn connect_patiently(&self, patience: Duration) -> Result<AnyStorage, Error> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            match self.connect().await {
                Ok(s) => return Ok(s),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}
