//! jq in one file: typed jobs, a worker pool, and what became of each job.
//!
//! ```text
//! cargo run -p examples --example quickstart                          # SQLite, no server
//! cargo run -p examples --example quickstart -- postgres://postgres@127.0.0.1:5432/postgres
//! cargo run -p examples --example quickstart -- redis://127.0.0.1:6379
//! ```
//!
//! Without a URL the database is `jq-quickstart.db` in the system temp
//! directory (`$TMPDIR`, usually `/tmp`). On PostgreSQL the jobs live in the
//! schema `jq_quickstart`, on Redis under the key prefix `jq-quickstart`.
//! Each is emptied at start so every run begins afresh. Logs go to stderr at
//! `warn` unless `RUST_LOG` says otherwise.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use jq_core::worker::{HandlerError, HandlerResult, JobContext, WorkerPool};
use jq_core::{ExponentialBackoff, JobId, JobType, NewJob, State, Storage, StorageExt};
use jq_postgres::{PostgresConfig, PostgresStorage};
use jq_redis::{RedisConfig, RedisStorage};
use jq_sqlite::{SqliteConfig, SqliteStorage};
use serde::{Deserialize, Serialize};

/// Always succeeds.
#[derive(Serialize, Deserialize)]
struct SendWelcome {
    user: String,
}

impl JobType for SendWelcome {
    const KIND: &'static str = "send_welcome";
    const QUEUE: &'static str = "mail";
}

/// Fails on its first attempt (a flaky payment gateway), then succeeds.
#[derive(Serialize, Deserialize)]
struct ChargeCard {
    order: u32,
    cents: u64,
}

impl JobType for ChargeCard {
    const KIND: &'static str = "charge_card";
    const QUEUE: &'static str = "billing";
}

/// Never succeeds: ends Dead after its attempts, with every error kept.
#[derive(Serialize, Deserialize)]
struct BuildReport {
    report: String,
}

impl JobType for BuildReport {
    const KIND: &'static str = "build_report";
    const MAX_ATTEMPTS: u32 = 3;
}

async fn send_welcome(job: SendWelcome, _ctx: JobContext) -> HandlerResult {
    println!("  [handler] welcome mail sent to {}", job.user);
    Ok(())
}

async fn charge_card(job: ChargeCard, ctx: JobContext) -> HandlerResult {
    if ctx.attempt() == 1 {
        // Any std error with `?` means "retry later".
        Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "payment gateway timed out"))?;
    }
    println!("  [handler] order {} charged {} cents on attempt {}", job.order, job.cents, ctx.attempt());
    Ok(())
}

async fn build_report(job: BuildReport, ctx: JobContext) -> HandlerResult {
    Err(HandlerError::retry(format!("report {:?}: data source missing (attempt {})", job.report, ctx.attempt())))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();

    match std::env::args().nth(1) {
        None => run(open_sqlite(&std::env::temp_dir().join("jq-quickstart.db"))?).await,
        Some(url) if url.starts_with("sqlite:") => run(SqliteStorage::open(SqliteConfig::from_url(&url)?)?).await,
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            println!("database: {url}, schema jq_quickstart");
            let storage = PostgresStorage::connect(PostgresConfig::new(url).schema("jq_quickstart")).await?;
            sqlx::query("DROP SCHEMA IF EXISTS jq_quickstart CASCADE").execute(storage.pool()).await?;
            storage.migrate().await?;
            run(storage).await
        }
        Some(url) if url.starts_with("redis://") => {
            println!("database: {url}, key prefix jq-quickstart");
            let storage = RedisStorage::connect(RedisConfig::new(url).prefix("jq-quickstart")).await?;
            storage.delete_all_keys().await?;
            run(storage).await
        }
        Some(other) => Err(format!("unknown URL {other:?}: use sqlite://PATH, postgres://... or redis://...").into()),
    }
}

/// A fresh SQLite file at `path`.
fn open_sqlite(path: &std::path::Path) -> Result<SqliteStorage, Box<dyn std::error::Error>> {
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.to_path_buf().into_os_string();
        file.push(suffix);
        let _ = std::fs::remove_file(file); // absent on the first run
    }
    println!("database: {}", path.display());
    Ok(SqliteStorage::open(SqliteConfig::new(path))?)
}

/// Enqueues the demo jobs, works them off and prints what became of each.
async fn run<S: Storage + Clone>(storage: S) -> Result<(), Box<dyn std::error::Error>> {
    let ids = vec![
        storage.enqueue_one(NewJob::typed(&SendWelcome { user: "ada@example.com".into() }).build()?).await?,
        storage
            .enqueue_one(
                NewJob::typed(&SendWelcome { user: "later@example.com".into() })
                    .delay(Duration::from_secs(2))
                    .build()?,
            )
            .await?,
        storage.enqueue_one(NewJob::typed(&ChargeCard { order: 42, cents: 1999 }).build()?).await?,
        storage.enqueue_one(NewJob::typed(&BuildReport { report: "q3".into() }).build()?).await?,
    ];
    println!("enqueued {} jobs (one delayed by 2 s)", ids.len());

    let started = Instant::now();
    let pool = WorkerPool::new(storage.clone())
        // A fast backoff so the retries finish within the demo; the default
        // starts at 1 s and doubles up to an hour.
        .backoff(ExponentialBackoff { base: Duration::from_millis(100), max: Duration::from_millis(400) })
        .register::<SendWelcome, _, _>(send_welcome)
        .register::<ChargeCard, _, _>(charge_card)
        .register::<BuildReport, _, _>(build_report)
        .start()?;
    let settled = wait_until_settled(&storage, &ids, Duration::from_secs(15)).await?;
    pool.shutdown().await?;
    if !settled {
        eprintln!("some jobs did not settle within 15 s");
    }
    println!("all settled in {:.1} s\n", started.elapsed().as_secs_f64());

    for id in &ids {
        let job = storage.get(*id).await?;
        println!("{:<13} {:<9} attempts {}/{}", job.kind, job.state.as_str(), job.attempts, job.max_attempts);
        for error in &job.errors {
            println!("    attempt {}: {}", error.attempt, error.message);
        }
    }
    println!("\ncounts per state:");
    let stats = storage.stats().await?;
    for state in State::ALL {
        println!("  {:<10} {}", state.as_str(), stats.total(state));
    }
    Ok(())
}

/// Waits (bounded) until every job is in a terminal state.
async fn wait_until_settled<S: Storage>(storage: &S, ids: &[JobId], limit: Duration) -> jq_core::Result<bool> {
    let deadline = Instant::now() + limit;
    let mut open: HashSet<JobId> = ids.iter().copied().collect();
    while Instant::now() < deadline {
        let mut done = Vec::new();
        for id in &open {
            if storage.get(*id).await?.state.is_terminal() {
                done.push(*id);
            }
        }
        for id in done {
            open.remove(&id);
        }
        if open.is_empty() {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(false)
}
