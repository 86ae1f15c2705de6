//! Enqueue from SQL (`<schema>.enqueue`, src/functions/enqueue.sql): the job it stores is
//! the one the Rust enqueue stores (defaults, ids, unique keys, resends),
//! in the caller's transaction, with the wake-up; bad input is refused with
//! a message naming the argument and stores nothing.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use std::time::Duration;

use common::Fixture;
use jq_core::storage::Storage;
use jq_core::{Clock, JobId, NewJob, Payload, Priority, State};
use jq_postgres::PostgresStorage;
use sqlx::Row;
use uuid::Uuid;

/// Runs `SELECT <schema>.enqueue(<args>)` and returns the id.
async fn sql_enqueue(s: &PostgresStorage, args: &str) -> Result<JobId, sqlx::Error> {
    let sql = format!("SELECT \"{}\".enqueue({args})", s.schema());
    let row = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_one(s.pool()).await?;
    Ok(JobId(row.try_get::<Uuid, _>(0)?))
}

async fn count(s: &PostgresStorage) -> i64 {
    let sql = format!("SELECT count(*) FROM \"{}\".jobs", s.schema());
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(s.pool()).await.unwrap()
}

#[tokio::test]
async fn a_job_enqueued_from_sql_is_the_job_rust_would_store() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;

    let from_sql = s.get(sql_enqueue(&s, r#"'send_email', '{"to": "a@example.com",  "n": 1}'"#).await.unwrap()).await;
    let from_sql = from_sql.unwrap();
    let rust = NewJob::builder("send_email", Payload::from_json(r#"{"to": "a@example.com",  "n": 1}"#).unwrap())
        .build()
        .unwrap();
    let from_rust = s.get(s.enqueue(vec![rust]).await.unwrap()[0]).await.unwrap();
    for job in [&from_sql, &from_rust] {
        assert_eq!(job.queue.as_str(), "default");
        assert_eq!(job.kind, "send_email");
        assert_eq!(job.payload.as_str(), r#"{"to": "a@example.com",  "n": 1}"#, "the JSON text as given");
        assert_eq!(job.priority, Priority::Normal);
        assert_eq!(job.state, State::Pending);
        assert_eq!((job.attempts, job.max_attempts), (0, 25));
        assert_eq!(job.unique_key, None);
        assert!(job.errors.is_empty());
    }
    assert_eq!(from_sql.id.0.get_version_num(), 7, "a UUIDv7, like the Rust client's ids");
    assert!(from_sql.id < from_rust.id, "ids in time order across both");

    // Every option, by name; a future run_at is Scheduled.
    let id = sql_enqueue(
        &s,
        "'report', '[1, 2]', queue => 'reports', priority => 'critical', run_at => now() + interval '1 hour', \
         max_attempts => 3, unique_key => 'daily'",
    )
    .await
    .unwrap();
    let job = s.get(id).await.unwrap();
    assert_eq!(
        (job.queue.as_str(), job.priority, job.state, job.max_attempts, job.unique_key.as_deref()),
        ("reports", Priority::Critical, State::Scheduled, 3, Some("daily"))
    );
    assert!(job.run_at > job.created_at + chrono::Duration::minutes(59));
    s.close().await;
    f.cleanup().await;
}

#[tokio::test]
async fn unique_keys_and_resent_ids_agree_with_the_rust_enqueue() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;

    // A key held by a Rust-enqueued job: SQL gets that job's id, and the
    // other way round.
    let keyed = NewJob::builder("k", Payload::from_json("{}").unwrap()).unique_key("rust-key").build().unwrap();
    let rust_id = s.enqueue(vec![keyed]).await.unwrap()[0];
    assert_eq!(sql_enqueue(&s, "'k', '{}', unique_key => 'rust-key'").await.unwrap(), rust_id);
    let sql_id = sql_enqueue(&s, "'k', '{}', unique_key => 'sql-key'").await.unwrap();
    let again = NewJob::builder("k", Payload::from_json("{}").unwrap()).unique_key("sql-key").build().unwrap();
    assert_eq!(s.enqueue(vec![again]).await.unwrap(), vec![sql_id]);
    // The key is per queue.
    let other = sql_enqueue(&s, "'k', '{}', queue => 'other', unique_key => 'sql-key'").await.unwrap();
    assert_ne!(other, sql_id);

    // A producer's id: a resend after a lost answer stores nothing twice.
    let id = Uuid::now_v7();
    let args = format!("'k', '{{\"n\": 1}}', id => '{id}'");
    assert_eq!(sql_enqueue(&s, &args).await.unwrap(), JobId(id));
    assert_eq!(sql_enqueue(&s, &args).await.unwrap(), JobId(id));
    assert_eq!(count(&s).await, 4, "rust-key, sql-key, other's sql-key, the producer's id");

    // Once the key's job finished, the key is free again.
    let claimed = s
        .claim(&jq_core::storage::ClaimRequest::new(vec!["default".parse().unwrap()], 10, Duration::from_secs(30), "w"))
        .await
        .unwrap()
        .jobs;
    let settle = claimed
        .iter()
        .map(|j| jq_core::storage::Settlement {
            lease: j.lease_ref().unwrap(),
            outcome: jq_core::storage::Outcome::Ack,
        })
        .collect::<Vec<_>>();
    s.settle(settle).await.unwrap();
    let fresh = sql_enqueue(&s, "'k', '{}', unique_key => 'rust-key'").await.unwrap();
    assert_ne!(fresh, rust_id, "a finished job does not hold its key");
    s.close().await;
    f.cleanup().await;
}

#[tokio::test]
async fn bad_input_is_refused_naming_the_argument_and_stores_nothing() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;
    let big = format!("'k', '\"{}\"'", "x".repeat(1024 * 1024));
    let cases = [
        ("'', '{}'", "kind"),
        ("E'a\\nb', '{}'", "kind"),
        ("'k', NULL", "payload is NULL"),
        (big.as_str(), "payload of"),
        (r#"'k', '{"a": "\u0000"}'"#, "\\u0000"),
        ("'k', '{}', queue => 'two words'", "queue"),
        ("'k', '{}', queue => ''", "queue"),
        ("'k', '{}', priority => 'urgent'", "priority"),
        ("'k', '{}', max_attempts => 0", "max_attempts"),
        ("'k', '{}', unique_key => ''", "unique_key"),
        ("'k', '{}', key => ''", "enqueue: key"),
        ("'k', '{}', key => repeat('x', 256)", "enqueue: key"),
    ];
    for (args, names) in cases {
        let err = sql_enqueue(&s, args).await.unwrap_err();
        let sqlx::Error::Database(db) = &err else { panic!("{args}: {err}") };
        assert_eq!(db.code().as_deref(), Some("22023"), "{args}: {err}");
        assert!(db.message().contains(names), "{args}: {:?} should name {names:?}", db.message());
    }
    let sql = format!("SELECT \"{}\".enqueue('k', 'not json')", s.schema());
    assert!(sqlx::query(sqlx::AssertSqlSafe(sql)).execute(s.pool()).await.is_err(), "json is checked by its type");
    assert_eq!(count(&s).await, 0, "nothing stored");
    s.close().await;
    f.cleanup().await;
}

#[tokio::test]
async fn a_job_from_sql_is_claimable_at_commit_and_wakes_a_listener() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;
    let mut wakes = s.subscribe().expect("PostgreSQL wakes claimers");
    wakes.mark_unchanged();

    let mut tx = s.pool().begin().await.unwrap();
    let sql = format!("SELECT \"{}\".enqueue('k', '{{}}')", s.schema());
    let id: Uuid = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(&mut *tx).await.unwrap();
    let request =
        jq_core::storage::ClaimRequest::new(vec!["default".parse().unwrap()], 10, Duration::from_secs(30), "w");
    assert!(s.claim(&request).await.unwrap().jobs.is_empty(), "not visible before the commit");
    tx.commit().await.unwrap();

    tokio::time::timeout(Duration::from_secs(10), wakes.changed()).await.expect("woken at the commit").unwrap();
    let claimed = s.claim(&request).await.unwrap().jobs;
    assert_eq!(claimed.iter().map(|j| j.id.0).collect::<Vec<_>>(), vec![id]);

    // A rolled-back enqueue leaves nothing.
    let mut tx = s.pool().begin().await.unwrap();
    let sql = format!("SELECT \"{}\".enqueue('k', '{{}}')", s.schema());
    sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut *tx).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(count(&s).await, 1);
    s.close().await;
    f.cleanup().await;
}

/// The trailing `key` argument: a keyed job from SQL is the one
/// the Rust enqueue stores with that key, by name or by position, and the
/// calls without it still resolve (no ambiguous overload).
#[tokio::test]
async fn a_key_given_to_the_sql_enqueue_is_stored() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;
    let named = s.get(sql_enqueue(&s, "'k', '{}', queue => 'q', key => 'tenant-1'").await.unwrap()).await.unwrap();
    assert_eq!(named.key.as_deref(), Some("tenant-1"));
    let positional = sql_enqueue(&s, "'k', '{}', 'q', 'normal', NULL, 25, NULL, NULL, 'tenant-2'").await.unwrap();
    assert_eq!(s.get(positional).await.unwrap().key.as_deref(), Some("tenant-2"));
    let plain = s.get(sql_enqueue(&s, "'k', '{}', 'q'").await.unwrap()).await.unwrap();
    assert_eq!(plain.key, None);
    s.close().await;
    f.cleanup().await;
}
