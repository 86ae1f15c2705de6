//! Restarts in the middle of maintenance (private servers): recover,
//! promote, purge, a periodic fire and a workflow release, each caught in
//! flight and the server crashed under it, then started again.
//!
//! Each step is held in flight deterministically. PostgreSQL: another
//! session takes an ACCESS EXCLUSIVE lock on a table the step writes (for
//! the fire, the jobs table, so that its cursor's compare-and-set has run
//! in the transaction and the job's insert waits; for the release, the
//! workflow counts, so that the parent's settlement waits inside its
//! statement), the step is called, and once it waits on the lock the
//! server crashes (SIGQUIT) and starts again. Redis: `CLIENT PAUSE WRITE`
//! holds the step's script unrun, and the server is SIGKILLed and started
//! again from its append-only file (fsync always). The step's call fails as retryable and
//! nothing of it is left half-done: the step runs again as the pool would
//! run it (next round, or the outcome sent again) and does its work once;
//! at the end every job is claimed and acked, and none is left claimed,
//! waiting or scheduled (DBOS #716: runs PENDING forever after a restart
//! during recovery).

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::str::FromStr;
use std::time::{Duration, Instant};

use jq_chaos::Backend;
use jq_chaos::scenario::Env;
use jq_core::periodic::{Fire, FireOutcome};
use jq_core::storage::{ClaimRequest, PeriodicStorage, Storage, StorageExt, WorkflowStorage};
use jq_core::workflow::{Step, Workflow};
use jq_core::{Error, Job, JobId, NewJob, Payload, QueueName, Result, State};
use jq_postgres::{PostgresConfig, PostgresStorage};
use jq_redis::{RedisConfig, RedisStorage};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, PgConnection};

/// How long a step may take to succeed again after the restart.
const PATIENCE: Duration = Duration::from_secs(30);

fn job(queue: &str) -> NewJob {
    NewJob::builder("midway", Payload::from_json("{}").unwrap()).queue(queue).build().unwrap()
}

fn queue(name: &str) -> QueueName {
    QueueName::new(name).unwrap()
}

/// Calls `step` until it succeeds (the server is starting again; the
/// first calls may meet connections that died with it), for up to
/// [`PATIENCE`]. Only retryable errors are retried.
async fn again<T, F, Fut>(what: &str, mut step: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let began = Instant::now();
    loop {
        match step().await {
            Ok(v) => return v,
            Err(e) if e.is_retryable() && began.elapsed() < PATIENCE => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{what} after the restart: {e}"),
        }
    }
}

/// The lock holder's connection to the private server.
async fn holder(url: &str) -> PgConnection {
    PgConnectOptions::from_str(url).unwrap().application_name("jq-chaos-attacker").connect().await.unwrap()
}

/// How a step is held in flight.
#[derive(Clone)]
enum Hold {
    /// A PostgreSQL table lock, taken over this URL.
    Lock(String),
    /// Redis's `CLIENT PAUSE WRITE`, over this URL.
    Pause(String),
}

/// Holds the step (on `table` for PostgreSQL), runs `step` until it is
/// held, crashes the server and starts it again; returns the step's
/// answer (an error: it was cut off).
async fn crash_during<T: Send + 'static>(
    env: &mut Env,
    hold: &Hold,
    table: &str,
    step: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let url = match hold {
        Hold::Lock(url) => url,
        Hold::Pause(url) => {
            let client = redis::Client::open(url.as_str()).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let () = redis::cmd("CLIENT").arg("PAUSE").arg(60_000).arg("WRITE").query_async(&mut conn).await.unwrap();
            let call = tokio::spawn(step);
            // Paused, the step's script cannot run: it is in flight until
            // the crash, whether it reached the server yet or not.
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(!call.is_finished(), "the step finished although writes were paused");
            tokio::task::block_in_place(|| env.server.crash_and_restart(Duration::ZERO)).unwrap();
            return call.await.unwrap();
        }
    };
    let mut lock = holder(url).await;
    sqlx::query("BEGIN").execute(&mut lock).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("LOCK TABLE chaos.{table} IN ACCESS EXCLUSIVE MODE")))
        .execute(&mut lock)
        .await
        .unwrap();
    let call = tokio::spawn(step);
    let began = Instant::now();
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'jq' AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut lock)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(began.elapsed() < PATIENCE, "the step never waited on the lock of {table}");
        assert!(!call.is_finished(), "the step finished without waiting on the lock of {table}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::task::block_in_place(|| env.server.crash_and_restart(Duration::ZERO)).unwrap();
    drop(lock);
    call.await.unwrap()
}

fn cut_off<T: std::fmt::Debug>(what: &str, answer: Result<T>) {
    match answer {
        Err(e) => {
            assert!(e.is_retryable(), "{what} cut off by the restart failed with a non-retryable error: {e}");
            println!("  {what}: cut off in flight ({e})");
        }
        Ok(v) => panic!("{what} succeeded although the server crashed while it waited: {v:?}"),
    }
}

async fn state<S: Storage>(storage: &S, id: JobId) -> State {
    again("get", || storage.get(id)).await.state
}

async fn claim_one<S: Storage>(storage: &S, queue_name: &str, lease: Duration) -> Job {
    let request = ClaimRequest::new(vec![queue(queue_name)], 1, lease, "midway");
    let answer = again("claim", || storage.claim(&request)).await;
    answer.jobs.into_iter().next().unwrap_or_else(|| panic!("nothing to claim in {queue_name}"))
}

#[test]
fn restart_mid_maintenance_postgres() {
    jq_testkit::needs!(postgres_programs);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut env = Env::start(Backend::Postgres).await.unwrap();
        let jq_chaos::Target::Postgres { url, schema } = env.target.clone() else { unreachable!() };
        let storage = PostgresStorage::connect(
            PostgresConfig::new(url.clone()).schema(schema).response_timeout(Duration::from_secs(5)),
        )
        .await
        .unwrap();
        midway(&mut env, storage.clone(), Hold::Lock(url)).await;
        storage.close().await;
    });
}

#[test]
fn restart_mid_maintenance_redis() {
    jq_testkit::needs!(redis_programs);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut env = Env::start(Backend::Redis).await.unwrap();
        let jq_chaos::Target::Redis { url, prefix } = env.target.clone() else { unreachable!() };
        let storage = RedisStorage::connect(
            RedisConfig::new(url.clone()).prefix(prefix).response_timeout(Duration::from_secs(5)),
        )
        .await
        .unwrap();
        midway(&mut env, storage, Hold::Pause(url)).await;
    });
}

/// Every step held, crashed under, checked and run again; then every job
/// claimed and acked.
async fn midway<S>(env: &mut Env, storage: S, hold: Hold)
where
    S: Storage + PeriodicStorage + WorkflowStorage + Clone + 'static,
{
    {
        let url = hold.clone();
        let mut ids = Vec::new();

        // recover: a job whose lease expired.
        again("enqueue", || storage.enqueue_one(job("m_recover"))).await;
        let expired = claim_one(&storage, "m_recover", Duration::from_millis(50)).await;
        ids.push(expired.id);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let s = storage.clone();
        cut_off("recover", crash_during(env, &url, "jobs", async move { s.recover().await }).await);
        assert_eq!(state(&storage, expired.id).await, State::Running, "recover half-done");
        let recovered = again("recover", || storage.recover()).await;
        assert!(recovered >= 1, "recover found nothing to hand on after the restart");
        assert_eq!(state(&storage, expired.id).await, State::Pending);

        // promote: a job due.
        let due = NewJob::builder("midway", Payload::from_json("{}").unwrap())
            .queue("m_promote")
            .delay(Duration::from_millis(50))
            .build()
            .unwrap();
        let due = again("enqueue", || storage.enqueue_one(due.clone())).await;
        ids.push(due);
        assert_eq!(state(&storage, due).await, State::Scheduled);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let s = storage.clone();
        cut_off("promote", crash_during(env, &url, "jobs", async move { s.promote().await }).await);
        assert_eq!(state(&storage, due).await, State::Scheduled, "promote half-done");
        assert!(again("promote", || storage.promote()).await >= 1);
        assert_eq!(state(&storage, due).await, State::Pending);

        // retention: a finished job purged.
        again("enqueue", || storage.enqueue_one(job("m_purge"))).await;
        let done = claim_one(&storage, "m_purge", Duration::from_secs(30)).await;
        again("ack", || storage.ack(done.lease_ref().unwrap())).await;
        let cutoff = storage.clock().now() + chrono::Duration::seconds(60);
        let s = storage.clone();
        cut_off("purge", crash_during(env, &url, "jobs", async move { s.purge(State::Completed, cutoff).await }).await);
        assert_eq!(state(&storage, done.id).await, State::Completed, "purge half-done");
        assert_eq!(again("purge", || storage.purge(State::Completed, cutoff)).await, 1);
        assert!(matches!(storage.get(done.id).await, Err(Error::NotFound { .. })));

        // A periodic fire: the cursor's compare-and-set runs, the job's
        // insert waits on the jobs table.
        let tick = storage.clock().now();
        let fire = Fire {
            name: "midway".into(),
            queue: queue("m_fire"),
            spec: "every 1m".into(),
            zone: "UTC".into(),
            expected: None,
            expected_trigger: None,
            cursor: tick,
            jobs: vec![job("m_fire")],
            missed: 0,
            last_missed: None,
        };
        let (s, f) = (storage.clone(), fire.clone());
        cut_off("fire", crash_during(env, &url, "jobs", async move { s.fire(&f).await }).await);
        let stored = again("periodic", || storage.periodic()).await;
        assert!(stored.iter().all(|p| p.name != "midway"), "the fire's cursor moved without its job: {stored:?}");
        let FireOutcome::Fired(fired) = again("fire", || storage.fire(&fire)).await else {
            panic!("the fire found the cursor moved after the restart")
        };
        assert_eq!(fired.len(), 1);
        ids.extend(fired);
        assert!(matches!(again("fire", || storage.fire(&fire)).await, FireOutcome::Moved), "the tick fired twice");

        // A workflow release: the parent's ack waits inside its statement
        // on the workflow counts.
        let plan = Workflow::new()
            .step(Step::new("parent", job("m_flow")))
            .step(Step::new("child", job("m_flow")).after(["parent"]))
            .plan()
            .unwrap();
        let steps = again("enqueue_workflow", || storage.enqueue_workflow(&plan)).await;
        let (parent_id, child_id) = (steps[0], steps[1]);
        let parent = claim_one(&storage, "m_flow", Duration::from_secs(30)).await;
        assert_eq!(parent.id, parent_id);
        let (s, lease) = (storage.clone(), parent.lease_ref().unwrap());
        cut_off(
            "the parent's ack",
            crash_during(env, &url, "workflow_counts", async move { s.ack(lease).await }).await,
        );
        assert_eq!(state(&storage, parent_id).await, State::Running, "the parent's ack half-done");
        assert_eq!(state(&storage, child_id).await, State::Waiting, "the child released without its parent");
        again("the parent's ack", || storage.ack(lease)).await;
        assert_eq!(state(&storage, child_id).await, State::Pending, "the child stays Waiting");
        ids.extend([parent_id, child_id]);

        // Nothing is left claimed, waiting or scheduled: every job runs.
        let queues: Vec<QueueName> = ["m_recover", "m_promote", "m_fire", "m_flow"].into_iter().map(queue).collect();
        let began = Instant::now();
        loop {
            let answer = storage.claim(&ClaimRequest::new(queues.clone(), 10, Duration::from_secs(30), "midway")).await;
            for job in answer.map(|a| a.jobs).unwrap_or_default() {
                again("ack", || storage.ack(job.lease_ref().unwrap())).await;
            }
            let mut open = Vec::new();
            for id in &ids {
                let s = state(&storage, *id).await;
                if s != State::Completed {
                    open.push((*id, s));
                }
            }
            if open.is_empty() {
                break;
            }
            assert!(began.elapsed() < PATIENCE, "jobs left unfinished after the restarts: {open:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        println!("restarts in the middle of maintenance: {} restarts, every job completed", env.server.restarts());
    }
}
