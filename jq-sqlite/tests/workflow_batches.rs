//! SQLite's batched workflow writes: a workflow's nodes and edges stored
//! many rows per INSERT (full chunks and a last partial one), and the
//! children of the parents one settle call completes released together
//! (a child counted down once per call, by how many of its parents
//! completed in it). The conformance kit's workflows are smaller than one
//! chunk; these are not.
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::collections::BTreeMap;
use std::time::Duration;

use jq_core::storage::{ClaimRequest, Outcome, Settlement, Storage, StorageExt};
use jq_core::workflow::{Batch, OnFailure, Step, Workflow};
use jq_core::{Job, JobId, ManualClock, NewJob, Payload, Priority, QueueName, State};
use jq_sqlite::{SqliteConfig, SqliteStorage};

fn job(clock: &ManualClock, n: usize) -> NewJob {
    NewJob::builder("k", Payload::from_json(format!(r#"{{"n":{n}}}"#)).unwrap())
        .queue("wf")
        .build_at(clock.now())
        .unwrap()
}

fn open(dir: &tempfile::TempDir, clock: &ManualClock) -> SqliteStorage {
    SqliteStorage::open(SqliteConfig::new(dir.path().join("jobs.db")).clock(clock.clock())).unwrap()
}

async fn claim_all(s: &SqliteStorage) -> BTreeMap<JobId, Job> {
    let request = ClaimRequest::new(vec![QueueName::new("wf").unwrap()], 10_000, Duration::from_secs(60), "w");
    s.claim(&request).await.unwrap().jobs.into_iter().map(|j| (j.id, j)).collect()
}

async fn state(s: &SqliteStorage, id: JobId) -> State {
    s.get(id).await.unwrap().state
}

/// 130 members and a callback: 131 nodes and 130 edges, two full chunks
/// of each and a partial one. Members acked in settle calls of 100, 29 and
/// 1: the callback's count goes 130 -> 30 -> 1 -> 0.
#[tokio::test]
async fn a_large_batch_is_stored_whole_and_released_per_settle_call() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::starting_now();
    let s = open(&dir, &clock);
    // Members vary in what a row holds, so that a row of a multi-row
    // INSERT put in the wrong place would show.
    let members: Vec<NewJob> = (0..130)
        .map(|i| {
            let b = NewJob::builder(format!("k{}", i % 3), Payload::from_json(format!(r#"{{"n":{i}}}"#)).unwrap())
                .queue("wf")
                .max_attempts(1 + (i % 5) as u32)
                .priority(if i % 2 == 0 { Priority::High } else { Priority::Normal });
            let b = if i % 4 == 0 { b.timeout(Duration::from_millis(1000 + i as u64)) } else { b };
            b.build_at(clock.now()).unwrap()
        })
        .collect();
    let plan = Batch::new(members, job(&clock, 1000)).plan().unwrap();
    let ids = s.require_workflows().unwrap().enqueue_workflow(&plan).await.unwrap();
    assert_eq!(ids, plan.ids());
    let callback = *ids.last().unwrap();
    let flows = s.require_workflows().unwrap();
    let steps = flows.workflow_steps(plan.id).await.unwrap();
    assert_eq!(steps.len(), 131);
    for (i, step) in steps.iter().enumerate() {
        assert_eq!(step.id, ids[i], "step {i} in step order");
        assert_eq!(step.name, plan.steps[i].name);
    }
    assert_eq!(steps[130].parents, ids[..130].to_vec(), "every edge stored, in step order");
    let links = flows.links(callback).await.unwrap();
    assert_eq!(links.unfinished_parents, 130);
    assert_eq!(links.parents.len(), 130);
    assert_eq!(flows.links(ids[0]).await.unwrap().children, vec![callback]);
    assert_eq!(state(&s, callback).await, State::Waiting);
    for (i, step) in plan.steps.iter().enumerate() {
        let stored = s.get(ids[i]).await.unwrap();
        let new = &step.job;
        assert_eq!(
            (&stored.kind, stored.payload.as_str(), stored.priority, stored.max_attempts, stored.timeout),
            (&new.kind, new.payload.as_str(), new.priority, new.max_attempts, new.timeout),
            "step {i} stored as planned"
        );
        assert_eq!(stored.state, if i < 130 { State::Pending } else { State::Waiting });
    }

    let claimed = claim_all(&s).await;
    assert_eq!(claimed.len(), 130, "only the members are claimable");
    let mut leases: Vec<_> = ids[..130].iter().map(|id| claimed[id].lease_ref().unwrap()).collect();
    for (take, left) in [(100, 30), (29, 1), (1, 0)] {
        let batch: Vec<Settlement> =
            leases.drain(..take).map(|lease| Settlement { lease, outcome: Outcome::Ack }).collect();
        let settled = s.settle(batch).await.unwrap();
        assert!(settled.iter().all(|r| matches!(r, Ok(State::Completed))), "{settled:?}");
        assert_eq!(flows.links(callback).await.unwrap().unfinished_parents, left);
        let expected = if left == 0 { State::Pending } else { State::Waiting };
        assert_eq!(state(&s, callback).await, expected, "{left} parents left");
    }
    let info = flows.workflow(plan.id).await.unwrap();
    assert_eq!((info.counts.get(State::Completed), info.counts.get(State::Pending)), (130, 1));
}

/// One settle call that completes two parents of one child, fails a third
/// under run-anyway and buries a fourth under cancel: the child is
/// cancelled and counted down by the three released edges, whatever the
/// order of the items.
#[tokio::test]
async fn one_settle_call_mixes_acks_and_failures() {
    for order in [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]] {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::starting_now();
        let s = open(&dir, &clock);
        let parents = ["a", "b", "c", "d"];
        let mut workflow = Workflow::new();
        for (i, name) in parents.iter().enumerate() {
            workflow = workflow.step(Step::new(*name, job(&clock, i)));
        }
        let plan = workflow
            .step(Step::new("anyway", job(&clock, 10)).after(["a", "b", "c"]).on_failure(OnFailure::RunAnyway))
            .step(Step::new("child", job(&clock, 11)).after(parents))
            .plan()
            .unwrap();
        let ids = s.require_workflows().unwrap().enqueue_workflow(&plan).await.unwrap();
        let claimed = claim_all(&s).await;
        // c fails for both children, d for "child" only (cancel).
        let outcome = |i: usize| match i {
            0 | 1 => Outcome::Ack,
            2 => Outcome::Bury { error: "c failed".into() },
            _ => Outcome::Bury { error: "d failed".into() },
        };
        let batch: Vec<Settlement> = order
            .iter()
            .map(|&i| Settlement { lease: claimed[&ids[i]].lease_ref().unwrap(), outcome: outcome(i) })
            .collect();
        s.settle(batch).await.unwrap();
        let flows = s.require_workflows().unwrap();
        assert_eq!(state(&s, ids[4]).await, State::Pending, "run-anyway: a, b completed, c released by its failure");
        assert_eq!(flows.links(ids[4]).await.unwrap().unfinished_parents, 0);
        assert_eq!(state(&s, ids[5]).await, State::Cancelled, "order {order:?}");
        let links = flows.links(ids[5]).await.unwrap();
        assert_eq!(links.unfinished_parents, 2, "a and b released; c and d failed under cancel");
        assert_eq!(links.cancelled_by, Some(ids[2]), "the first failed parent in step order");
    }
}
