//! The scenarios every backend runs: batch and single enqueue, drain, and
//! idle wake-up latency; and the drain's pool, shared by the other modules.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use jq_core::storage::{Storage, StorageExt};
use jq_core::{JobContext, WorkerPool};
use jq_core::{JobType, NewJob, QueueLimits, QueueName, Rate, State};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc};

use crate::BoxError;

pub const BATCH_JOBS: usize = 20_000;
pub const BATCH_SIZE: usize = 1_000;
pub const SINGLE_JOBS: usize = 5_000;
pub const DRAIN_JOBS: usize = 20_000;
pub const DRAIN_CONCURRENCY: usize = 16;
pub const LATENCY_JOBS: usize = 200;
/// The rated drain: this many jobs through a queue limited to
/// [`RATE_LIMIT`] starts per second.
pub const RATED_JOBS: usize = 10_000;
pub const RATE_LIMIT: u32 = 1_000;
/// The rated drain's pool polls this often: a rate-limited queue is found
/// claimable again by polling (nothing signals a window that frees up).
pub const RATED_POLL: Duration = Duration::from_millis(10);
const LATENCY_GAP: Duration = Duration::from_millis(20);

/// The benchmark's job: a no-op.
#[derive(Serialize, Deserialize)]
pub struct Noop {
    pub n: usize,
}

impl JobType for Noop {
    const KIND: &'static str = "bench_noop";
    const QUEUE: &'static str = "bench";
}

pub fn noop_jobs(range: std::ops::Range<usize>) -> Result<Vec<NewJob>, BoxError> {
    range.map(|n| NewJob::typed(&Noop { n }).build().map_err(Into::into)).collect()
}

/// Enqueues `n` no-op jobs in batches of [`BATCH_SIZE`].
pub async fn enqueue_noops<S: Storage>(storage: &S, n: usize) -> Result<(), BoxError> {
    for start in (0..n).step_by(BATCH_SIZE) {
        storage.enqueue(noop_jobs(start..(start + BATCH_SIZE).min(n))?).await?;
    }
    Ok(())
}

pub async fn batch_enqueue<S: Storage>(storage: Arc<S>) -> Result<f64, BoxError> {
    let batches: Vec<Vec<NewJob>> = (0..BATCH_JOBS / BATCH_SIZE)
        .map(|b| noop_jobs(b * BATCH_SIZE..(b + 1) * BATCH_SIZE))
        .collect::<Result<_, _>>()?;
    let start = Instant::now();
    for batch in batches {
        storage.enqueue(batch).await?;
    }
    Ok(BATCH_JOBS as f64 / start.elapsed().as_secs_f64())
}

pub async fn single_enqueue<S: Storage>(storage: Arc<S>) -> Result<f64, BoxError> {
    let jobs = noop_jobs(0..SINGLE_JOBS)?;
    let start = Instant::now();
    for job in jobs {
        storage.enqueue_one(job).await?;
    }
    Ok(SINGLE_JOBS as f64 / start.elapsed().as_secs_f64())
}

/// The drain: [`DRAIN_JOBS`] enqueued, then run by one pool; jobs/s.
pub async fn drain<S: Storage>(storage: Arc<S>) -> Result<f64, BoxError> {
    enqueue_noops(&*storage, DRAIN_JOBS).await?;
    let drained = run_pool(storage, DRAIN_JOBS, None).await?;
    Ok(DRAIN_JOBS as f64 / drained.total.as_secs_f64())
}

/// What the rated drain measured.
pub struct Rated {
    /// Starts per second over whole windows: the handler starts in the
    /// first `RATED_JOBS / RATE_LIMIT - 1` seconds from the first one,
    /// divided by that (the last window is left out: it is not full).
    pub rate: f64,
}

/// The drain of [`RATED_JOBS`] through a queue with a rate limit of
/// [`RATE_LIMIT`] per second (the same pool as the drain, polling every
/// [`RATED_POLL`]).
pub async fn rated<S: Storage>(storage: Arc<S>) -> Result<Rated, BoxError> {
    let rate = Rate::new(RATE_LIMIT, Duration::from_secs(1));
    let limits = QueueLimits { concurrency: None, rate: Some(rate) };
    storage.require_controls()?.set_limits(&QueueName::new(Noop::QUEUE)?, &limits).await?;
    enqueue_noops(&*storage, RATED_JOBS).await?;
    let starts: Arc<std::sync::Mutex<Vec<Instant>>> = Arc::default();
    let all_ran = Arc::new(Notify::new());
    let (seen, notify) = (starts.clone(), all_ran.clone());
    let pool = WorkerPool::new(storage.clone())
        .concurrency(DRAIN_CONCURRENCY)
        .poll_interval(RATED_POLL)
        .register::<Noop, _, _>(move |_job, _ctx: JobContext| {
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.push(Instant::now());
            if seen.len() == RATED_JOBS {
                notify.notify_one();
            }
            async { Ok(()) }
        })
        .start()?;
    all_ran.notified().await;
    pool.shutdown().await?;
    let mut starts = std::mem::take(&mut *starts.lock().unwrap_or_else(|e| e.into_inner()));
    starts.sort();
    let first = *starts.first().ok_or("rated: no job ran")?;
    let whole = (RATED_JOBS / RATE_LIMIT as usize).saturating_sub(1).max(1) as u32;
    let span = rate.period * whole;
    let counted = starts.iter().take_while(|t| t.duration_since(first) < span).count();
    Ok(Rated { rate: counted as f64 / span.as_secs_f64() })
}

/// How long a pool took to drain.
pub struct Drained {
    /// From pool start until the last ack was durable.
    pub total: Duration,
    /// From pool start until the `mark`-th handler ran.
    pub at_mark: Option<Duration>,
}

/// A pool at the default settings except concurrency [`DRAIN_CONCURRENCY`],
/// observed when the bench is asked to (`crate::observation`): the pool of
/// every drain scenario, its handlers still to register.
pub fn drain_pool<S: Storage>(storage: Arc<S>) -> WorkerPool<Arc<S>> {
    let pool = WorkerPool::new(storage).concurrency(DRAIN_CONCURRENCY);
    match crate::observation::pool_observe() {
        Some(on) => pool.observe(on),
        None => pool,
    }
}

/// Runs a pool at the default settings except concurrency
/// [`DRAIN_CONCURRENCY`] over `jobs` no-op jobs already enqueued, until every
/// one has run and its ack is durable (the pool's shutdown returns once every
/// outcome is written); checks that exactly `jobs` more are Completed.
pub async fn run_pool<S: Storage>(storage: Arc<S>, jobs: usize, mark: Option<usize>) -> Result<Drained, BoxError> {
    let completed_before = storage.stats().await?.total(State::Completed);
    let ran = Arc::new(AtomicUsize::new(0));
    let all_ran = Arc::new(Notify::new());
    let marked: Arc<OnceLock<Instant>> = Arc::default();
    let (counter, notify, at_mark) = (ran.clone(), all_ran.clone(), marked.clone());
    let start = Instant::now();
    let pool = drain_pool(storage.clone())
        .register::<Noop, _, _>(move |_job, _ctx: JobContext| {
            let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
            if Some(n) == mark {
                let _ = at_mark.set(Instant::now());
            }
            if n == jobs {
                notify.notify_one();
            }
            async { Ok(()) }
        })
        .start()?;
    all_ran.notified().await;
    pool.shutdown().await?;
    let total = start.elapsed();
    let completed = storage.stats().await?.total(State::Completed) - completed_before;
    if completed != jobs as u64 {
        return Err(format!("drain: {completed} of {jobs} jobs completed").into());
    }
    Ok(Drained { total, at_mark: marked.get().map(|at| at.duration_since(start)) })
}

pub async fn latency<S: Storage>(storage: Arc<S>) -> Result<(Duration, Duration), BoxError> {
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

pub fn median<T: Copy + PartialOrd>(mut values: Vec<T>) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values[values.len() / 2]
}
