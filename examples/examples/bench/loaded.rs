//! The drain again with [`LOADED_COMPLETED`] completed jobs left in the
//! store (PostgreSQL and SQLite): finished jobs must not slow the queue.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jq_core::JobType;
use jq_postgres::PostgresStorage;
use jq_sqlite::{SqliteConfig, SqliteStorage};

use crate::scenarios::{Noop, drain, median};
use crate::{BoxError, Fresh, Row};

/// Jobs left completed in the store for the loaded drain.
pub const LOADED_COMPLETED: u64 = 1_000_000;

/// The row: the median of `rates`, with its ratio to the clean drain.
fn row(rates: Vec<f64>, clean: Option<f64>) -> Row {
    let loaded = median(rates);
    let name = format!("drain, {LOADED_COMPLETED} completed jobs in the store");
    let value = match clean {
        Some(clean) => format!("{loaded:.0} jobs/s ({:.0}% of clean)", 100.0 * loaded / clean),
        None => format!("{loaded:.0} jobs/s"),
    };
    (name, value)
}

/// The drain `runs` times on one schema holding [`LOADED_COMPLETED`]
/// completed jobs (bulk `INSERT ... SELECT generate_series`, loaded once;
/// `VACUUM ANALYZE` and `CHECKPOINT` before each drain).
pub async fn postgres<F, Fut>(runs: usize, clean: Option<f64>, mut fresh: F) -> Result<Row, BoxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Fresh<PostgresStorage>, BoxError>>,
{
    let storage = fresh().await?.storage;
    let jobs = format!("\"{}\".jobs", storage.schema());
    let start = Instant::now();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {jobs} (id, queue, kind, payload, priority, state, attempts, max_attempts, run_at, created_at, \
                             finished_at) \
         SELECT gen_random_uuid(), '{queue}', '{kind}', '{{\"n\":' || n || '}}', 1, 'completed', 1, 25, \
                now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour' + n * interval '1 ms' \
         FROM generate_series(1, {LOADED_COMPLETED}) AS n",
        queue = Noop::QUEUE,
        kind = Noop::KIND,
    )))
    .execute(storage.pool())
    .await?;
    eprintln!("loaded {LOADED_COMPLETED} completed jobs in {:.1} s", start.elapsed().as_secs_f64());
    let mut rates = Vec::with_capacity(runs);
    for run in 1..=runs {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE {jobs}"))).execute(storage.pool()).await?;
        // The load and the vacuum wrote about a gigabyte of WAL and dirty
        // pages; without a checkpoint here the server would run one during
        // the drain and measure the setup, not a table that grew over time.
        sqlx::raw_sql("CHECKPOINT").execute(storage.pool()).await?;
        let rate = drain(Arc::new(storage.clone())).await?;
        eprintln!("loaded run {run}/{runs}: drain {rate:.0}/s");
        rates.push(rate);
    }
    Ok(row(rates, clean))
}

/// The drain `runs` times on one database file holding
/// [`LOADED_COMPLETED`] completed jobs (inserted by a connection of the
/// bench's own, with time-ordered ids older than the drain's, in one
/// transaction), with the WAL checkpointed into the file before each drain.
pub async fn sqlite(runs: usize, clean: Option<f64>) -> Result<Row, BoxError> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("loaded.db");
    let storage = Arc::new(SqliteStorage::open(SqliteConfig::new(&path))?);
    let start = Instant::now();
    let load_path = path.clone();
    tokio::task::spawn_blocking(move || load_sqlite(&load_path)).await??;
    eprintln!("loaded {LOADED_COMPLETED} completed jobs in {:.1} s", start.elapsed().as_secs_f64());
    let mut rates = Vec::with_capacity(runs);
    for run in 1..=runs {
        let checkpoint_path = path.clone();
        tokio::task::spawn_blocking(move || checkpoint_sqlite(&checkpoint_path)).await??;
        let rate = drain(storage.clone()).await?;
        eprintln!("loaded run {run}/{runs}: drain {rate:.0}/s");
        rates.push(rate);
    }
    drop(storage);
    drop(dir);
    Ok(row(rates, clean))
}

fn load_sqlite(path: &Path) -> Result<(), BoxError> {
    let mut conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(60))?;
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    {
        let mut insert = tx.prepare(
            "INSERT INTO jobs (id, queue, kind, payload, priority, state, attempts, max_attempts, run_at, created_at, \
                               finished_at) \
             VALUES (?1, ?2, ?3, ?4, 1, 'completed', 1, 25, ?5, ?5, ?6)",
        )?;
        let hour_ago = chrono_now_micros() - 3_600_000_000;
        for n in 0..LOADED_COMPLETED {
            let id = uuid::Uuid::now_v7();
            let finished = hour_ago + n as i64 * 1_000;
            insert.execute(rusqlite::params![
                id.as_bytes().as_slice(),
                Noop::QUEUE,
                Noop::KIND,
                format!("{{\"n\":{n}}}"),
                hour_ago,
                finished
            ])?;
        }
    }
    tx.commit()?;
    checkpoint_conn(&conn)
}

fn chrono_now_micros() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// Copies the WAL into the database file and empties it, as an idle
/// application's checkpoints would have by the time the drain starts.
fn checkpoint_sqlite(path: &Path) -> Result<(), BoxError> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(60))?;
    checkpoint_conn(&conn)
}

fn checkpoint_conn(conn: &rusqlite::Connection) -> Result<(), BoxError> {
    let busy: i64 = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
    if busy != 0 {
        return Err("SQLite checkpoint could not finish: a reader held the WAL".into());
    }
    Ok(())
}
