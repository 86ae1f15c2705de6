//! `enqueue_tx`: a job exists, and this process's workers are woken, if
//! and only if the caller's own rusqlite transaction commits.
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::time::Duration;

use jq_core::storage::{ClaimRequest, Storage};
use jq_core::{Error, ManualClock, NewJob, Payload, QueueName, State};
use jq_sqlite::rusqlite::{Connection, TransactionBehavior};
use jq_sqlite::{SqliteConfig, SqliteStorage};

fn setup() -> (tempfile::TempDir, ManualClock, SqliteStorage, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let clock = ManualClock::starting_now();
    let storage = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock())).unwrap();
    let app = Connection::open(&path).unwrap();
    app.busy_timeout(Duration::from_secs(5)).unwrap();
    app.execute_batch("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, total INTEGER NOT NULL)").unwrap();
    (dir, clock, storage, app)
}

fn job(clock: &ManualClock) -> NewJob {
    NewJob::builder("ship_order", Payload::from_json(r#"{"order":1}"#).unwrap()).build_at(clock.now()).unwrap()
}

fn claim_request() -> ClaimRequest {
    ClaimRequest::new(vec![QueueName::new("default").unwrap()], 10, Duration::from_secs(30), "w")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_job_exists_and_is_claimable() {
    let (_dir, clock, storage, mut app) = setup();
    let signal = storage.subscribe().unwrap();
    let new = job(&clock);
    let mut tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
    tx.execute("INSERT INTO orders (total) VALUES (42)", []).unwrap();
    let ids = storage.enqueue_tx(&mut tx, vec![new.clone()]).into_inner().unwrap();
    assert_eq!(ids, vec![new.id]);
    assert!(!signal.has_changed().unwrap(), "no wake-up before the commit");
    tx.commit().unwrap();
    assert!(signal.has_changed().unwrap(), "the commit woke the workers");

    let got = storage.get(new.id).await.unwrap();
    assert_eq!(got.state, State::Pending);
    assert_eq!(got.created_at, clock.now());
    let claimed = storage.claim(&claim_request()).await.unwrap().jobs;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![new.id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_back_job_is_not_stored() {
    let (_dir, clock, storage, mut app) = setup();
    let mut signal = storage.subscribe().unwrap();
    let new = job(&clock);
    {
        let mut tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        tx.execute("INSERT INTO orders (total) VALUES (42)", []).unwrap();
        storage.enqueue_tx(&mut tx, vec![new.clone()]).into_inner().unwrap();
        tx.rollback().unwrap();
    }
    assert!(matches!(storage.get(new.id).await, Err(Error::NotFound { .. })));
    assert!(storage.claim(&claim_request()).await.unwrap().jobs.is_empty());
    assert_eq!(storage.stats().await.unwrap().queues.len(), 0);
    let orders: i64 = app.query_row("SELECT count(*) FROM orders", [], |r| r.get(0)).unwrap();
    assert_eq!(orders, 0);
    signal.mark_unchanged();
    // The connection's next commit enqueued nothing: it wakes no one.
    app.execute("INSERT INTO orders (total) VALUES (7)", []).unwrap();
    assert!(!signal.has_changed().unwrap(), "a rolled-back enqueue left no wake-up armed");
}

/// The wake-up is sent once the commit is visible: a read on another
/// connection, made from the woken task, finds the job (a wake-up from
/// SQLite's commit hook, which runs before the commit, could come too early).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn woken_reader_sees_the_committed_job() {
    let (_dir, clock, storage, mut app) = setup();
    let mut signal = storage.subscribe().unwrap();
    let new = job(&clock);
    let id = new.id;
    let reader = storage.clone();
    let woken = tokio::spawn(async move {
        tokio::time::timeout(Duration::from_secs(10), signal.changed()).await.expect("no wake-up").unwrap();
        let seen = reader.get(id).await.map(|j| j.state);
        (seen, reader.claim(&claim_request()).await.unwrap().jobs)
    });
    tokio::task::spawn_blocking(move || {
        let mut tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        storage.enqueue_tx(&mut tx, vec![new]).into_inner().unwrap();
        tx.commit().unwrap();
    })
    .await
    .unwrap();
    let (seen, claimed) = woken.await.unwrap();
    assert_eq!(seen.unwrap(), State::Pending);
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![id]);
}

/// SQLite's automatic checkpoint still runs on a connection whose WAL hook
/// jq replaced: the WAL does not grow without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_still_run_on_the_callers_connection() {
    let (_dir, clock, storage, mut app) = setup();
    let mut tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
    storage.enqueue_tx(&mut tx, vec![job(&clock)]).into_inner().unwrap();
    tx.commit().unwrap();
    app.execute("CREATE TABLE blobs (b BLOB)", []).unwrap();
    let blob = vec![0u8; 64 * 1024];
    for _ in 0..100 {
        app.execute("INSERT INTO blobs (b) VALUES (?1)", [&blob]).unwrap();
    }
    // Over 1,600 pages were written; a checkpoint every 1,000 keeps the WAL
    // (its frames since the last reset) well under that.
    let frames: i64 = app.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1)).unwrap();
    assert!(frames < 1_200, "the WAL holds {frames} frames: no automatic checkpoint ran");
}

/// A workflow stored in the caller's transaction exists, whole, if and only
/// if it commits; its root is claimable after the commit, its child waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_in_the_callers_transaction_commits_or_rolls_back_whole() {
    use jq_core::storage::WorkflowStorage;
    use jq_core::workflow::{Step, Workflow};
    let (_dir, clock, storage, mut app) = setup();
    let plan = || {
        Workflow::new()
            .step(Step::new("root", job(&clock)))
            .step(Step::new("child", job(&clock)).after(["root"]))
            .plan()
            .unwrap()
    };
    let dropped = plan();
    {
        let mut tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        storage.enqueue_workflow_tx(&mut tx, &dropped).into_inner().unwrap();
        tx.rollback().unwrap();
    }
    for id in dropped.ids() {
        assert!(matches!(storage.get(id).await, Err(Error::NotFound { .. })), "a rolled back step is not stored");
    }
    assert!(matches!(storage.workflow(dropped.id).await, Err(Error::WorkflowNotFound { .. })));

    let kept = plan();
    let mut tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
    tx.execute("INSERT INTO orders (total) VALUES (7)", []).unwrap();
    assert_eq!(storage.enqueue_workflow_tx(&mut tx, &kept).into_inner().unwrap(), kept.ids());
    tx.commit().unwrap();
    let ids = kept.ids();
    assert_eq!(storage.get(ids[1]).await.unwrap().state, State::Waiting);
    let claimed = storage.claim(&claim_request()).await.unwrap().jobs;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![ids[0]], "only the root");
}
