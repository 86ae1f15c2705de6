//! The limited scenarios: what a limit costs beyond what it allows.
//!
//! `limited`, for N in [`LIMITS`]: jobs of [`JOB_TIME`] each (a sleep),
//! [`jobs_for`] of them, drained
//!
//! - by a plain pool of concurrency N, the jobs without a key: what a
//!   limit of N allows at best;
//! - by a pool of [`POOL`] with every job of one key limited to N running;
//! - by a pool of [`POOL`] with the queue limited to N running;
//! - the key and the queue limit again, shared by 2 and by 4 worker
//!   processes with a pool of [`POOL`] each (`procs.rs`).
//!
//! Each figure jobs/s from pool start until the last ack is durable, with
//! its ratio to the plain pool of concurrency N; each run on fresh storage.
//!
//! `hotkey` (a backend with keys): one key with [`HOT_JOBS`] pending jobs
//! of [`JOB_TIME`], limited to 2 running (the queue's default key limit),
//! and another key's jobs enqueued every [`ARRIVAL_GAP`] into the same
//! queue, drained by a pool of [`POOL`] at its defaults: the small key's
//! start delay (handler start minus the instant before its enqueue), p50
//! and p99, against the same arrivals on an idle pool.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use jq_core::storage::{Storage, StorageExt};
use jq_core::{JobContext, JobType, NewJob, QueueLimits, QueueName, State, WorkerPool};
use tokio::sync::{Notify, mpsc};

use crate::scenarios::{BATCH_SIZE, Noop, median};
use crate::{BoxError, Fresh, Row, procs};

/// Each job's run: a sleep this long.
pub const JOB_TIME: Duration = Duration::from_millis(2);
/// The limits measured.
pub const LIMITS: [u32; 3] = [1, 2, 8];
/// Handlers of the limited pools.
pub const POOL: usize = 16;
/// The key of the limited drains.
const TENANT: &str = "tenant";

/// Jobs of a drain under a limit of `n`: at least 400, and about 0.4 s of
/// work at the limit.
pub fn jobs_for(n: u32) -> usize {
    (200 * n as usize).max(400)
}

/// What holds the jobs back.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Limit {
    /// No limit: the plain pool of concurrency N.
    None,
    /// One key limited to N running.
    Key,
    /// The queue limited to N running.
    Queue,
}

/// `n` jobs, with the key when `limit` is [`Limit::Key`], after setting
/// the limit of `max`.
async fn enqueue<S: Storage>(storage: &S, n: usize, limit: Limit, max: u32) -> Result<(), BoxError> {
    let queue = QueueName::new(Noop::QUEUE)?;
    let limits = QueueLimits { concurrency: Some(max), rate: None };
    match limit {
        Limit::None => {}
        Limit::Key => storage.require_keys()?.set_key_limits(&queue, Some(TENANT), &limits).await?,
        Limit::Queue => storage.require_controls()?.set_limits(&queue, &limits).await?,
    }
    for start in (0..n).step_by(BATCH_SIZE) {
        let jobs: Vec<NewJob> = (start..(start + BATCH_SIZE).min(n))
            .map(|n| {
                let job = NewJob::typed(&Noop { n });
                if limit == Limit::Key { job.key(TENANT) } else { job }.build()
            })
            .collect::<Result<_, _>>()?;
        storage.enqueue(jobs).await?;
    }
    Ok(())
}

/// Runs `jobs` enqueued jobs through one pool of `concurrency` handlers
/// that sleep [`JOB_TIME`]; jobs/s until the last ack is durable.
async fn one_pool<S: Storage>(storage: Arc<S>, jobs: usize, concurrency: usize) -> Result<f64, BoxError> {
    let ran = Arc::new(AtomicUsize::new(0));
    let all_ran = Arc::new(Notify::new());
    let (counter, notify) = (ran.clone(), all_ran.clone());
    let start = Instant::now();
    let pool = WorkerPool::new(storage.clone())
        .concurrency(concurrency)
        .register::<Noop, _, _>(move |_job, _ctx: JobContext| {
            let (counter, notify) = (counter.clone(), notify.clone());
            async move {
                tokio::time::sleep(JOB_TIME).await;
                if counter.fetch_add(1, Ordering::Relaxed) + 1 == jobs {
                    notify.notify_one();
                }
                Ok(())
            }
        })
        .start()?;
    tokio::time::timeout(Duration::from_secs(300), all_ran.notified()).await.map_err(|_| "limited: stuck for 300 s")?;
    pool.shutdown().await?;
    let elapsed = start.elapsed();
    let completed = storage.stats().await?.total(State::Completed);
    if completed != jobs as u64 {
        return Err(format!("limited: {completed} of {jobs} jobs completed").into());
    }
    Ok(jobs as f64 / elapsed.as_secs_f64())
}

/// The figures of one run for one N: plain, key, queue, then key and queue
/// by 2 and by 4 processes.
type Run = [f64; 7];

/// The labels of [`Run`]'s figures.
const LABELS: [&str; 7] = [
    "plain pool of concurrency N",
    "one key limited to N, pool of 16",
    "queue limited to N, pool of 16",
    "one key limited to N, 2 processes of 16",
    "one key limited to N, 4 processes of 16",
    "queue limited to N, 2 processes of 16",
    "queue limited to N, 4 processes of 16",
];

/// `runs` runs of every limited drain on storage from `fresh`; the rows.
pub async fn limited<S, F, Fut>(backend: &str, runs: usize, mut fresh: F) -> Result<Vec<Row>, BoxError>
where
    S: Storage,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Fresh<S>, BoxError>>,
{
    let mut rows = Vec::new();
    for max in LIMITS {
        let jobs = jobs_for(max);
        let mut all: Vec<Run> = Vec::with_capacity(runs);
        for run in 1..=runs {
            let mut figures = [0.0; 7];
            let cases: [(Limit, usize); 7] = [
                (Limit::None, 0),
                (Limit::Key, 0),
                (Limit::Queue, 0),
                (Limit::Key, 2),
                (Limit::Key, 4),
                (Limit::Queue, 2),
                (Limit::Queue, 4),
            ];
            for (i, (limit, processes)) in cases.into_iter().enumerate() {
                let f = fresh().await?;
                let store = f.store.clone();
                figures[i] = f
                    .measure(|s| async move {
                        enqueue(&*s, jobs, limit, max).await?;
                        if processes == 0 {
                            let concurrency = if limit == Limit::None { max as usize } else { POOL };
                            one_pool(s, jobs, concurrency).await
                        } else {
                            procs::drain_enqueued(s, backend, &store, processes, jobs, JOB_TIME).await
                        }
                    })
                    .await?;
            }
            eprintln!(
                "limited N={max} run {run}/{runs}: {}",
                figures.iter().map(|f| format!("{f:.0}")).collect::<Vec<_>>().join(", ")
            );
            all.push(figures);
        }
        for (i, label) in LABELS.iter().enumerate() {
            let rate = median(all.iter().map(|r| r[i]).collect());
            let value = if i == 0 {
                format!("{rate:.0} jobs/s")
            } else {
                let ratio = median(all.iter().map(|r| r[i] / r[0]).collect());
                format!("{rate:.0} jobs/s ({:.0}%)", 100.0 * ratio)
            };
            rows.push((format!("limited N={max} ({jobs} jobs of 2 ms): {label}"), value));
        }
    }
    Ok(rows)
}

/// Pending jobs of the hot key.
pub const HOT_JOBS: usize = 50_000;
/// The small key's jobs: one every [`ARRIVAL_GAP`].
pub const SMALL_JOBS: usize = 200;
/// Between two of the small key's jobs.
pub const ARRIVAL_GAP: Duration = Duration::from_millis(10);
/// Payload numbers of the hot key's jobs start here (the small key's are
/// below).
const HOT_BASE: usize = 1_000_000;

/// The small key's start delays on a pool over `storage`, after `hot` jobs
/// of the hot key were stored: p50 and p99.
async fn start_delays<S: Storage>(storage: Arc<S>, hot: usize) -> Result<(Duration, Duration), BoxError> {
    let queue = QueueName::new(Noop::QUEUE)?;
    let limits = QueueLimits { concurrency: Some(2), rate: None };
    storage.require_keys()?.set_key_limits(&queue, None, &limits).await?;
    for start in (0..hot).step_by(BATCH_SIZE) {
        let jobs: Vec<NewJob> = (start..(start + BATCH_SIZE).min(hot))
            .map(|n| NewJob::typed(&Noop { n: HOT_BASE + n }).key("hot").build())
            .collect::<Result<_, _>>()?;
        storage.enqueue(jobs).await?;
    }
    let (started_tx, mut started) = mpsc::unbounded_channel::<(usize, Instant)>();
    let pool = WorkerPool::new(storage.clone())
        .concurrency(POOL)
        .register::<Noop, _, _>(move |job: Noop, _ctx: JobContext| {
            let started_tx = started_tx.clone();
            async move {
                if job.n >= HOT_BASE {
                    tokio::time::sleep(JOB_TIME).await;
                } else {
                    let _ = started_tx.send((job.n, Instant::now()));
                }
                Ok(())
            }
        })
        .start()?;
    // The pool at work on the hot key (or idle) before the first arrival.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut enqueued_at = Vec::with_capacity(SMALL_JOBS);
    for n in 0..SMALL_JOBS {
        let job = NewJob::typed(&Noop { n }).key("small").build()?;
        enqueued_at.push(Instant::now());
        storage.enqueue_one(job).await?;
        tokio::time::sleep(ARRIVAL_GAP).await;
    }
    let mut delays = Vec::with_capacity(SMALL_JOBS);
    while delays.len() < SMALL_JOBS {
        let (n, at) = tokio::time::timeout(Duration::from_secs(60), started.recv())
            .await
            .map_err(|_| "hotkey: the small key's jobs did not start within 60 s")?
            .ok_or("pool stopped")?;
        delays.push(at.saturating_duration_since(enqueued_at[n]));
    }
    pool.shutdown().await?;
    delays.sort();
    let at = |p: f64| delays[((p * delays.len() as f64).ceil() as usize).clamp(1, delays.len()) - 1];
    Ok((at(0.50), at(0.99)))
}

/// One run's start delays (p50, p99): idle, then beside the hot key.
type Delays = ((Duration, Duration), (Duration, Duration));

/// `runs` runs of the hot-key latency, idle and hot, on storage from
/// `fresh`; the rows, or a skip message on a backend without keys.
pub async fn hotkey<S, F, Fut>(backend: &str, runs: usize, mut fresh: F) -> Result<Vec<Row>, BoxError>
where
    S: Storage,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Fresh<S>, BoxError>>,
{
    let mut all: Vec<Delays> = Vec::with_capacity(runs);
    for run in 1..=runs {
        let first = fresh().await?;
        if let Err(e) = first.storage.require_keys() {
            first.measure(|_| async { Ok(()) }).await?;
            eprintln!("hotkey: skipped on {backend}: {e}");
            return Ok(vec![("hotkey".to_owned(), "skipped: no keys capability".to_owned())]);
        }
        let idle = first.measure(|s| start_delays(s, 0)).await?;
        let hot = fresh().await?.measure(|s| start_delays(s, HOT_JOBS)).await?;
        eprintln!(
            "hotkey run {run}/{runs}: idle p50 {:?} p99 {:?}, hot p50 {:?} p99 {:?}",
            idle.0, idle.1, hot.0, hot.1
        );
        all.push((idle, hot));
    }
    let pick = |f: fn(&Delays) -> Duration| median(all.iter().map(f).collect());
    let (ip50, ip99) = (pick(|r| r.0.0), pick(|r| r.0.1));
    let (hp50, hp99) = (pick(|r| r.1.0), pick(|r| r.1.1));
    let bound = ip99 * 2 + Duration::from_millis(20);
    Ok(vec![
        ("hotkey: small key's start delay, idle pool (p50 / p99)".to_owned(), format!("{ip50:.1?} / {ip99:.1?}")),
        (
            format!("hotkey: same, beside a key with {HOT_JOBS} pending (limit 2) (p50 / p99)"),
            format!("{hp50:.1?} / {hp99:.1?}"),
        ),
        (
            "hotkey: target p99 <= 2 x idle p99 + 20 ms".to_owned(),
            format!("{bound:.1?}: {}", if hp99 <= bound { "met" } else { "missed" }),
        ),
    ])
}
