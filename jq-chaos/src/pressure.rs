//! Hours under pressure (PostgreSQL): a steady enqueue rate near half of
//! jq's drain rate, in phases: clean, an idle-in-transaction session
//! holding the xmin horizon, clean, four REPEATABLE READ readers scanning
//! the jobs, clean. Each bucket of the run (a minute in the full run) says
//! how many jobs finished, their pickup latency (from enqueue to the
//! handler's start), and the jobs table's dead tuples and sizes; each phase
//! is summed up beside the clean phase before it.
//!
//! The pool runs in this process, so the handler itself counts the runs of
//! every job (one byte per job): millions of jobs need no audit trail. With
//! long leases and no kills, a job that ran twice or never is a problem.
//! Completed jobs are kept only a little while (`keep_completed`), as a
//! busy queue's operator sets it, so that the store's size is steady and a
//! size that does not come back after the pressure shows.
//!
//! ```text
//! cargo test -p jq-chaos --test pressure -- --nocapture          # the short run (CI): 15 s phases
//! JQ_PRESSURE_PHASE_MINUTES=24 cargo test --release -p jq-chaos --test pressure -- --nocapture   # two hours
//! ```

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jq_core::{JobContext, JobType, NewJob, Retention, WorkerPool};
use serde::{Deserialize, Serialize};
use sqlx::{Connection, PgConnection, Row};

use crate::audit::now_us;
use crate::scenario::Env;
use crate::{AnyStorage, Target};

/// What the database is put through during a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Nothing but jq.
    Clean,
    /// One session idle in a REPEATABLE READ transaction that took an xid:
    /// the xmin horizon stays where it was, so no dead row of the phase can
    /// be vacuumed away.
    IdleInTransaction,
    /// Four sessions, each in REPEATABLE READ transactions of 10 s that
    /// scan every row of the jobs table (the horizon moves, in steps).
    Readers,
}

impl Phase {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Clean => "clean",
            Phase::IdleInTransaction => "idle-in-tx",
            Phase::Readers => "readers",
        }
    }
}

/// How a pressure run goes.
#[derive(Clone, Debug)]
pub struct PressurePlan {
    /// The phases, in order, with their lengths.
    pub phases: Vec<(Phase, Duration)>,
    /// The length of one row of the table.
    pub bucket: Duration,
    /// The pool's concurrency.
    pub concurrency: usize,
    /// How long completed jobs are kept before the pool purges them.
    pub keep_completed: Duration,
    /// Jobs of the calibration burst that measures the drain rate.
    pub calibration_jobs: usize,
    /// The enqueue rate, jobs/s; `None`: half the calibrated drain rate.
    pub rate: Option<f64>,
}

impl PressurePlan {
    /// Phases of `phase` each: clean, idle in transaction, clean,
    /// readers, clean.
    pub fn phases_of(phase: Duration) -> Vec<(Phase, Duration)> {
        use Phase::*;
        [Clean, IdleInTransaction, Clean, Readers, Clean].into_iter().map(|p| (p, phase)).collect()
    }

    /// The short run (CI): phases of 15 s, rows of 5 s.
    pub fn short() -> PressurePlan {
        PressurePlan {
            phases: PressurePlan::phases_of(Duration::from_secs(15)),
            bucket: Duration::from_secs(5),
            concurrency: 16,
            keep_completed: Duration::from_secs(10),
            calibration_jobs: 5_000,
            rate: None,
        }
    }

    /// The long run: phases of `minutes` each, rows of a minute, completed
    /// jobs kept five minutes.
    pub fn long(minutes: u64) -> PressurePlan {
        PressurePlan {
            phases: PressurePlan::phases_of(Duration::from_secs(minutes * 60)),
            bucket: Duration::from_secs(60),
            keep_completed: Duration::from_secs(300),
            calibration_jobs: 40_000,
            ..PressurePlan::short()
        }
    }

    /// The long run when `JQ_PRESSURE_PHASE_MINUTES` is set (and
    /// `JQ_PRESSURE_RATE` fixes the rate), else the short one.
    pub fn from_env() -> PressurePlan {
        let minutes = std::env::var("JQ_PRESSURE_PHASE_MINUTES").ok().and_then(|m| m.parse().ok());
        let mut plan = minutes.map_or_else(PressurePlan::short, PressurePlan::long);
        plan.rate = std::env::var("JQ_PRESSURE_RATE").ok().and_then(|r| r.parse().ok());
        plan
    }

    fn total(&self) -> Duration {
        self.phases.iter().map(|(_, d)| *d).sum()
    }
}

/// The jobs table's state at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sizes {
    /// `n_dead_tup` of the jobs table.
    pub dead_tuples: i64,
    /// `n_live_tup` of the jobs table.
    pub live_tuples: i64,
    /// The jobs table's heap, bytes.
    pub heap_bytes: i64,
    /// Its indexes, bytes.
    pub index_bytes: i64,
}

/// One row of the table.
#[derive(Clone, Debug)]
pub struct Bucket {
    /// Its start, from the start of the phases.
    pub from: Duration,
    /// The phase it falls in (where it began).
    pub phase: Phase,
    /// Jobs whose handler started in it.
    pub started: u64,
    /// Pickup latencies of those, microseconds.
    latencies: Vec<u32>,
    /// Sizes read at its end.
    pub sizes: Option<Sizes>,
}

impl Bucket {
    /// The `q` quantile of its pickup latencies (0.5, 0.99), milliseconds.
    pub fn latency_ms(&self, q: f64) -> Option<f64> {
        quantile(&self.latencies, q)
    }
}

fn quantile(values: &[u32], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let at = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    Some(f64::from(v[at]) / 1000.0)
}

/// The job of the run: its number and when it was enqueued.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PressureJob {
    /// Its number, from 0.
    pub seq: u64,
    /// When it was enqueued, microseconds since the epoch.
    pub at_us: i64,
}

impl JobType for PressureJob {
    const KIND: &'static str = "pressure";
    const QUEUE: &'static str = "pressure";
}

/// What the handler counts.
#[derive(Default)]
struct Tally {
    /// Runs per job number.
    runs: Vec<u8>,
    /// The rows of the phases (the calibration burst's starts and the
    /// final drain's fall in none).
    buckets: Vec<Bucket>,
    /// Handler starts since the tally began.
    started: u64,
}

/// What a pressure run measured.
#[derive(Clone, Debug)]
pub struct PressureOutcome {
    /// The drain rate of the calibration burst, jobs/s.
    pub drain_rate: f64,
    /// The enqueue rate of the phases, jobs/s.
    pub rate: f64,
    /// The rows, in order.
    pub buckets: Vec<Bucket>,
    /// Jobs enqueued (calibration included).
    pub enqueued: u64,
    /// Jobs that never ran.
    pub lost: u64,
    /// Jobs that ran more than once.
    pub repeated: u64,
    /// Errors of the producer and the pressure sessions.
    pub errors: Vec<String>,
    /// Length of a row.
    pub bucket: Duration,
}

impl PressureOutcome {
    /// Everything that makes the run fail. Rates and latencies are printed,
    /// never asserted.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.lost > 0 {
            p.push(format!("{} job(s) never ran", self.lost));
        }
        if self.repeated > 0 {
            p.push(format!("{} job(s) ran more than once without a kill or an expired lease", self.repeated));
        }
        if !self.errors.is_empty() {
            p.push(format!("{} error(s), e.g. {:?}", self.errors.len(), &self.errors[..self.errors.len().min(5)]));
        }
        if self.buckets.iter().all(|b| b.sizes.is_none()) {
            p.push("no sizes were read".into());
        }
        p
    }

    /// Per phase, in order: the phase, its jobs/s, its p99 pickup latency
    /// (ms) and its last sizes.
    pub fn phases(&self) -> Vec<(Phase, f64, Option<f64>, Option<Sizes>)> {
        let mut out: Vec<(Phase, Vec<&Bucket>)> = Vec::new();
        for b in &self.buckets {
            match out.last_mut() {
                Some((phase, list)) if *phase == b.phase => list.push(b),
                _ => out.push((b.phase, vec![b])),
            }
        }
        out.into_iter()
            .map(|(phase, list)| {
                let secs = self.bucket.as_secs_f64() * list.len() as f64;
                let started: u64 = list.iter().map(|b| b.started).sum();
                let latencies: Vec<u32> = list.iter().flat_map(|b| b.latencies.iter().copied()).collect();
                let sizes = list.iter().rev().find_map(|b| b.sizes);
                (phase, started as f64 / secs, quantile(&latencies, 0.99), sizes)
            })
            .collect()
    }
}

fn mb(bytes: i64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

impl fmt::Display for PressureOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "pressure postgres: drain rate {:.0} jobs/s (calibration), enqueue rate {:.0} jobs/s, {} enqueued, {} lost, {} ran twice",
            self.drain_rate, self.rate, self.enqueued, self.lost, self.repeated
        )?;
        writeln!(
            f,
            "  {:>6}  {:10} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8}",
            "t (s)", "phase", "jobs/s", "p50 ms", "p99 ms", "dead", "live", "heap MB", "index MB"
        )?;
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
        for b in &self.buckets {
            let (dead, live, heap, index) = b.sizes.map_or_else(
                || ("-".to_owned(), "-".to_owned(), "-".to_owned(), "-".to_owned()),
                |s| {
                    (
                        s.dead_tuples.to_string(),
                        s.live_tuples.to_string(),
                        format!("{:.1}", mb(s.heap_bytes)),
                        format!("{:.1}", mb(s.index_bytes)),
                    )
                },
            );
            writeln!(
                f,
                "  {:>6}  {:10} {:>8.0} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8}",
                b.from.as_secs(),
                b.phase.name(),
                b.started as f64 / self.bucket.as_secs_f64(),
                ms(b.latency_ms(0.5)),
                ms(b.latency_ms(0.99)),
                dead,
                live,
                heap,
                index
            )?;
        }
        let phases = self.phases();
        let mut clean_rate = None;
        for (phase, rate, p99, sizes) in &phases {
            let share = match (phase, clean_rate) {
                (Phase::Clean, _) => {
                    clean_rate = Some(*rate);
                    String::new()
                }
                (_, Some(clean)) if clean > 0.0 => format!(" ({:.0}% of the clean phase before)", 100.0 * rate / clean),
                _ => String::new(),
            };
            let sizes = sizes.map_or_else(String::new, |s| {
                format!(
                    ", at its end {} dead tuples, heap {:.1} MB, indexes {:.1} MB",
                    s.dead_tuples,
                    mb(s.heap_bytes),
                    mb(s.index_bytes)
                )
            });
            writeln!(f, "  phase {:10} {rate:>8.0} jobs/s{share}, p99 {}{sizes}", phase.name(), ms(*p99))?;
        }
        Ok(())
    }
}

/// The pressure run on `env` (PostgreSQL): the pool, the calibration
/// burst, then the phases at a steady rate, then the drain of what is left.
pub async fn run_pressure(env: &Env, plan: &PressurePlan) -> Result<PressureOutcome, String> {
    let Target::Postgres { url, schema } = &env.target else {
        return Err("the pressure run is PostgreSQL's (snapshots, dead tuples)".into());
    };
    let storage: AnyStorage =
        env.target.connect_patiently(Duration::from_secs(30)).await.map_err(|e| format!("connect: {e}"))?;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let clock = Arc::new(Mutex::new(None::<Instant>));
    let pool = {
        let (tally, clock, bucket) = (tally.clone(), clock.clone(), plan.bucket);
        WorkerPool::new(storage.clone())
            .register::<PressureJob, _, _>(move |job: PressureJob, _ctx: JobContext| {
                count_start(&tally, &clock, bucket, &job);
                async { Ok(()) }
            })
            .concurrency(plan.concurrency)
            .retention(Retention { completed: Some(plan.keep_completed), ..Retention::DEFAULT })
            .purge_interval(plan.keep_completed.min(Duration::from_secs(60)))
            .start()
            .map_err(|e| format!("pool: {e}"))?
    };
    let mut errors = Vec::new();

    // calibration: a burst drained as fast as the pool goes
    let burst_start = Instant::now();
    let mut seq = 0_u64;
    while (seq as usize) < plan.calibration_jobs {
        let n = 500.min(plan.calibration_jobs - seq as usize);
        storage.enqueue(pressure_jobs(seq, n)?).await.map_err(|e| format!("calibration enqueue: {e}"))?;
        seq += n as u64;
    }
    wait_started(&tally, seq, Duration::from_secs(120)).await?;
    let drain_rate = seq as f64 / burst_start.elapsed().as_secs_f64();
    let rate = plan.rate.unwrap_or(drain_rate / 2.0);

    // the phases, at a steady rate
    let start = Instant::now();
    {
        let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
        let mut from = Duration::ZERO;
        for (phase, length) in &plan.phases {
            let end = from + *length;
            while from < end {
                t.buckets.push(Bucket { from, phase: *phase, started: 0, latencies: Vec::new(), sizes: None });
                from += plan.bucket;
            }
        }
    }
    *clock.lock().unwrap_or_else(|p| p.into_inner()) = Some(start);
    let producing = Arc::new(AtomicBool::new(true));
    let producer = tokio::spawn(produce(storage.clone(), seq, rate, producing.clone()));
    let sampler = tokio::spawn(sample(url.clone(), schema.clone(), tally.clone(), start, plan.bucket, plan.total()));
    for (phase, length) in &plan.phases {
        let until = Instant::now() + *length;
        if let Err(e) = pressure(*phase, url, schema, until).await {
            errors.push(format!("{}: {e}", phase.name()));
        }
        tokio::time::sleep_until(until.into()).await;
    }
    producing.store(false, Ordering::Relaxed);
    let (enqueued, producer_errors) = producer.await.map_err(|e| format!("producer panicked: {e}"))?;
    errors.extend(producer_errors);
    if let Err(e) = sampler.await.map_err(|e| format!("sampler panicked: {e}"))? {
        errors.push(e);
    }

    // what is left drains; then every job must have run once
    if let Err(e) = wait_started(&tally, enqueued, Duration::from_secs(120)).await {
        errors.push(e);
    }
    if let Err(e) = pool.shutdown().await {
        errors.push(format!("pool: {e}"));
    }
    let t = std::mem::take(&mut *tally.lock().unwrap_or_else(|p| p.into_inner()));
    let runs = |n: u64| t.runs.get(n as usize).copied().unwrap_or(0);
    Ok(PressureOutcome {
        drain_rate,
        rate,
        enqueued,
        lost: (0..enqueued).filter(|&n| runs(n) == 0).count() as u64,
        repeated: (0..enqueued).filter(|&n| runs(n) > 1).count() as u64,
        buckets: t.buckets,
        errors,
        bucket: plan.bucket,
    })
}

fn pressure_jobs(from: u64, n: usize) -> Result<Vec<NewJob>, String> {
    let at_us = now_us();
    (from..from + n as u64)
        .map(|seq| NewJob::typed(&PressureJob { seq, at_us }).build().map_err(|e| e.to_string()))
        .collect()
}

/// The handler's part: counts the run, and its latency in its bucket.
fn count_start(tally: &Mutex<Tally>, clock: &Mutex<Option<Instant>>, bucket: Duration, job: &PressureJob) {
    let latency = u32::try_from((now_us() - job.at_us).max(0)).unwrap_or(u32::MAX);
    let start = *clock.lock().unwrap_or_else(|p| p.into_inner());
    let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
    let n = job.seq as usize;
    if t.runs.len() <= n {
        t.runs.resize(n + 1 + 4096, 0);
    }
    t.runs[n] = t.runs[n].saturating_add(1);
    t.started += 1;
    if let Some(start) = start {
        let at = (start.elapsed().as_nanos() / bucket.as_nanos().max(1)) as usize;
        if let Some(b) = t.buckets.get_mut(at) {
            b.started += 1;
            b.latencies.push(latency);
        }
    }
}

/// Waits until `n` handler runs started in all.
async fn wait_started(tally: &Mutex<Tally>, n: u64, patience: Duration) -> Result<(), String> {
    let deadline = Instant::now() + patience;
    loop {
        let started = tally.lock().unwrap_or_else(|p| p.into_inner()).started;
        if started >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{started} of {n} jobs started within {patience:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Enqueues at `rate` jobs/s, numbered from `first`, every 10 ms what is
/// due, until `producing` turns false; returns the next number (the count
/// enqueued in all) and the errors. A failed batch is sent again (its ids
/// make a resend store nothing twice).
async fn produce(storage: AnyStorage, first: u64, rate: f64, producing: Arc<AtomicBool>) -> (u64, Vec<String>) {
    let start = Instant::now();
    let mut next = first;
    let mut errors = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while producing.load(Ordering::Relaxed) {
        tick.tick().await;
        let due = first + (start.elapsed().as_secs_f64() * rate) as u64;
        if due <= next {
            continue;
        }
        let jobs = match pressure_jobs(next, (due - next) as usize) {
            Ok(jobs) => jobs,
            Err(e) => {
                errors.push(e);
                break;
            }
        };
        loop {
            match storage.enqueue(jobs.clone()).await {
                Ok(_) => break,
                Err(e) if e.is_retryable() && errors.len() < 100 => {
                    errors.push(format!("enqueue (sent again): {e}"));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => {
                    errors.push(format!("enqueue: {e}"));
                    return (next, errors);
                }
            }
        }
        next = due;
    }
    (next, errors)
}

/// Reads the jobs table's sizes at the end of every bucket.
async fn sample(
    url: String,
    schema: String,
    tally: Arc<Mutex<Tally>>,
    start: Instant,
    bucket: Duration,
    total: Duration,
) -> Result<(), String> {
    let mut conn = PgConnection::connect(&url).await.map_err(|e| format!("sampler: {e}"))?;
    let table = format!("{schema}.jobs");
    let mut at = 0_usize;
    while start.elapsed() < total {
        let end = start + bucket * (at as u32 + 1);
        tokio::time::sleep_until(end.into()).await;
        let row = sqlx::query(
            "SELECT coalesce(s.n_dead_tup, 0), coalesce(s.n_live_tup, 0), \
                    pg_relation_size($1::regclass), pg_indexes_size($1::regclass) \
             FROM pg_stat_user_tables s WHERE s.relid = $1::regclass",
        )
        .bind(&table)
        .fetch_one(&mut conn)
        .await
        .map_err(|e| format!("sampler: {e}"))?;
        let sizes =
            Sizes { dead_tuples: row.get(0), live_tuples: row.get(1), heap_bytes: row.get(2), index_bytes: row.get(3) };
        if let Some(b) = tally.lock().unwrap_or_else(|p| p.into_inner()).buckets.get_mut(at) {
            b.sizes = Some(sizes);
        }
        at += 1;
    }
    Ok(())
}

/// Puts `phase`'s pressure on the database until `until`.
async fn pressure(phase: Phase, url: &str, schema: &str, until: Instant) -> Result<(), String> {
    let err = |e: sqlx::Error| e.to_string();
    match phase {
        Phase::Clean => Ok(()),
        Phase::IdleInTransaction => {
            // the schema is the run's own (Env's), never outside text
            let mut conn = PgConnection::connect(url).await.map_err(err)?;
            sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ").execute(&mut conn).await.map_err(err)?;
            sqlx::query("SELECT txid_current()").execute(&mut conn).await.map_err(err)?;
            sqlx::query(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {schema}.jobs")))
                .execute(&mut conn)
                .await
                .map_err(err)?;
            tokio::time::sleep_until(until.into()).await;
            sqlx::query("COMMIT").execute(&mut conn).await.map_err(err)?;
            Ok(())
        }
        Phase::Readers => {
            // the schema is the run's own (Env's), never outside text
            let scan = format!("SELECT count(*), sum(pg_column_size(j.*)) FROM {schema}.jobs j");
            let readers = (0..4).map(|_| {
                let (url, scan) = (url.to_owned(), scan.clone());
                tokio::spawn(async move {
                    let mut conn = PgConnection::connect(&url).await.map_err(err)?;
                    while Instant::now() < until {
                        let ends = (Instant::now() + Duration::from_secs(10)).min(until);
                        sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ").execute(&mut conn).await.map_err(err)?;
                        while Instant::now() < ends {
                            sqlx::query(sqlx::AssertSqlSafe(scan.as_str())).execute(&mut conn).await.map_err(err)?;
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                        sqlx::query("COMMIT").execute(&mut conn).await.map_err(err)?;
                    }
                    Ok::<(), String>(())
                })
            });
            for reader in readers.collect::<Vec<_>>() {
                reader.await.map_err(|e| format!("reader panicked: {e}"))??;
            }
            Ok(())
        }
    }
}
