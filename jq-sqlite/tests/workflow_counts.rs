//! SQLite's summary of each workflow's steps (`workflow_counts`)
//! against the steps themselves, after each kind of change the
//! conformance scenarios do not reach: a step settled or released by a
//! storage that did not claim it (its workflow read from its node), a
//! Scheduled step claimed straight from the due walk, a child woken into
//! Scheduled, a promote of steps among plain jobs, a corrupt step buried
//! by a claim and by recover, an operator's retry and cancel, and the purge
//! of Dead, Cancelled and Completed steps.
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use jq_core::storage::{ClaimRequest, LeaseRef, Outcome, Settlement, Storage, StorageExt};
use jq_core::workflow::{Step, Workflow, WorkflowId};
use jq_core::{Job, JobId, ManualClock, NewJob, Payload, QueueName, State};
use jq_sqlite::rusqlite::{Connection, params};
use jq_sqlite::{SqliteConfig, SqliteStorage};

const LEASE: Duration = Duration::from_secs(60);

/// A job of queue "wf" with three attempts, due after `delay`.
fn job(clock: &ManualClock, n: usize, delay: u64) -> NewJob {
    NewJob::builder("k", Payload::from_json(format!(r#"{{"n":{n}}}"#)).unwrap())
        .queue("wf")
        .max_attempts(3)
        .delay(Duration::from_secs(delay))
        .build_at(clock.now())
        .unwrap()
}

fn open(path: &Path, clock: &ManualClock) -> SqliteStorage {
    SqliteStorage::open(SqliteConfig::new(path).clock(clock.clock())).unwrap()
}

async fn claim_all(s: &SqliteStorage) -> HashMap<JobId, Job> {
    let request = ClaimRequest::new(vec![QueueName::new("wf").unwrap()], 100, LEASE, "w");
    s.claim(&request).await.unwrap().jobs.into_iter().map(|j| (j.id, j)).collect()
}

async fn settle(s: &SqliteStorage, lease: LeaseRef, outcome: Outcome) -> State {
    s.settle(vec![Settlement { lease, outcome }]).await.unwrap().remove(0).unwrap()
}

/// The workflow's counts as `workflow(id)` answers them; asserted equal to
/// the states of its steps, read from the file (the walk the summary spares
/// `workflow(id)`) and from `workflow_steps(id)`.
async fn counts(s: &SqliteStorage, path: &Path, id: WorkflowId, after: &str) -> BTreeMap<State, u64> {
    let flows = s.require_workflows().unwrap();
    let info = flows.workflow(id).await.unwrap();
    let summary: BTreeMap<State, u64> =
        State::ALL.iter().map(|&st| (st, info.counts.get(st))).filter(|(_, n)| *n > 0).collect();
    let mut walked: BTreeMap<State, u64> = BTreeMap::new();
    for step in flows.workflow_steps(id).await.unwrap() {
        *walked.entry(step.state).or_default() += 1;
    }
    assert_eq!(summary, walked, "after {after}: the summary against workflow_steps");
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT j.state, count(*) FROM job_nodes n JOIN jobs j ON j.id = n.id WHERE n.workflow = ?1 \
             GROUP BY j.state",
        )
        .unwrap();
    let stored: BTreeMap<State, u64> = stmt
        .query_map(params![id.0.as_bytes()], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
        .unwrap()
        .map(|r| {
            let (state, n) = r.unwrap();
            (State::ALL.into_iter().find(|st| st.as_str() == state).unwrap(), n as u64)
        })
        .collect();
    assert_eq!(summary, stored, "after {after}: the summary against the stored steps");
    summary
}

fn expect(pairs: &[(State, u64)]) -> BTreeMap<State, u64> {
    pairs.iter().copied().filter(|(_, n)| *n > 0).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_follows_every_change_of_a_step() {
    use State::*;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let clock = ManualClock::starting_now();
    let a = open(&path, &clock);
    // Another process on the same file: it claimed nothing, so it reads
    // what it settles (queue, flow and the step's workflow) from the rows.
    let b = open(&path, &clock);
    let names = ["r1", "r2", "r3", "c1", "c2", "bad", "rot", "lost"];
    let plan = Workflow::new()
        .step(Step::new("r1", job(&clock, 0, 0)))
        .step(Step::new("r2", job(&clock, 1, 0)))
        .step(Step::new("r3", job(&clock, 2, 10)))
        .step(Step::new("c1", job(&clock, 3, 0)).after(["r1"]))
        // Due in 60 s: woken into Scheduled when r2 completes before then.
        .step(Step::new("c2", job(&clock, 4, 60)).after(["r2"]))
        .step(Step::new("bad", job(&clock, 5, 0)))
        .step(Step::new("rot", job(&clock, 6, 0)))
        .step(Step::new("lost", job(&clock, 7, 0)))
        .plan()
        .unwrap();
    let ids = a.require_workflows().unwrap().enqueue_workflow(&plan).await.unwrap();
    let id: HashMap<&str, JobId> = names.iter().copied().zip(ids.iter().copied()).collect();
    // A second workflow and a plain job, both due in 5 s, for promote.
    let other = Workflow::new().step(Step::new("s", job(&clock, 8, 5))).plan().unwrap();
    a.require_workflows().unwrap().enqueue_workflow(&other).await.unwrap();
    let plain = a.enqueue_one(job(&clock, 9, 5)).await.unwrap();
    let w = plan.id;
    assert_eq!(counts(&a, &path, w, "enqueue").await, expect(&[(Pending, 5), (Scheduled, 1), (Waiting, 2)]));
    assert_eq!(counts(&a, &path, other.id, "enqueue").await, expect(&[(Scheduled, 1)]));

    // A priority out of range: the claim that takes it buries it.
    let conn = Connection::open(&path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.execute("UPDATE jobs SET priority = 99 WHERE id = ?1", params![id["bad"].0.as_bytes()]).unwrap();
    let claimed = claim_all(&a).await;
    assert_eq!(claimed.len(), 4, "r1, r2, rot and lost; bad buried");
    assert_eq!(a.get(id["bad"]).await.map(|j| j.state).ok(), None, "bad does not decode");
    assert_eq!(counts(&a, &path, w, "a claim").await, expect(&[(Running, 4), (Dead, 1), (Scheduled, 1), (Waiting, 2)]));

    assert_eq!(settle(&a, claimed[&id["r1"]].lease_ref().unwrap(), Outcome::Bury { error: "x".into() }).await, Dead);
    assert_eq!(
        counts(&a, &path, w, "a bury that cancels a child").await,
        expect(&[(Running, 3), (Dead, 2), (Scheduled, 1), (Cancelled, 1), (Waiting, 1)])
    );
    assert_eq!(settle(&b, claimed[&id["r2"]].lease_ref().unwrap(), Outcome::Ack).await, Completed);
    assert_eq!(a.get(id["c2"]).await.unwrap().state, Scheduled, "woken before its own run_at");
    assert_eq!(
        counts(&a, &path, w, "an ack by another storage").await,
        expect(&[(Running, 2), (Dead, 2), (Scheduled, 2), (Cancelled, 1), (Completed, 1)])
    );

    clock.advance(Duration::from_secs(5));
    assert_eq!(a.promote().await.unwrap(), 2, "s and the plain job");
    assert_eq!(a.get(plain).await.unwrap().state, Pending);
    assert_eq!(counts(&a, &path, other.id, "promote").await, expect(&[(Pending, 1)]));
    assert_eq!(
        counts(&a, &path, w, "promote").await,
        expect(&[(Running, 2), (Dead, 2), (Scheduled, 2), (Cancelled, 1), (Completed, 1)])
    );

    // An error history that is not JSON: recover buries it; lost goes back
    // to Pending.
    conn.execute("UPDATE jobs SET errors = 'not json' WHERE id = ?1", params![id["rot"].0.as_bytes()]).unwrap();
    clock.advance(Duration::from_secs(56));
    assert_eq!(a.recover().await.unwrap(), 2);
    assert_eq!(
        counts(&a, &path, w, "recover").await,
        expect(&[(Pending, 1), (Dead, 3), (Scheduled, 2), (Cancelled, 1), (Completed, 1)])
    );
    a.retry(id["r1"]).await.unwrap();
    assert_eq!(
        counts(&a, &path, w, "a retry that restores a child").await,
        expect(&[(Pending, 2), (Dead, 2), (Scheduled, 2), (Waiting, 1), (Completed, 1)])
    );

    // r3 and c2 are due and never promoted: claimed from the due walk.
    let claimed = claim_all(&a).await;
    let ours: Vec<JobId> = ["r1", "r3", "c2", "lost"].iter().map(|n| id[n]).collect();
    assert!(ours.iter().all(|i| claimed.contains_key(i)), "{:?}", claimed.keys());
    assert_eq!(claimed.len(), 6, "with s and the plain job");
    assert_eq!(counts(&a, &path, w, "a claim").await, expect(&[(Running, 4), (Dead, 2), (Waiting, 1), (Completed, 1)]));
    assert_eq!(counts(&a, &path, other.id, "a claim").await, expect(&[(Running, 1)]));
    assert_eq!(
        settle(&b, claimed[&id["r1"]].lease_ref().unwrap(), Outcome::Release { delay: Duration::ZERO }).await,
        Pending
    );
    assert_eq!(
        settle(&b, claimed[&id["lost"]].lease_ref().unwrap(), Outcome::Release { delay: Duration::from_secs(1) }).await,
        Scheduled
    );
    assert_eq!(
        counts(&a, &path, w, "releases by another storage").await,
        expect(&[(Pending, 1), (Scheduled, 1), (Running, 2), (Dead, 2), (Waiting, 1), (Completed, 1)])
    );
    let nacked =
        settle(&a, claimed[&id["r3"]].lease_ref().unwrap(), Outcome::Nack { error: "x".into(), delay: Duration::ZERO });
    assert_eq!(nacked.await, Pending);
    assert_eq!(settle(&a, claimed[&id["c2"]].lease_ref().unwrap(), Outcome::Ack).await, Completed);
    assert_eq!(
        counts(&a, &path, w, "a nack and an ack").await,
        expect(&[(Pending, 2), (Scheduled, 1), (Dead, 2), (Waiting, 1), (Completed, 2)])
    );

    clock.advance(Duration::from_secs(1));
    let claimed = claim_all(&a).await;
    assert_eq!(claimed.len(), 3, "r1, r3 and lost");
    let batch: Vec<Settlement> =
        [("r1", Outcome::Ack), ("r3", Outcome::Bury { error: "x".into() }), ("lost", Outcome::Ack)]
            .into_iter()
            .map(|(n, outcome)| Settlement { lease: claimed[&id[n]].lease_ref().unwrap(), outcome })
            .collect();
    a.settle(batch).await.unwrap();
    assert_eq!(
        counts(&a, &path, w, "a settle batch that wakes a child").await,
        expect(&[(Pending, 1), (Dead, 3), (Completed, 4)])
    );
    a.cancel(id["c1"]).await.unwrap();
    let finished = expect(&[(Dead, 3), (Cancelled, 1), (Completed, 4)]);
    assert_eq!(counts(&a, &path, w, "an operator's cancel").await, finished);
    assert!(a.require_workflows().unwrap().workflow(w).await.unwrap().is_finished());

    clock.advance(Duration::from_secs(1));
    assert_eq!(a.purge(Dead, clock.now()).await.unwrap(), 3);
    assert_eq!(counts(&a, &path, w, "a purge of Dead").await, expect(&[(Cancelled, 1), (Completed, 4)]));
    assert_eq!(a.purge(Cancelled, clock.now()).await.unwrap(), 1);
    assert_eq!(a.purge(Completed, clock.now()).await.unwrap(), 4);
    assert_eq!(counts(&a, &path, w, "a purge of every step").await, expect(&[]));
    let info = a.require_workflows().unwrap().workflow(w).await.unwrap();
    assert!(info.is_finished() && info.counts.total() == 0, "the workflow stays known: {info:?}");
}
