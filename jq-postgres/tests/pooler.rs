//! jq through PgBouncer in transaction pooling mode (Debian's package,
//! started by this test binary on free ports; `common/pgbouncer.rs`): the
//! whole conformance suite and the property suite run through it, as does
//! a worker pool that drains jobs and fires a periodic job with wake-ups
//! by polling; a pooler that refuses `extra_float_digits` and one that jq
//! was not told about give errors that say what to configure.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::pgbouncer::{self, Bouncer, Setup};
use jq_core::periodic::Periodic;
use jq_core::storage::{ClaimRequest, Outcome, Settlement, Storage, StorageExt};
use jq_core::{Clock, Error, NewJob, Payload, QueueName, State, WorkerPool};
use jq_postgres::{PostgresConfig, PostgresError, PostgresStorage};

jq_testkit::conformance!(common::pgbouncer::harness; roles, periodic, controls, throughput, cancellation, workflows, keys, durable);
jq_testkit::properties!(common::pgbouncer::harness; periodic);

fn job(queue: &str, n: usize) -> NewJob {
    NewJob::builder("n", Payload::from_json(format!(r#"{{"n": {n}}}"#)).unwrap()).queue(queue).build().unwrap()
}

/// PgBouncer's default refuses the `extra_float_digits` sqlx sends: the
/// error says to ignore it (or use the pooler mode), not to check that the
/// server runs.
#[tokio::test]
async fn a_pooler_refusing_extra_float_digits_says_what_to_configure() {
    jq_testkit::needs!(postgres, pgbouncer);
    let url = pgbouncer::strict().url();
    let err = PostgresStorage::connect(PostgresConfig::new(url)).await.unwrap_err();
    assert!(
        matches!(&err, PostgresError::StartupParameter { parameter, .. } if parameter == "extra_float_digits"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("ignore_startup_parameters = extra_float_digits"), "{msg}");
    assert!(msg.contains("pooler=transaction"), "{msg}");
    assert!(!msg.contains("is the server running"), "{msg}");
    assert!(!err.is_unavailable(), "retrying cannot help");
}

/// In transaction pooler mode jq sends nothing a default PgBouncer
/// refuses, and the statement timeout still applies (set per transaction).
#[tokio::test]
async fn pooler_mode_needs_no_ignored_parameters_and_keeps_the_statement_timeout() {
    jq_testkit::needs!(postgres, pgbouncer);
    let schema = format!("jq_test_{}", uuid::Uuid::new_v4().simple());
    let config = PostgresConfig::new(pgbouncer::strict().url())
        .schema(schema.as_str())
        .transaction_pooler(true)
        .statement_timeout(Duration::from_millis(300));
    let s = PostgresStorage::connect(config).await.unwrap();
    s.migrate().await.unwrap();
    let id = s.enqueue_one(job("q", 1)).await.unwrap();

    // Hold the row's lock on a direct connection: the cancel through the
    // pooler waits on it until its statement timeout fires.
    let direct = common::connect(&schema, Clock::system()).await;
    let mut tx = direct.pool().begin().await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("SELECT 1 FROM \"{schema}\".jobs WHERE id = $1 FOR UPDATE")))
        .bind(id.0)
        .execute(&mut *tx)
        .await
        .unwrap();
    let err = s.cancel(id).await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    tx.rollback().await.unwrap();
    s.cancel(id).await.unwrap();
    assert_eq!(s.get(id).await.unwrap().state, State::Cancelled);
    s.close().await;
    direct.close().await;
    common::drop_schema(&schema).await;
}

/// Through a transaction pooler jq was not told about, two clients meet
/// on one server connection and their prepared statements clash: a fatal
/// error (going on could run one client's statement with another's
/// parameters) that names the setting. One server connection makes the
/// clash certain.
#[tokio::test]
async fn an_undeclared_transaction_pooler_is_fatal_and_named() {
    jq_testkit::needs!(postgres, pgbouncer);
    let bouncer = Bouncer::start(Setup { ignore_extra_float_digits: true, pool_size: 1 });
    let f = common::Fixture::new().await;
    let config = || PostgresConfig::new(bouncer.url()).schema(f.schema.as_str()).max_connections(1);
    let a = PostgresStorage::connect(config()).await.unwrap();
    let b = PostgresStorage::connect(config()).await.unwrap();
    a.stats().await.unwrap();
    let err = b.stats().await.unwrap_err();
    assert!(err.is_fatal(), "{err:?}");
    let Error::Fatal { source, .. } = &err else { unreachable!() };
    assert!(matches!(source.downcast_ref(), Some(PostgresError::TransactionPooler { .. })), "{err:?}");
    assert!(err.to_string().contains("?pooler=transaction"), "{err}");
    a.close().await;
    b.close().await;
    f.cleanup().await;
}

/// Everything a pool does, through the pooler, with no listen URL: workers
/// poll (the log says so), drain every job of several enqueue batches
/// exactly once, run the periodic job's ticks, and skip a paused queue
/// until it is resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_pool_drains_and_fires_through_the_pooler_by_polling() {
    jq_testkit::needs!(postgres, pgbouncer);
    const JOBS: usize = 300;
    let schema = format!("jq_test_{}", uuid::Uuid::new_v4().simple());
    let config = PostgresConfig::new(pgbouncer::shared().url())
        .schema(schema.as_str())
        .max_connections(4)
        .transaction_pooler(true);
    let s = PostgresStorage::connect(config).await.unwrap();
    s.migrate().await.unwrap();
    assert!(s.subscribe().is_none(), "no LISTEN through a transaction pooler: workers poll");

    for chunk in (0..JOBS).collect::<Vec<_>>().chunks(100) {
        s.enqueue(chunk.iter().map(|&n| job("work", n)).collect()).await.unwrap();
    }
    let held = s.enqueue(vec![job("held", 0), job("held", 1)]).await.unwrap();
    let held_queue = QueueName::new("held").unwrap();
    s.capabilities().controls.unwrap().set_paused(&held_queue, true).await.unwrap();

    let ran = Arc::new(AtomicUsize::new(0));
    let ticks = Arc::new(AtomicUsize::new(0));
    let (ran_in, ticks_in) = (ran.clone(), ticks.clone());
    let every_second = Periodic::every("tick", Duration::from_secs(1))
        .unwrap()
        .job_with("ticks", |_| NewJob::builder("tick", Payload::from_json("{}").unwrap()))
        .unwrap();
    let handle = WorkerPool::new(s.clone())
        .queues(["work", "ticks", "held"])
        .concurrency(8)
        .poll_interval(Duration::from_millis(100))
        .register_raw("n", move |_job, _ctx| {
            let ran = ran_in.clone();
            async move {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .register_raw("tick", move |_job, _ctx| {
            let ticks = ticks_in.clone();
            async move {
                ticks.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .periodic(every_second)
        .start()
        .unwrap();

    let drained = async {
        loop {
            let stats = s.stats().await.unwrap();
            let work = stats.queues.get("work").map(|c| c.get(State::Completed)).unwrap_or(0);
            if work == JOBS as u64 && ticks.load(Ordering::SeqCst) >= 2 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(120), drained).await.expect("the pool drains through the pooler");
    for id in &held {
        assert_eq!(s.get(*id).await.unwrap().state, State::Pending, "a paused queue waits");
    }
    s.capabilities().controls.unwrap().set_paused(&held_queue, false).await.unwrap();
    let resumed = async {
        loop {
            let stats = s.stats().await.unwrap();
            if stats.queues.get("held").map(|c| c.get(State::Completed)).unwrap_or(0) == 2 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), resumed).await.expect("the resumed queue runs");
    handle.shutdown().await.unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), JOBS + 2, "every job ran once");
    // The periodic job may have stored one more tick as the pool stopped:
    // only the drained queues must be empty.
    let stats = s.stats().await.unwrap();
    for queue in ["work", "held"] {
        let left = stats.queues.get(queue).map(|c| c.get(State::Pending) + c.get(State::Running) + c.get(State::Dead));
        assert_eq!(left.unwrap_or(0), 0, "{queue}: every job completed");
    }
    s.close().await;
    common::drop_schema(&schema).await;
}

/// The storage calls one by one through the pooler, each checked: a batch
/// enqueue, a claim, a settlement of each kind, a heartbeat, recover.
#[tokio::test]
async fn each_call_through_the_pooler() {
    jq_testkit::needs!(postgres, pgbouncer);
    let h = pgbouncer::harness().await.unwrap();
    let s = PostgresStorage::connect(pgbouncer::config(&h.schema, Clock::system())).await.unwrap();
    let ids = s.enqueue((0..4).map(|n| job("q", n)).collect()).await.unwrap();
    let request = ClaimRequest::new(vec![QueueName::new("q").unwrap()], 4, Duration::from_secs(60), "w");
    let claimed = s.claim(&request).await.unwrap().jobs;
    assert_eq!(claimed.len(), 4);
    assert_eq!(
        s.heartbeat(&claimed.iter().map(|j| j.lease_ref().unwrap()).collect::<Vec<_>>(), Duration::from_secs(60))
            .await
            .unwrap(),
        jq_core::storage::Beat::default()
    );
    let outcomes = [
        Outcome::Ack,
        Outcome::Nack { error: "again".into(), delay: Duration::ZERO },
        Outcome::Bury { error: "no".into() },
        Outcome::Release { delay: Duration::ZERO },
    ];
    let batch: Vec<Settlement> = claimed
        .iter()
        .zip(outcomes)
        .map(|(j, outcome)| Settlement { lease: j.lease_ref().unwrap(), outcome })
        .collect();
    s.settle(batch).await.unwrap();
    let states: Vec<State> = futures::future::join_all(claimed.iter().map(|j| s.get(j.id)))
        .await
        .into_iter()
        .map(|j| j.unwrap().state)
        .collect();
    assert_eq!(states, [State::Completed, State::Pending, State::Dead, State::Pending]);
    assert_eq!(s.recover().await.unwrap(), 0);
    assert_eq!(ids.len(), 4);
    s.close().await;
    common::drop_schema(&h.schema).await;
}
