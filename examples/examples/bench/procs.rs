//! Worker processes draining one store: the same drain run by 1 and by
//! [`PROCESSES`] OS processes, each with its own storage handle (its own
//! connections) and a pool of [`DRAIN_CONCURRENCY`] handlers.
//!
//! The children are this binary started as `bench --worker <backend>
//! <store>` (the store: a SQLite file, a PostgreSQL schema, a Redis key
//! prefix). Each prints `ready`, starts its pool when it reads `go`, prints
//! how many jobs it has run every few milliseconds, and on the end of its
//! input shuts its pool down (every outcome written) and exits. The
//! parent times from `go` until every child has exited.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use jq_core::State;
use jq_core::storage::Storage;
use jq_core::{JobContext, WorkerPool};
use jq_postgres::{PostgresConfig, PostgresStorage};
use jq_redis::{RedisConfig, RedisStorage};
use jq_sqlite::{SqliteConfig, SqliteStorage};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use crate::scenarios::{DRAIN_CONCURRENCY, Noop, enqueue_noops};
use crate::{BoxError, postgres_url, redis_url};

/// Jobs each drain runs.
pub const PROCS_JOBS: usize = 40_000;
/// Worker processes of the larger drain.
pub const PROCESSES: usize = 4;
/// How often a child reports its count.
const REPORT_EVERY: Duration = Duration::from_millis(5);

/// Drains [`PROCS_JOBS`] jobs enqueued into `storage` by `processes` child
/// processes of `backend` on `store`; jobs/s.
pub async fn drain<S: Storage>(storage: Arc<S>, backend: &str, store: &str, processes: usize) -> Result<f64, BoxError> {
    enqueue_noops(&*storage, PROCS_JOBS).await?;
    drain_enqueued(storage, backend, store, processes, PROCS_JOBS, Duration::ZERO).await
}

/// Drains `jobs` jobs already in `storage` by `processes` child processes
/// of `backend` on `store`, each job's handler sleeping `job_time`; jobs/s.
pub async fn drain_enqueued<S: Storage>(
    storage: Arc<S>,
    backend: &str,
    store: &str,
    processes: usize,
    jobs: usize,
    job_time: Duration,
) -> Result<f64, BoxError> {
    let completed_before = storage.stats().await?.total(State::Completed);
    let sleep_us = job_time.as_micros().to_string();
    let exe = std::env::current_exe()?;
    let mut children: Vec<(Child, ChildStdin)> = Vec::with_capacity(processes);
    let (counts_tx, mut counts) = mpsc::unbounded_channel::<(usize, usize)>();
    let mut readers = Vec::with_capacity(processes);
    for i in 0..processes {
        let mut child = Command::new(&exe)
            .args(["--worker", backend, store, &sleep_us])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().ok_or("child without stdin")?;
        let stdout = child.stdout.take().ok_or("child without stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        match lines.next_line().await? {
            Some(line) if line == "ready" => {}
            other => return Err(format!("worker process {i} did not start: {other:?}").into()),
        }
        let tx = counts_tx.clone();
        readers.push(tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let count = line.trim_start_matches("done ").parse().unwrap_or(0);
                if tx.send((i, count)).is_err() {
                    break;
                }
            }
        }));
        children.push((child, stdin));
    }
    drop(counts_tx);
    let start = Instant::now();
    for (_, stdin) in &mut children {
        stdin.write_all(b"go\n").await?;
        stdin.flush().await?;
    }
    let mut ran = vec![0usize; processes];
    while ran.iter().sum::<usize>() < jobs {
        let (i, count) = tokio::time::timeout(Duration::from_secs(120), counts.recv())
            .await
            .map_err(|_| "procs: no progress for 120 s")?
            .ok_or("procs: every worker process stopped early")?;
        ran[i] = ran[i].max(count);
    }
    let mut waits = Vec::with_capacity(processes);
    for (mut child, stdin) in children {
        // End of input: the child shuts its pool down and exits.
        drop(stdin);
        waits.push(tokio::spawn(async move { child.wait().await }));
    }
    for wait in waits {
        let status = wait.await??;
        if !status.success() {
            return Err(format!("a worker process failed: {status}").into());
        }
    }
    let elapsed = start.elapsed();
    for reader in readers {
        reader.await?;
    }
    let completed = storage.stats().await?.total(State::Completed) - completed_before;
    if completed != jobs as u64 {
        return Err(format!("procs: {completed} of {jobs} jobs completed").into());
    }
    Ok(jobs as f64 / elapsed.as_secs_f64())
}

/// The child: `bench --worker <backend> <store> <job time in µs>`.
pub async fn worker(backend: &str, store: &str, job_time: Duration) -> Result<(), BoxError> {
    match backend {
        "sqlite" => run(SqliteStorage::open(SqliteConfig::new(store))?, job_time).await,
        "postgres" => {
            run(PostgresStorage::connect(PostgresConfig::new(postgres_url()).schema(store)).await?, job_time).await
        }
        "redis" => run(RedisStorage::connect(RedisConfig::new(redis_url()).prefix(store)).await?, job_time).await,
        other => Err(format!("--worker: unknown backend {other:?}").into()),
    }
}

async fn run<S: Storage>(storage: S, job_time: Duration) -> Result<(), BoxError> {
    let mut input = BufReader::new(tokio::io::stdin()).lines();
    println!("ready");
    if input.next_line().await?.as_deref() != Some("go") {
        return Ok(());
    }
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let pool = WorkerPool::new(Arc::new(storage))
        .concurrency(DRAIN_CONCURRENCY)
        .register::<Noop, _, _>(move |_job, _ctx: JobContext| {
            let counter = counter.clone();
            async move {
                if !job_time.is_zero() {
                    tokio::time::sleep(job_time).await;
                }
                counter.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
        })
        .start()?;
    let report = {
        let ran = ran.clone();
        tokio::spawn(async move {
            let mut shown = 0;
            let mut every = tokio::time::interval(REPORT_EVERY);
            loop {
                every.tick().await;
                let now = ran.load(Ordering::Relaxed);
                if now != shown {
                    println!("{now}");
                    shown = now;
                }
            }
        })
    };
    while input.next_line().await?.is_some() {}
    pool.shutdown().await?;
    report.abort();
    println!("done {}", ran.load(Ordering::Relaxed));
    Ok(())
}
