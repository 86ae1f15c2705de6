//! Enqueue inside the caller's transaction: the job exists, and its
//! wake-up is delivered, if and only if the caller commits.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use std::time::Duration;

use common::Fixture;
use jq_core::storage::{ClaimRequest, Storage};
use jq_core::{Clock, Error, NewJob, Payload, QueueName};
use sqlx::Connection;
use sqlx::postgres::PgListener;

fn job() -> NewJob {
    NewJob::builder("tx", Payload::from_json(r#"{"order": 42}"#).unwrap()).queue("orders").build().unwrap()
}

fn request() -> ClaimRequest {
    ClaimRequest::new(vec![QueueName::new("orders").unwrap()], 10, Duration::from_secs(30), "w")
}

#[tokio::test]
async fn commit_makes_the_job_exist_and_claimable() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;
    let other = f.connect(Clock::system()).await;
    let j = job();
    let mut tx = s.pool().begin().await.unwrap();
    // The business row and the job in one transaction.
    sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
    let ids = s.enqueue_tx(&mut tx, vec![j.clone()]).await.unwrap();
    assert_eq!(ids, vec![j.id]);
    assert!(matches!(other.get(j.id).await, Err(Error::NotFound { .. })), "invisible before commit");
    assert!(other.claim(&request()).await.unwrap().jobs.is_empty(), "not claimable before commit");
    tx.commit().await.unwrap();
    let claimed = other.claim(&request()).await.unwrap().jobs;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![j.id]);
    f.cleanup().await;
}

#[tokio::test]
async fn rollback_stores_nothing_and_sends_no_wake_up() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;

    // A raw listener, to tell notifications apart by the sender's pid.
    let mut listener = PgListener::connect(&common::url()).await.unwrap();
    listener.listen(s.channel()).await.unwrap();

    let mut rolled_back = sqlx::PgConnection::connect(&common::url()).await.unwrap();
    let mut marker = sqlx::PgConnection::connect(&common::url()).await.unwrap();
    let marker_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut marker).await.unwrap();

    let j = job();
    let mut tx = rolled_back.begin().await.unwrap();
    s.enqueue_in(&mut *tx, vec![j.clone()]).await.unwrap();
    tx.rollback().await.unwrap();
    assert!(matches!(s.get(j.id).await, Err(Error::NotFound { .. })), "nothing stored");
    assert!(s.claim(&request()).await.unwrap().jobs.is_empty());

    // A committed enqueue afterwards: notifications arrive in commit order,
    // so the first one must be the marker's, not the rolled-back one's.
    let m = job();
    s.enqueue_in(&mut marker, vec![m.clone()]).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), listener.recv()).await.unwrap().unwrap();
    assert_eq!(first.process_id() as i32, marker_pid, "the rolled-back enqueue sent no wake-up");
    assert_eq!(s.get(m.id).await.unwrap().id, m.id);
    f.cleanup().await;
}

#[tokio::test]
async fn enqueue_in_a_pool_or_connection_commits_at_once() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;
    let a = job();
    s.enqueue_in(s.pool(), vec![a.clone()]).await.unwrap();
    let mut conn = s.pool().acquire().await.unwrap();
    let b = job();
    s.enqueue_in(&mut *conn, vec![b.clone()]).await.unwrap();
    drop(conn);
    assert_eq!(s.claim(&request()).await.unwrap().jobs.len(), 2);
    f.cleanup().await;
}

/// A job stored in a caller's transaction with a `run_at` in the past is
/// claimed by the first claim after the commit, even when a claim of the
/// same storage took a later job while the transaction was open. *The
/// claim positions moved past the uncommitted job, which then waited for
/// the next walk from the front.*
#[tokio::test]
async fn a_job_committed_late_is_claimed_at_once_by_the_storage_that_stored_it() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let manual = jq_core::ManualClock::starting_now();
    let s = f.connect(manual.clock()).await;
    let now = manual.now();
    let at = |secs_ago: u64| jq_core::storage::sub(now, Duration::from_secs(secs_ago));
    let build = |secs_ago: u64| {
        NewJob::builder("tx", Payload::from_json("{}").unwrap()).queue("orders").run_at(at(secs_ago)).build().unwrap()
    };
    let first = build(30);
    s.enqueue(vec![first.clone()]).await.unwrap();
    assert_eq!(s.claim(&request()).await.unwrap().jobs[0].id, first.id, "a whole walk sets the band's position");

    let late = build(20);
    let mut tx = s.pool().begin().await.unwrap();
    s.enqueue_tx(&mut tx, vec![late.clone()]).await.unwrap();
    let meanwhile = build(10);
    s.enqueue(vec![meanwhile.clone()]).await.unwrap();
    let got = s.claim(&request()).await.unwrap().jobs;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![meanwhile.id], "the uncommitted job is not seen");
    tx.commit().await.unwrap();

    // The same storage instant: no walk from the front is due.
    let got = s.claim(&request()).await.unwrap().jobs;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![late.id], "claimed right after its commit");
    f.cleanup().await;
}

/// A workflow stored in the caller's transaction exists, whole, if and only
/// if it commits.
#[tokio::test]
async fn a_workflow_in_the_callers_transaction_commits_or_rolls_back_whole() {
    use jq_core::storage::WorkflowStorage;
    use jq_core::workflow::{Step, Workflow};
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;
    let plan = || {
        Workflow::new().step(Step::new("root", job())).step(Step::new("child", job()).after(["root"])).plan().unwrap()
    };
    let dropped = plan();
    let mut tx = s.pool().begin().await.unwrap();
    s.enqueue_workflow_tx(&mut tx, &dropped).await.unwrap();
    tx.rollback().await.unwrap();
    for id in dropped.ids() {
        assert!(matches!(s.get(id).await, Err(Error::NotFound { .. })), "a rolled back step is not stored");
    }
    assert!(matches!(s.workflow(dropped.id).await, Err(Error::WorkflowNotFound { .. })));

    let kept = plan();
    let mut tx = s.pool().begin().await.unwrap();
    assert_eq!(s.enqueue_workflow_tx(&mut tx, &kept).await.unwrap(), kept.ids());
    assert!(matches!(s.get(kept.ids()[0]).await, Err(Error::NotFound { .. })), "invisible before commit");
    tx.commit().await.unwrap();
    let ids = kept.ids();
    assert_eq!(s.get(ids[1]).await.unwrap().state, jq_core::State::Waiting);
    let claimed = s.claim(&request()).await.unwrap().jobs;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![ids[0]], "only the root");
    f.cleanup().await;
}

/// A unique rule in the caller's transaction: the replace takes effect if
/// and only if the caller commits; `enqueue_in` (one statement) refuses it.
#[tokio::test]
async fn a_unique_rule_rides_the_callers_transaction() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;
    let replacing = |n: u32| {
        NewJob::builder("tx", Payload::from_json(format!(r#"{{"order": {n}}}"#)).unwrap())
            .queue("orders")
            .unique_key("order")
            .delay(Duration::from_secs(60))
            .replace()
            .build()
            .unwrap()
    };
    let first = replacing(1);
    assert_eq!(s.enqueue(vec![first.clone()]).await.unwrap(), vec![first.id]);

    let mut tx = s.pool().begin().await.unwrap();
    assert_eq!(s.enqueue_tx(&mut tx, vec![replacing(2)]).await.unwrap(), vec![first.id]);
    tx.rollback().await.unwrap();
    assert_eq!(s.get(first.id).await.unwrap().payload.as_str(), r#"{"order": 1}"#, "rolled back: unchanged");

    let mut tx = s.pool().begin().await.unwrap();
    assert_eq!(s.enqueue_tx(&mut tx, vec![replacing(3)]).await.unwrap(), vec![first.id]);
    tx.commit().await.unwrap();
    assert_eq!(s.get(first.id).await.unwrap().payload.as_str(), r#"{"order": 3}"#, "committed: replaced");

    let mut conn = s.pool().acquire().await.unwrap();
    let refused = s.enqueue_in(&mut *conn, vec![replacing(4)]).await;
    assert!(matches!(refused, Err(Error::InvalidInput { what: "unique rule", .. })), "{refused:?}");
    f.cleanup().await;
}
