//! Workflows ([`WorkflowStorage`]): results stored with the ack, jobs that
//! wait for their parents and are released in the same atomic step that
//! finishes the last one, failure policies, operator retry, and a batch's
//! callback that runs exactly once, never early.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jq_core::storage::{CancelAnswer, Outcome, Settlement, Storage, StorageExt, WorkflowStorage};
use jq_core::workflow::WorkflowId;
use jq_core::workflow::{Batch, OnFailure, Step, Workflow, WorkflowPlan};
use jq_core::{Error, JobContext, JobFilter, JobId, ManualClock, Payload, State, StateCounts, WorkerPool};

use super::support::{LEASE, build, builder, claim, get, lease, manual_clock, settle, stats_as_listed};
use crate::Harness;

const QUEUE: &str = "flow";

fn flows<S: Storage>(storage: &S) -> &dyn WorkflowStorage {
    storage.require_workflows().expect("the backend declares workflows")
}

fn step(clock: &ManualClock, name: &str, n: usize) -> Step {
    Step::new(name, build(builder(QUEUE, n), clock))
}

fn batch(clock: &ManualClock, members: usize) -> WorkflowPlan {
    Batch::new((0..members).map(|i| build(builder(QUEUE, i), clock)), build(builder(QUEUE, 1000), clock))
        .plan()
        .expect("a valid batch")
}

async fn enqueue_plan<S: Storage>(storage: &S, plan: &WorkflowPlan) -> Vec<JobId> {
    let ids = flows(storage).enqueue_workflow(plan).await.expect("enqueue workflow");
    assert_eq!(ids, plan.ids(), "enqueue_workflow returns the steps' ids in step order");
    ids
}

/// `workflow(id)`'s counts (read from the backend's summary) equal the
/// states of `workflow_steps(id)` (read from the jobs): the summary is kept
/// in the same atomic step as every change of a step. Called after each
/// step of the scenarios.
async fn summary_agrees<S: Storage>(storage: &S, id: WorkflowId, after: &str) {
    let info = flows(storage).workflow(id).await.expect("workflow");
    let steps = flows(storage).workflow_steps(id).await.expect("workflow steps");
    let mut walked = StateCounts::default();
    for step in &steps {
        walked.add(step.state, 1);
    }
    assert_eq!(info.counts, walked, "after {after}: workflow(id) counts differ from its steps' states {steps:?}");
    assert_eq!(info.is_finished(), steps.iter().all(|s| s.state.is_terminal()), "after {after}: finished");
}

async fn state<S: Storage>(storage: &S, id: JobId) -> State {
    get(storage, id).await.state
}

/// Claims every claimable job of the queue (in one claim) and returns them
/// by id.
async fn claim_all<S: Storage>(storage: &S, worker: &str) -> HashMap<JobId, jq_core::Job> {
    claim(storage, &[QUEUE], 1000, worker).await.into_iter().map(|j| (j.id, j)).collect()
}

/// A workflow's steps are stored in one call: roots Pending, the others
/// Waiting (not claimable, counted and listed as Waiting, their parents
/// counted); a resend stores nothing twice; a plan the backend refuses
/// stores nothing.
pub async fn workflow_enqueue_stores_waiting_steps<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let plan = Workflow::new()
        .step(step(&clock, "a", 0))
        .step(step(&clock, "b", 1).after(["a"]))
        .step(step(&clock, "c", 2).after(["a"]))
        .step(
            Step::new("d", build(builder(QUEUE, 3).timeout(std::time::Duration::from_millis(1500)), &clock))
                .after(["b", "c"]),
        )
        .plan()
        .expect("valid");
    let ids = enqueue_plan(&storage, &plan).await;
    summary_agrees(&storage, plan.id, "enqueue").await;
    assert_eq!(state(&storage, ids[0]).await, State::Pending);
    let d = storage.get(ids[3]).await.expect("get d");
    assert_eq!(d.timeout, Some(std::time::Duration::from_millis(1500)), "a step keeps its own timeout");
    for id in &ids[1..] {
        assert_eq!(state(&storage, *id).await, State::Waiting, "a step with parents waits");
    }
    let again = flows(&storage).enqueue_workflow(&plan).await.expect("resend");
    assert_eq!(again, ids, "a resent workflow returns the stored ids");
    summary_agrees(&storage, plan.id, "a resend").await;
    let stats = stats_as_listed(&storage, "after a workflow enqueue").await;
    assert_eq!(stats.total(State::Waiting), 3);
    assert_eq!(stats.total(State::Pending), 1);
    let waiting =
        storage.list(&JobFilter { state: Some(State::Waiting), ..JobFilter::default() }).await.expect("list waiting");
    assert_eq!(waiting.iter().map(|j| j.id).collect::<Vec<_>>(), ids[1..].to_vec());

    let links = flows(&storage).links(ids[3]).await.expect("links");
    assert_eq!(links.workflow, Some(plan.id));
    assert_eq!(links.step.as_deref(), Some("d"));
    assert_eq!(links.parents.iter().map(|l| l.id).collect::<Vec<_>>(), vec![ids[1], ids[2]]);
    assert_eq!(links.unfinished_parents, 2);
    assert_eq!(flows(&storage).links(ids[0]).await.expect("links").children, vec![ids[1], ids[2]]);

    let claimed = claim_all(&storage, "w").await;
    assert_eq!(claimed.keys().copied().collect::<Vec<_>>(), vec![ids[0]], "only the root is claimable");
    summary_agrees(&storage, plan.id, "the root's claim").await;

    // A plan with one oversized payload stores nothing.
    let big =
        Payload::from_json(format!("{{\"x\":\"{}\"}}", "a".repeat(jq_core::DEFAULT_MAX_PAYLOAD_BYTES))).expect("json");
    let bad = Workflow::new()
        .step(step(&clock, "ok", 0))
        .step(Step::new("big", jq_core::NewJob::builder("test", big).queue(QUEUE).build_at(clock.now()).expect("job")))
        .plan()
        .expect("valid shape");
    let refused = flows(&storage).enqueue_workflow(&bad).await;
    assert!(matches!(refused, Err(Error::PayloadTooLarge { .. })), "{refused:?}");
    for id in bad.ids() {
        assert!(matches!(storage.get(id).await, Err(Error::NotFound { .. })), "nothing of a refused plan is stored");
    }
    assert!(matches!(flows(&storage).workflow(bad.id).await, Err(Error::WorkflowNotFound { .. })));
    // Cycles and unknown names never reach the store: the plan refuses them.
    let cycle = Workflow::new().step(step(&clock, "x", 0).after(["y"])).step(step(&clock, "y", 1).after(["x"])).plan();
    assert!(matches!(cycle, Err(Error::InvalidInput { .. })));
}

/// The callback of a batch runs exactly once, and never before every
/// member completed: members acked one by one leave it Waiting, and the
/// last two acked at the same instant on two connections release it once.
pub async fn workflow_batch_callback_once_when_last_two_race<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let other = h.connect(clock.clock()).await;
    for round in 0..5 {
        let plan = batch(&clock, 6);
        let ids = enqueue_plan(&storage, &plan).await;
        let callback = ids[6];
        summary_agrees(&storage, plan.id, "enqueue").await;
        let mut claimed = claim_all(&storage, "w").await;
        summary_agrees(&storage, plan.id, "the claim").await;
        assert_eq!(claimed.len(), 6, "round {round}: every member and not the callback");
        assert!(!claimed.contains_key(&callback));
        for id in &ids[..4] {
            let job = claimed.remove(id).expect("claimed");
            assert_eq!(settle(&storage, lease(&job), Outcome::Ack).await.expect("ack"), State::Completed);
            assert_eq!(state(&storage, callback).await, State::Waiting, "round {round}: a member is left");
            summary_agrees(&storage, plan.id, "a member's ack").await;
        }
        let (x, y) = (claimed.remove(&ids[4]).expect("claimed"), claimed.remove(&ids[5]).expect("claimed"));
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let (s1, s2) = (storage.clone(), other.clone());
        let (b1, b2) = (barrier.clone(), barrier.clone());
        let t1 = tokio::spawn(async move {
            b1.wait().await;
            settle(&s1, lease(&x), Outcome::Ack).await
        });
        let t2 = tokio::spawn(async move {
            b2.wait().await;
            settle(&s2, lease(&y), Outcome::Ack).await
        });
        assert_eq!(t1.await.expect("task").expect("ack"), State::Completed);
        assert_eq!(t2.await.expect("task").expect("ack"), State::Completed);
        assert_eq!(state(&storage, callback).await, State::Pending, "round {round}: released by the last ack");
        summary_agrees(&storage, plan.id, "the last two acks at once").await;
        assert_eq!(flows(&storage).links(callback).await.expect("links").unfinished_parents, 0);
        let took = claim_all(&other, "w2").await;
        assert_eq!(took.keys().copied().collect::<Vec<_>>(), vec![callback], "round {round}: the callback, once");
        assert!(claim_all(&storage, "w3").await.is_empty(), "round {round}: nothing else to claim");
        let job = &took[&callback];
        settle(&storage, lease(job), Outcome::Ack).await.expect("callback ack");
        summary_agrees(&storage, plan.id, "the callback's ack").await;
        let info = flows(&storage).workflow(plan.id).await.expect("workflow");
        assert!(info.is_finished() && info.is_succeeded(), "{info:?}");
    }
}

/// An ack whose answer was lost is sent again: the resend is LeaseLost
/// and changes nothing, the callback was released once, by the first. A
/// worker killed between a member's ack and anything after leaves nothing
/// to do: the callback is already claimable from any other connection; a
/// worker killed before its ack leaves the member to recover, and the
/// callback waits for its next run.
pub async fn workflow_lost_answer_and_killed_worker_release_once<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let plan = batch(&clock, 3);
    let ids = enqueue_plan(&storage, &plan).await;
    let callback = ids[3];
    let mut claimed = claim_all(&storage, "w").await;
    // Member 0: the ack took effect, its answer was lost, it is sent again.
    let m0 = claimed.remove(&ids[0]).expect("claimed");
    settle(&storage, lease(&m0), Outcome::Ack).await.expect("ack");
    let resent = settle(&storage, lease(&m0), Outcome::Ack).await;
    assert!(matches!(resent, Err(Error::LeaseLost { .. })), "a resent ack is LeaseLost: {resent:?}");
    assert_eq!(flows(&storage).links(callback).await.expect("links").unfinished_parents, 2, "counted once");
    summary_agrees(&storage, plan.id, "an ack sent twice").await;
    // Member 1: its worker dies before the ack; recover hands it on.
    let m1 = claimed.remove(&ids[1]).expect("claimed");
    drop(m1);
    clock.advance(LEASE);
    assert_eq!(storage.recover().await.expect("recover"), 2, "members 1 and 2 were held by the dead worker");
    summary_agrees(&storage, plan.id, "recover").await;
    assert_eq!(state(&storage, callback).await, State::Waiting);
    // A restarted worker runs 1 and 2; it dies right after acking 2.
    let restarted = h.connect(clock.clock()).await;
    let again = claim_all(&restarted, "w-restarted").await;
    assert_eq!(again.len(), 2);
    for job in again.values() {
        settle(&restarted, lease(job), Outcome::Ack).await.expect("ack");
    }
    drop(restarted);
    let fresh = h.connect(clock.clock()).await;
    summary_agrees(&fresh, plan.id, "the restarted worker's acks").await;
    assert_eq!(state(&fresh, callback).await, State::Pending, "released in the ack's own step");
    let took = claim_all(&fresh, "w-fresh").await;
    assert_eq!(took.keys().copied().collect::<Vec<_>>(), vec![callback]);
    assert!(claim_all(&fresh, "w-fresh").await.is_empty());
    summary_agrees(&fresh, plan.id, "the callback's claim").await;
}

/// A parent that fails and is retried does not release its child; its
/// later success releases it, once.
pub async fn workflow_retried_dependency_releases_children_once<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let plan = Workflow::new()
        .step(step(&clock, "parent", 0))
        .step(step(&clock, "child", 1).after(["parent"]))
        .plan()
        .expect("valid");
    let ids = enqueue_plan(&storage, &plan).await;
    let first = claim_all(&storage, "w").await.remove(&ids[0]).expect("parent");
    let nacked = settle(&storage, lease(&first), Outcome::Nack { error: "flaky".into(), delay: Duration::ZERO }).await;
    assert_eq!(nacked.expect("nack"), State::Pending);
    summary_agrees(&storage, plan.id, "a nack").await;
    assert_eq!(state(&storage, ids[1]).await, State::Waiting, "a retried parent does not release");
    let second = claim_all(&storage, "w").await;
    assert_eq!(second.keys().copied().collect::<Vec<_>>(), vec![ids[0]], "only the parent again");
    settle(&storage, lease(&second[&ids[0]]), Outcome::Ack).await.expect("ack");
    assert_eq!(state(&storage, ids[1]).await, State::Pending);
    let third = claim_all(&storage, "w").await;
    assert_eq!(third.keys().copied().collect::<Vec<_>>(), vec![ids[1]], "the child, once");
    settle(&storage, lease(&third[&ids[1]]), Outcome::Ack).await.expect("ack");
    assert!(claim_all(&storage, "w").await.is_empty());
    summary_agrees(&storage, plan.id, "the child's ack").await;
}

/// A dead parent cancels its dependents, recursively, naming it
/// (`cancelled_by`); a dependent under run-anyway runs. An operator's
/// retry of the dead parent brings back exactly the dependents its
/// failure cancelled, unless another failed parent still cancels them.
pub async fn workflow_dead_dependency_cancels_and_retry_restores<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let plan = Workflow::new()
        .step(step(&clock, "a", 0))
        .step(step(&clock, "x", 1))
        .step(step(&clock, "b", 2).after(["a"]))
        .step(step(&clock, "c", 3).after(["b"]))
        .step(step(&clock, "anyway", 4).after(["a"]).on_failure(OnFailure::RunAnyway))
        .step(step(&clock, "both", 5).after(["a", "x"]))
        .plan()
        .expect("valid");
    let ids = enqueue_plan(&storage, &plan).await;
    let by_name: HashMap<&str, JobId> = plan.steps.iter().map(|s| (s.name.as_str(), s.job.id)).collect();
    let id = |name: &str| by_name[name];
    let mut roots = claim_all(&storage, "w").await;
    assert_eq!(roots.len(), 2);
    let a = roots.remove(&id("a")).expect("a");
    assert_eq!(settle(&storage, lease(&a), Outcome::Bury { error: "broken".into() }).await.expect("bury"), State::Dead);
    summary_agrees(&storage, plan.id, "a bury that cascades").await;
    for name in ["b", "c", "both"] {
        assert_eq!(state(&storage, id(name)).await, State::Cancelled, "{name} is cancelled with a");
    }
    let links = |name: &'static str| {
        let storage = storage.clone();
        let target = id(name);
        async move { flows(&storage).links(target).await.expect("links") }
    };
    assert_eq!(links("b").await.cancelled_by, Some(id("a")));
    assert_eq!(links("c").await.cancelled_by, Some(id("b")), "cancelled down the chain, naming its own parent");
    assert_eq!(links("both").await.cancelled_by, Some(id("a")));
    assert_eq!(state(&storage, id("anyway")).await, State::Pending, "run-anyway runs");
    // x dies too: `both` stays cancelled (by a).
    let x = roots.remove(&id("x")).expect("x");
    settle(&storage, lease(&x), Outcome::Bury { error: "broken too".into() }).await.expect("bury");
    summary_agrees(&storage, plan.id, "a second bury").await;
    assert_eq!(links("both").await.cancelled_by, Some(id("a")));

    storage.retry(id("a")).await.expect("retry");
    summary_agrees(&storage, plan.id, "a retry that restores").await;
    assert_eq!(state(&storage, id("a")).await, State::Pending);
    assert_eq!(state(&storage, id("b")).await, State::Waiting, "brought back by the retry");
    assert_eq!(state(&storage, id("c")).await, State::Waiting, "and its own dependents");
    assert_eq!(links("b").await.cancelled_by, None);
    assert_eq!(get(&storage, id("b")).await.finished_at, None);
    assert_eq!(state(&storage, id("both")).await, State::Cancelled, "x still cancels it");
    assert_eq!(links("both").await.cancelled_by, Some(id("x")), "now by x");
    assert_eq!(state(&storage, id("anyway")).await, State::Pending, "a released dependent is left as it is");

    // a succeeds now: b, then c, run; `anyway` was released once only.
    let mut runs: HashMap<JobId, u32> = HashMap::new();
    for _ in 0..4 {
        for (jid, job) in claim_all(&storage, "w").await {
            *runs.entry(jid).or_default() += 1;
            settle(&storage, lease(&job), Outcome::Ack).await.expect("ack");
        }
        summary_agrees(&storage, plan.id, "a round of acks").await;
    }
    for name in ["a", "b", "c", "anyway"] {
        assert_eq!(runs.get(&id(name)), Some(&1), "{name} ran once: {runs:?}");
        assert_eq!(state(&storage, id(name)).await, State::Completed);
    }
    storage.retry(id("x")).await.expect("retry x");
    summary_agrees(&storage, plan.id, "the retry of x").await;
    assert_eq!(state(&storage, id("both")).await, State::Waiting, "no failed parent is left");
    let x = claim_all(&storage, "w").await.remove(&id("x")).expect("x again");
    settle(&storage, lease(&x), Outcome::Ack).await.expect("ack");
    assert_eq!(state(&storage, id("both")).await, State::Pending);
    let info = flows(&storage).workflow(plan.id).await.expect("workflow");
    assert_eq!(info.counts.get(State::Completed), 5);
    assert_eq!(info.counts.get(State::Pending), 1);
    assert!(!info.is_finished());
    let steps = flows(&storage).workflow_steps(plan.id).await.expect("steps");
    assert_eq!(steps.iter().map(|s| s.id).collect::<Vec<_>>(), ids);
}

/// Cancelling a waiting step, or a parent, cancels the dependents with it;
/// a dead parent reached through recover (lease expired on the last
/// attempt) cancels them as a bury does.
pub async fn workflow_cancel_and_recover_cascade<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let plan = Workflow::new()
        .step(step(&clock, "root", 0))
        .step(step(&clock, "mid", 1).after(["root"]))
        .step(step(&clock, "leaf", 2).after(["mid"]))
        .plan()
        .expect("valid");
    let ids = enqueue_plan(&storage, &plan).await;
    storage.cancel(ids[1]).await.expect("a waiting job can be cancelled");
    summary_agrees(&storage, plan.id, "the cancel of a waiting step").await;
    assert_eq!(state(&storage, ids[1]).await, State::Cancelled);
    assert_eq!(state(&storage, ids[2]).await, State::Cancelled);
    let leaf = flows(&storage).links(ids[2]).await.expect("links");
    assert_eq!(leaf.cancelled_by, Some(ids[1]));
    assert_eq!(flows(&storage).links(ids[1]).await.expect("links").cancelled_by, None, "an operator's cancel");
    storage.cancel(ids[0]).await.expect("cancel the root");
    summary_agrees(&storage, plan.id, "the cancel of a pending root").await;
    assert_eq!(flows(&storage).links(ids[2]).await.expect("links").cancelled_by, Some(ids[1]), "left as it was");

    let plan = Workflow::new()
        .step(Step::new("root", build(builder(QUEUE, 0).max_attempts(1), &clock)))
        .step(step(&clock, "child", 1).after(["root"]))
        .plan()
        .expect("valid");
    let ids = enqueue_plan(&storage, &plan).await;
    let _held = claim_all(&storage, "dies").await;
    clock.advance(LEASE);
    assert_eq!(storage.recover().await.expect("recover"), 1);
    summary_agrees(&storage, plan.id, "recover to Dead").await;
    assert_eq!(state(&storage, ids[0]).await, State::Dead);
    assert_eq!(state(&storage, ids[1]).await, State::Cancelled, "recover to Dead cascades");
    assert_eq!(flows(&storage).links(ids[1]).await.expect("links").cancelled_by, Some(ids[0]));

    // A cancel request reaching a parent before it started ends it at once,
    // as `cancel` does: its dependents follow by their policies.
    if let Some(cancels) = storage.capabilities().cancellation {
        let plan = Workflow::new()
            .step(step(&clock, "root", 0))
            .step(step(&clock, "follows", 1).after(["root"]))
            .step(step(&clock, "anyway", 2).after(["root"]).on_failure(OnFailure::RunAnyway))
            .plan()
            .expect("valid");
        let ids = enqueue_plan(&storage, &plan).await;
        assert_eq!(cancels.request_cancel(ids[0], "not wanted").await.expect("cancel"), CancelAnswer::Cancelled);
        summary_agrees(&storage, plan.id, "a cancel request of a pending root").await;
        assert_eq!(state(&storage, ids[1]).await, State::Cancelled, "cancelled with its parent");
        assert_eq!(flows(&storage).links(ids[1]).await.expect("links").cancelled_by, Some(ids[0]));
        assert_eq!(state(&storage, ids[2]).await, State::Pending, "run_anyway: released");

        // A Waiting step is not finished: a cancel request ends it as
        // `cancel` does (what `Client::cancel` and `jqctl cancel` call).
        let plan = Workflow::new()
            .step(step(&clock, "root", 0))
            .step(step(&clock, "waits", 1).after(["root"]))
            .step(step(&clock, "below", 2).after(["waits"]))
            .plan()
            .expect("valid");
        let ids = enqueue_plan(&storage, &plan).await;
        assert_eq!(cancels.request_cancel(ids[1], "not wanted").await.expect("cancel"), CancelAnswer::Cancelled);
        summary_agrees(&storage, plan.id, "a cancel request of a waiting step").await;
        assert_eq!(state(&storage, ids[1]).await, State::Cancelled);
        assert_eq!(flows(&storage).links(ids[1]).await.expect("links").cancelled_by, None, "an operator's cancel");
        assert_eq!(state(&storage, ids[2]).await, State::Cancelled, "its dependents follow");
        assert_eq!(flows(&storage).links(ids[2]).await.expect("links").cancelled_by, Some(ids[1]));
        assert_eq!(state(&storage, ids[0]).await, State::Pending, "its parent is untouched");
        assert_eq!(
            cancels.request_cancel(ids[1], "again").await.expect("resend"),
            CancelAnswer::Finished(State::Cancelled)
        );
    }
}

/// A result is stored with its ack and read back; a child reads its
/// parents' results; a job without one reads `None`.
pub async fn workflow_results_are_stored_with_the_ack<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let plan = Workflow::new()
        .step(step(&clock, "left", 0))
        .step(step(&clock, "right", 1))
        .step(step(&clock, "join", 2).after(["left", "right"]))
        .plan()
        .expect("valid");
    let ids = enqueue_plan(&storage, &plan).await;
    let claimed = claim_all(&storage, "w").await;
    let result = Payload::from_json(r#"{"rows":42,"name":"ünï"}"#).expect("json");
    let acked = settle(&storage, lease(&claimed[&ids[0]]), Outcome::AckWith { result: result.clone() }).await;
    assert_eq!(acked.expect("ack with a result"), State::Completed);
    assert_eq!(state(&storage, ids[2]).await, State::Waiting);
    settle(&storage, lease(&claimed[&ids[1]]), Outcome::Ack).await.expect("ack");
    summary_agrees(&storage, plan.id, "acks with and without a result").await;
    let stored = flows(&storage).result(ids[0]).await.expect("result").expect("a result");
    let value = |p: &Payload| serde_json::from_str::<serde_json::Value>(p.as_str()).expect("json");
    assert_eq!(value(&stored), value(&result));
    assert_eq!(flows(&storage).result(ids[1]).await.expect("result"), None);
    let parents = flows(&storage).parent_results(ids[2]).await.expect("parent results");
    assert_eq!(parents.iter().map(|p| p.step.as_str()).collect::<Vec<_>>(), ["left", "right"]);
    assert_eq!(parents[0].result.as_ref().map(value), Some(value(&result)));
    assert!(parents.iter().all(|p| p.state == State::Completed));
    assert_eq!(parents[1].result, None);
    let unknown = JobId::new();
    assert!(matches!(flows(&storage).result(unknown).await, Err(Error::NotFound { .. })));
    assert!(matches!(flows(&storage).links(unknown).await, Err(Error::NotFound { .. })));

    // One batch holding an ack with a result and a cancel: each item gets
    // its own outcome (PostgreSQL settles such a batch by another statement).
    if storage.capabilities().cancellation.is_some() {
        let ids = storage
            .enqueue(vec![build(builder(QUEUE, 10), &clock), build(builder(QUEUE, 11), &clock)])
            .await
            .expect("enqueue");
        let claimed = claim_all(&storage, "w").await;
        let answers = storage
            .settle(vec![
                Settlement { lease: lease(&claimed[&ids[0]]), outcome: Outcome::AckWith { result: result.clone() } },
                Settlement { lease: lease(&claimed[&ids[1]]), outcome: Outcome::Cancel },
            ])
            .await
            .expect("settle");
        let states: Vec<State> = answers.into_iter().map(|a| a.expect("settled")).collect();
        assert_eq!(states, [State::Completed, State::Cancelled]);
        assert_eq!(state(&storage, ids[1]).await, State::Cancelled);
        stats_as_listed(&storage, "after a batch with a result and a cancel").await;
    }
}

/// A real worker pool runs a batch: members set results, the callback
/// reads them from its context and runs exactly once, after every member;
/// a result over the pool's cap is refused with a typed error.
pub async fn workflow_pool_runs_a_batch_with_results<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let plan = batch(&clock, 8);
    let callback = *plan.ids().last().expect("a callback");
    let runs: Arc<Mutex<Vec<JobId>>> = Arc::default();
    let seen: Arc<Mutex<Option<Vec<i64>>>> = Arc::default();
    let refused: Arc<Mutex<Option<String>>> = Arc::default();
    let (r, s, f) = (runs.clone(), seen.clone(), refused.clone());
    let pool = WorkerPool::new(storage.clone())
        .queues([QUEUE])
        .concurrency(4)
        .poll_interval(Duration::from_millis(5))
        .maintenance(false)
        .max_result_bytes(64)
        .register_raw("test", move |job: jq_core::Job, ctx: JobContext| {
            let (r, s, f) = (r.clone(), s.clone(), f.clone());
            async move {
                r.lock().unwrap_or_else(|p| p.into_inner()).push(job.id);
                if job.id == callback {
                    let parents = ctx.parent_results().await.map_err(jq_core::HandlerError::nack)?;
                    let values: Vec<i64> =
                        parents.iter().filter_map(|p| p.result.as_ref().and_then(|r| r.decode::<i64>().ok())).collect();
                    *s.lock().unwrap_or_else(|p| p.into_inner()) = Some(values);
                } else {
                    let n: serde_json::Value = job.payload.decode().map_err(jq_core::HandlerError::bury)?;
                    if let Err(e) = ctx.set_result(&"x".repeat(100)) {
                        *f.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("{e:?}"));
                    }
                    ctx.set_result(&n["n"].as_i64().unwrap_or(-1)).map_err(jq_core::HandlerError::nack)?;
                }
                Ok(())
            }
        })
        .start()
        .expect("pool starts");
    let ids = enqueue_plan(&storage, &plan).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while state(&storage, callback).await != State::Completed {
        assert!(Instant::now() < deadline, "the callback never completed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    pool.shutdown().await.expect("pool stops");
    summary_agrees(&storage, plan.id, "a pool's run").await;
    let runs = runs.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(runs.len(), 9, "each job ran once: {runs:?}");
    assert_eq!(runs.last(), Some(&callback), "the callback ran last");
    assert_eq!(seen.lock().unwrap_or_else(|p| p.into_inner()).clone(), Some((0..8).collect::<Vec<i64>>()));
    let refusal = refused.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_default();
    assert!(refusal.contains("ResultTooLarge"), "{refusal}");
    for id in &ids[..8] {
        assert!(flows(&storage).result(*id).await.expect("result").is_some());
    }
}

/// Purge takes a step's result and place with it: gone from its parent's
/// children, its child's parent results and the workflow's steps and
/// counts, while the child keeps the edge and the workflow stays known.
pub async fn workflow_purge_takes_results_and_steps_with_it<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let plan = Workflow::new()
        .step(step(&clock, "first", 0))
        .step(step(&clock, "second", 1).after(["first"]))
        .plan()
        .expect("valid");
    let ids = enqueue_plan(&storage, &plan).await;
    let first = claim_all(&storage, "w").await.remove(&ids[0]).expect("first");
    let result = Payload::from_json(r#"{"ok":true}"#).expect("json");
    settle(&storage, lease(&first), Outcome::AckWith { result }).await.expect("ack");
    clock.advance(Duration::from_secs(1));
    assert_eq!(storage.purge(State::Completed, clock.now()).await.expect("purge"), 1);
    summary_agrees(&storage, plan.id, "purge").await;
    assert!(matches!(flows(&storage).result(ids[0]).await, Err(Error::NotFound { .. })));
    let links = flows(&storage).links(ids[1]).await.expect("links");
    assert_eq!(links.parents.iter().map(|p| p.id).collect::<Vec<_>>(), vec![ids[0]], "the edge stays");
    assert_eq!(links.unfinished_parents, 0);
    assert!(flows(&storage).parent_results(ids[1]).await.expect("parent results").is_empty());
    let info = flows(&storage).workflow(plan.id).await.expect("the workflow stays known");
    assert_eq!((info.counts.total(), info.counts.get(State::Pending)), (1, 1));
    let steps = flows(&storage).workflow_steps(plan.id).await.expect("steps");
    assert_eq!(steps.iter().map(|s| s.id).collect::<Vec<_>>(), vec![ids[1]]);
    assert_eq!(steps[0].parents, vec![ids[0]]);
}

/// The workflow's counts follow every kind of change of a step, each read
/// right after it: a Scheduled root promoted, a release, a nack with a
/// delay (Scheduled) and its promotion, an operator's cancel of a Pending
/// step (its dependents cancelled with it), a running step cancelled by its
/// handler's outcome where the backend has the capability, and the ack
/// that finishes the workflow.
pub async fn workflow_counts_follow_every_change<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let later = |n: usize, secs: u64| build(builder(QUEUE, n).delay(Duration::from_secs(secs)), &clock);
    let plan = Workflow::new()
        .step(Step::new("late", later(0, 10)))
        .step(step(&clock, "soon", 1))
        .step(step(&clock, "other", 2))
        .step(step(&clock, "after_late", 3).after(["late"]))
        .step(step(&clock, "after_other", 4).after(["other"]))
        .plan()
        .expect("valid");
    let ids = enqueue_plan(&storage, &plan).await;
    summary_agrees(&storage, plan.id, "enqueue with a Scheduled root").await;
    assert_eq!(state(&storage, ids[0]).await, State::Scheduled);
    clock.advance(Duration::from_secs(10));
    assert_eq!(storage.promote().await.expect("promote"), 1);
    summary_agrees(&storage, plan.id, "promote").await;
    let claimed = claim_all(&storage, "w").await;
    assert_eq!(claimed.len(), 3, "the three roots");
    summary_agrees(&storage, plan.id, "the roots' claim").await;
    settle(&storage, lease(&claimed[&ids[0]]), Outcome::Release { delay: Duration::ZERO }).await.expect("release");
    summary_agrees(&storage, plan.id, "a release").await;
    let nacked = settle(
        &storage,
        lease(&claimed[&ids[1]]),
        Outcome::Nack { error: "later".into(), delay: Duration::from_secs(5) },
    )
    .await
    .expect("nack");
    assert_eq!(nacked, State::Scheduled);
    summary_agrees(&storage, plan.id, "a nack with a delay").await;
    settle(&storage, lease(&claimed[&ids[2]]), Outcome::Ack).await.expect("ack");
    summary_agrees(&storage, plan.id, "an ack that releases a child").await;
    if storage.capabilities().cancellation.is_some() {
        let again = claim_all(&storage, "w").await;
        assert_eq!(again.len(), 2, "late, released, and after_other");
        summary_agrees(&storage, plan.id, "a second claim").await;
        assert_eq!(settle(&storage, lease(&again[&ids[0]]), Outcome::Cancel).await.expect("cancel"), State::Cancelled);
        summary_agrees(&storage, plan.id, "a running step cancelled, its child with it").await;
        settle(&storage, lease(&again[&ids[4]]), Outcome::Ack).await.expect("ack");
    } else {
        storage.cancel(ids[0]).await.expect("cancel a pending step");
        summary_agrees(&storage, plan.id, "a pending step cancelled, its child with it").await;
        let again = claim_all(&storage, "w").await;
        settle(&storage, lease(&again[&ids[4]]), Outcome::Ack).await.expect("ack");
    }
    assert_eq!(state(&storage, ids[3]).await, State::Cancelled);
    summary_agrees(&storage, plan.id, "the last child's ack").await;
    clock.advance(Duration::from_secs(5));
    assert_eq!(storage.promote().await.expect("promote"), 1);
    summary_agrees(&storage, plan.id, "the promotion of a nacked step").await;
    let last = claim_all(&storage, "w").await;
    assert_eq!(last.keys().copied().collect::<Vec<_>>(), vec![ids[1]]);
    settle(&storage, lease(&last[&ids[1]]), Outcome::Ack).await.expect("ack");
    summary_agrees(&storage, plan.id, "the last ack").await;
    let info = flows(&storage).workflow(plan.id).await.expect("workflow");
    assert!(info.is_finished() && !info.is_succeeded(), "{info:?}");
    assert_eq!((info.counts.get(State::Completed), info.counts.get(State::Cancelled)), (3, 2));
}
