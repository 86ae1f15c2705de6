//! A durable chaos worker process: a jq worker pool over a SQLite file
//! whose durable handler runs [`STEPS`] steps per job; each step's body
//! appends `<job> <step> <pid> <micros>` to this process's effects file
//! (flushed before the body returns, so a SIGKILL cannot hide an effect
//! that happened) and returns a fresh random number, and the job's result
//! is the list of what its steps returned (replayed from the journal on
//! every later run). The harness (`tests/durable.rs`) SIGKILLs these
//! processes at random and checks that no step body ran after its
//! checkpoint.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use jq_core::{DurableContext, HandlerError, HandlerResult, JobType, WorkerPool};
use rand::Rng;
use serde::{Deserialize, Serialize};

/// Steps per job.
const STEPS: u32 = 20;

/// The durable job the harness enqueues.
#[derive(Serialize, Deserialize)]
struct Flow {
    n: u64,
}

impl JobType for Flow {
    const KIND: &'static str = "durable-chaos";
    const QUEUE: &'static str = "durable-chaos";
}

/// Runs a durable jq worker pool for the chaos harness.
#[derive(Parser, Debug)]
struct Args {
    /// SQLite database file.
    #[arg(long)]
    sqlite: PathBuf,
    /// The effects file this process appends to.
    #[arg(long)]
    effects: PathBuf,
    /// Jobs run at once.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Lease, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    lease_ms: u64,
}

/// Appends one effect's line and flushes it (no lock held across an await).
fn record(effects: &Mutex<std::fs::File>, line: &str) -> Result<(), HandlerError> {
    let mut file = effects.lock().unwrap_or_else(|p| p.into_inner());
    file.write_all(line.as_bytes())?;
    file.flush()?;
    Ok(())
}

/// One job's run: the steps, each recording its effect first.
async fn run(effects: Arc<Mutex<std::fs::File>>, ctx: DurableContext) -> HandlerResult {
    let mut got = Vec::with_capacity(STEPS as usize);
    for step in 0..STEPS {
        let effects = effects.clone();
        let id = ctx.id();
        let value: u64 = ctx
            .step(&format!("s{step}"), async move {
                let line = format!("{id} {step} {} {}\n", std::process::id(), jq_chaos::audit::now_us());
                record(&effects, &line)?;
                tokio::task::yield_now().await;
                Ok::<_, HandlerError>(rand::rng().random::<u32>() as u64)
            })
            .await?;
        got.push(value);
    }
    ctx.set_result(&got).map_err(HandlerError::bury)?;
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("jq-chaos-durable-worker: no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let file = match std::fs::OpenOptions::new().create(true).append(true).open(&args.effects) {
            Ok(f) => Arc::new(Mutex::new(f)),
            Err(e) => {
                eprintln!("jq-chaos-durable-worker: cannot open {}: {e}", args.effects.display());
                return ExitCode::FAILURE;
            }
        };
        let config = jq_sqlite::SqliteConfig::new(&args.sqlite).busy_timeout(Duration::from_secs(10));
        let storage = match jq_sqlite::SqliteStorage::open(config) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("jq-chaos-durable-worker: cannot open the store: {e}");
                return ExitCode::FAILURE;
            }
        };
        let lease = Duration::from_millis(args.lease_ms);
        let pool = WorkerPool::new(storage)
            .concurrency(args.concurrency)
            .lease(lease)
            .heartbeat_interval(lease / 4)
            .recover_interval(lease / 2)
            .promote_interval(Duration::from_millis(100))
            .poll_interval(Duration::from_millis(20))
            .register_durable::<Flow, _, _>(move |_flow: Flow, ctx: DurableContext| run(file.clone(), ctx));
        let stop = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        match pool.run_until(stop).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("jq-chaos-durable-worker: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
