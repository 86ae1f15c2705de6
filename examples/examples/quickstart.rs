//! jq in one file: typed jobs in a SQLite file, a worker pool, and what
//! became of each job.
//!
//! ```text
//! cargo run -p examples --example quickstart
//! ```
//!
//! The database is `jq-quickstart.db` in the system temp directory
//! (`$TMPDIR`, usually `/tmp`); it is deleted at start so every run begins
//! empty. Logs go to stderr at `warn` unless `RUST_LOG` says otherwise.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use jq_core::worker::{HandlerError, HandlerResult, JobContext, WorkerPool};
use jq_core::{ExponentialBackoff, JobId, JobType, NewJob, State, Storage, StorageExt};
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

    let path = std::env::temp_dir().join("jq-quickstart.db");
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.clone().into_os_string();
        file.push(suffix);
        let _ = std::fs::remove_file(file); // absent on the first run
    }
    println!("database: {}", path.display());
    let storage = SqliteStorage::open(SqliteConfig::new(&path))?;

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
    pool.shutdown().await;
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
async fn wait_until_settled(storage: &SqliteStorage, ids: &[JobId], limit: Duration) -> jq_core::Result<bool> {
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
