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
    let claimed = storage.claim(&request(10)).await.unwrap().jobs;
    assert_eq!(claimed.len(), 3, "{claimed:?}");
    let first = claimed.iter().find(|j| j.id == steps[0]).unwrap();
    assert_eq!(first.key.as_deref(), Some("flow"));
    storage.ack(first.lease_ref().unwrap()).await.unwrap();
    let woken = storage.claim(&request(10)).await.unwrap().jobs;
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
        let got = storage.claim(&request(1)).await.unwrap().jobs;
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
    assert_eq!(storage.claim(&request(10)).await.unwrap().jobs.len(), 1, "one start per hour");
    assert!(storage.claim(&request(10)).await.unwrap().jobs.is_empty());
    keys(&storage).clear_key_limits(&q, "r").await.unwrap();
    assert_eq!(storage.claim(&request(1)).await.unwrap().jobs.len(), 1, "no limit any more");
    keys(&storage).set_key_limits(&q, None, &hourly).await.unwrap();
    assert_eq!(
        storage.claim(&request(10)).await.unwrap().jobs.len(),
        1,
        "the log was dropped with the rate: the default's window starts empty"
    );
    assert!(storage.claim(&request(10)).await.unwrap().jobs.is_empty());
}

/// The marker `keyed_wait` (001_schema.sql) is on exactly the
/// keyed jobs that wait to run (Pending or Scheduled) after every move of
/// a job: enqueue (Pending, Scheduled, a workflow's steps), claim, nack (to
/// Pending and to Scheduled), release, bury, an ack that wakes a keyed
/// step, an operator's retry and cancel, recover, promote. A move that
/// forgot it would leave a keyed job unclaimable, or a claimed one in the
/// rotation's index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_marker_follows_every_move_of_a_keyed_job() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let clock = ManualClock::starting_now();
    let storage = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock())).unwrap();
    let check = Connection::open(&path).unwrap();
    check.busy_timeout(Duration::from_secs(5)).unwrap();
    let agrees = |when: &str| {
        let (wrong, marked): (i64, i64) = check
            .query_row(
                "SELECT count(*) FILTER (WHERE (keyed_wait IS NOT NULL) <> \
                     (key IS NOT NULL AND (state = 'pending' OR state = 'scheduled'))), \
                     count(keyed_wait) FROM jobs",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(wrong, 0, "after {when}");
        marked
    };
    let later = |n: usize, key: &str| {
        NewJob::builder("k", Payload::from_json(format!(r#"{{"n":{n}}}"#)).unwrap())
            .queue("q")
            .key(key)
            .delay(Duration::from_secs(60))
            .build_at(clock.now())
            .unwrap()
    };
    let (a, b, c, d, e) = (
        job(&clock, 0, Some("a")),
        job(&clock, 1, Some("b")),
        job(&clock, 2, Some("c")),
        job(&clock, 3, Some("d")),
        later(4, "e"),
    );
    storage.enqueue(vec![a.clone(), b.clone(), c.clone(), d.clone(), e.clone(), job(&clock, 5, None)]).await.unwrap();
    let plan = Workflow::new()
        .step(Step::new("first", job(&clock, 6, Some("w"))))
        .step(Step::new("then", job(&clock, 7, Some("w"))).after(["first"]))
        .plan()
        .unwrap();
    let steps = storage.require_workflows().unwrap().enqueue_workflow(&plan).await.unwrap();
    assert_eq!(agrees("enqueue"), 6, "a, b, c, d, e and the first step");

    let claimed = storage.claim(&request(10)).await.unwrap().jobs;
    assert_eq!(claimed.len(), 6, "a, b, c, d, the plain job and the first step: {claimed:?}");
    assert_eq!(agrees("claim"), 1, "e, scheduled for later");
    let lease = |id| claimed.iter().find(|j| j.id == id).unwrap().lease_ref().unwrap();
    assert_eq!(storage.nack(lease(a.id), "again", Duration::ZERO).await.unwrap(), State::Pending);
    assert_eq!(storage.nack(lease(b.id), "later", Duration::from_secs(60)).await.unwrap(), State::Scheduled);
    storage.release(lease(c.id)).await.unwrap();
    storage.bury(lease(d.id), "no").await.unwrap();
    storage.ack(lease(steps[0])).await.unwrap();
    assert_eq!(agrees("settle"), 5, "a, b, c, e and the woken step");

    storage.retry(d.id).await.unwrap();
    storage.cancel(e.id).await.unwrap();
    assert_eq!(agrees("retry and cancel"), 5, "a, b, c, d and the woken step");

    let claimed = storage.claim(&request(10)).await.unwrap().jobs;
    assert_eq!(claimed.len(), 4, "a, c, d and the woken step: {claimed:?}");
    assert_eq!(agrees("claim"), 1, "b, scheduled for later");
    clock.advance(Duration::from_secs(31));
    // The plain job of the first claim, never settled, comes back too.
    assert_eq!(storage.recover().await.unwrap(), 5);
    assert_eq!(agrees("recover"), 5);
    clock.advance(Duration::from_secs(60));
    storage.promote().await.unwrap();
    assert_eq!(agrees("promote"), 5);
    let claimed = storage.claim(&request(10)).await.unwrap().jobs;
    assert_eq!(claimed.len(), 6, "{claimed:?}");
    assert_eq!(agrees("claim"), 0);
    for job in &claimed {
        storage.ack(job.lease_ref().unwrap()).await.unwrap();
    }
    assert_eq!(agrees("ack"), 0);
    jq_testkit::assert_stats_agree_with_list(&storage).await;
}
