//! Keyed jobs through the `Client`: the key limits calls on a store that
//! declares keys (the reference model), and the refusals of one that does
//! not (SQLite, for now).

#![allow(clippy::unwrap_used)] // tests may unwrap

use jq::storage::Capability;
use jq::{Client, Error, KeyLimit, NewJob, Payload, QueueLimits};

fn job(key: &str) -> jq::JobBuilder {
    NewJob::builder("k", Payload::of(&()).unwrap()).queue("q").key(key)
}

#[test]
fn key_limits_through_the_client() {
    jq_testkit::__private::block_on(async {
        let client = Client::new(jq_testkit::MemoryStorage::new());
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
    });
}

#[cfg(feature = "sqlite")]
#[test]
fn a_store_without_keys_refuses_them() {
    jq_testkit::__private::block_on(async {
        let client = jq::connect("sqlite::memory:").await.unwrap();
        assert!(!client.capabilities().contains(&Capability::Keys));
        let got = client.enqueue(job("acme")).await;
        assert!(matches!(got, Err(Error::Unsupported { capability: Capability::Keys })), "{got:?}");
        assert!(client.stats().await.unwrap().queues.is_empty(), "nothing stored");
        let got = client.set_key_limits("q", None, QueueLimits::none()).await;
        assert!(matches!(got, Err(Error::Unsupported { capability: Capability::Keys })), "{got:?}");
        let got = client.keys("q", 10).await;
        assert!(matches!(got, Err(Error::Unsupported { capability: Capability::Keys })), "{got:?}");
    });
}
