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
//! schema `jq_quickstart`, on Redis under the key prefix `jq-quickstart`
//! (unless the URL names another with `?schema=` or `?prefix=`). Each is
//! emptied at start so every run begins afresh. Logs go to stderr at `warn`
//! unless `RUST_LOG` says otherwise. `tests/quickstart.rs` runs this file's
//! `open_fresh` and `run` on every backend.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use jq::{Backend, Client, ExponentialBackoff, HandlerError, HandlerResult, Job, JobContext, JobType, NewJob, State};
use serde::{Deserialize, Serialize};

/// What `main` and the test return on failure.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Always succeeds.
#[derive(Serialize, Deserialize)]
pub struct SendWelcome {
    user: String,
}

impl JobType for SendWelcome {
    const KIND: &'static str = "send_welcome";
    const QUEUE: &'static str = "mail";
}

/// Fails on its first attempt (a flaky payment gateway), then succeeds.
#[derive(Serialize, Deserialize)]
pub struct ChargeCard {
    order: u32,
    cents: u64,
}

impl JobType for ChargeCard {
    const KIND: &'static str = "charge_card";
    const QUEUE: &'static str = "billing";
}

/// Never succeeds: ends Dead after its attempts, with every error kept.
#[derive(Serialize, Deserialize)]
pub struct BuildReport {
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
    Err(HandlerError::nack(format!("report {:?}: data source missing (attempt {})", job.report, ctx.attempt())))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();

    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| format!("sqlite://{}", std::env::temp_dir().join("jq-quickstart.db").display()));
    let client = open_fresh(&url).await?;
    let jobs = run(&client).await?;
    for job in &jobs {
        println!("{:<13} {:<9} attempts {}/{}", job.kind, job.state.as_str(), job.attempts, job.max_attempts);
        for error in &job.errors {
            println!("    attempt {}: {}", error.attempt, error.message);
        }
    }
    println!("\ncounts per state:");
    let stats = client.stats().await?;
    for state in State::ALL {
        println!("  {:<10} {}", state.as_str(), stats.total(state));
    }
    Ok(())
}

/// Connects to `url` (with the quickstart's schema or key prefix unless the
/// URL names one), empties what an earlier run left there, and migrates.
pub async fn open_fresh(url: &str) -> Result<Client, BoxError> {
    let url = with_default_namespace(url);
    if let Some(path) = url.strip_prefix("sqlite://") {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path}{suffix}")); // absent on the first run
        }
    }
    println!("database: {url}");
    let client = jq::connect(&url).await?;
    match client.storage() {
        Backend::Postgres(s) => {
            let drop = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", s.schema());
            jq::postgres::sqlx::raw_sql(jq::postgres::sqlx::AssertSqlSafe(drop)).execute(s.pool()).await?;
        }
        Backend::Redis(s) => {
            s.delete_all_keys().await?;
        }
        _ => {}
    }
    client.migrate().await?; // PostgreSQL's schema; nothing to do on SQLite and Redis
    Ok(client)
}

fn with_default_namespace(url: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    if url.starts_with("postgres") && !url.contains("schema=") {
        format!("{url}{sep}schema=jq_quickstart")
    } else if url.starts_with("redis") && !url.contains("prefix=") {
        format!("{url}{sep}prefix=jq-quickstart")
    } else {
        url.to_owned()
    }
}

/// Enqueues the demo jobs, works them off, and returns what became of each.
pub async fn run(client: &Client) -> Result<Vec<Job>, BoxError> {
    let ids = vec![
        client.enqueue(SendWelcome { user: "ada@example.com".into() }).await?,
        client
            .enqueue(NewJob::typed(&SendWelcome { user: "later@example.com".into() }).delay(Duration::from_secs(2)))
            .await?,
        client.enqueue(ChargeCard { order: 42, cents: 1999 }).await?,
        client.enqueue(BuildReport { report: "q3".into() }).await?,
    ];
    println!("enqueued {} jobs (one delayed by 2 s)", ids.len());

    let started = Instant::now();
    let pool = client
        .worker_pool()
        // A fast backoff so the retries finish within the demo; the default
        // starts at 1 s and doubles up to an hour.
        .backoff(ExponentialBackoff { base: Duration::from_millis(100), max: Duration::from_millis(400) })
        .register::<SendWelcome, _, _>(send_welcome)
        .register::<ChargeCard, _, _>(charge_card)
        .register::<BuildReport, _, _>(build_report)
        .start()?;
    let settled = wait_until_settled(client, &ids, Duration::from_secs(15)).await?;
    pool.shutdown().await?;
    if !settled {
        eprintln!("some jobs did not settle within 15 s");
    }
    println!("all settled in {:.1} s\n", started.elapsed().as_secs_f64());

    let mut jobs = Vec::with_capacity(ids.len());
    for id in ids {
        jobs.push(client.get(id).await?);
    }
    Ok(jobs)
}

/// Waits (bounded) until every job is in a terminal state.
async fn wait_until_settled(client: &Client, ids: &[jq::JobId], limit: Duration) -> jq::Result<bool> {
    let deadline = Instant::now() + limit;
    let mut open: HashSet<jq::JobId> = ids.iter().copied().collect();
    while Instant::now() < deadline {
        let mut done = Vec::new();
        for id in &open {
            if client.get(*id).await?.state.is_terminal() {
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
