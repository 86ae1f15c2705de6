//! Unreachable servers and timeouts give typed, retryable errors.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use std::time::Duration;

use common::Fixture;
use jq_core::storage::{Storage, StorageExt};
use jq_core::{Clock, Error, NewJob, Payload};
use jq_postgres::{PostgresConfig, PostgresError, PostgresStorage};

/// A port nothing listens on.
fn closed_port() -> u16 {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    socket.local_addr().unwrap().port()
}

#[tokio::test]
async fn connecting_to_a_closed_port_says_what_is_wrong() {
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", closed_port());
    let err = PostgresStorage::connect(PostgresConfig::new(url)).await.unwrap_err();
    assert!(matches!(err, PostgresError::Connect { .. }), "{err:?}");
    assert!(err.is_unavailable());
    let msg = err.to_string();
    assert!(msg.contains("cannot connect") && msg.contains("start-services"), "{msg}");
    assert!(Error::from(err).is_retryable());
}

#[tokio::test]
async fn operations_on_an_unreachable_server_are_unavailable() {
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", closed_port());
    let pool =
        sqlx::postgres::PgPoolOptions::new().acquire_timeout(Duration::from_millis(300)).connect_lazy(&url).unwrap();
    let s = PostgresStorage::from_pool(pool, PostgresConfig::new(url)).unwrap();
    let err = s.stats().await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { backend: "postgres", .. }), "{err:?}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn a_statement_timeout_is_unavailable() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;
    let id = s.enqueue_one(NewJob::builder("k", Payload::from_json("{}").unwrap()).build().unwrap()).await.unwrap();
    let impatient = PostgresStorage::connect(
        common::config(&f.schema, Clock::system()).statement_timeout(Duration::from_millis(200)),
    )
    .await
    .unwrap();
    // Hold the row's lock in another transaction: the cancel waits on it
    // until the statement timeout fires.
    let mut tx = s.pool().begin().await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("SELECT 1 FROM \"{}\".jobs WHERE id = $1 FOR UPDATE", f.schema)))
        .bind(id.0)
        .execute(&mut *tx)
        .await
        .unwrap();
    let err = impatient.cancel(id).await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    tx.rollback().await.unwrap();
    impatient.cancel(id).await.unwrap();
    f.cleanup().await;
}

#[tokio::test]
async fn terminated_connection_is_unavailable_and_the_pool_recovers() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = PostgresStorage::connect(common::config(&f.schema, Clock::system()).max_connections(1)).await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(s.pool()).await.unwrap();
    let admin = f.connect(Clock::system()).await;
    sqlx::query("SELECT pg_terminate_backend($1)").bind(pid).execute(admin.pool()).await.unwrap();
    // The next operation on the killed connection fails retryably...
    let first = s.stats().await;
    if let Err(e) = &first {
        assert!(e.is_retryable(), "{e:?}");
    }
    // ...and the pool replaces it.
    s.stats().await.unwrap();
    f.cleanup().await;
}

/// A schema that was never migrated is a fatal, typed error that says what
/// to do, and it stops a worker pool, whose handle returns it.
#[tokio::test]
async fn an_unmigrated_schema_is_fatal_and_stops_the_pool() {
    jq_testkit::needs!(postgres);
    let schema = format!("jq_test_{}", uuid::Uuid::new_v4().simple());
    let s = common::connect(&schema, Clock::system()).await;
    let err = s.stats().await.unwrap_err();
    assert!(schema_missing(&err) && err.is_fatal(), "{err:?}");
    assert!(err.to_string().contains("jqctl migrate"), "{err}");
    let result = jq_core::WorkerPool::new(s.clone())
        .queues(["q"])
        .register_raw("k", |_job, _ctx| async { Ok(()) })
        .run_until(std::future::pending())
        .await;
    assert!(result.as_ref().is_err_and(schema_missing), "{result:?}");
    s.close().await;
}

/// A schema migrated by an older jq lacks the leaders table: the pool's
/// maintenance stops it with the same fatal error.
#[tokio::test]
async fn a_schema_older_than_this_build_stops_the_pool() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP TABLE \"{}\".leaders", f.schema))).execute(s.pool()).await.unwrap();
    let handle = jq_core::WorkerPool::new(s.clone())
        .queues(["q"])
        .register_raw("k", |_job, _ctx| async { Ok(()) })
        .start()
        .unwrap();
    let stopped = handle.shutdown_token();
    tokio::time::timeout(Duration::from_secs(30), stopped.cancelled()).await.expect("the pool stops by itself");
    let err = handle.wait().await.unwrap_err();
    assert!(schema_missing(&err), "{err:?}");
    f.cleanup().await;
}

/// The fatal error of a schema never migrated: `Fatal` carrying
/// `PostgresError::SchemaMissing`.
fn schema_missing(err: &Error) -> bool {
    matches!(
        err,
        Error::Fatal { backend: "postgres", source }
            if matches!(source.downcast_ref(), Some(jq_postgres::PostgresError::SchemaMissing { .. }))
    )
}

/// `url` with one more query parameter.
fn with_param(url: &str, param: &str) -> String {
    if url.contains('?') { format!("{url}&{param}") } else { format!("{url}?{param}") }
}

/// A server whose sessions are read-only, as a demoted primary's are: its
/// writes answer SQLSTATE 25006 while its pings succeed.
fn read_only_url() -> String {
    with_param(&common::url(), "options=-c%20default_transaction_read_only%3Don")
}

#[tokio::test]
async fn a_read_only_answer_is_retryable_and_drops_the_connection() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = PostgresStorage::connect(PostgresConfig::new(read_only_url()).schema(&f.schema).max_connections(1))
        .await
        .unwrap();
    let before: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(s.pool()).await.unwrap();
    let err =
        s.enqueue_one(NewJob::builder("k", Payload::from_json("{}").unwrap()).build().unwrap()).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    let Error::Unavailable { source, .. } = &err else { panic!("{err:?}") };
    assert!(matches!(source.downcast_ref::<PostgresError>(), Some(PostgresError::ReadOnly { .. })), "{err:?}");
    assert!(err.to_string().contains("25006"), "{err}");
    // The pool's one connection answered read-only: it is not used again.
    let after: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(s.pool()).await.unwrap();
    assert_ne!(before, after, "the read-only connection was used again");
    s.close().await;
    f.cleanup().await;
}

#[tokio::test]
async fn read_write_sessions_refuse_a_read_only_server_at_connect() {
    jq_testkit::needs!(postgres);
    let url = with_param(&read_only_url(), "target_session_attrs=read-write");
    let err = PostgresStorage::connect(PostgresConfig::new(url)).await.unwrap_err();
    assert!(matches!(err, PostgresError::NoPrimary { .. }), "{err:?}");
    assert!(err.is_unavailable());
}

#[tokio::test]
async fn a_multi_host_url_goes_to_the_first_host_that_answers() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    // A host that is down first, then the server.
    let url = common::url().replacen('@', &format!("@127.0.0.1:{},", closed_port()), 1);
    assert!(url.contains(','), "the test URL has no user part to put a host before: {url}");
    for url in [url.clone(), with_param(&url, "target_session_attrs=read-write")] {
        let s = PostgresStorage::connect(PostgresConfig::new(url).schema(&f.schema)).await.unwrap();
        s.enqueue_one(NewJob::builder("k", Payload::from_json("{}").unwrap()).build().unwrap()).await.unwrap();
        s.close().await;
    }
    let s = f.connect(Clock::system()).await;
    assert_eq!(s.stats().await.unwrap().total(jq_core::State::Pending), 2);
    s.close().await;
    f.cleanup().await;
}

#[test]
fn a_standby_target_is_refused() {
    let url = "postgres://postgres@h1:5432,h2:5432/postgres?target_session_attrs=standby";
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let err = rt.block_on(PostgresStorage::connect(PostgresConfig::new(url))).unwrap_err();
    assert!(matches!(err, PostgresError::InvalidUrl(_)), "{err:?}");
    assert!(err.to_string().contains("target_session_attrs=standby"), "{err}");
}
