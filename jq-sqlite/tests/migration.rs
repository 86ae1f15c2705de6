//! Opening a database created at an older schema version upgrades it, and
//! keeps its jobs.
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::time::Duration;

use jq_core::storage::{ClaimRequest, Storage};
use jq_core::{ManualClock, QueueName, State};
use jq_sqlite::rusqlite::{Connection, params};
use jq_sqlite::{SqliteConfig, SqliteStorage, schema};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_1_file_is_upgraded_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let clock = ManualClock::starting_now();
    let now = clock.now().timestamp_micros();
    let id = jq_core::JobId::new();
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(schema::MIGRATIONS[0].1).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute(
            "INSERT INTO jobs (id, queue, kind, payload, priority, state, max_attempts, run_at, created_at) \
             VALUES (?1, 'default', 'old_kind', '{}', 2, 'pending', 3, ?2, ?2)",
            params![id.0.as_bytes(), now],
        )
        .unwrap();
    }

    let storage = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock())).unwrap();
    let conn = Connection::open(&path).unwrap();
    assert_eq!(schema::version(&conn).unwrap(), schema::current_version());
    assert!(schema::current_version() > 1);
    let indexes: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN ('jobs_lease', 'jobs_finished')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(indexes, 2);

    let old = storage.get(id).await.unwrap();
    assert_eq!((old.kind.as_str(), old.state, old.max_attempts), ("old_kind", State::Pending, 3));
    let request = ClaimRequest::new(vec![QueueName::new("default").unwrap()], 5, Duration::from_secs(10), "w");
    let claimed = storage.claim(&request).await.unwrap();
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![id]);

    // Opening again is a no-op.
    drop(SqliteStorage::open(SqliteConfig::new(&path)).unwrap());
    assert_eq!(schema::version(&conn).unwrap(), schema::current_version());
}

/// Version 7 counts the jobs finished before it, per queue and state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_7_counts_the_jobs_finished_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let now = ManualClock::starting_now().now().timestamp_micros();
    {
        let conn = Connection::open(&path).unwrap();
        for (_, sql) in &schema::MIGRATIONS[..6] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 6).unwrap();
        let mut insert = conn
            .prepare(
                "INSERT INTO jobs (id, queue, kind, payload, priority, state, max_attempts, run_at, created_at, \
                                   finished_at) VALUES (?1, ?2, 'k', '{}', 1, ?3, 3, ?4, ?4, ?5)",
            )
            .unwrap();
        for (queue, state, n) in [("a", "completed", 3), ("a", "dead", 2), ("b", "cancelled", 4), ("b", "pending", 1)] {
            for _ in 0..n {
                let finished = (state != "pending").then_some(now);
                insert.execute(params![jq_core::JobId::new().0.as_bytes(), queue, state, now, finished]).unwrap();
            }
        }
    }
    let storage = SqliteStorage::open(SqliteConfig::new(&path)).unwrap();
    let stats = storage.stats().await.unwrap();
    let count = |queue: &str, state| stats.queues.get(queue).map_or(0, |c| c.get(state));
    assert_eq!(
        [
            count("a", State::Completed),
            count("a", State::Dead),
            count("b", State::Cancelled),
            count("b", State::Pending)
        ],
        [3, 2, 4, 1],
        "{stats:?}"
    );
    jq_testkit::assert_stats_agree_with_list(&storage).await;
}

/// What schema version 12 (012_keyed_wait.sql) changes, undone: the file
/// a jq of version 11 left.
const UNDO_12: &str = "CREATE INDEX jobs_keyed ON jobs (queue, priority DESC, key, run_at, id) \
    WHERE key IS NOT NULL AND (state = 'pending' OR state = 'scheduled'); \
    DROP INDEX jobs_keyed_waiting; ALTER TABLE jobs DROP COLUMN keyed_wait; PRAGMA user_version = 11;";

/// What schema version 11 (011_keys.sql) adds, taken away again: the file
/// a jq of version 10 left (with no keyed job in it).
const UNDO_11: &str = "DROP INDEX jobs_keyed; \
    DROP TABLE key_limits; DROP TABLE key_cursors; DROP TABLE key_starts; \
    CREATE INDEX jobs_pending ON jobs (queue, priority DESC, run_at, id) WHERE state = 'pending'; \
    CREATE INDEX jobs_scheduled ON jobs (queue, priority DESC, run_at, id) WHERE state = 'scheduled'; \
    DROP INDEX jobs_plain_pending; DROP INDEX jobs_plain_scheduled; \
    ALTER TABLE jobs DROP COLUMN key; PRAGMA user_version = 10;";

/// Version 10 counts the steps of the workflows stored before it, per
/// workflow and state, whatever state they are in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_10_counts_the_steps_stored_before_it() {
    use jq_core::storage::{Outcome, Settlement, StorageExt};
    use jq_core::workflow::{Step, Workflow};
    use jq_core::{NewJob, Payload};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let clock = ManualClock::starting_now();
    let job = |n: usize, delay: u64| {
        NewJob::builder("k", Payload::from_json(format!(r#"{{"n":{n}}}"#)).unwrap())
            .queue("wf")
            .delay(Duration::from_secs(delay))
            .build_at(clock.now())
            .unwrap()
    };
    // Workflows in flight, made by this version, then taken back to
    // version 9: 010 only adds its table, so dropping it (after undoing
    // 012 and 011, see UNDO_12 and UNDO_11) is the file a jq of version 9
    // left.
    let in_flight = Workflow::new()
        .step(Step::new("done", job(0, 0)))
        .step(Step::new("failed", job(1, 0)))
        .step(Step::new("running", job(2, 0)))
        .step(Step::new("later", job(3, 60)))
        .step(Step::new("woken", job(4, 0)).after(["done"]))
        .step(Step::new("cancelled", job(5, 0)).after(["failed"]))
        .step(Step::new("waiting", job(6, 0)).after(["running"]))
        .plan()
        .unwrap();
    let finished = Workflow::new().step(Step::new("only", job(7, 0))).plan().unwrap();
    {
        let storage = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock())).unwrap();
        let flows = storage.require_workflows().unwrap();
        let ids = flows.enqueue_workflow(&in_flight).await.unwrap();
        let only = flows.enqueue_workflow(&finished).await.unwrap()[0];
        let request = ClaimRequest::new(vec![QueueName::new("wf").unwrap()], 10, Duration::from_secs(60), "w");
        let claimed = storage.claim(&request).await.unwrap();
        assert_eq!(claimed.len(), 4, "done, failed, running and only");
        let lease = |id| claimed.iter().find(|j| j.id == id).unwrap().lease_ref().unwrap();
        let batch = vec![
            Settlement { lease: lease(ids[0]), outcome: Outcome::Ack },
            Settlement { lease: lease(ids[1]), outcome: Outcome::Bury { error: "x".into() } },
            Settlement { lease: lease(only), outcome: Outcome::Ack },
        ];
        storage.settle(batch).await.unwrap();
    }
    {
        let conn = Connection::open(&path).unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(schema::version(&conn).unwrap(), 12);
        conn.execute_batch(UNDO_12).unwrap();
        conn.execute_batch(UNDO_11).unwrap();
        conn.execute_batch("DROP TABLE workflow_counts; PRAGMA user_version = 9;").unwrap();
    }

    let storage = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock())).unwrap();
    let flows = storage.require_workflows().unwrap();
    let info = flows.workflow(in_flight.id).await.unwrap();
    let count = |state| info.counts.get(state);
    assert_eq!(
        [
            State::Completed,
            State::Dead,
            State::Running,
            State::Scheduled,
            State::Pending,
            State::Cancelled,
            State::Waiting
        ]
        .map(count),
        [1, 1, 1, 1, 1, 1, 1],
        "{info:?}"
    );
    assert!(!info.is_finished());
    let info = flows.workflow(finished.id).await.unwrap();
    assert!(info.is_finished() && info.is_succeeded() && info.counts.total() == 1, "{info:?}");

    // The counts go on from there.
    let request = ClaimRequest::new(vec![QueueName::new("wf").unwrap()], 10, Duration::from_secs(60), "w");
    let claimed = storage.claim(&request).await.unwrap();
    assert_eq!(claimed.len(), 1, "woken");
    storage.ack(claimed[0].lease_ref().unwrap()).await.unwrap();
    let info = flows.workflow(in_flight.id).await.unwrap();
    assert_eq!((info.counts.get(State::Completed), info.counts.get(State::Pending)), (2, 0), "{info:?}");
}

/// Version 11 (keyed jobs) moves the plain jobs to claim indexes without
/// keyed jobs: the jobs a version-10 file holds in flight (Pending, due and
/// later Scheduled, Running) stay claimable, counted and listed, with no
/// key; keyed jobs work on the upgraded file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_11_keeps_jobs_in_flight_claimable() {
    use jq_core::storage::StorageExt;
    use jq_core::{JobFilter, NewJob, Payload, QueueLimits};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let clock = ManualClock::starting_now();
    let now = clock.now().timestamp_micros();
    let hour = 3_600_000_000i64;
    let (pending, due, later, running) =
        (jq_core::JobId::new(), jq_core::JobId::new(), jq_core::JobId::new(), jq_core::JobId::new());
    {
        let conn = Connection::open(&path).unwrap();
        for (_, sql) in &schema::MIGRATIONS[..10] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 10).unwrap();
        let mut insert = conn
            .prepare(
                "INSERT INTO jobs (id, queue, kind, payload, priority, state, attempts, max_attempts, run_at, \
                                   created_at, lease_token, lease_worker, lease_expires_at) \
                 VALUES (?1, 'q', 'k', '{}', 1, ?2, ?3, 3, ?4, ?5, ?6, ?7, ?8)",
            )
            .unwrap();
        let token = jq_core::JobId::new();
        for (id, state, run_at) in
            [(pending, "pending", now - 2), (due, "scheduled", now - 1), (later, "scheduled", now + hour)]
        {
            insert
                .execute(params![
                    id.0.as_bytes(),
                    state,
                    0,
                    run_at,
                    now - 10,
                    None::<Vec<u8>>,
                    None::<String>,
                    None::<i64>
                ])
                .unwrap();
        }
        insert
            .execute(params![
                running.0.as_bytes(),
                "running",
                1,
                now - 5,
                now - 10,
                token.0.as_bytes(),
                "old",
                now + hour
            ])
            .unwrap();
    }

    let storage = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock())).unwrap();
    let conn = Connection::open(&path).unwrap();
    assert_eq!(schema::version(&conn).unwrap(), schema::current_version());
    let index = |name: &str| -> i64 {
        conn.query_row("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?1", [name], |r| r.get(0))
            .unwrap()
    };
    for name in ["jobs_plain_pending", "jobs_plain_scheduled", "jobs_keyed_waiting"] {
        assert_eq!(index(name), 1, "{name}");
    }
    for name in ["jobs_pending", "jobs_scheduled", "jobs_keyed"] {
        assert_eq!(index(name), 0, "{name} is replaced");
    }

    let stats = storage.stats().await.unwrap();
    let counts = stats.queues.get("q").unwrap();
    assert_eq!([counts.get(State::Pending), counts.get(State::Scheduled), counts.get(State::Running)], [1, 2, 1]);
    let listed = storage.list(&JobFilter { state: Some(State::Scheduled), ..Default::default() }).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|j| j.key.is_none()), "jobs stored before keys have none");

    let request = ClaimRequest::new(vec![QueueName::new("q").unwrap()], 10, Duration::from_secs(10), "w");
    let claimed = storage.claim(&request).await.unwrap();
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![pending, due], "claim order, as before");
    assert_eq!(storage.get(later).await.unwrap().state, State::Scheduled);
    assert_eq!(storage.get(running).await.unwrap().state, State::Running);

    // Keyed jobs on the upgraded file, next to the plain ones.
    let keys = storage.require_keys().unwrap();
    keys.set_key_limits(&QueueName::new("q").unwrap(), None, &QueueLimits { concurrency: Some(1), rate: None })
        .await
        .unwrap();
    let keyed = |n: usize| {
        NewJob::builder("k", Payload::from_json(format!(r#"{{"n":{n}}}"#)).unwrap())
            .queue("q")
            .key("tenant")
            .build_at(clock.now())
            .unwrap()
    };
    storage.enqueue(vec![keyed(0), keyed(1)]).await.unwrap();
    let claimed = storage.claim(&request).await.unwrap();
    assert_eq!(claimed.len(), 1, "one slot for the key");
    assert_eq!(claimed[0].key.as_deref(), Some("tenant"));
    storage.ack(claimed[0].lease_ref().unwrap()).await.unwrap();
    assert_eq!(storage.claim(&request).await.unwrap().len(), 1, "the ack freed the slot");
}

/// Version 12 indexes the keyed waiting jobs by a marker (012_keyed_wait.sql):
/// the keyed jobs a version-11 file holds in flight (Pending, due and later
/// Scheduled, Running) are marked as they wait, stay claimable in the
/// rotation's order and within their key's limits, counted and listed; the
/// plain ones are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_12_keeps_keyed_jobs_in_flight_claimable() {
    use jq_core::JobFilter;
    use jq_core::storage::StorageExt;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let clock = ManualClock::starting_now();
    let now = clock.now().timestamp_micros();
    let hour = 3_600_000_000i64;
    let ids: Vec<jq_core::JobId> = (0..6).map(|_| jq_core::JobId::new()).collect();
    let (a1, a2, b_due, c_later, a_running, plain) = (ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]);
    let token = jq_core::JobId::new();
    {
        let conn = Connection::open(&path).unwrap();
        for (_, sql) in &schema::MIGRATIONS[..11] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 11).unwrap();
        // Every key of q limited to one Running job (the default).
        conn.execute("INSERT INTO key_limits (queue, key, concurrency) VALUES ('q', '', 1)", []).unwrap();
        let mut insert = conn
            .prepare(
                "INSERT INTO jobs (id, queue, kind, payload, priority, state, attempts, max_attempts, run_at, \
                                   created_at, lease_token, lease_worker, lease_expires_at, key) \
                 VALUES (?1, 'q', 'k', '{}', 1, ?2, ?3, 3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )
            .unwrap();
        for (id, state, run_at, key) in [
            (a1, "pending", now - 4, Some("a")),
            (a2, "pending", now - 3, Some("a")),
            (b_due, "scheduled", now - 2, Some("b")),
            (c_later, "scheduled", now + hour, Some("c")),
            (plain, "pending", now - 1, None),
        ] {
            insert
                .execute(params![
                    id.0.as_bytes(),
                    state,
                    0,
                    run_at,
                    now - 10,
                    None::<Vec<u8>>,
                    None::<String>,
                    None::<i64>,
                    key
                ])
                .unwrap();
        }
        insert
            .execute(params![
                a_running.0.as_bytes(),
                "running",
                1,
                now - 5,
                now - 10,
                token.0.as_bytes(),
                "old",
                now + hour,
                "a"
            ])
            .unwrap();
    }

    let storage = SqliteStorage::open(SqliteConfig::new(&path).clock(clock.clock())).unwrap();
    let conn = Connection::open(&path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(schema::version(&conn).unwrap(), schema::current_version());
    let index = |name: &str| -> i64 {
        conn.query_row("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?1", [name], |r| r.get(0))
            .unwrap()
    };
    assert_eq!((index("jobs_keyed_waiting"), index("jobs_keyed")), (1, 0));
    let marked: Vec<Vec<u8>> = conn
        .prepare("SELECT id FROM jobs WHERE keyed_wait IS NOT NULL ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut waiting: Vec<Vec<u8>> = [a1, a2, b_due, c_later].iter().map(|id| id.0.as_bytes().to_vec()).collect();
    waiting.sort();
    assert_eq!(marked, waiting, "the keyed waiting jobs, and only them");

    let stats = storage.stats().await.unwrap();
    let counts = stats.queues.get("q").unwrap();
    assert_eq!([counts.get(State::Pending), counts.get(State::Scheduled), counts.get(State::Running)], [3, 2, 1]);
    let listed = storage.list(&JobFilter { state: Some(State::Pending), ..Default::default() }).await.unwrap();
    assert_eq!(listed.len(), 3);
    jq_testkit::assert_stats_agree_with_list(&storage).await;

    // Key a holds its one slot (the Running job): b's due job and the
    // plain one come out; c's is not due.
    let request = ClaimRequest::new(vec![QueueName::new("q").unwrap()], 10, Duration::from_secs(10), "w");
    let mut claimed: Vec<_> = storage.claim(&request).await.unwrap().iter().map(|j| j.id).collect();
    claimed.sort();
    let mut expected = vec![b_due, plain];
    expected.sort();
    assert_eq!(claimed, expected);
    // The Running job of key a, acked with its lease: a's head is next.
    let lease = storage.get(a_running).await.unwrap().lease_ref().unwrap();
    storage.ack(lease).await.unwrap();
    let claimed = storage.claim(&request).await.unwrap();
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![a1], "a's head, in its order");
    assert_eq!(storage.get(c_later).await.unwrap().state, State::Scheduled);
}
