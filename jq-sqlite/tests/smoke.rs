//! Smoke tests of every operation of the SQLite backend, on a temp file and
//! in memory, with a manual clock.
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::time::Duration;

use jq_core::storage::{
    ClaimRequest, ControlStorage, Outcome, PeriodicStorage, RoleStorage, Settlement, Storage, StorageExt,
};
use jq_core::{Error, JobFilter, ManualClock, NewJob, Payload, Priority, QueueName, State};
use jq_sqlite::{SqliteConfig, SqliteStorage};

fn job(clock: &ManualClock, queue: &str) -> NewJob {
    NewJob::builder("k", Payload::from_json(r#"{"n":1}"#).unwrap()).queue(queue).build_at(clock.now()).unwrap()
}

fn request(queues: &[&str], limit: usize) -> ClaimRequest {
    ClaimRequest::new(
        queues.iter().map(|q| QueueName::new(*q).unwrap()).collect(),
        limit,
        Duration::from_secs(30),
        "w1",
    )
}

fn open_file(dir: &tempfile::TempDir, clock: &ManualClock) -> SqliteStorage {
    SqliteStorage::open(SqliteConfig::new(dir.path().join("jobs.db")).clock(clock.clock())).unwrap()
}

async fn every_operation(s: SqliteStorage, clock: ManualClock) {
    let mut signal = s.subscribe().expect("sqlite signals work");
    // enqueue: pending, scheduled, unique keys (in batch and stored)
    let a = job(&clock, "q");
    let b = NewJob::builder("k", Payload::from_json("{}").unwrap())
        .queue("q")
        .delay(Duration::from_secs(10))
        .priority(Priority::High)
        .build_at(clock.now())
        .unwrap();
    let u1 = NewJob::builder("k", Payload::from_json("{}").unwrap()).unique_key("u").build_at(clock.now()).unwrap();
    let u2 = NewJob::builder("k", Payload::from_json("{}").unwrap()).unique_key("u").build_at(clock.now()).unwrap();
    let ids = s.enqueue(vec![a.clone(), b.clone(), u1.clone(), u2.clone()]).await.unwrap();
    assert_eq!(ids, vec![a.id, b.id, u1.id, u1.id]);
    assert!(signal.has_changed().unwrap());
    signal.borrow_and_update();
    // re-sent job is not stored twice
    assert_eq!(s.enqueue(vec![a.clone()]).await.unwrap(), vec![a.id]);
    let got = s.get(a.id).await.unwrap();
    assert_eq!(got.state, State::Pending);
    assert_eq!(got.payload.as_str(), r#"{"n":1}"#);
    assert_eq!(got.created_at, clock.now());
    assert_eq!(s.get(b.id).await.unwrap().state, State::Scheduled);
    assert!(matches!(s.get(jq_core::JobId::new()).await, Err(Error::NotFound { .. })));

    // oversized payload refused, nothing stored
    let big = s.config().clone();
    let _ = big;
    let small = SqliteStorage::open(SqliteConfig::memory().max_payload_bytes(3)).unwrap();
    assert!(matches!(small.enqueue(vec![job(&clock, "q")]).await, Err(Error::PayloadTooLarge { .. })));

    // claim: b not due yet; a first
    let claimed = s.claim(&request(&["q"], 10)).await.unwrap().jobs;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![a.id]);
    let ja = &claimed[0];
    assert_eq!(ja.state, State::Running);
    assert_eq!(ja.attempts, 1);
    let lease = ja.lease.clone().unwrap();
    assert_eq!(lease.worker, "w1");
    assert_eq!(lease.expires_at, jq_core::storage::add(clock.now(), Duration::from_secs(30)));

    // heartbeat and fencing
    let lost = s.heartbeat(&[ja.lease_ref().unwrap()], Duration::from_secs(60)).await.unwrap().lost;
    assert!(lost.is_empty());
    let stale = jq_core::storage::LeaseRef { id: a.id, token: jq_core::storage::LeaseToken::new() };
    assert_eq!(s.heartbeat(&[stale], Duration::from_secs(60)).await.unwrap().lost, vec![a.id]);
    assert!(matches!(s.ack(stale).await, Err(Error::LeaseLost { .. })));

    // nack with delay -> scheduled, errors recorded
    let st = s.nack(ja.lease_ref().unwrap(), "boom", Duration::from_secs(5)).await.unwrap();
    assert_eq!(st, State::Scheduled);
    let got = s.get(a.id).await.unwrap();
    assert_eq!(got.errors.len(), 1);
    assert_eq!(got.errors[0].attempt, 1);
    assert_eq!(got.errors[0].message, "boom");
    assert_eq!(got.errors[0].at, clock.now());
    assert!(got.lease.is_none());

    // time passes: both due; b has higher priority
    clock.advance(Duration::from_secs(11));
    assert_eq!(s.promote().await.unwrap(), 2);
    let claimed = s.claim(&request(&["q"], 2)).await.unwrap().jobs;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![b.id, a.id]);
    // release gives the attempt back; ack completes; fail -> dead
    let results = s
        .settle(vec![
            Settlement { lease: claimed[0].lease_ref().unwrap(), outcome: Outcome::Release { delay: Duration::ZERO } },
            Settlement { lease: claimed[1].lease_ref().unwrap(), outcome: Outcome::Ack },
            Settlement { lease: claimed[1].lease_ref().unwrap(), outcome: Outcome::Ack },
        ])
        .await
        .unwrap();
    assert!(matches!(results[0], Ok(State::Pending)));
    assert!(matches!(results[1], Ok(State::Completed)));
    assert!(matches!(results[2], Err(Error::LeaseLost { .. })));
    assert_eq!(s.get(b.id).await.unwrap().attempts, 0);
    let jb = s.claim(&request(&["q"], 5)).await.unwrap().jobs.pop().unwrap();
    s.bury(jb.lease_ref().unwrap(), "poison").await.unwrap();
    assert_eq!(s.get(b.id).await.unwrap().state, State::Dead);

    // retry dead, cancel
    s.retry(b.id).await.unwrap();
    let got = s.get(b.id).await.unwrap();
    assert_eq!((got.state, got.finished_at, got.errors.len()), (State::Pending, None, 1));
    assert!(matches!(s.retry(b.id).await, Err(Error::InvalidState { operation: "retry", .. })));
    s.cancel(b.id).await.unwrap();
    assert!(matches!(s.cancel(b.id).await, Err(Error::InvalidState { operation: "cancel", .. })));
    assert!(matches!(s.cancel(jq_core::JobId::new()).await, Err(Error::NotFound { .. })));

    // recover: claim u1 and let its lease expire
    let ju = s.claim(&request(&["default"], 5)).await.unwrap().jobs.pop().unwrap();
    assert_eq!(ju.id, u1.id);
    clock.advance(Duration::from_secs(31));
    assert_eq!(s.recover().await.unwrap(), 1);
    assert_eq!(s.recover().await.unwrap(), 0);
    let got = s.get(u1.id).await.unwrap();
    assert_eq!(got.state, State::Pending);
    assert_eq!(got.errors[0].message, "lease expired (worker w1 did not finish or heartbeat in time)");
    assert!(matches!(s.ack(ju.lease_ref().unwrap()).await, Err(Error::LeaseLost { .. })));

    // list, stats
    let all = s.list(&JobFilter::default()).await.unwrap();
    assert_eq!(all.len(), 3);
    assert!(all.windows(2).all(|w| w[0].id < w[1].id));
    let page = s.list(&JobFilter { limit: 1, after: Some(all[0].id), ..Default::default() }).await.unwrap();
    assert_eq!(page.iter().map(|j| j.id).collect::<Vec<_>>(), vec![all[1].id]);
    let q = s.list(&JobFilter { queue: Some(QueueName::new("q").unwrap()), ..Default::default() }).await.unwrap();
    assert_eq!(q.len(), 2);
    let done = s.list(&JobFilter { state: Some(State::Completed), ..Default::default() }).await.unwrap();
    assert_eq!(done.iter().map(|j| j.id).collect::<Vec<_>>(), vec![a.id]);
    let stats = s.stats().await.unwrap();
    assert_eq!(stats.queues["q"].get(State::Completed), 1);
    assert_eq!(stats.queues["q"].get(State::Cancelled), 1);
    assert_eq!(stats.queues["default"].get(State::Pending), 1);

    // purge
    assert!(matches!(s.purge(State::Pending, clock.now()).await, Err(Error::InvalidInput { .. })));
    assert_eq!(s.purge(State::Completed, jq_core::storage::add(clock.now(), Duration::from_secs(1))).await.unwrap(), 1);
    assert!(matches!(s.get(a.id).await, Err(Error::NotFound { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_on_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::starting_now();
    every_operation(open_file(&dir, &clock), clock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_in_memory() {
    let clock = ManualClock::starting_now();
    every_operation(SqliteStorage::open(SqliteConfig::memory().clock(clock.clock())).unwrap(), clock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claimers_on_separate_storages_never_share_a_job() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::starting_now();
    let s = open_file(&dir, &clock);
    let jobs: Vec<_> = (0..500).map(|_| job(&clock, "q")).collect();
    s.enqueue(jobs).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let s = open_file(&dir, &clock);
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let batch = s.claim(&request(&["q"], 7)).await.unwrap().jobs;
                if batch.is_empty() {
                    return mine;
                }
                let done: Vec<_> =
                    batch.iter().map(|j| Settlement { lease: j.lease_ref().unwrap(), outcome: Outcome::Ack }).collect();
                for r in s.settle(done).await.unwrap() {
                    r.unwrap();
                }
                mine.extend(batch.into_iter().map(|j| j.id));
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!((n, all.len()), (500, 500));
    assert_eq!(s.stats().await.unwrap().total(State::Completed), 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn group_commit_isolates_a_failing_command() {
    // Many concurrent enqueues, some invalid (duplicate ids are fine, but a
    // batch with an oversized payload is refused before the writer), and
    // concurrent admin errors: each caller gets its own answer.
    let clock = ManualClock::starting_now();
    let s = SqliteStorage::open(SqliteConfig::memory().clock(clock.clock())).unwrap();
    let mut tasks = Vec::new();
    for i in 0..64 {
        let s = s.clone();
        let j = job(&clock, "q");
        tasks.push(tokio::spawn(async move {
            if i % 4 == 0 {
                assert!(matches!(s.cancel(jq_core::JobId::new()).await, Err(Error::NotFound { .. })));
                None
            } else {
                Some(s.enqueue(vec![j]).await.unwrap()[0])
            }
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.extend(t.await.unwrap());
    }
    assert_eq!(ids.len(), 48);
    for id in ids {
        assert_eq!(s.get(id).await.unwrap().state, State::Pending);
    }
}

#[tokio::test]
async fn claim_limit_zero_and_no_queue_return_nothing() {
    let clock = ManualClock::starting_now();
    let s = SqliteStorage::open(SqliteConfig::memory().clock(clock.clock())).unwrap();
    s.enqueue(vec![job(&clock, "q")]).await.unwrap();
    assert!(s.claim(&request(&["q"], 0)).await.unwrap().jobs.is_empty());
    assert!(s.claim(&request(&[], 5)).await.unwrap().jobs.is_empty());
    assert!(s.claim(&request(&["other"], 5)).await.unwrap().jobs.is_empty());
}

#[tokio::test]
async fn nacks_to_dead_after_max_attempts_then_an_operator_retry() {
    let clock = ManualClock::starting_now();
    let s = SqliteStorage::open(SqliteConfig::memory().clock(clock.clock())).unwrap();
    let j = NewJob::builder("k", Payload::from_json("{}").unwrap()).max_attempts(2).build_at(clock.now()).unwrap();
    s.enqueue(vec![j.clone()]).await.unwrap();
    for (attempt, expected) in [(1, State::Pending), (2, State::Dead)] {
        let c = s.claim(&request(&["default"], 1)).await.unwrap().jobs.pop().unwrap();
        assert_eq!(c.attempts, attempt);
        assert_eq!(s.nack(c.lease_ref().unwrap(), format!("e{attempt}"), Duration::ZERO).await.unwrap(), expected);
    }
    let got = s.get(j.id).await.unwrap();
    assert_eq!(got.errors.iter().map(|e| e.attempt).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(got.finished_at, Some(clock.now()));
    s.retry(j.id).await.unwrap();
    assert_eq!(s.get(j.id).await.unwrap().max_attempts, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_lock_held_beyond_busy_timeout_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let clock = ManualClock::starting_now();
    let s = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock()).busy_timeout(Duration::from_millis(50)))
        .unwrap();
    let other = jq_sqlite::rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let err = s.enqueue(vec![job(&clock, "q")]).await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(err.is_retryable());
    other.execute_batch("ROLLBACK").unwrap();
    s.enqueue(vec![job(&clock, "q")]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_row_is_a_typed_error_and_goes_dead_when_claimed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let clock = ManualClock::starting_now();
    let s = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock())).unwrap();
    let bad = job(&clock, "q");
    let good = job(&clock, "q");
    s.enqueue(vec![bad.clone(), good.clone()]).await.unwrap();
    let other = jq_sqlite::rusqlite::Connection::open(&path).unwrap();
    other.execute("UPDATE jobs SET errors = 'not json' WHERE id = ?1", [bad.id.0.as_bytes()]).unwrap();
    assert!(matches!(s.get(bad.id).await, Err(Error::Corrupt { id: Some(id), .. }) if id == bad.id));
    // The queue is not blocked: the good job is claimed, the corrupt one buried.
    let claimed = s.claim(&request(&["q"], 10)).await.unwrap().jobs;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![good.id]);
    let state: String =
        other.query_row("SELECT state FROM jobs WHERE id = ?1", [bad.id.0.as_bytes()], |r| r.get(0)).unwrap();
    assert_eq!(state, "dead");
    assert!(s.claim(&request(&["q"], 10)).await.unwrap().jobs.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_stats_skip_corrupt_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let clock = ManualClock::starting_now();
    let s = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock())).unwrap();
    let mut jobs: Vec<NewJob> = (0..8).map(|_| job(&clock, "q")).collect();
    jobs.sort_by_key(|j| j.id);
    s.enqueue(jobs.clone()).await.unwrap();
    // The first three in a row (a whole page of 2 and more), and one later.
    let other = jq_sqlite::rusqlite::Connection::open(&path).unwrap();
    let corrupt = [
        ("errors", "'not json'", 0),
        ("state", "'bogus'", 1),
        ("priority", "'urgent'", 2),
        ("state", "'bogus'", 5),
        ("queue", "x'00'", 6),
    ];
    for (column, literal, i) in corrupt {
        let sql = format!("UPDATE jobs SET {column} = {literal} WHERE id = ?1");
        assert_eq!(other.execute(&sql, [jobs[i].id.0.as_bytes()]).unwrap(), 1);
    }
    let good: Vec<_> = [3, 4, 7].iter().map(|&i| jobs[i].id).collect();

    // get still says what is wrong; list leaves the rows out.
    let bad: Vec<_> = corrupt.iter().map(|&(_, _, i)| jobs[i].id).collect();
    jq_testkit::assert_list_skips_corrupt(&s, &bad, &good).await;

    // stats count every row whose queue and state they know.
    let stats = s.stats().await.unwrap();
    let q = stats.queues.get("q").copied().unwrap_or_default();
    assert_eq!((q.get(State::Pending), q.total(), stats.queues.len()), (5, 5, 1), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_buries_an_expired_corrupt_job_and_recovers_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let clock = ManualClock::starting_now();
    let s = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock())).unwrap();
    let jobs: Vec<NewJob> = (0..4).map(|_| job(&clock, "q")).collect();
    s.enqueue(jobs.clone()).await.unwrap();
    assert_eq!(s.claim(&request(&["q"], 10)).await.unwrap().jobs.len(), 4);
    // Corrupted while Running: each of these used to fail the recover
    // statement as a whole (malformed JSON, a BLOB in json_object), or
    // would have been handed on as garbage.
    let other = jq_sqlite::rusqlite::Connection::open(&path).unwrap();
    let corrupt = [("errors", "'not json'", 0), ("attempts", "x'00'", 1), ("max_attempts", "'many'", 2)];
    for (column, literal, i) in corrupt {
        let sql = format!("UPDATE jobs SET {column} = {literal} WHERE id = ?1");
        assert_eq!(other.execute(&sql, [jobs[i].id.0.as_bytes()]).unwrap(), 1);
    }
    clock.advance(Duration::from_secs(31));
    assert_eq!(s.recover().await.unwrap(), 4);
    assert_eq!(s.recover().await.unwrap(), 0, "nothing is left Running with an expired lease");
    let good = s.get(jobs[3].id).await.unwrap();
    assert_eq!(good.state, State::Pending);
    assert_eq!(good.errors.len(), 1);
    for (column, _, i) in corrupt {
        let (state, errors, expires): (String, String, Option<i64>) = other
            .query_row(
                "SELECT state, errors, lease_expires_at FROM jobs WHERE id = ?1",
                [jobs[i].id.0.as_bytes()],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!((state.as_str(), expires), ("dead", None), "{column}");
        assert!(errors.contains(column) && errors.contains("lease expired"), "{column}: {errors}");
    }
    // The good job is claimable again; the buried ones are not.
    let claimed = s.claim(&request(&["q"], 10)).await.unwrap().jobs;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![jobs[3].id]);
}

/// A settle batch one of whose rows refuses its outcome (an error history
/// that is not JSON) applies the others, and gives that item its error:
/// the batch is not refused whole, which the pool would send forever. The
/// job stays Running until recover buries it with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_that_refuses_its_outcome_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let clock = ManualClock::starting_now();
    let s = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock())).unwrap();
    let mut jobs: Vec<NewJob> = (0..3).map(|_| job(&clock, "q")).collect();
    jobs.sort_by_key(|j| j.id);
    s.enqueue(jobs.clone()).await.unwrap();
    let mut claimed = s.claim(&request(&["q"], 3)).await.unwrap().jobs;
    claimed.sort_by_key(|j| j.id);
    let other = jq_sqlite::rusqlite::Connection::open(&path).unwrap();
    other.execute("UPDATE jobs SET errors = 'not json' WHERE id = ?1", [jobs[0].id.0.as_bytes()]).unwrap();
    let lease = |i: usize| claimed[i].lease_ref().unwrap();
    let results = s
        .settle(vec![
            Settlement { lease: lease(0), outcome: Outcome::Nack { error: "e".into(), delay: Duration::ZERO } },
            Settlement { lease: lease(1), outcome: Outcome::Ack },
            Settlement { lease: lease(2), outcome: Outcome::Bury { error: "no".into() } },
        ])
        .await
        .expect("one bad row does not fail the batch");
    assert!(matches!(results[0], Err(Error::Backend { .. })), "{:?}", results[0]);
    assert_eq!((results[1].as_ref().ok(), results[2].as_ref().ok()), (Some(&State::Completed), Some(&State::Dead)));
    clock.advance(Duration::from_secs(60));
    assert_eq!(s.recover().await.unwrap(), 1);
    let state: String =
        other.query_row("SELECT state FROM jobs WHERE id = ?1", [jobs[0].id.0.as_bytes()], |r| r.get(0)).unwrap();
    assert_eq!(state, "dead", "recover buries the row it cannot use");
}

/// A periodic job row that cannot be decoded is left out of `periodic()`
/// (and logged) while the others are listed and keep firing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_skips_a_row_that_cannot_be_decoded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let clock = ManualClock::starting_now();
    let s = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock())).unwrap();
    let every = |name: &str| {
        jq_core::periodic::Periodic::every(name, Duration::from_secs(60))
            .unwrap()
            .job_with("q", |_| NewJob::builder("k", Payload::from_json("{}").unwrap()))
            .unwrap()
    };
    let runner = jq_core::periodic::PeriodicRunner::new(vec![every("a"), every("b"), every("c")]).unwrap();
    runner.run_once(&s).await.unwrap();
    let other = jq_sqlite::rusqlite::Connection::open(&path).unwrap();
    assert_eq!(other.execute("UPDATE periodic_jobs SET cursor = 'soon' WHERE name = 'a'", []).unwrap(), 1);
    assert_eq!(other.execute("UPDATE periodic_jobs SET last_job = x'0102' WHERE name = 'c'", []).unwrap(), 1);
    let names: Vec<String> =
        s.periodic().await.expect("one bad row does not fail the list").into_iter().map(|r| r.name).collect();
    assert_eq!(names, vec!["b"]);
    clock.advance(Duration::from_secs(60));
    let round = runner.run_once(&s).await.unwrap();
    assert_eq!((round.fired, round.jobs), (1, 1), "b fires: {round:?}");
}

/// `leaders` and `queues` leave out (and log) a row they cannot decode,
/// as `list` and `periodic` do, and list the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaders_and_queues_skip_rows_that_cannot_be_decoded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let clock = ManualClock::starting_now();
    let s = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock())).unwrap();
    for role in ["a", "b"] {
        let bid = jq_core::storage::Election {
            role: role.into(),
            token: jq_core::storage::LeaseToken::new(),
            holder: "h".into(),
            ttl: Duration::from_secs(10),
        };
        assert!(s.elect(&bid).await.unwrap());
    }
    for q in ["p", "r"] {
        s.set_paused(&QueueName::new(q).unwrap(), true).await.unwrap();
    }
    for worker in ["w1", "w2"] {
        let mut req = request(&["p"], 1);
        req.worker = worker.into();
        s.claim(&req).await.unwrap();
    }
    let other = jq_sqlite::rusqlite::Connection::open(&path).unwrap();
    other.execute("UPDATE leaders SET expires_at = 'soon' WHERE role = 'a'", []).unwrap();
    other.execute("UPDATE queue_seen SET seen_at = 'soon' WHERE worker = 'w1'", []).unwrap();
    other.execute("UPDATE queue_controls SET paused_at = 'soon' WHERE queue = 'r'", []).unwrap();
    let roles: Vec<String> = s.leaders().await.unwrap().into_iter().map(|l| l.role).collect();
    assert_eq!(roles, vec!["b"]);
    let queues = s.queues().await.unwrap();
    assert_eq!(queues.iter().map(|q| q.queue.as_str()).collect::<Vec<_>>(), vec!["p"]);
    assert_eq!(queues[0].seen.iter().map(|w| w.worker.as_str()).collect::<Vec<_>>(), vec!["w2"]);
}

/// An ack counts its job in its queue whether or not the handle that acks
/// claimed it: the writer remembers the queues of its own claims and reads
/// the row for the others (a second handle, another process).
#[tokio::test]
async fn acks_count_jobs_claimed_by_another_handle() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::starting_now();
    let (claimer, acker) = (open_file(&dir, &clock), open_file(&dir, &clock));
    claimer.enqueue(vec![job(&clock, "a"), job(&clock, "b"), job(&clock, "b")]).await.unwrap();
    let jobs = claimer.claim(&request(&["a", "b"], 3)).await.unwrap().jobs;
    assert_eq!(jobs.len(), 3);
    let (first, rest) = jobs.split_at(1);
    let settle = |jobs: &[jq_core::Job]| {
        jobs.iter().map(|j| Settlement { lease: j.lease_ref().unwrap(), outcome: Outcome::Ack }).collect::<Vec<_>>()
    };
    acker.settle(settle(first)).await.unwrap();
    claimer.settle(settle(rest)).await.unwrap();
    let stats = acker.stats().await.unwrap();
    let completed = |q: &str| stats.queues.get(q).map_or(0, |c| c.get(State::Completed));
    let queue_of = |q: &str| jobs.iter().filter(|j| j.queue.as_str() == q).count() as u64;
    assert_eq!((completed("a"), completed("b")), (queue_of("a"), queue_of("b")));
}
