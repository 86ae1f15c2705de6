//! `enqueue_in_tx`: a job exists if and only if the caller's own rusqlite
//! transaction commits.
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::time::Duration;

use jq_core::{ClaimRequest, Error, ManualClock, NewJob, Payload, QueueName, State, Storage};
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
    let tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
    tx.execute("INSERT INTO orders (total) VALUES (42)", []).unwrap();
    let ids = storage.enqueue_in_tx(&tx, vec![new.clone()]).unwrap();
    assert_eq!(ids, vec![new.id]);
    tx.commit().unwrap();
    storage.notify();
    assert!(signal.has_changed().unwrap());

    let got = storage.get(new.id).await.unwrap();
    assert_eq!(got.state, State::Pending);
    assert_eq!(got.created_at, clock.now());
    let claimed = storage.claim(&claim_request()).await.unwrap();
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![new.id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_back_job_is_not_stored() {
    let (_dir, clock, storage, mut app) = setup();
    let new = job(&clock);
    {
        let tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        tx.execute("INSERT INTO orders (total) VALUES (42)", []).unwrap();
        storage.enqueue_in_tx(&tx, vec![new.clone()]).unwrap();
        tx.rollback().unwrap();
    }
    assert!(matches!(storage.get(new.id).await, Err(Error::NotFound { .. })));
    assert!(storage.claim(&claim_request()).await.unwrap().is_empty());
    assert_eq!(storage.stats().await.unwrap().queues.len(), 0);
    let orders: i64 = app.query_row("SELECT count(*) FROM orders", [], |r| r.get(0)).unwrap();
    assert_eq!(orders, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_payload_in_tx_is_refused() {
    let (dir, clock, _storage, mut app) = setup();
    let small = SqliteStorage::open(SqliteConfig::new(dir.path().join("app.db")).max_payload_bytes(4)).unwrap();
    let tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
    assert!(matches!(small.enqueue_in_tx(&tx, vec![job(&clock)]), Err(Error::PayloadTooLarge { .. })));
}
