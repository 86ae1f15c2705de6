//! Keyed jobs on SQLite beyond the shared scenarios: the key through every
//! path that stores a job (a caller's transaction, a workflow), the
//! counts and lists that read the keyed index, the rotation's cursor
//! shared by every process on the file, and rate logs dropped with their
//! rate.
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::time::Duration;

use jq_core::storage::{ClaimRequest, KeyStorage, Storage, StorageExt};
use jq_core::workflow::{Step, Workflow};
use jq_core::{JobFilter, ManualClock, NewJob, Payload, QueueLimits, QueueName, Rate, State};
use jq_sqlite::rusqlite::{Connection, TransactionBehavior};
use jq_sqlite::{SqliteConfig, SqliteStorage};

fn job(clock: &ManualClock, n: usize, key: Option<&str>) -> NewJob {
    let b = NewJob::builder("k", Payload::from_json(format!(r#"{{"n":{n}}}"#)).unwrap()).queue("q");
    let b = match key {
        Some(key) => b.key(key),
        None => b,
    };
    b.build_at(clock.now()).unwrap()
}

fn request(limit: usize) -> ClaimRequest {
    ClaimRequest::new(vec![QueueName::new("q").unwrap()], limit, Duration::from_secs(30), "w")
}

fn keys(storage: &SqliteStorage) -> &dyn KeyStorage {
    storage.require_keys().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_is_stored_by_every_path_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let clock = ManualClock::starting_now();
    let storage = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock())).unwrap();

    let in_tx = job(&clock, 0, Some("tx"));
    let mut app = Connection::open(&path).unwrap();
    app.busy_timeout(Duration::from_secs(5)).unwrap();
    let mut tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
    storage.enqueue_tx(&mut tx, vec![in_tx.clone()]).into_inner().unwrap();
    tx.commit().unwrap();

    let later = NewJob::builder("k", Payload::from_json("{}").unwrap())
        .queue("q")
        .key("later")
        .delay(Duration::from_secs(60))
        .build_at(clock.now())
        .unwrap();
    storage.enqueue(vec![later.clone(), job(&clock, 1, None)]).await.unwrap();
    let plan = Workflow::new()
        .step(Step::new("first", job(&clock, 2, Some("flow"))))
        .step(Step::new("then", job(&clock, 3, Some("flow"))).after(["first"]))
        .plan()
        .unwrap();
    let steps = storage.require_workflows().unwrap().enqueue_workflow(&plan).await.unwrap();

    assert_eq!(storage.get(in_tx.id).await.unwrap().key.as_deref(), Some("tx"));
    assert_eq!(storage.get(later.id).await.unwrap().key.as_deref(), Some("later"));
    assert_eq!(storage.get(steps[1]).await.unwrap().key.as_deref(), Some("flow"));
    let stats = storage.stats().await.unwrap();
    let counts = stats.queues.get("q").unwrap();
    assert_eq!([counts.get(State::Pending), counts.get(State::Scheduled), counts.get(State::Waiting)], [3, 1, 1]);
    jq_testkit::assert_stats_agree_with_list(&storage).await;
    let scheduled = storage.list(&JobFilter { state: Some(State::Scheduled), ..Default::default() }).await.unwrap();
    assert_eq!(scheduled.iter().map(|j| j.id).collect::<Vec<_>>(), vec![later.id], "a keyed job is listed by state");

    // One slot per key: the workflow's second step waits for its first
    // anyway; the rotation takes flow, then the plain job by run_at, tx.
    keys(&storage)
        .set_key_limits(&QueueName::new("q").unwrap(), None, &QueueLimits { concurrency: Some(1), rate: None })
        .await
        .unwrap();
    let claimed = storage.claim(&request(10)).await.unwrap();
    assert_eq!(claimed.len(), 3, "{claimed:?}");
    let first = claimed.iter().find(|j| j.id == steps[0]).unwrap();
    assert_eq!(first.key.as_deref(), Some("flow"));
    storage.ack(first.lease_ref().unwrap()).await.unwrap();
    let woken = storage.claim(&request(10)).await.unwrap();
    assert_eq!(woken.iter().map(|j| j.id).collect::<Vec<_>>(), vec![steps[1]], "the woken step of key flow");
    let info = storage.require_workflows().unwrap().workflow(plan.id).await.unwrap();
    assert_eq!((info.counts.get(State::Completed), info.counts.get(State::Running)), (1, 1), "{info:?}");
    jq_testkit::assert_stats_agree_with_list(&storage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cursor_is_shared_by_every_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let clock = ManualClock::starting_now();
    let one = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock())).unwrap();
    let two = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock())).unwrap();
    let mut jobs = Vec::new();
    for (i, key) in ["a", "b", "c"].iter().enumerate() {
        jobs.push(job(&clock, i, Some(key)));
        jobs.push(job(&clock, 10 + i, Some(key)));
    }
    one.enqueue(jobs).await.unwrap();
    let mut order = Vec::new();
    for i in 0..6 {
        let storage = if i % 2 == 0 { &one } else { &two };
        let got = storage.claim(&request(1)).await.unwrap();
        order.push(got[0].key.clone().unwrap());
    }
    assert_eq!(order, ["a", "b", "c", "a", "b", "c"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_log_goes_with_its_rate() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::starting_now();
    let storage = SqliteStorage::open(SqliteConfig::new(dir.path().join("jobs.db")).clock(clock.clock())).unwrap();
    storage.enqueue((0..4).map(|i| job(&clock, i, Some("r"))).collect()).await.unwrap();
    let q = QueueName::new("q").unwrap();
    let hourly = QueueLimits { concurrency: None, rate: Some(Rate::new(1, Duration::from_secs(3600))) };
    keys(&storage).set_key_limits(&q, Some("r"), &hourly).await.unwrap();
    assert_eq!(storage.claim(&request(10)).await.unwrap().len(), 1, "one start per hour");
    assert!(storage.claim(&request(10)).await.unwrap().is_empty());
    keys(&storage).clear_key_limits(&q, "r").await.unwrap();
    assert_eq!(storage.claim(&request(1)).await.unwrap().len(), 1, "no limit any more");
    keys(&storage).set_key_limits(&q, None, &hourly).await.unwrap();
    assert_eq!(
        storage.claim(&request(10)).await.unwrap().len(),
        1,
        "the log was dropped with the rate: the default's window starts empty"
    );
    assert!(storage.claim(&request(10)).await.unwrap().is_empty());
}
