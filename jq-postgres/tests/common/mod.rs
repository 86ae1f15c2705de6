//! Test support: the server URL, a fresh schema per test, and the testkit
//! harness. Each test works in its own schema `jq_test_<uuid>`, created and
//! migrated in setup, dropped when the test passes and kept when it fails.
//! Without a server the tests skip, saying so once (or fail under
//! `JQ_REQUIRE_SERVICES=1`): `jq_testkit::services`.

#![allow(dead_code)]

use jq_core::Clock;
use jq_core::storage::Storage;
use jq_postgres::{PostgresConfig, PostgresStorage};
use sqlx::Connection;

pub mod pgbouncer;

/// Connections per handle: the suite runs many tests at once on 2 cores.
pub const MAX_CONNECTIONS: u32 = 4;

/// `JQ_POSTGRES_URL`, or the local server.
pub fn url() -> String {
    jq_testkit::services::postgres_url()
}

/// Panics with how to start the server.
pub fn unreachable(e: impl std::fmt::Display) -> ! {
    panic!("PostgreSQL is not reachable at {} ({e}): run scripts/start-services.sh (or set JQ_POSTGRES_URL)", url())
}

/// The configuration of a test handle on `schema`.
pub fn config(schema: &str, clock: Clock) -> PostgresConfig {
    PostgresConfig::new(url()).schema(schema).clock(clock).max_connections(MAX_CONNECTIONS)
}

/// A handle with its own pool on `schema`.
pub async fn connect(schema: &str, clock: Clock) -> PostgresStorage {
    PostgresStorage::connect(config(schema, clock)).await.unwrap_or_else(|e| unreachable(e))
}

/// A fresh, migrated schema.
pub struct Fixture {
    /// Its name.
    pub schema: String,
}

impl Fixture {
    /// Creates and migrates `jq_test_<uuid>`.
    pub async fn new() -> Self {
        let schema = format!("jq_test_{}", uuid::Uuid::new_v4().simple());
        let storage = connect(&schema, Clock::system()).await;
        storage.migrate().await.unwrap_or_else(|e| panic!("migrate {schema}: {e}"));
        storage.close().await;
        Fixture { schema }
    }

    /// A new handle (its own pool) on this schema.
    pub async fn connect(&self, clock: Clock) -> PostgresStorage {
        connect(&self.schema, clock).await
    }

    /// Drops the schema. Call at the end of a passing test only.
    pub async fn cleanup(&self) {
        drop_schema(&self.schema).await;
    }
}

/// `DROP SCHEMA ... CASCADE` on a connection of its own.
pub async fn drop_schema(schema: &str) {
    let mut conn = sqlx::PgConnection::connect(&url()).await.unwrap_or_else(|e| unreachable(e));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("drop schema {schema}: {e}"));
    let _ = conn.close().await;
}

/// The testkit harness: one fresh schema per scenario.
pub struct PostgresHarness(pub Fixture);

#[async_trait::async_trait]
impl jq_testkit::Harness for PostgresHarness {
    type Storage = PostgresStorage;

    async fn connect(&self, clock: Clock) -> PostgresStorage {
        self.0.connect(clock).await
    }

    async fn cleanup(&self) {
        self.0.cleanup().await;
    }
}

/// The testkit's setup function: `None` (skip) when no server answers.
pub async fn harness() -> Option<PostgresHarness> {
    jq_testkit::services::postgres()?;
    Some(PostgresHarness(Fixture::new().await))
}
