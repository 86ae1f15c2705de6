//! The workflow scenarios, on a backend with
//! `Capability::Workflows` (skipped, with a message, on the others):
//!
//! - `fanin`: [`FANIN_MEMBERS`] no-op jobs and one callback after all of
//!   them, stored as one batch, drained by the drain's pool (concurrency
//!   [`DRAIN_CONCURRENCY`]) from pool start until the callback's ack is
//!   durable; against the plain drain of [`FANIN_MEMBERS`] no-op jobs run
//!   by the same pool in the same run. And the callback's start latency:
//!   the callback handler's start minus the return of the last member's
//!   handler (so it holds the member's ack being written, the release in
//!   its step, the wake-up and the claim), p50 and p99 over the runs.
//! - `wfenqueue`: one workflow of [`WF_STEPS`] steps in [`WF_CHAINS`]
//!   chains, stored by one `enqueue_workflow` call, against the plain batch
//!   enqueue of as many jobs in calls of [`BATCH_SIZE`], in the same run.
//!
//! Each run on fresh, empty storage, as every scenario.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use jq_core::storage::{Storage, StorageExt};
use jq_core::workflow::{Batch, Step, Workflow, WorkflowPlan};
use jq_core::{JobContext, NewJob, State};
use tokio::sync::Notify;

use crate::scenarios::{BATCH_SIZE, DRAIN_CONCURRENCY, Noop, drain_pool, enqueue_noops, median, noop_jobs, run_pool};
use crate::{BoxError, Fresh, Row};

/// Members of the fan-in (and jobs of its plain drain).
pub const FANIN_MEMBERS: usize = 10_000;
/// Steps of the enqueued workflow (and jobs of its plain batch enqueue).
pub const WF_STEPS: usize = 10_000;
/// Chains the enqueued workflow's steps form, each step after the one
/// before it in its chain.
pub const WF_CHAINS: usize = 100;

/// The `n` of the callback's payload: the handler tells it from members.
const CALLBACK: usize = usize::MAX;

/// A message, and `None`, when `storage` keeps no workflows.
fn skipped<S: Storage>(storage: &S, scenario: &str, backend: &str) -> Option<String> {
    storage.require_workflows().err().map(|e| format!("{scenario}: skipped on {backend}: {e}"))
}

/// One fan-in run's figures.
struct FanInRun {
    /// The plain drain of [`FANIN_MEMBERS`] jobs, jobs/s.
    plain: f64,
    /// The fan-in's jobs (members and callback) per second.
    fanin: f64,
    /// The callback's start after the last member's handler returned.
    callback_start: Duration,
}

/// `runs` fan-in runs, each a plain drain then the fan-in, on storage from
/// `fresh`; the rows, or a skip message on a backend without workflows.
pub async fn fanin<S, F, Fut>(backend: &str, runs: usize, mut fresh: F) -> Result<Vec<Row>, BoxError>
where
    S: Storage,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Fresh<S>, BoxError>>,
{
    let mut all = Vec::with_capacity(runs);
    for run in 1..=runs {
        let first = fresh().await?;
        if let Some(message) = skipped(&first.storage, "fanin", backend) {
            first.measure(|_| async { Ok(()) }).await?;
            eprintln!("{message}");
            return Ok(vec![("fanin".to_owned(), "skipped: no workflows capability".to_owned())]);
        }
        let plain = first
            .measure(|s| async move {
                enqueue_noops(&*s, FANIN_MEMBERS).await?;
                let drained = run_pool(s, FANIN_MEMBERS, None).await?;
                Ok(FANIN_MEMBERS as f64 / drained.total.as_secs_f64())
            })
            .await?;
        let (fanin, callback_start) = fresh().await?.measure(fanin_once).await?;
        eprintln!(
            "fanin run {run}/{runs}: plain drain {plain:.0}/s, fan-in {fanin:.0}/s ({:.0}%), callback start {:.2} ms",
            100.0 * fanin / plain,
            callback_start.as_secs_f64() * 1e3
        );
        all.push(FanInRun { plain, fanin, callback_start });
    }
    let plain = median(all.iter().map(|r| r.plain).collect());
    let fanin = median(all.iter().map(|r| r.fanin).collect());
    let ratio = median(all.iter().map(|r| r.fanin / r.plain).collect());
    let mut starts: Vec<Duration> = all.iter().map(|r| r.callback_start).collect();
    starts.sort();
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    Ok(vec![
        (
            format!("plain drain ({FANIN_MEMBERS} no-op jobs, concurrency {DRAIN_CONCURRENCY})"),
            format!("{plain:.0} jobs/s"),
        ),
        (
            format!("fan-in drain ({FANIN_MEMBERS} members + 1 callback), median ratio to plain"),
            format!("{fanin:.0} jobs/s ({:.0}%)", 100.0 * ratio),
        ),
        (format!("callback start after the last member, p50 ({runs} runs)"), ms(percentile(&starts, 0.50))),
        (format!("callback start after the last member, p99 ({runs} runs)"), ms(percentile(&starts, 0.99))),
    ])
}

/// The nearest-rank percentile of sorted values.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// One fan-in: the batch stored, then drained; (jobs/s, callback start).
async fn fanin_once<S: Storage>(storage: Arc<S>) -> Result<(f64, Duration), BoxError> {
    let plan = Batch::new(noop_jobs(0..FANIN_MEMBERS)?, NewJob::typed(&Noop { n: CALLBACK }).build()?).plan()?;
    storage.require_workflows()?.enqueue_workflow(&plan).await?;
    let base = Instant::now();
    // Nanoseconds after `base` when the last member's handler returned, and
    // when the callback's started.
    let last_member = Arc::new(AtomicU64::new(0));
    let callback_at = Arc::new(AtomicU64::new(0));
    let members = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(Notify::new());
    let (last, at, seen, notify) = (last_member.clone(), callback_at.clone(), members.clone(), done.clone());
    let since = move || u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let start = Instant::now();
    let pool = drain_pool(storage.clone())
        .register::<Noop, _, _>(move |job: Noop, _ctx: JobContext| {
            if job.n == CALLBACK {
                at.store(since(), Ordering::Relaxed);
                notify.notify_one();
            } else {
                seen.fetch_add(1, Ordering::Relaxed);
                last.fetch_max(since(), Ordering::Relaxed);
            }
            async { Ok(()) }
        })
        .start()?;
    done.notified().await;
    pool.shutdown().await?;
    let total = start.elapsed();
    let ran = members.load(Ordering::Relaxed);
    if ran != FANIN_MEMBERS {
        return Err(format!("fanin: the callback ran after {ran} of {FANIN_MEMBERS} members").into());
    }
    let info = storage.require_workflows()?.workflow(plan.id).await?;
    if info.counts.get(State::Completed) != FANIN_MEMBERS as u64 + 1 {
        return Err(format!("fanin: the workflow ended as {:?}", info.counts).into());
    }
    let gap = callback_at.load(Ordering::Relaxed).saturating_sub(last_member.load(Ordering::Relaxed));
    Ok(((FANIN_MEMBERS + 1) as f64 / total.as_secs_f64(), Duration::from_nanos(gap)))
}

/// [`WF_CHAINS`] chains of `WF_STEPS / WF_CHAINS` no-op steps.
fn chains() -> Result<WorkflowPlan, BoxError> {
    let per_chain = WF_STEPS / WF_CHAINS;
    let mut workflow = Workflow::new();
    for (i, job) in noop_jobs(0..WF_STEPS)?.into_iter().enumerate() {
        let (chain, link) = (i / per_chain, i % per_chain);
        let mut step = Step::new(format!("c{chain}s{link}"), job);
        if link > 0 {
            step = step.after([format!("c{chain}s{}", link - 1)]);
        }
        workflow = workflow.step(step);
    }
    Ok(workflow.plan()?)
}

/// `runs` runs of the plain batch enqueue of [`WF_STEPS`] jobs and the
/// enqueue of one workflow of as many steps, each on fresh storage; the
/// rows, or a skip message on a backend without workflows.
pub async fn wfenqueue<S, F, Fut>(backend: &str, runs: usize, mut fresh: F) -> Result<Vec<Row>, BoxError>
where
    S: Storage,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Fresh<S>, BoxError>>,
{
    let mut all: Vec<(f64, f64)> = Vec::with_capacity(runs);
    for run in 1..=runs {
        let first = fresh().await?;
        if let Some(message) = skipped(&first.storage, "wfenqueue", backend) {
            first.measure(|_| async { Ok(()) }).await?;
            eprintln!("{message}");
            return Ok(vec![("wfenqueue".to_owned(), "skipped: no workflows capability".to_owned())]);
        }
        let batch = first
            .measure(|s| async move {
                let batches: Vec<Vec<NewJob>> = (0..WF_STEPS / BATCH_SIZE)
                    .map(|b| noop_jobs(b * BATCH_SIZE..(b + 1) * BATCH_SIZE))
                    .collect::<Result<_, _>>()?;
                let start = Instant::now();
                for batch in batches {
                    s.enqueue(batch).await?;
                }
                Ok(WF_STEPS as f64 / start.elapsed().as_secs_f64())
            })
            .await?;
        let flow = fresh()
            .await?
            .measure(|s| async move {
                let plan = chains()?;
                let start = Instant::now();
                s.require_workflows()?.enqueue_workflow(&plan).await?;
                let rate = WF_STEPS as f64 / start.elapsed().as_secs_f64();
                let info = s.require_workflows()?.workflow(plan.id).await?;
                let expected = (WF_CHAINS as u64, (WF_STEPS - WF_CHAINS) as u64);
                if (info.counts.get(State::Pending), info.counts.get(State::Waiting)) != expected {
                    return Err(format!("wfenqueue: stored {:?}", info.counts).into());
                }
                Ok(rate)
            })
            .await?;
        eprintln!(
            "wfenqueue run {run}/{runs}: batch {batch:.0}/s, workflow {flow:.0}/s ({:.0}%)",
            100.0 * flow / batch
        );
        all.push((batch, flow));
    }
    let batch = median(all.iter().map(|r| r.0).collect());
    let flow = median(all.iter().map(|r| r.1).collect());
    let ratio = median(all.iter().map(|r| r.1 / r.0).collect());
    Ok(vec![
        (
            format!("batch enqueue ({WF_STEPS} jobs, {} calls of {BATCH_SIZE})", WF_STEPS / BATCH_SIZE),
            format!("{batch:.0} jobs/s"),
        ),
        (
            format!("workflow enqueue ({WF_STEPS} steps in {WF_CHAINS} chains, 1 call), median ratio"),
            format!("{flow:.0} steps/s ({:.0}%)", 100.0 * ratio),
        ),
    ])
}
