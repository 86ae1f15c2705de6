//! Shared by the integration tests: the server URL, a random prefix per
//! test, and cleanup of that prefix. Without a server the tests skip,
//! saying so once (or fail under `JQ_REQUIRE_SERVICES=1`):
//! `jq_testkit::services`.

#![allow(dead_code)]

pub mod cluster;

use jq_core::Clock;
use jq_redis::{RedisConfig, RedisStorage};

/// The server under test: `JQ_REDIS_URL`, default `redis://127.0.0.1:6379`.
pub fn url() -> String {
    jq_testkit::services::redis_url()
}

/// A fresh key prefix, `jqtest:<uuid>`.
pub fn prefix() -> String {
    format!("jqtest:{}", uuid::Uuid::new_v4().simple())
}

/// Connects, or fails the test with how to start the server.
pub async fn connect(prefix: &str, clock: Clock) -> RedisStorage {
    let url = url();
    RedisStorage::connect(RedisConfig::new(url.clone()).prefix(prefix).clock(clock))
        .await
        .unwrap_or_else(|e| panic!("cannot reach Redis at {url}: {e}; run scripts/start-services.sh"))
}

/// Deletes every key under `prefix` (SCAN MATCH, then DEL).
pub async fn drop_prefix(prefix: &str) {
    let client = redis::Client::open(url()).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("cannot reach Redis: {e}; run scripts/start-services.sh"));
    let pattern = format!("{prefix}:*");
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .expect("SCAN");
        if !keys.is_empty() {
            let _: () = redis::cmd("UNLINK").arg(&keys).query_async(&mut conn).await.expect("UNLINK");
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
}

/// One test's private namespace.
pub struct RedisHarness {
    /// Its key prefix.
    pub prefix: String,
}

#[async_trait::async_trait]
impl jq_testkit::Harness for RedisHarness {
    type Storage = RedisStorage;

    async fn connect(&self, clock: Clock) -> RedisStorage {
        connect(&self.prefix, clock).await
    }

    async fn cleanup(&self) {
        drop_prefix(&self.prefix).await;
    }
}

/// A fresh harness under a random prefix; `None` (skip) when no server
/// answers.
pub async fn setup() -> Option<RedisHarness> {
    jq_testkit::services::redis()?;
    Some(RedisHarness { prefix: prefix() })
}
