//! Keyed jobs through the `Client`: the key limits calls on stores that
//! declare keys (the reference model, and SQLite).

#![allow(clippy::unwrap_used)] // tests may unwrap

use jq::storage::{Capability, Storage};
use jq::{Client, Error, KeyLimit, NewJob, Payload, QueueLimits};

fn job(key: &str) -> jq::JobBuilder {
    NewJob::builder("k", Payload::of(&()).unwrap()).queue("q").key(key)
}

async fn key_limits_through<S: Storage>(client: Client<S>) {
    assert!(client.capabilities().contains(&Capability::Keys));
    client.enqueue(job("acme")).await.unwrap();
    let one = QueueLimits { concurrency: Some(1), rate: None };
    client.set_key_limits("q", None, one).await.unwrap();
    client.set_key_limits("q", Some("acme"), QueueLimits::none()).await.unwrap();
    let report = client.keys("q", 10).await.unwrap();
    assert_eq!(report.default, one);
    assert_eq!(report.overrides, vec![KeyLimit { key: "acme".into(), limits: QueueLimits::none() }]);
    assert_eq!(report.busiest.len(), 1);
    assert_eq!((report.busiest[0].pending, report.busiest[0].limits), (1, QueueLimits::none()));
    client.clear_key_limits("q", "acme").await.unwrap();
    assert_eq!(client.keys("q", 10).await.unwrap().busiest[0].limits, one);
    let bad = client.set_key_limits("bad queue", None, one).await;
    assert!(matches!(bad, Err(Error::InvalidQueue { .. })), "{bad:?}");
}

#[test]
fn key_limits_through_the_client() {
    jq_testkit::__private::block_on(key_limits_through(Client::new(jq_testkit::MemoryStorage::new())));
}

#[cfg(feature = "sqlite")]
#[test]
fn key_limits_through_the_client_on_sqlite() {
    jq_testkit::__private::block_on(async {
        key_limits_through(jq::connect("sqlite::memory:").await.unwrap()).await;
    });
}
