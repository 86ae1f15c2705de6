//! A store that grew for a year, on PostgreSQL and SQLite:
//! [`finished`] finished jobs spread over the past 365 days in four queues,
//! and [`PENDING`] Pending ones in a fifth, filled by the SQL of
//! `scripts/bench/grow-*.sql`. On it, the reads an operator's tools make
//! (each the median of [`READS`] calls, after one warm-up call):
//!
//! - `stats`: what `jqctl stats` and every dashboard refresh call;
//! - `queues`: the dashboard's list of queues and their controls;
//! - the dashboard's overview, `GET /` over HTTP from a local listener (it
//!   calls stats, queues, the last hour's throughput, the periodic jobs,
//!   and the oldest Pending job of each queue with any);
//!
//! then the drain again, `--runs` times, with its ratio to the clean drain
//! of the same sitting. `JQ_BENCH_GROWN_FINISHED` sets the number of
//! finished jobs (default 10,000,000); `JQ_BENCH_KEEP=1` keeps the store
//! afterwards (its schema or file is printed) for measuring `jqctl` by hand.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jq_core::storage::{Storage, StorageExt};
use jq_postgres::PostgresStorage;
use jq_sqlite::{SqliteConfig, SqliteStorage};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::scenarios::{drain, median};
use crate::{BoxError, Fresh, Row};

/// Pending jobs in queue "backlog" beside the finished ones.
pub const PENDING: u64 = 100_000;
/// Calls per measured read.
const READS: usize = 7;
/// Finished jobs per fill statement (progress shows between them).
const CHUNK: u64 = 1_000_000;

const GROW_POSTGRES: &str = include_str!("../../../scripts/bench/grow-postgres.sql");
const GROW_POSTGRES_FINISH: &str = include_str!("../../../scripts/bench/grow-postgres-finish.sql");
const GROW_SQLITE: &str = include_str!("../../../scripts/bench/grow-sqlite.sql");
const GROW_SQLITE_FINISH: &str = include_str!("../../../scripts/bench/grow-sqlite-finish.sql");

/// Finished jobs in the grown store: `JQ_BENCH_GROWN_FINISHED`, else 10,000,000.
pub fn finished() -> u64 {
    std::env::var("JQ_BENCH_GROWN_FINISHED").ok().and_then(|n| n.parse().ok()).unwrap_or(10_000_000)
}

fn keep() -> bool {
    std::env::var("JQ_BENCH_KEEP").is_ok_and(|v| v == "1")
}

/// `template` with `{name}` replaced by each value.
fn fill(template: &str, values: &[(&str, String)]) -> String {
    values.iter().fold(template.to_owned(), |sql, (name, value)| sql.replace(&format!("{{{name}}}"), value))
}

/// The grown store's rows: one per read, then the drain's.
async fn measure<S: Storage + Clone>(
    storage: &S,
    runs: usize,
    clean: Option<f64>,
    mut before_drain: impl FnMut() -> std::pin::Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>,
) -> Result<Vec<Row>, BoxError> {
    let n = finished();
    let what = format!("{n} finished + {PENDING} pending jobs");
    let stats = storage.stats().await?;
    let (done, pending) = (stats.queues.values().map(|c| c.total()).sum::<u64>(), stats.total(jq_core::State::Pending));
    if done != n + PENDING || pending != PENDING {
        return Err(format!("the grown store counts {done} jobs, {pending} pending: the fill went wrong").into());
    }
    let mut rows = Vec::new();
    let stats_ms = timed(|| async { storage.stats().await.map(drop) }).await?;
    rows.push((format!("stats, {what}"), ms(stats_ms)));
    let controls = storage.require_controls()?;
    let queues_ms = timed(|| async { controls.queues().await.map(drop) }).await?;
    rows.push((format!("queues (the dashboard's list), {what}"), ms(queues_ms)));
    let overview_ms = overview(storage.clone()).await?;
    rows.push((format!("dashboard overview GET /, {what}"), ms(overview_ms)));
    let mut rates = Vec::with_capacity(runs);
    for run in 1..=runs {
        before_drain().await?;
        let rate = drain(Arc::new(storage.clone())).await?;
        eprintln!("grown run {run}/{runs}: drain {rate:.0}/s");
        rates.push(rate);
    }
    let rate = median(rates);
    let value = match clean {
        Some(clean) => format!("{rate:.0} jobs/s ({:.0}% of clean)", 100.0 * rate / clean),
        None => format!("{rate:.0} jobs/s"),
    };
    rows.push((format!("drain, {what} in the store"), value));
    Ok(rows)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// The median of [`READS`] calls of `read`, after one unmeasured call.
async fn timed<F, Fut>(mut read: F) -> Result<Duration, BoxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = jq_core::Result<()>>,
{
    read().await?;
    let mut times = Vec::with_capacity(READS);
    for _ in 0..READS {
        let start = Instant::now();
        read().await?;
        times.push(start.elapsed());
    }
    Ok(median(times))
}

/// The dashboard's overview over HTTP: the router served on a local port,
/// one `GET /` per call on a fresh connection, read to its end.
async fn overview<S: Storage + Clone>(storage: S) -> Result<Duration, BoxError> {
    let router = jq_dashboard::router(jq::Client::new(storage), jq_dashboard::Options::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let get = || async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        if !response.starts_with(b"HTTP/1.1 200") {
            let head = String::from_utf8_lossy(&response[..response.len().min(300)]).into_owned();
            return Err::<(), BoxError>(format!("the overview answered {head}").into());
        }
        Ok(())
    };
    get().await?;
    let mut times = Vec::with_capacity(READS);
    for _ in 0..READS {
        let start = Instant::now();
        get().await?;
        times.push(start.elapsed());
    }
    server.abort();
    Ok(median(times))
}

/// The scenario on a PostgreSQL schema from `fresh`, filled by
/// `grow-postgres*.sql`, vacuumed and analysed (as autovacuum would have),
/// with a `CHECKPOINT` before each drain.
pub async fn postgres<F, Fut>(runs: usize, clean: Option<f64>, mut fresh: F) -> Result<Vec<Row>, BoxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Fresh<PostgresStorage>, BoxError>>,
{
    let storage = fresh().await?.storage;
    let schema = format!("\"{}\"", storage.schema());
    let total = finished();
    let start = Instant::now();
    for first in (1..=total).step_by(CHUNK as usize) {
        let last = (first + CHUNK - 1).min(total);
        let values = [
            ("schema", schema.clone()),
            ("first", first.to_string()),
            ("last", last.to_string()),
            ("total", total.to_string()),
        ];
        sqlx::raw_sql(sqlx::AssertSqlSafe(fill(GROW_POSTGRES, &values))).execute(storage.pool()).await?;
        eprintln!("grown: {last} of {total} finished jobs stored ({:.0} s)", start.elapsed().as_secs_f64());
    }
    let values = [("schema", schema.clone()), ("pending", PENDING.to_string())];
    sqlx::raw_sql(sqlx::AssertSqlSafe(fill(GROW_POSTGRES_FINISH, &values))).execute(storage.pool()).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE {schema}.jobs"))).execute(storage.pool()).await?;
    sqlx::raw_sql("CHECKPOINT").execute(storage.pool()).await?;
    eprintln!("grown: filled, vacuumed and analysed in {:.0} s", start.elapsed().as_secs_f64());
    let pool = storage.pool().clone();
    let rows = measure(&storage, runs, clean, move || {
        let pool = pool.clone();
        Box::pin(async move {
            sqlx::raw_sql("CHECKPOINT").execute(&pool).await?;
            Ok(())
        })
    })
    .await;
    if keep() {
        eprintln!("grown: keeping schema {schema} (JQ_BENCH_KEEP=1); drop it when done");
        // Closed, so the bench's final sweep of open schemas leaves it.
        storage.close().await;
    } else {
        crate::postgres_drop_schema(&storage).await?;
    }
    rows
}

/// The scenario on a SQLite file filled by `grow-sqlite*.sql` through a
/// connection of the bench's own (the triggers count the jobs), with the
/// WAL checkpointed into the file after the fill and before each drain.
pub async fn sqlite(runs: usize, clean: Option<f64>) -> Result<Vec<Row>, BoxError> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("grown.db");
    let storage = SqliteStorage::open(SqliteConfig::new(&path))?;
    let start = Instant::now();
    let fill_path = path.clone();
    tokio::task::spawn_blocking(move || fill_sqlite(&fill_path)).await??;
    eprintln!("grown: filled in {:.0} s", start.elapsed().as_secs_f64());
    let checkpoint_path = path.clone();
    let rows = measure(&storage, runs, clean, move || {
        let path = checkpoint_path.clone();
        Box::pin(async move { tokio::task::spawn_blocking(move || checkpoint(&path)).await? })
    })
    .await;
    drop(storage);
    if keep() {
        let kept = dir.keep();
        eprintln!("grown: keeping {} (JQ_BENCH_KEEP=1); delete it when done", kept.join("grown.db").display());
    }
    rows
}

fn fill_sqlite(path: &Path) -> Result<(), BoxError> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(60))?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_micros().to_string();
    let total = finished();
    let start = Instant::now();
    for first in (1..=total).step_by(CHUNK as usize) {
        let last = (first + CHUNK - 1).min(total);
        let values = [
            ("first", first.to_string()),
            ("last", last.to_string()),
            ("total", total.to_string()),
            ("now", now.clone()),
        ];
        conn.execute_batch(&format!("BEGIN IMMEDIATE; {} COMMIT;", fill(GROW_SQLITE, &values)))?;
        checkpoint_conn(&conn)?;
        eprintln!("grown: {last} of {total} finished jobs stored ({:.0} s)", start.elapsed().as_secs_f64());
    }
    let values = [("pending", PENDING.to_string()), ("now", now)];
    conn.execute_batch(&format!("BEGIN IMMEDIATE; {} COMMIT;", fill(GROW_SQLITE_FINISH, &values)))?;
    // No ANALYZE: jq never runs one, so a real store has no statistics.
    checkpoint_conn(&conn)
}

fn checkpoint(path: &Path) -> Result<(), BoxError> {
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
