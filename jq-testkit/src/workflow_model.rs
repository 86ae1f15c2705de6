//! The workflow property suite: a random DAG of up to 50 steps (random
//! parents and failure policies), a random script of outcomes per step
//! (success with a result, retry, failure, release, a worker killed before
//! its outcome), random operator cancels and retries between rounds, run on
//! the backend and on a fresh [`MemoryStorage`] side by side on one manual
//! clock. After every round the states, attempts, results and links of
//! every step must be the same on both sides; at the end every step is
//! terminal or, Cancelled parents aside, claimable work is none left.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::time::Duration;

use jq_core::storage::{ClaimRequest, Outcome, Settlement, Storage, StorageExt, WorkflowStorage};
use jq_core::workflow::{OnFailure, Step, Workflow, WorkflowPlan};
use jq_core::{Error, JobId, ManualClock, NewJob, Payload, QueueName, State};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};

use crate::__private::harness;
use crate::{Harness, IntoHarness, MemoryStorage};

/// Cases per run unless `PROPTEST_CASES` says otherwise.
pub const DEFAULT_CASES: u32 = 16;

const QUEUE: &str = "dag";
const LEASE: Duration = Duration::from_secs(10);
const ROUNDS: usize = 120;

/// What one run of a step does.
#[derive(Clone, Copy, Debug)]
pub enum Run {
    /// Ack with the result `{"step": i, "run": n}`.
    Succeed,
    /// Nack with no delay (Dead when no attempt is left).
    Retry,
    /// Bury.
    Fail,
    /// Release without counting the attempt.
    Release,
    /// The worker dies before any outcome: recover hands the job on.
    Crash,
}

/// One generated step.
#[derive(Clone, Debug)]
pub struct StepSpec {
    /// Picks among the earlier steps (deduplicated).
    pub parents: Vec<Index>,
    /// Run anyway when a parent fails.
    pub run_anyway: bool,
    /// 1 to 3 attempts.
    pub max_attempts: u32,
    /// Its runs in order; once used up, it succeeds.
    pub runs: Vec<Run>,
}

/// An operator's action between rounds.
#[derive(Clone, Debug)]
pub enum Admin {
    /// Nothing this round.
    Nothing,
    /// cancel() of a step.
    Cancel(Index),
    /// retry() of a step.
    Retry(Index),
}

/// One generated case.
#[derive(Clone, Debug)]
pub struct Case {
    /// The steps, parents before children.
    pub steps: Vec<StepSpec>,
    /// One per round, cycled.
    pub admin: Vec<Admin>,
}

fn run() -> impl Strategy<Value = Run> {
    prop_oneof![
        5 => Just(Run::Succeed),
        2 => Just(Run::Retry),
        1 => Just(Run::Fail),
        1 => Just(Run::Release),
        1 => Just(Run::Crash),
    ]
}

fn step() -> impl Strategy<Value = StepSpec> {
    (prop::collection::vec(any::<Index>(), 0..=3), any::<bool>(), 1u32..=3, prop::collection::vec(run(), 0..=3))
        .prop_map(|(parents, run_anyway, max_attempts, runs)| StepSpec { parents, run_anyway, max_attempts, runs })
}

fn admin() -> impl Strategy<Value = Admin> {
    prop_oneof![
        6 => Just(Admin::Nothing),
        1 => any::<Index>().prop_map(Admin::Cancel),
        2 => any::<Index>().prop_map(Admin::Retry),
    ]
}

/// The generator of one case: up to 50 steps.
pub fn case() -> impl Strategy<Value = Case> {
    (prop::collection::vec(step(), 1..=50), prop::collection::vec(admin(), 1..=8))
        .prop_map(|(steps, admin)| Case { steps, admin })
}

/// Runs the suite against harnesses made by `setup` (one per case).
pub fn check<H, F, Fut>(setup: F)
where
    H: Harness,
    F: Fn() -> Fut,
    Fut: Future,
    Fut::Output: IntoHarness<Harness = H>,
{
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_CASES);
    let config = Config { cases, max_shrink_iters: 256, failure_persistence: None, ..Config::default() };
    let runtime = crate::__private::runtime();
    let mut runner = TestRunner::new(config);
    let result = runner.run(&case(), |case| {
        runtime.block_on(async {
            let h = harness(setup()).await.expect("the backend was reachable when the test began");
            match run_case(&h, &case).await {
                Ok(()) => {
                    h.cleanup().await;
                    Ok(())
                }
                Err(message) => Err(TestCaseError::fail(message)),
            }
        })
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, case)) => {
            panic!("the backend disagrees with the reference model on a workflow: {reason}\nsmallest case: {case:#?}")
        }
        Err(TestError::Abort(reason)) => panic!("workflow property suite aborted: {reason}"),
    }
}

/// The plan of a case: step `i` named `s{i}`, parents among earlier steps.
fn plan(case: &Case, clock: &ManualClock) -> Result<WorkflowPlan, String> {
    let mut workflow = Workflow::new();
    for (i, spec) in case.steps.iter().enumerate() {
        let payload = Payload::from_json(format!(r#"{{"step":{i}}}"#)).map_err(|e| e.to_string())?;
        let job = NewJob::builder("dag", payload)
            .queue(QUEUE)
            .max_attempts(spec.max_attempts)
            .build_at(clock.now())
            .map_err(|e| e.to_string())?;
        let mut parents: Vec<usize> =
            if i == 0 { Vec::new() } else { spec.parents.iter().map(|p| p.index(i)).collect() };
        parents.sort_unstable();
        parents.dedup();
        let policy = if spec.run_anyway { OnFailure::RunAnyway } else { OnFailure::Cancel };
        workflow = workflow.step(
            Step::new(format!("s{i}"), job).after(parents.into_iter().map(|p| format!("s{p}"))).on_failure(policy),
        );
    }
    workflow.plan().map_err(|e| e.to_string())
}

/// What both sides must agree on for one job.
#[derive(Debug, PartialEq)]
struct Seen {
    state: State,
    attempts: u32,
    errors: usize,
    result: Option<serde_json::Value>,
    unfinished: u32,
    cancelled_by: Option<JobId>,
}

async fn seen<S: Storage>(storage: &S, ids: &[JobId]) -> Result<BTreeMap<JobId, Seen>, String> {
    let flows = storage.require_workflows().map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for id in ids {
        let job = storage.get(*id).await.map_err(|e| format!("get {id}: {e}"))?;
        let result = flows.result(*id).await.map_err(|e| format!("result {id}: {e}"))?;
        let links = flows.links(*id).await.map_err(|e| format!("links {id}: {e}"))?;
        let result = result.map(|r| serde_json::from_str(r.as_str()).unwrap_or(serde_json::Value::Null));
        out.insert(
            *id,
            Seen {
                state: job.state,
                attempts: job.attempts,
                errors: job.errors.len(),
                result,
                unfinished: links.unfinished_parents,
                cancelled_by: links.cancelled_by,
            },
        );
    }
    Ok(out)
}

fn err_kind(e: &Error) -> String {
    match e {
        Error::InvalidState { state, .. } => format!("InvalidState({state})"),
        other => format!("{other:?}").chars().take(40).collect(),
    }
}

async fn run_case<H: Harness>(h: &H, case: &Case) -> Result<(), String> {
    let clock = ManualClock::starting_now();
    let backend = h.connect(clock.clock()).await;
    let model = MemoryStorage::new().clock(clock.clock());
    let plan = plan(case, &clock)?;
    let ids = plan.ids();
    let index: BTreeMap<JobId, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let b = backend.require_workflows().map_err(|e| e.to_string())?.enqueue_workflow(&plan).await;
    let m = model.enqueue_workflow(&plan).await;
    if b.as_ref().map_err(err_kind) != m.as_ref().map_err(err_kind) {
        return Err(format!("enqueue_workflow: backend {b:?}, model {m:?}"));
    }
    let mut scripts: Vec<VecDeque<Run>> = case.steps.iter().map(|s| s.runs.iter().copied().collect()).collect();
    let mut log = String::new();
    let queues = vec![QueueName::new(QUEUE).map_err(|e| e.to_string())?];
    for round in 0..ROUNDS {
        let request = ClaimRequest::new(queues.clone(), 1000, LEASE, format!("w{round}"));
        let mut bj = backend.claim(&request).await.map_err(|e| format!("claim: {e}"))?.jobs;
        let mut mj = model.claim(&request).await.map_err(|e| format!("model claim: {e}"))?.jobs;
        bj.sort_by_key(|j| j.id);
        mj.sort_by_key(|j| j.id);
        let b_ids: Vec<JobId> = bj.iter().map(|j| j.id).collect();
        let m_ids: Vec<JobId> = mj.iter().map(|j| j.id).collect();
        if b_ids != m_ids {
            return Err(format!("round {round}: claimed {b_ids:?} on the backend, {m_ids:?} in the model\n{log}"));
        }
        let mut batch = Vec::new();
        let mut crashed = false;
        for job in &bj {
            let Some(lease) = job.lease_ref() else { return Err(format!("claimed job {} has no lease", job.id)) };
            let i = index.get(&job.id).copied().unwrap_or(0);
            let run = scripts[i].pop_front().unwrap_or(Run::Succeed);
            log.push_str(&format!("round {round}: s{i} {run:?}\n"));
            let outcome = match run {
                Run::Succeed => Outcome::AckWith {
                    result: Payload::from_json(format!(r#"{{"step":{i},"round":{round}}}"#))
                        .map_err(|e| e.to_string())?,
                },
                Run::Retry => Outcome::Nack { error: format!("retry in round {round}"), delay: Duration::ZERO },
                Run::Fail => Outcome::Bury { error: format!("failed in round {round}") },
                Run::Release => Outcome::Release { delay: Duration::ZERO },
                Run::Crash => {
                    crashed = true;
                    continue;
                }
            };
            batch.push(Settlement { lease, outcome });
        }
        let br = backend.settle(batch.clone()).await.map_err(|e| format!("settle: {e}"))?;
        let mr = model.settle(batch).await.map_err(|e| format!("model settle: {e}"))?;
        let br: Vec<_> = br.iter().map(|r| r.as_ref().map_err(err_kind)).collect();
        let mr: Vec<_> = mr.iter().map(|r| r.as_ref().map_err(err_kind)).collect();
        if br != mr {
            return Err(format!("round {round}: settle gave {br:?} on the backend, {mr:?} in the model\n{log}"));
        }
        if crashed {
            clock.advance(LEASE);
            let (b, m) = (backend.recover().await, model.recover().await);
            if b.as_ref().map_err(err_kind) != m.as_ref().map_err(err_kind) {
                return Err(format!("round {round}: recover {b:?} on the backend, {m:?} in the model\n{log}"));
            }
        }
        let admin = &case.admin[round % case.admin.len()];
        match admin {
            Admin::Nothing => {}
            Admin::Cancel(i) => {
                let id = *i.get(&ids);
                log.push_str(&format!("round {round}: cancel s{}\n", index[&id]));
                let (b, m) = (backend.cancel(id).await, model.cancel(id).await);
                if b.as_ref().map_err(err_kind) != m.as_ref().map_err(err_kind) {
                    return Err(format!("round {round}: cancel {b:?} on the backend, {m:?} in the model\n{log}"));
                }
            }
            Admin::Retry(i) => {
                let id = *i.get(&ids);
                log.push_str(&format!("round {round}: retry s{}\n", index[&id]));
                let (b, m) = (backend.retry(id).await, model.retry(id).await);
                if b.as_ref().map_err(err_kind) != m.as_ref().map_err(err_kind) {
                    return Err(format!("round {round}: retry {b:?} on the backend, {m:?} in the model\n{log}"));
                }
            }
        }
        let (bs, ms) = (seen(&backend, &ids).await?, seen(&model, &ids).await?);
        if bs != ms {
            let diff: Vec<String> = bs
                .iter()
                .zip(&ms)
                .filter(|(x, y)| x != y)
                .take(3)
                .map(|((id, x), (_, y))| format!("s{}: backend {x:?}\n      model {y:?}", index[id]))
                .collect();
            return Err(format!("round {round}: steps differ:\n{}\n{log}", diff.join("\n")));
        }
        let (bi, mi) = (
            backend.require_workflows().map_err(|e| e.to_string())?.workflow(plan.id).await,
            model.workflow(plan.id).await,
        );
        if bi.as_ref().map_err(err_kind) != mi.as_ref().map_err(err_kind) {
            return Err(format!("round {round}: workflow counts {bi:?} on the backend, {mi:?} in the model\n{log}"));
        }
        if ms.values().all(|s| s.state.is_terminal()) && matches!(admin, Admin::Nothing) {
            break;
        }
    }
    // No step may be stuck: every one is terminal, or Waiting only behind
    // a parent that is not terminal (never the case at the end), or
    // claimable.
    let end = seen(&model, &ids).await?;
    for (id, s) in &end {
        if s.state == State::Waiting && s.unfinished == 0 {
            return Err(format!("s{} is Waiting with no unfinished parent\n{log}", index[id]));
        }
    }
    Ok(())
}
