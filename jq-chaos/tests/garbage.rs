//! Bad input and corruption, per backend (private servers).
//!
//! 1. Property test: arbitrary strings and bytes as queue names, kinds,
//!    payloads (valid JSON and not) and unique keys, through the builder
//!    and enqueue. A typed error or success, never a panic; what was stored
//!    reads back equal; a sentinel job enqueued first is intact after.
//! 2. Corruption by hand: jobs whose stored row/hash gets garbage in one
//!    field. `get` reports them with `Error::Corrupt` (a payload is not
//!    parsed by the store: the worker's typed handler fails to deserialize
//!    it), the worker pool moves the claimable ones to Dead with the
//!    reason, and carries on with the other jobs.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use jq_chaos::scenario::Env;
use jq_chaos::{AnyStorage, Backend, ChaosJob, Target, soak};
use jq_core::WorkerPool;
use jq_core::storage::Storage;
use jq_core::{Error, Job, JobFilter, JobId, NewJob, Payload, State};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Arbitrary text: printable names, any Unicode, or any bytes made text.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9_.:-]{1,12}",
        any::<String>(),
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        Just(String::new()),
        (0usize..300).prop_map(|n| "x".repeat(n)),
    ]
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(serde_json::Value::from),
        any::<String>().prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
            proptest::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A payload: a JSON value, or arbitrary text checked as JSON.
#[derive(Clone, Debug)]
enum RawPayload {
    Value(serde_json::Value),
    Text(String),
}

fn payload() -> impl Strategy<Value = RawPayload> {
    prop_oneof![json_value().prop_map(RawPayload::Value), text().prop_map(RawPayload::Text)]
}

#[derive(Clone, Debug)]
struct Garbage {
    queue: String,
    kind: String,
    payload: RawPayload,
    unique_key: Option<String>,
}

fn garbage() -> impl Strategy<Value = Garbage> {
    // Mostly valid queue names, so that most cases reach the store.
    let queue = prop_oneof![3 => "[A-Za-z0-9_.:-]{1,12}", 1 => text()];
    (queue, text(), payload(), proptest::option::of(text())).prop_map(|(queue, kind, payload, unique_key)| Garbage {
        queue,
        kind,
        payload,
        unique_key,
    })
}

fn is_validation(e: &Error) -> bool {
    matches!(e, Error::InvalidQueue { .. } | Error::InvalidInput { .. } | Error::InvalidPayload(_))
}

/// One case: the builder refuses with a validation error, or enqueue stores
/// exactly what was built (or returns the live job holding the unique key).
async fn one_case(storage: &dyn Storage, g: Garbage) -> Result<(), TestCaseError> {
    let payload = match &g.payload {
        RawPayload::Value(v) => Payload::of(v),
        RawPayload::Text(t) => Payload::from_json(t.clone()),
    };
    let payload = match payload {
        Ok(p) => p,
        Err(e) => {
            prop_assert!(matches!(e, Error::InvalidPayload(_)), "payload refused with {e:?}");
            return Ok(());
        }
    };
    let mut builder = NewJob::builder(g.kind.clone(), payload).queue(g.queue.clone());
    if let Some(k) = &g.unique_key {
        builder = builder.unique_key(k.clone());
    }
    let job = match builder.build() {
        Ok(job) => job,
        Err(e) => {
            prop_assert!(is_validation(&e), "builder refused with an unexpected error: {e:?}");
            return Ok(());
        }
    };
    let ids = storage.enqueue(vec![job.clone()]).await;
    let ids = match ids {
        Ok(ids) => ids,
        Err(e) => return Err(TestCaseError::fail(format!("a job the builder accepted was refused by enqueue: {e}"))),
    };
    prop_assert_eq!(ids.len(), 1);
    let stored = storage.get(ids[0]).await.map_err(|e| TestCaseError::fail(format!("get after enqueue: {e}")))?;
    if ids[0] == job.id {
        prop_assert_eq!(&stored.queue, &job.queue);
        prop_assert_eq!(&stored.kind, &job.kind);
        prop_assert_eq!(stored.payload.as_str(), job.payload.as_str());
        prop_assert_eq!(&stored.unique_key, &job.unique_key);
    } else {
        // The unique key matched a live job of the same queue.
        prop_assert_eq!(&stored.queue, &job.queue);
        prop_assert_eq!(&stored.unique_key, &job.unique_key);
    }
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn start(rt: &tokio::runtime::Runtime, backend: Backend) -> (Env, AnyStorage) {
    rt.block_on(async {
        let env = Env::start(backend).await.unwrap_or_else(|e| {
            panic!("cannot start a private {} server: {e}; run scripts/start-services.sh", backend.name())
        });
        let storage = env.target.connect().await.unwrap();
        (env, storage)
    })
}

fn arbitrary_input(backend: Backend) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let rt = runtime();
    let (env, storage) = start(&rt, backend);
    let sentinel = NewJob::typed(&ChaosJob { seq: 7 }).queue("sentinel").unique_key("sentinel").build().unwrap();
    let before = rt.block_on(async {
        storage.enqueue(vec![sentinel.clone()]).await.unwrap();
        storage.get(sentinel.id).await.unwrap()
    });

    let cases = if soak() { 2_000 } else { 96 };
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let result = runner.run(&garbage(), |g| rt.block_on(one_case(&*storage, g)));

    // Oversized payloads: a typed error, nothing stored.
    let big =
        NewJob::builder("big", Payload::of(&"x".repeat(jq_core::DEFAULT_MAX_PAYLOAD_BYTES)).unwrap()).build().unwrap();
    let big_result = rt.block_on(storage.enqueue(vec![big.clone()]));
    let big_after = rt.block_on(storage.get(big.id));

    let after = rt.block_on(storage.get(sentinel.id)).unwrap();
    let listed = rt.block_on(jq_chaos::checker::all_jobs(&*storage));
    if let Err(e) = result {
        panic!("{}: {e}", backend.name());
    }
    assert!(
        matches!(big_result, Err(Error::PayloadTooLarge { .. })),
        "{}: oversized payload gave {big_result:?}",
        backend.name()
    );
    assert!(
        matches!(big_after, Err(Error::NotFound { .. })),
        "{}: oversized job was stored: {big_after:?}",
        backend.name()
    );
    assert_eq!(before, after, "{}: the sentinel job changed", backend.name());
    let listed = listed.unwrap_or_else(|e| panic!("{}: list after garbage: {e}", backend.name()));
    println!("{}: {cases} arbitrary inputs; {} jobs stored; sentinel intact", backend.name(), listed.len());
    drop(env);
}

/// How one field of a stored job is corrupted.
#[derive(Clone, Copy, Debug)]
struct Corruption {
    field: &'static str,
    /// SQL literal (the Redis value is the literal without quotes).
    literal: &'static str,
    /// Whether the pool can claim the job (so it must end Dead).
    claimable: bool,
    /// Substring the Dead reason must contain.
    reason: &'static str,
}

const CORRUPTIONS: &[Corruption] = &[
    Corruption { field: "priority", literal: "99", claimable: true, reason: "priority" },
    Corruption { field: "priority", literal: "'bogus'", claimable: true, reason: "priority" },
    Corruption { field: "payload", literal: "'{{not json'", claimable: true, reason: "does not deserialize" },
    Corruption { field: "state", literal: "'bogus'", claimable: false, reason: "state" },
];

async fn corrupt(target: &Target, id: JobId, c: Corruption) -> Result<(), String> {
    match target {
        Target::Sqlite { path } => {
            let conn = jq_sqlite::rusqlite::Connection::open(path).map_err(|e| e.to_string())?;
            conn.busy_timeout(Duration::from_secs(10)).map_err(|e| e.to_string())?;
            let sql = format!("UPDATE jobs SET {} = {} WHERE id = ?1", c.field, c.literal);
            let n = conn.execute(&sql, [id.0.as_bytes().to_vec()]).map_err(|e| e.to_string())?;
            if n == 1 { Ok(()) } else { Err(format!("{n} rows updated")) }
        }
        Target::Postgres { url, schema } => {
            let pool = sqlx::PgPool::connect(url).await.map_err(|e| e.to_string())?;
            let sql = format!("UPDATE \"{schema}\".jobs SET {} = {} WHERE id = $1", c.field, c.literal);
            let done =
                sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id.0).execute(&pool).await.map_err(|e| e.to_string())?;
            pool.close().await;
            if done.rows_affected() == 1 { Ok(()) } else { Err(format!("{} rows updated", done.rows_affected())) }
        }
        Target::Redis { url, prefix } => {
            let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
            let mut conn = client.get_multiplexed_async_connection().await.map_err(|e| e.to_string())?;
            let keys = jq_redis::Keys::new(prefix.clone());
            let value = c.literal.trim_matches('\'').as_bytes();
            jq_redis::raw::set_field(&mut conn, &keys, "garbage", id, c.field, value).await.map_err(|e| e.to_string())
        }
    }
}

/// The stored state and error history of a job, read around the backend
/// (a corrupt job stays corrupt after it is buried, so `get` cannot show it).
async fn raw_state(target: &Target, id: JobId) -> Result<(String, String), String> {
    match target {
        Target::Sqlite { path } => {
            let conn = jq_sqlite::rusqlite::Connection::open(path).map_err(|e| e.to_string())?;
            conn.busy_timeout(Duration::from_secs(10)).map_err(|e| e.to_string())?;
            conn.query_row("SELECT state, errors FROM jobs WHERE id = ?1", [id.0.as_bytes().to_vec()], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .map_err(|e| e.to_string())
        }
        Target::Postgres { url, schema } => {
            let pool = sqlx::PgPool::connect(url).await.map_err(|e| e.to_string())?;
            let sql = format!("SELECT state, errors::text FROM \"{schema}\".jobs WHERE id = $1");
            let row: (String, String) = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(id.0)
                .fetch_one(&pool)
                .await
                .map_err(|e| e.to_string())?;
            pool.close().await;
            Ok(row)
        }
        Target::Redis { url, prefix } => {
            let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
            let mut conn = client.get_multiplexed_async_connection().await.map_err(|e| e.to_string())?;
            let keys = jq_redis::Keys::new(prefix.clone());
            jq_redis::raw::state_and_errors(&mut conn, &keys, "garbage", id).await.map_err(|e| e.to_string())
        }
    }
}

fn describe(r: &Result<Job, Error>) -> String {
    match r {
        Ok(job) => format!(
            "{} after {} attempt(s), errors {:?}",
            job.state,
            job.attempts,
            job.errors.iter().map(|e| &e.message).collect::<Vec<_>>()
        ),
        Err(e) => format!("error: {e}"),
    }
}

fn corrupt_rows(backend: Backend) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let rt = runtime();
    let (env, storage) = start(&rt, backend);
    let mut problems = Vec::new();
    rt.block_on(async {
        let good: Vec<NewJob> =
            (0..50).map(|seq| NewJob::typed(&ChaosJob { seq }).queue("garbage").build().unwrap()).collect();
        let corruptions: Vec<Corruption> = CORRUPTIONS
            .iter()
            .copied()
            // smallint cannot hold text
            .filter(|c| !(backend == Backend::Postgres && c.field == "priority" && c.literal.starts_with('\'')))
            .collect();
        let victims: Vec<NewJob> = corruptions
            .iter()
            .map(|_| NewJob::typed(&ChaosJob { seq: 999 }).queue("garbage").max_attempts(3).build().unwrap())
            .collect();
        storage.enqueue(victims.clone()).await.unwrap();
        for (v, c) in victims.iter().zip(&corruptions) {
            corrupt(&env.target, v.id, *c).await.unwrap_or_else(|e| panic!("corrupting {c:?}: {e}"));
            let got = storage.get(v.id).await;
            let expect_corrupt = c.field != "payload";
            match (&got, expect_corrupt) {
                (Err(Error::Corrupt { id: Some(id), .. }), true) if *id == v.id => {}
                (Ok(_), false) => {}
                _ => problems.push(format!("{c:?}: get gave {}", describe(&got))),
            }
        }
        // Listing and counting with corrupt rows present.
        let listed = storage.list(&JobFilter { queue: Some("garbage".parse().unwrap()), ..JobFilter::default() }).await;
        println!(
            "{}: list with corrupt rows: {}",
            backend.name(),
            match &listed {
                Ok(l) => format!("{} jobs", l.len()),
                Err(e) => format!("error: {e}"),
            }
        );
        let stats = storage.stats().await;
        println!(
            "{}: stats with corrupt rows: {}",
            backend.name(),
            match &stats {
                Ok(s) => format!("{:?}", s.queues.get("garbage")),
                Err(e) => format!("error: {e}"),
            }
        );
        storage.enqueue(good.clone()).await.unwrap();

        let ran = Arc::new(AtomicUsize::new(0));
        let counter = ran.clone();
        let pool = WorkerPool::new(storage.clone())
            .register::<ChaosJob, _, _>(move |_job, _ctx| {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
            })
            .queues(["garbage"])
            .lease(Duration::from_millis(1000))
            .heartbeat_interval(Duration::from_millis(300))
            .recover_interval(Duration::from_millis(200))
            .poll_interval(Duration::from_millis(50))
            .start()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(12);
        loop {
            let mut settled = true;
            for j in &good {
                settled &= storage.get(j.id).await.is_ok_and(|j| j.state == State::Completed);
            }
            for (v, c) in victims.iter().zip(&corruptions) {
                if c.claimable {
                    settled &= raw_state(&env.target, v.id).await.is_ok_and(|(state, _)| state == "dead");
                }
            }
            if settled || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        pool.shutdown().await.expect("the pool stopped cleanly");

        let mut completed = 0;
        for j in &good {
            if storage.get(j.id).await.is_ok_and(|j| j.state == State::Completed) {
                completed += 1;
            }
        }
        println!(
            "{}: {completed}/{} good jobs completed, {} handler runs",
            backend.name(),
            good.len(),
            ran.load(Ordering::Relaxed)
        );
        if completed != good.len() {
            problems.push(format!("only {completed} of {} good jobs completed beside the corrupt ones", good.len()));
        }
        for (v, c) in victims.iter().zip(&corruptions) {
            let got = storage.get(v.id).await;
            let raw = raw_state(&env.target, v.id).await;
            println!("{}: {} = {} -> get: {}; stored: {raw:?}", backend.name(), c.field, c.literal, describe(&got));
            if c.claimable {
                let ok = raw.as_ref().is_ok_and(|(state, errors)| state == "dead" && errors.contains(c.reason));
                if !ok {
                    problems.push(format!(
                        "{} = {}: expected Dead with a reason mentioning {:?}; stored state and errors: {raw:?}",
                        c.field, c.literal, c.reason
                    ));
                }
            }
        }
    });
    drop(storage);
    if !problems.is_empty() {
        let dir = env.keep();
        panic!("{} corruption handling:\n  {}\n(data in {})", backend.name(), problems.join("\n  "), dir.display());
    }
}

#[test]
fn arbitrary_input_sqlite() {
    arbitrary_input(Backend::Sqlite);
}

#[test]
fn arbitrary_input_postgres() {
    jq_testkit::needs!(postgres_programs);
    arbitrary_input(Backend::Postgres);
}

#[test]
fn arbitrary_input_redis() {
    jq_testkit::needs!(redis_programs);
    arbitrary_input(Backend::Redis);
}

#[test]
fn corrupt_rows_sqlite() {
    corrupt_rows(Backend::Sqlite);
}

#[test]
fn corrupt_rows_postgres() {
    jq_testkit::needs!(postgres_programs);
    corrupt_rows(Backend::Postgres);
}

#[test]
fn corrupt_rows_redis() {
    jq_testkit::needs!(redis_programs);
    corrupt_rows(Backend::Redis);
}
