//! The durable-job scenarios (every built-in backend has durable jobs):
//!
//! - `durable`: [`DURABLE_JOBS`] durable jobs of [`DURABLE_STEPS`] trivial
//!   steps each (`ctx.step` returning a number, checkpointed with the job);
//!   against one workflow of [`DURABLE_JOBS`] chains of [`DURABLE_STEPS`]
//!   chained no-op steps, and against `DURABLE_JOBS * DURABLE_STEPS` plain
//!   no-op jobs. Each timed from the first enqueue call (one batch for the
//!   durable jobs, one `enqueue_workflow` call for the workflow, batches of
//!   [`BATCH_SIZE`] for the plain jobs) until the pool's shutdown returns
//!   with every outcome written, by the drain's pool (concurrency
//!   [`DRAIN_CONCURRENCY`]); steps/s, a plain job counting as one step.
//! - `sleepers`: [`SLEEPERS`] durable jobs that each `ctx.sleep`
//!   [`SLEEP`] once and then finish, by a pool of concurrency
//!   [`DRAIN_CONCURRENCY`]; the time until all are Completed, jobs/s, and
//!   the most jobs asleep at once. A sleep ends the run and holds no slot,
//!   so that peak is far above the concurrency, and the time far below
//!   `SLEEPERS * SLEEP / concurrency` (what slot-holding sleeps would take).
//!
//! Each run on fresh, empty storage, as every scenario.

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jq_core::storage::{Storage, StorageExt};
use jq_core::workflow::{Step, Workflow, WorkflowPlan};
use jq_core::{DurableContext, HandlerError, JobType, NewJob, State};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::scenarios::{BATCH_SIZE, DRAIN_CONCURRENCY, drain_pool, enqueue_noops, median, noop_jobs, run_pool};
use crate::{BoxError, Fresh, Row};

/// Durable jobs of the `durable` scenario (and chains of its workflow).
pub const DURABLE_JOBS: usize = 1_000;
/// Steps of each durable job (and of each workflow chain).
pub const DURABLE_STEPS: usize = 10;
/// Jobs of the `sleepers` scenario.
pub const SLEEPERS: usize = 10_000;
/// How long each sleeper sleeps.
pub const SLEEP: Duration = Duration::from_secs(1);

/// The benchmark's durable job: [`DURABLE_STEPS`] trivial steps.
#[derive(Serialize, Deserialize)]
pub struct Stepped {
    pub n: usize,
}

impl JobType for Stepped {
    const KIND: &'static str = "bench_durable";
    const QUEUE: &'static str = "bench";
}

/// The `sleepers` scenario's job: one durable sleep, then done.
#[derive(Serialize, Deserialize)]
pub struct Sleeper {
    pub n: usize,
}

impl JobType for Sleeper {
    const KIND: &'static str = "bench_sleeper";
    const QUEUE: &'static str = "bench";
}

/// The names of the steps, made once (a handler borrows them).
fn step_names() -> Arc<Vec<String>> {
    Arc::new((0..DURABLE_STEPS).map(|i| format!("s{i}")).collect())
}

/// One `durable` run's figures, steps/s each.
struct DurableRun {
    durable: f64,
    workflow: f64,
    plain: f64,
}

/// `runs` runs of the durable jobs, the workflow and the plain jobs, each
/// on fresh storage; the rows.
pub async fn durable<S, F, Fut>(_backend: &str, runs: usize, mut fresh: F) -> Result<Vec<Row>, BoxError>
where
    S: Storage,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Fresh<S>, BoxError>>,
{
    let steps = DURABLE_JOBS * DURABLE_STEPS;
    let mut all = Vec::with_capacity(runs);
    for run in 1..=runs {
        let durable = fresh().await?.measure(durable_once).await?;
        let workflow = fresh()
            .await?
            .measure(|s| async move {
                let plan = chains()?;
                let start = Instant::now();
                s.require_workflows()?.enqueue_workflow(&plan).await?;
                run_pool(s.clone(), steps, None).await?;
                let rate = steps as f64 / start.elapsed().as_secs_f64();
                let info = s.require_workflows()?.workflow(plan.id).await?;
                if info.counts.get(State::Completed) != steps as u64 {
                    return Err(format!("durable: the workflow ended as {:?}", info.counts).into());
                }
                Ok(rate)
            })
            .await?;
        let plain = fresh()
            .await?
            .measure(|s| async move {
                let start = Instant::now();
                enqueue_noops(&*s, steps).await?;
                run_pool(s, steps, None).await?;
                Ok(steps as f64 / start.elapsed().as_secs_f64())
            })
            .await?;
        eprintln!(
            "durable run {run}/{runs}: durable {durable:.0} steps/s, workflow {workflow:.0} steps/s, \
             plain {plain:.0} jobs/s"
        );
        all.push(DurableRun { durable, workflow, plain });
    }
    let pick = |f: fn(&DurableRun) -> f64| median(all.iter().map(f).collect());
    let (durable, workflow, plain) = (pick(|r| r.durable), pick(|r| r.workflow), pick(|r| r.plain));
    let of_plain = |rate: f64| format!("{rate:.0} steps/s ({:.0}%)", 100.0 * rate / plain);
    Ok(vec![
        (
            format!("durable jobs ({DURABLE_JOBS} of {DURABLE_STEPS} steps, concurrency {DRAIN_CONCURRENCY})"),
            of_plain(durable),
        ),
        (format!("workflow ({DURABLE_JOBS} chains of {DURABLE_STEPS} steps, 1 call)"), of_plain(workflow)),
        (format!("plain jobs ({steps} no-op jobs, calls of {BATCH_SIZE})"), format!("{plain:.0} steps/s")),
    ])
}

/// [`DURABLE_JOBS`] chains of [`DURABLE_STEPS`] no-op steps.
fn chains() -> Result<WorkflowPlan, BoxError> {
    let mut workflow = Workflow::new();
    for (i, job) in noop_jobs(0..DURABLE_JOBS * DURABLE_STEPS)?.into_iter().enumerate() {
        let (chain, link) = (i / DURABLE_STEPS, i % DURABLE_STEPS);
        let mut step = Step::new(format!("c{chain}s{link}"), job);
        if link > 0 {
            step = step.after([format!("c{chain}s{}", link - 1)]);
        }
        workflow = workflow.step(step);
    }
    Ok(workflow.plan()?)
}

/// The durable jobs enqueued in one call and drained; steps/s.
async fn durable_once<S: Storage>(storage: Arc<S>) -> Result<f64, BoxError> {
    let jobs: Vec<NewJob> =
        (0..DURABLE_JOBS).map(|n| NewJob::typed(&Stepped { n }).build()).collect::<Result<_, _>>()?;
    let names = step_names();
    let finished = Arc::new(AtomicUsize::new(0));
    let all_done = Arc::new(Notify::new());
    let (count, notify) = (finished.clone(), all_done.clone());
    let start = Instant::now();
    storage.enqueue(jobs).await?;
    let pool = drain_pool(storage.clone())
        .register_durable::<Stepped, _, _>(move |_job, ctx: DurableContext| {
            let (names, count, notify) = (names.clone(), count.clone(), notify.clone());
            async move {
                let mut sum = 0usize;
                for (i, name) in names.iter().enumerate() {
                    sum += ctx.step(name, async move { Ok::<_, HandlerError>(i) }).await?;
                }
                debug_assert_eq!(sum, (0..DURABLE_STEPS).sum::<usize>());
                if count.fetch_add(1, Ordering::Relaxed) + 1 == DURABLE_JOBS {
                    notify.notify_one();
                }
                Ok(())
            }
        })
        .start()?;
    all_done.notified().await;
    pool.shutdown().await?;
    let rate = (DURABLE_JOBS * DURABLE_STEPS) as f64 / start.elapsed().as_secs_f64();
    let completed = storage.stats().await?.total(State::Completed);
    if completed != DURABLE_JOBS as u64 {
        return Err(format!("durable: {completed} of {DURABLE_JOBS} durable jobs completed").into());
    }
    Ok(rate)
}

/// One `sleepers` run's figures.
struct SleepersRun {
    total: Duration,
    /// The most jobs asleep (first run ended, not yet finished) at once.
    peak: usize,
}

/// `runs` runs of the sleepers, each on fresh storage; the rows.
pub async fn sleepers<S, F, Fut>(_backend: &str, runs: usize, mut fresh: F) -> Result<Vec<Row>, BoxError>
where
    S: Storage,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Fresh<S>, BoxError>>,
{
    let mut all = Vec::with_capacity(runs);
    for run in 1..=runs {
        let r = fresh().await?.measure(sleepers_once).await?;
        eprintln!(
            "sleepers run {run}/{runs}: {:.2} s, {:.0} jobs/s, at most {} asleep at once",
            r.total.as_secs_f64(),
            SLEEPERS as f64 / r.total.as_secs_f64(),
            r.peak
        );
        all.push(r);
    }
    let total = median(all.iter().map(|r| r.total).collect());
    let peak = median(all.iter().map(|r| r.peak).collect());
    let held = SLEEP * (SLEEPERS / DRAIN_CONCURRENCY) as u32;
    Ok(vec![
        (
            format!("sleepers ({SLEEPERS} jobs sleeping {SLEEP:?} once, concurrency {DRAIN_CONCURRENCY}): all done"),
            format!("{:.2} s ({:.0} jobs/s)", total.as_secs_f64(), SLEEPERS as f64 / total.as_secs_f64()),
        ),
        ("sleepers: the most asleep at once (median of runs)".to_owned(), format!("{peak} jobs")),
        ("sleepers: what sleeps holding a slot would take at least".to_owned(), format!("{:.0} s", held.as_secs_f64())),
    ])
}

/// The sleepers enqueued in batches of [`BATCH_SIZE`] and run until every
/// one finished.
async fn sleepers_once<S: Storage>(storage: Arc<S>) -> Result<SleepersRun, BoxError> {
    let batches: Vec<Vec<NewJob>> = (0..SLEEPERS.div_ceil(BATCH_SIZE))
        .map(|b| {
            (b * BATCH_SIZE..((b + 1) * BATCH_SIZE).min(SLEEPERS))
                .map(|n| NewJob::typed(&Sleeper { n }).build())
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<_, _>>()?;
    // Jobs whose first run has begun; a replay finds its job here.
    let slept: Arc<Mutex<HashSet<usize>>> = Arc::default();
    let asleep = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let all_done = Arc::new(Notify::new());
    let (seen, now_asleep, most, count, notify) =
        (slept.clone(), asleep.clone(), peak.clone(), finished.clone(), all_done.clone());
    let start = Instant::now();
    for batch in batches {
        storage.enqueue(batch).await?;
    }
    let pool = drain_pool(storage.clone())
        .register_durable::<Sleeper, _, _>(move |job, ctx: DurableContext| {
            let first = seen.lock().unwrap_or_else(|e| e.into_inner()).insert(job.n);
            if first {
                // Counted before the sleep ends the run: it is asleep from here.
                let n = now_asleep.fetch_add(1, Ordering::Relaxed) + 1;
                most.fetch_max(n, Ordering::Relaxed);
            }
            let (now_asleep, count, notify) = (now_asleep.clone(), count.clone(), notify.clone());
            async move {
                ctx.sleep(SLEEP).await?;
                now_asleep.fetch_sub(1, Ordering::Relaxed);
                if count.fetch_add(1, Ordering::Relaxed) + 1 == SLEEPERS {
                    notify.notify_one();
                }
                Ok(())
            }
        })
        .start()?;
    all_done.notified().await;
    pool.shutdown().await?;
    let total = start.elapsed();
    let completed = storage.stats().await?.total(State::Completed);
    if completed != SLEEPERS as u64 {
        return Err(format!("sleepers: {completed} of {SLEEPERS} jobs completed").into());
    }
    Ok(SleepersRun { total, peak: peak.load(Ordering::Relaxed) })
}
