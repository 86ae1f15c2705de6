//! The benchmark of a jq backend at jq's default settings.
//!
//! ```text
//! cargo run --release -p examples --example bench -- sqlite [--runs N]
//! cargo run --release -p examples --example bench -- redis [--runs N]
//! cargo run --release -p examples --example bench -- postgres [--runs N]
//! cargo run --release -p examples --example bench -- postgres --only drain   # one scenario, e.g. under a profiler
//! cargo run --release -p examples --example bench -- sqlite --only drain --observe on    # A/B of observation:
//! cargo run --release -p examples --example bench -- sqlite --only drain --observe off   # run both, compare
//! ```
//!
//! `--observe on`: what jq's observation costs a scraped deployment: the
//! Prometheus recorder installed (its upkeep every 5 s), jq's spans enabled
//! (`jq_core=info`) in the fmt subscriber, and the pools' spans and metrics
//! on. `--observe otel` adds a `tracing-opentelemetry` layer over an
//! always-sampling tracer (no exporter): the OpenTelemetry SDK's own cost
//! per span on top. `--observe off`: no recorder, logs at warn, and the
//! pools built with `observe(false)`. Without the flag, the pools' default
//! (observe on) with no recorder and logs at warn.
//!
//! Redis: the server at `JQ_REDIS_URL` (default `redis://127.0.0.1:6379`);
//! every scenario uses a fresh random key prefix `jqbench:<uuid>`, whose keys
//! are deleted (SCAN + UNLINK, never FLUSHALL) when the scenario ends.
//! PostgreSQL: the server at `JQ_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); every scenario uses a
//! fresh, migrated schema `jqbench_<uuid>`, dropped (its pool closed, so its
//! wake-up listener stops) when the scenario ends. SQLite: a file in a
//! fresh temporary directory.
//!
//! For the backend it measures, each figure the median of `--runs` runs
//! (default 3), every run on fresh, empty storage:
//!
//! 1. `batch`: 20,000 jobs in 20 `enqueue` calls of 1,000, jobs/s;
//! 2. `single`: 5,000 sequential awaited `enqueue` calls of one job, jobs/s;
//! 3. `drain`: 20,000 pre-loaded no-op jobs run by a worker pool at the
//!    default settings except concurrency 16, jobs/s from pool start until
//!    the last ack is durable (the pool's shutdown returns once every
//!    outcome is written);
//! 4. `latency`: an idle pool in the same process; 200 jobs enqueued 20 ms
//!    apart; latency = handler start minus the instant just before the
//!    `enqueue` call; p50 and p99;
//! 5. `rated`: 10,000 pre-loaded no-op jobs through a queue with a rate
//!    limit of 1,000 starts/s (`ControlStorage::set_limits`), the drain's pool
//!    polling every 10 ms; the handler start rate over the whole windows
//!    (the drain above is the same pool without a limit; the bound itself,
//!    never more than the limit in any window, is what the conformance
//!    suite checks);
//! 6. `procs`: 40,000 pre-loaded no-op jobs drained by 1 worker process,
//!    then by 4, each its own OS process with its own storage handle and a
//!    pool of 16 handlers (`procs.rs`); jobs/s and the ratio.
//!
//! And per backend:
//!
//! - `loaded` (SQLite, PostgreSQL): the drain again, `--runs` times, on one
//!   store holding 1,000,000 completed jobs, with its ratio to the clean
//!   drain (`loaded.rs`);
//! - `grown` (SQLite, PostgreSQL): a store that grew for a year, 10,000,000
//!   finished jobs and 100,000 pending: how long `stats`, `queues` and the
//!   dashboard's overview take, and the drain again with its ratio to the
//!   clean drain (`grown.rs`);
//! - `held` (PostgreSQL): 100,000 jobs drained while another session holds
//!   a snapshot older than every claim, the rate over the first 20,000 and
//!   over all, and the same drain without the snapshot (`held.rs`);
//! - `fanin` and `wfenqueue` (a backend with workflows; skipped with a
//!   message on the others): 10,000 jobs into one callback drained against
//!   the plain drain of 10,000, with the callback's start latency, and one
//!   workflow of 10,000 steps enqueued against the batch enqueue of 10,000
//!   jobs (`workflows.rs`). Only with `--only fanin` or `--only wfenqueue`.
//! - `keyed` (a backend with keys; skipped with a message on the others):
//!   20,000 jobs over 10,000 keys, each key limited to one Running job,
//!   drained against the plain drain of 20,000 (`keyed.rs`). Only with
//!   `--only keyed`.
//! - `limited`: jobs of 2 ms under a key's or the queue's concurrency
//!   limit of 1, 2 and 8, by one pool of 16 and by 2 and 4 worker
//!   processes, against a plain pool of concurrency N (`limited.rs`);
//!   `hotkey` (a backend with keys): a small key's start delay beside a
//!   key with 50,000 pending jobs, against an idle pool. Only with `--only
//!   limited` or `--only hotkey`.
//! - `durable`: 1,000 durable jobs of 10 trivial steps each, against one
//!   workflow of 1,000 chains of 10 steps and against 10,000 plain jobs,
//!   steps/s from the first enqueue until every outcome is written;
//!   `sleepers`: 10,000 durable jobs that each sleep 1 s once, by a pool
//!   of 16: the time until all are done, and the most asleep at once
//!   (`durable.rs`). Only with `--only durable` or `--only sleepers`.
//!
//! Adding a backend is one arm in `main`'s match: build a fresh storage per
//! run and hand it to the same generic scenarios.

mod durable;
mod grown;
mod held;
mod keyed;
mod limited;
mod loaded;
mod observation;
mod procs;
mod scenarios;
mod workflows;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use jq_core::storage::Storage;
use jq_postgres::{PostgresConfig, PostgresStorage};
use jq_redis::{RedisConfig, RedisStorage};
use jq_sqlite::{SqliteConfig, SqliteStorage};

use crate::scenarios::{
    BATCH_JOBS, BATCH_SIZE, DRAIN_CONCURRENCY, DRAIN_JOBS, LATENCY_JOBS, RATE_LIMIT, RATED_JOBS, SINGLE_JOBS,
    batch_enqueue, drain, latency, median, rated, single_enqueue,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A printed row beyond the common ones: (scenario, result).
type Row = (String, String);

/// What tears a scenario's storage down once the scenario is measured.
type Cleanup = std::pin::Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;

/// A storage for one scenario, with whatever must live as long as it (a
/// temp dir), the name of its store for worker processes (a SQLite file, a
/// PostgreSQL schema, a Redis key prefix) and its teardown. Each scenario's
/// storage is torn down before the next one starts: a leftover
/// (PostgreSQL: a pool whose wake-up listener still LISTENs in the same
/// database) would tax the next one.
struct Fresh<S> {
    storage: S,
    store: String,
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

const USAGE: &str = "usage: bench <backend> [--runs N] \
                     [--only batch|single|drain|latency|rated|procs|loaded|grown|held|fanin|wfenqueue|keyed|limited|hotkey|durable|sleepers] \
                     [--observe on|off|otel]\n\
                     backends: sqlite, redis, postgres (loaded, grown: sqlite and postgres; held: postgres; \
                     fanin, wfenqueue: a backend with workflows, keyed: a backend with keys, only with --only)";

/// One scenario, for `--only`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Batch,
    Single,
    Drain,
    Latency,
    /// The drain through a rate-limited queue.
    Rated,
    Procs,
    /// The drain with a million completed jobs in the store.
    Loaded,
    /// Reads and the drain on a store that grew for a year.
    Grown,
    /// PostgreSQL's drain while a snapshot is held.
    Held,
    /// 10,000 jobs into one callback, against the plain drain.
    FanIn,
    /// One workflow of 10,000 steps enqueued, against the batch enqueue.
    WfEnqueue,
    /// 20,000 jobs over 10,000 keys limited to one running each, against
    /// the plain drain.
    Keyed,
    /// Jobs under a key's or the queue's concurrency limit, against a
    /// plain pool of that concurrency.
    Limited,
    /// A small key's start delay beside a hot key's backlog.
    HotKey,
    /// Durable jobs of 10 steps, against 10 chained workflow steps and 10
    /// plain jobs.
    Durable,
    /// Durable jobs that sleep once: sleeps hold no slot.
    Sleepers,
}

impl Scenario {
    /// A scenario of a capability (workflows, keys): run only when asked
    /// for by `--only`, after no common scenario.
    fn is_workflow(self) -> bool {
        matches!(
            self,
            Self::FanIn | Self::WfEnqueue | Self::Keyed | Self::Limited | Self::HotKey | Self::Durable | Self::Sleepers
        )
    }

    fn parse(name: &str) -> Result<Self, BoxError> {
        Ok(match name {
            "batch" => Self::Batch,
            "single" => Self::Single,
            "drain" => Self::Drain,
            "latency" => Self::Latency,
            "rated" => Self::Rated,
            "procs" => Self::Procs,
            "loaded" => Self::Loaded,
            "grown" => Self::Grown,
            "held" => Self::Held,
            "fanin" => Self::FanIn,
            "wfenqueue" => Self::WfEnqueue,
            "keyed" => Self::Keyed,
            "limited" => Self::Limited,
            "hotkey" => Self::HotKey,
            "durable" => Self::Durable,
            "sleepers" => Self::Sleepers,
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
    /// The rated drain's start rate.
    rated: Option<f64>,
    /// The drain by 1 and by [`procs::PROCESSES`] worker processes.
    procs: Option<(f64, f64)>,
}

fn postgres_url() -> String {
    std::env::var("JQ_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

fn redis_url() -> String {
    std::env::var("JQ_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let observe = match std::env::args().skip_while(|a| a != "--observe").nth(1) {
        None => None,
        Some(mode) => Some(
            observation::Observe::parse(&mode)
                .ok_or_else(|| format!("--observe {mode:?}: use on, off or otel\n{USAGE}"))?,
        ),
    };
    let _telemetry = observation::install(observe)?;

    let mut args = std::env::args().skip(1);
    let mut positional = Vec::new();
    let mut runs = 3usize;
    let mut only = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => runs = args.next().ok_or("--runs needs a number")?.parse()?,
            "--only" => only = Some(Scenario::parse(&args.next().ok_or("--only needs a scenario")?)?),
            "--observe" => drop(args.next()), // read above
            "--worker" => {
                let backend = args.next().ok_or("--worker needs a backend")?;
                let store = args.next().ok_or("--worker needs a store")?;
                let job_us: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(0);
                return procs::worker(&backend, &store, Duration::from_micros(job_us)).await;
            }
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
    let wanted = |s: Scenario| only.is_none_or(|o| o == s) && (!s.is_workflow() || only == Some(s));
    let clean_drain = |figures: &[Figures]| {
        figures.iter().map(|f| f.drain).collect::<Option<Vec<_>>>().filter(|v| !v.is_empty()).map(median)
    };

    // Rows a backend adds to the table.
    let mut extra_rows: Vec<Row> = Vec::new();
    let figures = match backend.as_str() {
        "sqlite" => {
            let fresh = || async {
                let dir = tempfile::tempdir()?;
                let path = dir.path().join("bench.db");
                let storage = SqliteStorage::open(SqliteConfig::new(&path))?;
                let store = path.to_str().ok_or("temporary path is not UTF-8")?.to_owned();
                Ok(Fresh { storage, store, _keep: Box::new(dir), cleanup: None })
            };
            let figures = bench(&backend, runs, only, fresh).await?;
            extra_rows.extend(workflow_rows(&backend, runs, only, fresh).await?);
            if wanted(Scenario::Loaded) {
                extra_rows.push(loaded::sqlite(runs, clean_drain(&figures)).await?);
            }
            if wanted(Scenario::Grown) {
                extra_rows.extend(grown::sqlite(runs, clean_drain(&figures)).await?);
            }
            figures
        }
        "redis" => {
            let url = redis_url();
            let used: Arc<std::sync::Mutex<Vec<RedisStorage>>> = Arc::default();
            let fresh = || {
                let (url, used) = (url.clone(), used.clone());
                async move {
                    let prefix = format!("jqbench:{}", uuid::Uuid::new_v4().simple());
                    let storage = RedisStorage::connect(RedisConfig::new(url).prefix(prefix.clone())).await?;
                    used.lock().unwrap_or_else(|e| e.into_inner()).push(storage.clone());
                    let done = storage.clone();
                    let cleanup: Cleanup = Box::pin(async move {
                        done.delete_all_keys().await?;
                        Ok(())
                    });
                    Ok(Fresh { storage, store: prefix, _keep: Box::new(()), cleanup: Some(cleanup) })
                }
            };
            let mut result = bench(&backend, runs, only, fresh).await;
            if result.is_ok() {
                match workflow_rows(&backend, runs, only, fresh).await {
                    Ok(rows) => extra_rows.extend(rows),
                    Err(e) => result = Err(e),
                }
            }
            let used = std::mem::take(&mut *used.lock().unwrap_or_else(|e| e.into_inner()));
            for storage in used {
                storage.delete_all_keys().await?;
            }
            result?
        }
        "postgres" => {
            let url = postgres_url();
            let used: Arc<std::sync::Mutex<Vec<PostgresStorage>>> = Arc::default();
            let fresh = || {
                let (url, used) = (url.clone(), used.clone());
                async move {
                    let schema = format!("jqbench_{}", uuid::Uuid::new_v4().simple());
                    let storage = PostgresStorage::connect(PostgresConfig::new(url).schema(schema.clone())).await?;
                    used.lock().unwrap_or_else(|e| e.into_inner()).push(storage.clone());
                    storage.migrate().await?;
                    let done = storage.clone();
                    let cleanup: Cleanup = Box::pin(async move { postgres_drop_schema(&done).await });
                    Ok(Fresh { storage, store: schema, _keep: Box::new(()), cleanup: Some(cleanup) })
                }
            };
            let mut result = bench(&backend, runs, only, fresh).await;
            let clean = result.as_ref().ok().and_then(|figures| clean_drain(figures));
            if result.is_ok() && wanted(Scenario::Loaded) {
                match loaded::postgres(runs, clean, fresh).await {
                    Ok(row) => extra_rows.push(row),
                    Err(e) => result = Err(e),
                }
            }
            if result.is_ok() && wanted(Scenario::Grown) {
                match grown::postgres(runs, clean, fresh).await {
                    Ok(rows) => extra_rows.extend(rows),
                    Err(e) => result = Err(e),
                }
            }
            if result.is_ok() {
                match workflow_rows(&backend, runs, only, fresh).await {
                    Ok(rows) => extra_rows.extend(rows),
                    Err(e) => result = Err(e),
                }
            }
            if result.is_ok() && wanted(Scenario::Held) {
                match held::postgres(runs, &url, fresh).await {
                    Ok(rows) => extra_rows.extend(rows),
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
    if !only.is_some_and(Scenario::is_workflow) {
        print_table(&backend, runs, &figures);
    } else {
        println!("\njq benchmark: backend {backend}, median of {runs} run(s), default settings\n");
    }
    for (name, value) in extra_rows {
        println!("{name:<70} {value:>20}");
    }
    Ok(())
}

/// The workflow scenario `only` asks for, if any, `runs` times on storage
/// from `fresh`.
async fn workflow_rows<S, F, Fut>(
    backend: &str,
    runs: usize,
    only: Option<Scenario>,
    fresh: F,
) -> Result<Vec<Row>, BoxError>
where
    S: Storage,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Fresh<S>, BoxError>>,
{
    match only {
        Some(Scenario::FanIn) => workflows::fanin(backend, runs, fresh).await,
        Some(Scenario::WfEnqueue) => workflows::wfenqueue(backend, runs, fresh).await,
        Some(Scenario::Keyed) => keyed::keyed(backend, runs, fresh).await,
        Some(Scenario::Limited) => limited::limited(backend, runs, fresh).await,
        Some(Scenario::HotKey) => limited::hotkey(backend, runs, fresh).await,
        Some(Scenario::Durable) => durable::durable(backend, runs, fresh).await,
        Some(Scenario::Sleepers) => durable::sleepers(backend, runs, fresh).await,
        _ => Ok(Vec::new()),
    }
}

/// Runs every common scenario `runs` times, each on storage from `fresh`.
async fn bench<S, F, Fut>(
    backend: &str,
    runs: usize,
    only: Option<Scenario>,
    mut fresh: F,
) -> Result<Vec<Figures>, BoxError>
where
    S: Storage,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Fresh<S>, BoxError>>,
{
    let mut all = Vec::with_capacity(runs);
    if only.is_some_and(Scenario::is_workflow) {
        return Ok(all);
    }
    for run in 1..=runs {
        let wanted = |s: Scenario| only.is_none_or(|o| o == s);
        let mut f = Figures::default();
        if wanted(Scenario::Batch) {
            f.batch_enqueue = Some(fresh().await?.measure(batch_enqueue).await?);
        }
        if wanted(Scenario::Single) {
            f.single_enqueue = Some(fresh().await?.measure(single_enqueue).await?);
        }
        // The loaded and grown drains are reported as a ratio to this one.
        if wanted(Scenario::Drain) || only == Some(Scenario::Loaded) || only == Some(Scenario::Grown) {
            f.drain = Some(fresh().await?.measure(drain).await?);
        }
        if wanted(Scenario::Latency) {
            let (p50, p99) = fresh().await?.measure(latency).await?;
            (f.p50, f.p99) = (Some(p50), Some(p99));
        }
        if wanted(Scenario::Rated) {
            f.rated = Some(fresh().await?.measure(rated).await?.rate);
        }
        if wanted(Scenario::Procs) {
            let mut by = [0.0; 2];
            for (rate, processes) in by.iter_mut().zip([1, procs::PROCESSES]) {
                let fresh = fresh().await?;
                let store = fresh.store.clone();
                *rate = fresh.measure(|s| async move { procs::drain(s, backend, &store, processes).await }).await?;
            }
            f.procs = Some((by[0], by[1]));
        }
        let rate = |r: Option<f64>| r.map_or("-".to_owned(), |r| format!("{r:.0}/s"));
        eprintln!(
            "run {run}/{runs}: batch {}, single {}, drain {}, p50 {:?}, p99 {:?}, rated {}, procs 1/{} {}/{}",
            rate(f.batch_enqueue),
            rate(f.single_enqueue),
            rate(f.drain),
            f.p50.unwrap_or_default(),
            f.p99.unwrap_or_default(),
            rate(f.rated),
            procs::PROCESSES,
            rate(f.procs.map(|p| p.0)),
            rate(f.procs.map(|p| p.1)),
        );
        all.push(f);
    }
    Ok(all)
}

fn print_table(backend: &str, runs: usize, all: &[Figures]) {
    // A scenario left out by `--only` is None in every run and gets no row.
    fn pick<T: Copy + PartialOrd>(all: &[Figures], f: impl Fn(&Figures) -> Option<T>) -> Option<T> {
        all.iter().map(f).collect::<Option<Vec<_>>>().filter(|v| !v.is_empty()).map(median)
    }
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    let rate = |r: f64| format!("{r:.0} jobs/s");
    println!("\njq benchmark: backend {backend}, median of {runs} run(s), default settings\n");
    println!("{:<58} {:>16}", "scenario", "result");
    println!("{}", "-".repeat(75));
    let (one, many) = (pick(all, |f| f.procs.map(|p| p.0)), pick(all, |f| f.procs.map(|p| p.1)));
    let procs = procs::PROCESSES;
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
        (
            format!("rated drain ({RATED_JOBS} jobs, limit {RATE_LIMIT}/s): start rate"),
            pick(all, |f| f.rated).map(|r| format!("{r:.0} starts/s")),
        ),
        (format!("drain ({} jobs) by 1 worker process", procs::PROCS_JOBS), one.map(rate)),
        (
            format!("drain ({} jobs) by {procs} worker processes", procs::PROCS_JOBS),
            many.zip(one).map(|(m, o)| format!("{m:.0} jobs/s ({:.2}x)", m / o)),
        ),
    ];
    for (name, value) in rows {
        if let Some(value) = value {
            println!("{name:<58} {value:>16}");
        }
    }
}

/// Drops a benchmark schema and closes its pool.
async fn postgres_drop_schema(storage: &PostgresStorage) -> Result<(), BoxError> {
    let drop = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", storage.schema());
    sqlx::raw_sql(sqlx::AssertSqlSafe(drop)).execute(storage.pool()).await?;
    storage.close().await;
    Ok(())
}
