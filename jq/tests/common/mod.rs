//! Harnesses that open every backend through `jq::connect_with`, each test
//! in its own namespace: a temp file, a fresh schema, a random key prefix.
//! A namespace is removed when its test passed and kept when it failed.
//! Without a server, its tests skip saying so once (or fail under
//! `JQ_REQUIRE_SERVICES=1`): `jq_testkit::services`.

#![allow(dead_code)] // each test file uses the harnesses of its backends
#![allow(clippy::unwrap_used)] // tests may unwrap

use jq::{Backend, Client, Clock, ConnectOptions};

/// Connections per PostgreSQL handle: many tests run at once on 2 cores.
const MAX_CONNECTIONS: u32 = 4;

/// `JQ_POSTGRES_URL`, or the local server.
pub fn postgres_url() -> String {
    jq_testkit::services::postgres_url()
}

/// `JQ_REDIS_URL`, or the local server.
pub fn redis_url() -> String {
    jq_testkit::services::redis_url()
}

/// Connects through the facade, or fails the test saying how to start the
/// servers.
pub async fn connect(url: &str, clock: Clock) -> Client {
    let mut options = ConnectOptions::new().clock(clock);
    // A pool size is PostgreSQL's alone: the other backends refuse it.
    if url.starts_with("postgres") {
        options = options.max_connections(MAX_CONNECTIONS);
    }
    jq::connect_with(url, &options)
        .await
        .unwrap_or_else(|e| panic!("cannot open {url} ({e}): is the server running? run scripts/start-services.sh"))
}

/// `url` with one more query parameter.
fn with_param(url: &str, name: &str, value: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{name}={value}")
}

/// One test's namespace, named by the URL that opens it.
pub struct Namespace {
    /// The URL `jq::connect` opens it with.
    pub url: String,
    /// SQLite: the temp directory, `None` once cleaned up. Dropped without
    /// cleanup (a failed test), it is kept for inspection.
    dir: std::sync::Mutex<Option<tempfile::TempDir>>,
}

impl Namespace {
    /// A SQLite file in a fresh temp directory.
    pub fn sqlite() -> Self {
        let dir = tempfile::Builder::new().prefix("jq-facade-").tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("jobs.db").display());
        Namespace { url, dir: std::sync::Mutex::new(Some(dir)) }
    }

    /// A fresh PostgreSQL schema `jq_facade_<uuid>`, migrated through the
    /// facade.
    pub async fn postgres() -> Self {
        let ns = Self::postgres_unmigrated();
        let client = ns.connect(Clock::system()).await;
        client.migrate().await.unwrap_or_else(|e| panic!("migrate {}: {e}", ns.url));
        ns
    }

    /// The name of a PostgreSQL schema `jq_facade_<uuid>` that does not
    /// exist yet.
    pub fn postgres_unmigrated() -> Self {
        let schema = format!("jq_facade_{}", uuid::Uuid::new_v4().simple());
        Namespace { url: with_param(&postgres_url(), "schema", &schema), dir: std::sync::Mutex::new(None) }
    }

    /// A random Redis key prefix `jqfacade:<uuid>`.
    pub fn redis() -> Self {
        let prefix = format!("jqfacade:{}", uuid::Uuid::new_v4().simple());
        Namespace { url: with_param(&redis_url(), "prefix", &prefix), dir: std::sync::Mutex::new(None) }
    }

    /// A new handle on this namespace with its own connections.
    pub async fn connect(&self, clock: Clock) -> Client {
        connect(&self.url, clock).await
    }

    /// Removes the namespace: the temp directory, the schema, the keys.
    pub async fn cleanup(&self) {
        if let Some(dir) = self.dir.lock().unwrap().take() {
            drop(dir);
            return;
        }
        let client = self.connect(Clock::system()).await;
        match client.storage() {
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => {
                let drop = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", s.schema());
                jq::postgres::sqlx::raw_sql(jq::postgres::sqlx::AssertSqlSafe(drop))
                    .execute(s.pool())
                    .await
                    .unwrap_or_else(|e| panic!("drop schema {}: {e}", s.schema()));
                s.close().await;
            }
            #[cfg(feature = "redis")]
            Backend::Redis(s) => {
                s.delete_all_keys().await.unwrap();
            }
            _ => {}
        }
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            eprintln!("test failed: its database is kept at {}", dir.keep().display());
        }
    }
}

/// The testkit harness over a namespace.
pub struct Harness(pub Namespace);

#[async_trait::async_trait]
impl jq_testkit::Harness for Harness {
    type Storage = Backend;

    async fn connect(&self, clock: Clock) -> Backend {
        self.0.connect(clock).await.storage().clone()
    }

    async fn cleanup(&self) {
        self.0.cleanup().await;
    }
}

/// Setup of the SQLite suites.
pub async fn sqlite() -> Harness {
    Harness(Namespace::sqlite())
}

/// Setup of the PostgreSQL suites: `None` (skip) when no server answers.
pub async fn postgres() -> Option<Harness> {
    jq_testkit::services::postgres()?;
    Some(Harness(Namespace::postgres().await))
}

/// Setup of the Redis suites: `None` (skip) when no server answers.
pub async fn redis() -> Option<Harness> {
    jq_testkit::services::redis()?;
    Some(Harness(Namespace::redis()))
}
