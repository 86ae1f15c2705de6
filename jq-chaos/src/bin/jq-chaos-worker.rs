//! A chaos worker process: a jq worker pool over the backend named by its
//! arguments, with short leases, whose handler appends a started and a
//! finished record per run to its own audit file and acks.
//!
//! SIGTERM (or ctrl-c) shuts it down gracefully; SIGKILL is what the chaos
//! harness sends to simulate a crash.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use jq_chaos::audit::{AuditWriter, Event, Record, now_us};
use jq_chaos::{ChaosJob, Target};
use jq_core::storage::Storage;
use jq_core::{HandlerError, HandlerResult, JobContext, WorkerPool};
use rand::Rng;

/// Runs a jq worker pool for the chaos harness.
#[derive(Parser, Debug)]
struct Args {
    /// SQLite database file.
    #[arg(long, conflicts_with_all = ["postgres", "redis"])]
    sqlite: Option<PathBuf>,
    /// PostgreSQL URL.
    #[arg(long, requires = "schema")]
    postgres: Option<String>,
    /// PostgreSQL schema.
    #[arg(long)]
    schema: Option<String>,
    /// Redis URL.
    #[arg(long, requires = "prefix")]
    redis: Option<String>,
    /// Redis key prefix.
    #[arg(long)]
    prefix: Option<String>,
    /// The audit file this process appends to.
    #[arg(long)]
    audit: PathBuf,
    /// Jobs run at once.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Lease, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    lease_ms: u64,
    /// Heartbeat interval, in milliseconds.
    #[arg(long, default_value_t = 500)]
    heartbeat_ms: u64,
    /// Longest random work per job, in milliseconds (0 to this).
    #[arg(long, default_value_t = 20)]
    work_max_ms: u64,
}

impl Args {
    fn target(&self) -> Option<Target> {
        match (&self.sqlite, &self.postgres, &self.schema, &self.redis, &self.prefix) {
            (Some(path), None, _, None, _) => Some(Target::Sqlite { path: path.clone() }),
            (None, Some(url), Some(schema), None, _) => {
                Some(Target::Postgres { url: url.clone(), schema: schema.clone() })
            }
            (None, None, _, Some(url), Some(prefix)) => {
                Some(Target::Redis { url: url.clone(), prefix: prefix.clone() })
            }
            _ => None,
        }
    }
}

async fn run_job(audit: Arc<AuditWriter>, work_max_ms: u64, ctx: JobContext) -> HandlerResult {
    let lease = ctx.lease();
    let mut record = Record {
        event: Event::Started,
        job: lease.id,
        attempt: ctx.attempt(),
        token: lease.token,
        pid: std::process::id(),
        started_us: now_us(),
        finished_us: None,
    };
    audit.append(&record).map_err(|e| HandlerError::nack(format!("audit write failed: {e}")))?;
    let work = rand::rng().random_range(0..=work_max_ms);
    tokio::time::sleep(Duration::from_millis(work)).await;
    record.event = Event::Finished;
    record.finished_us = Some(now_us());
    audit.append(&record).map_err(|e| HandlerError::nack(format!("audit write failed: {e}")))?;
    Ok(())
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(%e, "cannot listen for SIGTERM; only ctrl-c stops this worker");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

async fn serve<S: Storage>(storage: S, args: &Args, audit: Arc<AuditWriter>) -> jq_core::Result<()> {
    let work_max_ms = args.work_max_ms;
    WorkerPool::new(storage)
        .register::<ChaosJob, _, _>(move |_job, ctx| run_job(audit.clone(), work_max_ms, ctx))
        .concurrency(args.concurrency)
        .lease(Duration::from_millis(args.lease_ms))
        .heartbeat_interval(Duration::from_millis(args.heartbeat_ms))
        .poll_interval(Duration::from_millis(50))
        .recover_interval(Duration::from_millis(500))
        // A SIGKILLed maintainer is replaced within one lease, like its jobs.
        .maintenance_lease(Duration::from_millis(args.lease_ms))
        .promote_interval(Duration::from_millis(500))
        .shutdown_grace(Duration::from_secs(5))
        .job_timeout(Some(Duration::from_secs(30)))
        .run_until(shutdown_signal())
        .await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // The harness reads the log files: no colour codes in them.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    let Some(target) = args.target() else {
        eprintln!(
            "jq-chaos-worker: give exactly one of --sqlite PATH, --postgres URL --schema S, --redis URL --prefix P"
        );
        return ExitCode::from(2);
    };
    let audit = match AuditWriter::open(&args.audit) {
        Ok(a) => Arc::new(a),
        Err(e) => {
            eprintln!("jq-chaos-worker: cannot open audit file {}: {e}", args.audit.display());
            return ExitCode::from(2);
        }
    };
    // The server may be restarting right now: keep trying for a while.
    let storage = match target.connect_patiently(Duration::from_secs(60)).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("jq-chaos-worker: cannot connect: {e}");
            return ExitCode::from(1);
        }
    };
    match serve(storage, &args, audit).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("jq-chaos-worker: {e}");
            ExitCode::from(1)
        }
    }
}
