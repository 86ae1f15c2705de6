//! The benchmark of a jq backend at jq's default settings.
//!
//! ```text
//! cargo run --release -p examples --example bench -- sqlite [--runs N]
//! cargo run --release -p examples --example bench -- redis [--runs N]
//! cargo run --release -p examples --example bench -- postgres [--runs N]
//! cargo run --release -p examples --example bench -- postgres --only drain   # one scenario, e.g. under a profiler
//! ```
//!
//! Redis: the server at `JQ_REDIS_URL` (default `redis://127.0.0.1:6379`);
//! every scenario uses a fresh random key prefix `jqbench:<uuid>`, whose keys
//! are deleted (SCAN + UNLINK, never FLUSHALL) when the scenario ends.
//!
//! For the backend it measures, each figure the median of `--runs` runs
//! (default 3), every run on fresh, empty storage:
//!
//! 1. batch enqueue: 20,000 jobs in 20 `enqueue` calls of 1,000, jobs/s;
//! 2. single enqueue: 5,000 sequential awaited `enqueue` calls of one job, jobs/s;
//! 3. drain: 20,000 pre-loaded no-op jobs run by a worker pool at the default
//!    settings except concurrency 16, jobs/s from pool start until the last
//!    ack is durable (the pool's shutdown returns once every outcome is
//!    written);
//! 4. wake-up latency: an idle pool in the same process; 200 jobs enqueued
//!    20 ms apart; latency = handler start minus the instant just before the
//!    `enqueue` call; p50 and p99.
//!
//! PostgreSQL: the server at `JQ_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); every scenario uses a
//! fresh, migrated schema `jqbench_<uuid>`, dropped (its pool closed, so its
//! wake-up listener stops) when the scenario ends. It
//! also measures the drain again with 1,000,000 completed jobs left in the
//! table (bulk `INSERT ... SELECT generate_series`, then `VACUUM ANALYZE`
//! and a `CHECKPOINT`, so the drain does not pay for the load's writes),
//! printed as its own row with its ratio to the clean-table drain.
//!
//! Adding a backend is one arm in `main`'s match: build a fresh storage per
//! run and hand it to the same generic scenarios.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use jq_core::worker::{JobContext, WorkerPool};
use jq_core::{JobType, NewJob, State, Storage, StorageExt};
use jq_postgres::{PostgresConfig, PostgresStorage};
use jq_redis::{RedisConfig, RedisStorage};
use jq_sqlite::{SqliteConfig, SqliteStorage};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc};

const BATCH_JOBS: usize = 20_000;
const BATCH_SIZE: usize = 1_000;
const SINGLE_JOBS: usize = 5_000;
const DRAIN_JOBS: usize = 20_000;
const DRAIN_CONCURRENCY: usize = 16;
const LATENCY_JOBS: usize = 200;
const LATENCY_GAP: Duration = Duration::from_millis(20);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Serialize, Deserialize)]
struct Noop {
    n: usize,
}

impl JobType for Noop {
    const KIND: &'static str = "bench_noop";
    const QUEUE: &'static str = "bench";
}

/// What tears a scenario's storage down once the scenario is measured.
type Cleanup = std::pin::Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;

/// A storage for one scenario, with whatever must live as long as it (a
/// temp dir) and its teardown. Each scenario's storage is torn down before
/// the next one starts: a leftover (PostgreSQL: a pool whose wake-up
/// listener still LISTENs in the same database) would tax the next one.
struct Fresh<S> {
    storage: S,
    _keep: Box<dyn Send>,
    cleanup: Option<Cleanup>,
}

impl<S> Fresh<S> {
    /// Runs `scenario` on the storage, then its cleanup.
    async fn measure<T, Fut>(self, scenario: impl FnOnce(Arc<S>) -> Fut) -> Result<T, BoxError>
    where
        Fut: Future<Output = Result<T, BoxError>>,
    {
        let result = scenario(Arc::new(self.storage)).await;
        if let Some(cleanup) = self.cleanup {
            cleanup.await?;
        }
        drop(self._keep);
        result
    }
}

const USAGE: &str = "usage: bench <backend> [--runs N] [--only batch|single|drain|latency|loaded]\n\
                     backends: sqlite, redis, postgres (loaded: postgres only)";

/// One scenario, for `--only`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Batch,
    Single,
    Drain,
    Latency,
    /// PostgreSQL's drain with a million completed rows.
    Loaded,
}

impl Scenario {
    fn parse(name: &str) -> Result<Self, BoxError> {
        Ok(match name {
            "batch" => Self::Batch,
            "single" => Self::Single,
            "drain" => Self::Drain,
            "latency" => Self::Latency,
            "loaded" => Self::Loaded,
            other => return Err(format!("unknown scenario {other:?}\n{USAGE}").into()),
        })
    }
}

/// One run's figures.
/// `None`: the scenario was left out by `--only`.
#[derive(Clone, Copy, Debug, Default)]
struct Figures {
    batch_enqueue: Option<f64>,
    single_enqueue: Option<f64>,
    drain: Option<f64>,
    p50: Option<Duration>,
    p99: Option<Duration>,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // sqlx warns of every statement over 1 s; the loaded drain's 1M-row load is one.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,sqlx::query=error"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();

    let mut args = std::env::args().skip(1);
    let mut positional = Vec::new();
    let mut runs = 3usize;
    let mut only = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => runs = args.next().ok_or("--runs needs a number")?.parse()?,
            "--only" => only = Some(Scenario::parse(&args.next().ok_or("--only needs a scenario")?)?),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            _ => positional.push(arg),
        }
    }
    let backend = positional.first().cloned().ok_or(USAGE)?;
    if runs == 0 {
        return Err("--runs must be at least 1".into());
    }

    // Rows a backend adds to the table (PostgreSQL: the loaded drain).
    let mut extra_rows: Vec<(String, String)> = Vec::new();
    let figures = match backend.as_str() {
        "sqlite" => {
            bench(runs, only, || async {
                let dir = tempfile::tempdir()?;
                let storage = SqliteStorage::open(SqliteConfig::new(dir.path().join("bench.db")))?;
                Ok(Fresh { storage, _keep: Box::new(dir), cleanup: None })
            })
            .await?
        }
        "redis" => {
            let url = std::env::var("JQ_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
            let used: Arc<std::sync::Mutex<Vec<RedisStorage>>> = Arc::default();
            let result = bench(runs, only, || {
                let (url, used) = (url.clone(), used.clone());
                async move {
                    let prefix = format!("jqbench:{}", uuid::Uuid::new_v4().simple());
                    let storage = RedisStorage::connect(RedisConfig::new(url).prefix(prefix)).await?;
                    used.lock().unwrap_or_else(|e| e.into_inner()).push(storage.clone());
                    let done = storage.clone();
                    let cleanup: Cleanup = Box::pin(async move {
                        done.delete_all_keys().await?;
                        Ok(())
                    });
                    Ok(Fresh { storage, _keep: Box::new(()), cleanup: Some(cleanup) })
                }
            })
            .await;
            let used = std::mem::take(&mut *used.lock().unwrap_or_else(|e| e.into_inner()));
            for storage in used {
                storage.delete_all_keys().await?;
            }
            result?
        }
        "postgres" => {
            let url = std::env::var("JQ_POSTGRES_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
            let used: Arc<std::sync::Mutex<Vec<PostgresStorage>>> = Arc::default();
            let fresh = || {
                let (url, used) = (url.clone(), used.clone());
                async move {
                    let schema = format!("jqbench_{}", uuid::Uuid::new_v4().simple());
                    let storage = PostgresStorage::connect(PostgresConfig::new(url).schema(schema)).await?;
                    used.lock().unwrap_or_else(|e| e.into_inner()).push(storage.clone());
                    storage.migrate().await?;
                    let done = storage.clone();
                    let cleanup: Cleanup = Box::pin(async move { postgres_drop_schema(&done).await });
                    Ok(Fresh { storage, _keep: Box::new(()), cleanup: Some(cleanup) })
                }
            };
            let mut result = bench(runs, only, fresh).await;
            if let Ok(figures) = &result
                && only.is_none_or(|s| s == Scenario::Loaded)
            {
                let clean = figures.iter().map(|f| f.drain).collect::<Option<Vec<_>>>().map(median);
                match postgres_loaded_drain(runs, clean, fresh).await {
                    Ok(row) => extra_rows.push(row),
                    Err(e) => result = Err(e),
                }
            }
            let used = std::mem::take(&mut *used.lock().unwrap_or_else(|e| e.into_inner()));
            for storage in used {
                // Scenarios drop their own schema; this catches those an error cut short.
                if !storage.pool().is_closed() {
                    postgres_drop_schema(&storage).await?;
                }
            }
            result?
        }
        other => return Err(format!("unknown backend {other:?}; backends: sqlite, redis, postgres").into()),
    };
    print_table(&backend, runs, &figures);
    for (name, value) in extra_rows {
        println!("{name:<58} {value:>16}");
    }
    Ok(())
}

/// Runs every scenario `runs` times, each on storage from `fresh`.
async fn bench<S, F, Fut>(runs: usize, only: Option<Scenario>, mut fresh: F) -> Result<Vec<Figures>, BoxError>
where
    S: Storage,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Fresh<S>, BoxError>>,
{
    let mut all = Vec::with_capacity(runs);
    for run in 1..=runs {
        let wanted = |s: Scenario| only.is_none_or(|o| o == s);
        let mut f = Figures::default();
        if wanted(Scenario::Batch) {
            f.batch_enqueue = Some(fresh().await?.measure(batch_enqueue).await?);
        }
        if wanted(Scenario::Single) {
            f.single_enqueue = Some(fresh().await?.measure(single_enqueue).await?);
        }
        if wanted(Scenario::Drain) {
            f.drain = Some(fresh().await?.measure(drain).await?);
        }
        if wanted(Scenario::Latency) {
            let (p50, p99) = fresh().await?.measure(latency).await?;
            (f.p50, f.p99) = (Some(p50), Some(p99));
        }
        let rate = |r: Option<f64>| r.map_or("-".to_owned(), |r| format!("{r:.0}/s"));
        eprintln!(
            "run {run}/{runs}: batch {}, single {}, drain {}, p50 {:?}, p99 {:?}",
            rate(f.batch_enqueue),
            rate(f.single_enqueue),
            rate(f.drain),
            f.p50.unwrap_or_default(),
            f.p99.unwrap_or_default()
        );
        all.push(f);
    }
    Ok(all)
}

fn noop_jobs(range: std::ops::Range<usize>) -> Result<Vec<NewJob>, BoxError> {
    range.map(|n| NewJob::typed(&Noop { n }).build().map_err(Into::into)).collect()
}

async fn batch_enqueue<S: Storage>(storage: Arc<S>) -> Result<f64, BoxError> {
    let batches: Vec<Vec<NewJob>> = (0..BATCH_JOBS / BATCH_SIZE)
        .map(|b| noop_jobs(b * BATCH_SIZE..(b + 1) * BATCH_SIZE))
        .collect::<Result<_, _>>()?;
    let start = Instant::now();
    for batch in batches {
        storage.enqueue(batch).await?;
    }
    Ok(BATCH_JOBS as f64 / start.elapsed().as_secs_f64())
}

async fn single_enqueue<S: Storage>(storage: Arc<S>) -> Result<f64, BoxError> {
    let jobs = noop_jobs(0..SINGLE_JOBS)?;
    let start = Instant::now();
    for job in jobs {
        storage.enqueue_one(job).await?;
    }
    Ok(SINGLE_JOBS as f64 / start.elapsed().as_secs_f64())
}

async fn drain<S: Storage>(storage: Arc<S>) -> Result<f64, BoxError> {
    for b in 0..DRAIN_JOBS / BATCH_SIZE {
        storage.enqueue(noop_jobs(b * BATCH_SIZE..(b + 1) * BATCH_SIZE)?).await?;
    }
    let completed_before = storage.stats().await?.total(State::Completed);
    let ran = Arc::new(AtomicUsize::new(0));
    let all_ran = Arc::new(Notify::new());
    let (counter, notify) = (ran.clone(), all_ran.clone());
    let start = Instant::now();
    let pool = WorkerPool::new(storage.clone())
        .concurrency(DRAIN_CONCURRENCY)
        .register::<Noop, _, _>(move |_job, _ctx: JobContext| {
            if counter.fetch_add(1, Ordering::Relaxed) + 1 == DRAIN_JOBS {
                notify.notify_one();
            }
            async { Ok(()) }
        })
        .start()?;
    all_ran.notified().await;
    // Shutdown returns once every outcome is written: the last ack is durable.
    pool.shutdown().await?;
    let elapsed = start.elapsed();
    let completed = storage.stats().await?.total(State::Completed) - completed_before;
    if completed != DRAIN_JOBS as u64 {
        return Err(format!("drain: {completed} of {DRAIN_JOBS} jobs completed").into());
    }
    Ok(DRAIN_JOBS as f64 / elapsed.as_secs_f64())
}

async fn latency<S: Storage>(storage: Arc<S>) -> Result<(Duration, Duration), BoxError> {
    let (started_tx, mut started) = mpsc::unbounded_channel::<(usize, Instant)>();
    let pool = WorkerPool::new(storage.clone())
        .register::<Noop, _, _>(move |job: Noop, _ctx: JobContext| {
            let _ = started_tx.send((job.n, Instant::now()));
            async { Ok(()) }
        })
        .start()?;
    // Warm-up: one job through, so the pool is idle-waiting when we begin.
    storage.enqueue_one(NewJob::typed(&Noop { n: usize::MAX }).build()?).await?;
    started.recv().await.ok_or("pool stopped")?;

    let mut enqueued_at = Vec::with_capacity(LATENCY_JOBS);
    for n in 0..LATENCY_JOBS {
        let job = NewJob::typed(&Noop { n }).build()?;
        enqueued_at.push(Instant::now());
        storage.enqueue_one(job).await?;
        tokio::time::sleep(LATENCY_GAP).await;
    }
    let mut latencies = Vec::with_capacity(LATENCY_JOBS);
    while latencies.len() < LATENCY_JOBS {
        let (n, at) = tokio::time::timeout(Duration::from_secs(30), started.recv())
            .await
            .map_err(|_| "latency: jobs did not start within 30 s")?
            .ok_or("pool stopped")?;
        latencies.push(at.saturating_duration_since(enqueued_at[n]));
    }
    pool.shutdown().await?;
    latencies.sort();
    Ok((percentile(&latencies, 0.50), percentile(&latencies, 0.99)))
}

/// The nearest-rank percentile of sorted values.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn median<T: Copy + PartialOrd>(mut values: Vec<T>) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values[values.len() / 2]
}

fn print_table(backend: &str, runs: usize, all: &[Figures]) {
    // A scenario left out by `--only` is None in every run and gets no row.
    fn pick<T: Copy + PartialOrd>(all: &[Figures], f: fn(&Figures) -> Option<T>) -> Option<T> {
        all.iter().map(f).collect::<Option<Vec<_>>>().filter(|v| !v.is_empty()).map(median)
    }
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    let rate = |r: f64| format!("{r:.0} jobs/s");
    println!("\njq benchmark: backend {backend}, median of {runs} run(s), default settings\n");
    println!("{:<58} {:>16}", "scenario", "result");
    println!("{}", "-".repeat(75));
    let rows = [
        (
            format!("batch enqueue ({BATCH_JOBS} jobs, {} calls of {BATCH_SIZE})", BATCH_JOBS / BATCH_SIZE),
            pick(all, |f| f.batch_enqueue).map(rate),
        ),
        (
            format!("single enqueue ({SINGLE_JOBS} sequential calls of 1 job)"),
            pick(all, |f| f.single_enqueue).map(rate),
        ),
        (format!("drain ({DRAIN_JOBS} no-op jobs, concurrency {DRAIN_CONCURRENCY})"), pick(all, |f| f.drain).map(rate)),
        (format!("enqueue-to-start latency p50 ({LATENCY_JOBS} jobs, idle pool)"), pick(all, |f| f.p50).map(ms)),
        (format!("enqueue-to-start latency p99 ({LATENCY_JOBS} jobs, idle pool)"), pick(all, |f| f.p99).map(ms)),
    ];
    for (name, value) in rows {
        if let Some(value) = value {
            println!("{name:<58} {value:>16}");
        }
    }
}

/// Jobs left completed in the table for the loaded drain.
const LOADED_COMPLETED: u64 = 1_000_000;

/// The drain again on one schema holding [`LOADED_COMPLETED`] completed jobs
/// (loaded once; `VACUUM ANALYZE` and `CHECKPOINT` before each of the `runs` drains); prints
/// its median as a table row, with its ratio to the clean-table `clean`
/// when that was measured.
async fn postgres_loaded_drain<F, Fut>(
    runs: usize,
    clean: Option<f64>,
    mut fresh: F,
) -> Result<(String, String), BoxError>
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
    let loaded = median(rates);
    let name = format!("drain, {LOADED_COMPLETED} completed jobs in the table");
    let value = match clean {
        Some(clean) => format!("{loaded:.0} jobs/s ({:.0}% of clean)", 100.0 * loaded / clean),
        None => format!("{loaded:.0} jobs/s"),
    };
    Ok((name, value))
}

/// Drops a benchmark schema and closes its pool.
async fn postgres_drop_schema(storage: &PostgresStorage) -> Result<(), BoxError> {
    let drop = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", storage.schema());
    sqlx::raw_sql(sqlx::AssertSqlSafe(drop)).execute(storage.pool()).await?;
    storage.close().await;
    Ok(())
}
