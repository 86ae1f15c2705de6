//! The layout marker `P:layout` (schema.rs, "The layout marker"): written on
//! a new prefix, and a prefix this build cannot read refused at connect,
//! with nothing written.
#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use jq_core::storage::{Storage, StorageExt};
use jq_core::{Clock, NewJob, Payload};
use jq_redis::{LAYOUT, RedisConfig, RedisError, RedisStorage};

async fn raw() -> redis::aio::MultiplexedConnection {
    redis::Client::open(common::url()).unwrap().get_multiplexed_async_connection().await.unwrap()
}

async fn try_connect(prefix: &str) -> Result<RedisStorage, RedisError> {
    RedisStorage::connect(RedisConfig::new(common::url()).prefix(prefix)).await
}

/// Every key under `prefix`, sorted.
async fn keys_of(prefix: &str) -> Vec<String> {
    let mut all: Vec<String> =
        redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(&mut raw().await).await.unwrap();
    all.sort();
    all
}

fn job() -> NewJob {
    NewJob::builder("k", Payload::from_json("{}").unwrap()).queue("q").build().unwrap()
}

#[tokio::test]
async fn a_new_prefix_gets_the_marker_and_keeps_it() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let s = common::connect(&prefix, Clock::system()).await;
    let marker: String = redis::cmd("GET").arg(s.keys().layout()).query_async(&mut raw().await).await.unwrap();
    assert_eq!((marker, LAYOUT), ("1".to_owned(), 1));
    s.enqueue_one(job()).await.unwrap();
    drop(common::connect(&prefix, Clock::system()).await);
    assert_eq!(s.stats().await.unwrap().total(jq_core::State::Pending), 1);
    common::drop_prefix(&prefix).await;
}

/// A marker naming a newer layout: refused, as PostgreSQL refuses a schema
/// a newer build migrated, and nothing is written.
#[tokio::test]
async fn a_newer_layout_is_refused() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let marker = jq_redis::Keys::new(&prefix).layout();
    let () = redis::cmd("SET").arg(&marker).arg(LAYOUT + 1).query_async(&mut raw().await).await.unwrap();
    let err = try_connect(&prefix).await.unwrap_err();
    assert!(
        matches!(&err, RedisError::LayoutTooNew { found, known, .. } if *found == LAYOUT + 1 && *known == LAYOUT),
        "{err:?}"
    );
    assert!(err.to_string().contains("upgrade jq-redis"), "{err}");
    assert_eq!(keys_of(&prefix).await, vec![marker]);
    common::drop_prefix(&prefix).await;
}

#[tokio::test]
async fn a_marker_that_is_no_layout_number_is_refused() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let marker = jq_redis::Keys::new(&prefix).layout();
    let () = redis::cmd("SET").arg(&marker).arg("v2").query_async(&mut raw().await).await.unwrap();
    let err = try_connect(&prefix).await.unwrap_err();
    assert!(matches!(&err, RedisError::UnknownLayout { found, .. } if found == "v2"), "{err:?}");
    common::drop_prefix(&prefix).await;
}

/// A prefix a development build left (its queues' `v2:` keys, no marker):
/// refused with the error that says so, the store left as it was.
#[tokio::test]
async fn a_development_builds_layout_is_refused_and_left_alone() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let keys = jq_redis::Keys::new(&prefix);
    let mut conn = raw().await;
    let dev = format!("{}v2:states", keys.base("mail"));
    let () = redis::pipe()
        .cmd("SADD")
        .arg(keys.registry())
        .arg("default")
        .arg("mail")
        .ignore()
        .cmd("HSET")
        .arg(&dev)
        .arg("0123456789abcdef0123456789abcdef")
        .arg("pending\x000\x001\0\0\0\0\0")
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    let before = keys_of(&prefix).await;
    let err = try_connect(&prefix).await.unwrap_err();
    assert!(matches!(&err, RedisError::DevelopmentLayout { queue, .. } if queue == "mail"), "{err:?}");
    assert!(err.to_string().contains("unreleased development build"), "{err}");
    assert_eq!(keys_of(&prefix).await, before, "no marker, nothing else written");
    common::drop_prefix(&prefix).await;
}

/// A prefix emptied under a running handle (its registry written again
/// by the next enqueue) gets its marker from the next connect.
#[tokio::test]
async fn a_prefix_emptied_under_a_running_handle_is_marked_again() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let s = common::connect(&prefix, Clock::system()).await;
    s.enqueue_one(job()).await.unwrap();
    assert!(s.delete_all_keys().await.unwrap() > 0);
    s.enqueue_one(job()).await.unwrap();
    assert!(!keys_of(&prefix).await.contains(&s.keys().layout()));
    let again = common::connect(&prefix, Clock::system()).await;
    assert!(keys_of(&prefix).await.contains(&s.keys().layout()));
    assert_eq!(again.stats().await.unwrap().total(jq_core::State::Pending), 1);
    common::drop_prefix(&prefix).await;
}
