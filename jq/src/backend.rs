//! [`Backend`]: one storage of whichever compiled-in backend a URL named,
//! statically dispatched, and how it is opened ([`ConnectOptions`]).

use std::time::Duration;

use async_trait::async_trait;
use jq_core::{
    ClaimRequest, Clock, Election, Fire, FireOutcome, Job, JobFilter, JobId, Leader, LeaseRef, LeaseToken, NewJob,
    PeriodicInfo, QueueInfo, QueueLimits, QueueName, Result, Settled, Settlement, State, Stats, Storage, Throughput,
    Timestamp, WorkSignal,
};

use crate::error::SetupError;
use crate::url::BackendUrl;

/// A store of any backend compiled into this build (features `sqlite`,
/// `postgres`, `redis`): an enum, so every call is a `match` and a direct
/// call, never a trait object. Cheap to clone (each backend is an `Arc`
/// inside).
///
/// Made by [`crate::connect`] (inside a [`crate::Client`]) or
/// [`Backend::connect`], or from a backend storage you opened yourself
/// (`Backend::from(storage)`), when you need a setting
/// [`ConnectOptions`] does not have.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Backend {
    /// A SQLite file.
    #[cfg(feature = "sqlite")]
    Sqlite(jq_sqlite::SqliteStorage),
    /// A PostgreSQL schema.
    #[cfg(feature = "postgres")]
    Postgres(jq_postgres::PostgresStorage),
    /// A Redis key prefix.
    #[cfg(feature = "redis")]
    Redis(jq_redis::RedisStorage),
}

/// Runs `$body` with `$s` bound to the backend storage inside `$backend`
/// (a `&Backend`): the one place that lists the variants for a call.
macro_rules! dispatch {
    ($backend:expr, $s:ident => $body:expr) => {
        match *$backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(ref $s) => $body,
            #[cfg(feature = "postgres")]
            Backend::Postgres(ref $s) => $body,
            #[cfg(feature = "redis")]
            Backend::Redis(ref $s) => $body,
        }
    };
}

/// Settings [`Backend::connect_with`] applies to whichever backend the URL
/// names. The defaults are each backend's own.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    clock: Option<Clock>,
    max_payload_bytes: Option<usize>,
    max_connections: Option<u32>,
    acquire_timeout: Option<Duration>,
    response_timeout: Option<Duration>,
    keepalive: Option<Option<Duration>>,
}

impl ConnectOptions {
    /// The backends' defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes "now" from `clock` (default the system clock); tests pass a
    /// [`jq_core::ManualClock`]'s clock. The worker pool follows it too.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Refuses payloads over `bytes` of JSON (default 1 MiB).
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = Some(bytes);
        self
    }

    /// PostgreSQL: the size of the connection pool (default 10). Ignored by
    /// the other backends.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = Some(n);
        self
    }

    /// PostgreSQL: how long an operation waits for a pooled connection
    /// (default 5 s). Ignored by the other backends.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = Some(timeout);
        self
    }

    /// PostgreSQL and Redis: how long a storage call waits for the server
    /// (default 10 s) before it fails as retryable and its connection is
    /// dropped: how soon a connection that went silent is noticed. See
    /// `jq_postgres::PostgresConfig::response_timeout` and
    /// `jq_redis::RedisConfig::response_timeout`. Ignored by SQLite.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = Some(timeout);
        self
    }

    /// Redis: TCP keepalive on its connections (default 15 s; `None` turns
    /// it off); see `jq_redis::RedisConfig::keepalive`. Ignored by the
    /// other backends.
    pub fn keepalive(mut self, idle: Option<Duration>) -> Self {
        self.keepalive = Some(idle);
        self
    }
}

impl Backend {
    /// Opens the store `url` names with the backends' defaults; see
    /// [`Backend::connect_with`].
    pub async fn connect(url: &str) -> Result<Self, SetupError> {
        Self::connect_with(url, &ConnectOptions::default()).await
    }

    /// Parses `url` ([`BackendUrl`]) and opens its store with `options`.
    pub async fn connect_with(url: &str, options: &ConnectOptions) -> Result<Self, SetupError> {
        Self::open(&BackendUrl::parse(url)?, options).await
    }

    /// Opens the store of a parsed URL.
    ///
    /// - SQLite: opens the file (creating it when missing, but not its
    ///   directory) and creates or upgrades jq's tables in it, on the calling
    ///   thread: a few milliseconds, at start-up.
    /// - PostgreSQL: connects a pool; does **not** migrate (see
    ///   [`Backend::migrate`]), because schema changes are a deployment step
    ///   that an application starting several replicas should run once, not
    ///   race for at every start.
    /// - Redis: connects and loads the scripts; there is no schema.
    ///
    /// A URL whose backend is not compiled in gives
    /// [`SetupError::NotCompiled`] naming the feature to enable.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres", feature = "redis")), allow(unused_variables))]
    pub async fn open(url: &BackendUrl, options: &ConnectOptions) -> Result<Self, SetupError> {
        match url {
            #[cfg(feature = "sqlite")]
            BackendUrl::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
                    && !dir.is_dir()
                {
                    return Err(SetupError::InvalidUrl {
                        url: format!("sqlite://{}", path.display()),
                        reason: format!(
                            "directory {} does not exist; create it, or name a file in an existing directory",
                            dir.display()
                        ),
                    });
                }
                let mut config = jq_sqlite::SqliteConfig::new(path);
                if let Some(clock) = &options.clock {
                    config = config.clock(clock.clone());
                }
                if let Some(bytes) = options.max_payload_bytes {
                    config = config.max_payload_bytes(bytes);
                }
                Ok(Backend::Sqlite(jq_sqlite::SqliteStorage::open(config)?))
            }
            #[cfg(feature = "postgres")]
            BackendUrl::Postgres { url, schema } => {
                let mut config = jq_postgres::PostgresConfig::new(url.as_str());
                if let Some(schema) = schema {
                    config = config.schema(schema.as_str());
                }
                if let Some(clock) = &options.clock {
                    config = config.clock(clock.clone());
                }
                if let Some(bytes) = options.max_payload_bytes {
                    config = config.max_payload_bytes(bytes);
                }
                if let Some(n) = options.max_connections {
                    config = config.max_connections(n);
                }
                if let Some(timeout) = options.acquire_timeout {
                    config = config.acquire_timeout(timeout);
                }
                if let Some(timeout) = options.response_timeout {
                    config = config.response_timeout(timeout);
                }
                Ok(Backend::Postgres(jq_postgres::PostgresStorage::connect(config).await?))
            }
            #[cfg(feature = "redis")]
            BackendUrl::Redis { url, prefix } => {
                let mut config = jq_redis::RedisConfig::new(url.as_str());
                if let Some(prefix) = prefix {
                    config = config.prefix(prefix.as_str());
                }
                if let Some(clock) = &options.clock {
                    config = config.clock(clock.clone());
                }
                if let Some(bytes) = options.max_payload_bytes {
                    config = config.max_payload_bytes(bytes);
                }
                if let Some(timeout) = options.response_timeout {
                    config = config.response_timeout(timeout);
                }
                if let Some(idle) = options.keepalive {
                    config = config.keepalive(idle);
                }
                Ok(Backend::Redis(jq_redis::RedisStorage::connect(config).await?))
            }
            #[allow(unreachable_patterns)] // every backend compiled in
            other => Err(not_compiled(other)),
        }
    }

    /// Creates or upgrades jq's schema and returns how many migrations were
    /// applied. PostgreSQL: the schema's migrations, in one transaction
    /// under an advisory lock (concurrent calls are safe); run it once per
    /// deployment, or at start-up of a single process. SQLite migrates when
    /// the file is opened, and Redis has no schema: for them it does nothing
    /// and returns 0.
    pub async fn migrate(&self) -> Result<usize, SetupError> {
        match *self {
            #[cfg(feature = "postgres")]
            Backend::Postgres(ref s) => Ok(s.migrate().await?),
            #[allow(unreachable_patterns)] // PostgreSQL only
            _ => Ok(0),
        }
    }

    /// The backend's name: `"sqlite"`, `"postgres"` or `"redis"` (its Cargo
    /// feature).
    pub fn name(&self) -> &'static str {
        match *self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(_) => "sqlite",
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => "postgres",
            #[cfg(feature = "redis")]
            Backend::Redis(_) => "redis",
        }
    }

    /// The SQLite storage, when this is one.
    #[cfg(feature = "sqlite")]
    pub fn as_sqlite(&self) -> Option<&jq_sqlite::SqliteStorage> {
        match *self {
            Backend::Sqlite(ref s) => Some(s),
            #[allow(unreachable_patterns)] // SQLite only
            _ => None,
        }
    }

    /// The PostgreSQL storage (its pool, its schema), when this is one.
    #[cfg(feature = "postgres")]
    pub fn as_postgres(&self) -> Option<&jq_postgres::PostgresStorage> {
        match *self {
            Backend::Postgres(ref s) => Some(s),
            #[allow(unreachable_patterns)] // PostgreSQL only
            _ => None,
        }
    }

    /// The Redis storage, when this is one.
    #[cfg(feature = "redis")]
    pub fn as_redis(&self) -> Option<&jq_redis::RedisStorage> {
        match *self {
            Backend::Redis(ref s) => Some(s),
            #[allow(unreachable_patterns)] // Redis only
            _ => None,
        }
    }
}

/// The error for a URL whose backend this build left out.
fn not_compiled(url: &BackendUrl) -> SetupError {
    let backend = match url {
        BackendUrl::Sqlite(_) => "SQLite",
        BackendUrl::Postgres { .. } => "PostgreSQL",
        BackendUrl::Redis { .. } => "Redis",
    };
    SetupError::NotCompiled { backend, feature: url.backend() }
}

#[cfg(feature = "sqlite")]
impl From<jq_sqlite::SqliteStorage> for Backend {
    fn from(s: jq_sqlite::SqliteStorage) -> Self {
        Backend::Sqlite(s)
    }
}

#[cfg(feature = "postgres")]
impl From<jq_postgres::PostgresStorage> for Backend {
    fn from(s: jq_postgres::PostgresStorage) -> Self {
        Backend::Postgres(s)
    }
}

#[cfg(feature = "redis")]
impl From<jq_redis::RedisStorage> for Backend {
    fn from(s: jq_redis::RedisStorage) -> Self {
        Backend::Redis(s)
    }
}

/// Every method is the same method of the backend inside: one `match`.
#[async_trait]
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres", feature = "redis")), allow(unused_variables))]
impl Storage for Backend {
    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        dispatch!(self, s => s.enqueue(jobs).await)
    }
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Job>> {
        dispatch!(self, s => s.claim(request).await)
    }
    async fn settle(&self, batch: Vec<Settlement>) -> Result<Vec<Settled>> {
        dispatch!(self, s => s.settle(batch).await)
    }
    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<Vec<JobId>> {
        dispatch!(self, s => s.heartbeat(leases, lease).await)
    }
    async fn promote(&self) -> Result<u64> {
        dispatch!(self, s => s.promote().await)
    }
    async fn recover(&self) -> Result<u64> {
        dispatch!(self, s => s.recover().await)
    }
    async fn get(&self, id: JobId) -> Result<Job> {
        dispatch!(self, s => s.get(id).await)
    }
    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        dispatch!(self, s => s.list(filter).await)
    }
    async fn stats(&self) -> Result<Stats> {
        dispatch!(self, s => s.stats().await)
    }
    async fn throughput(&self, since: Timestamp) -> Result<Vec<Throughput>> {
        dispatch!(self, s => s.throughput(since).await)
    }
    async fn retry(&self, id: JobId) -> Result<()> {
        dispatch!(self, s => s.retry(id).await)
    }
    async fn cancel(&self, id: JobId) -> Result<()> {
        dispatch!(self, s => s.cancel(id).await)
    }
    async fn purge(&self, state: State, older_than: Timestamp) -> Result<u64> {
        dispatch!(self, s => s.purge(state, older_than).await)
    }
    async fn elect(&self, election: &Election) -> Result<bool> {
        dispatch!(self, s => s.elect(election).await)
    }
    async fn resign(&self, role: &str, token: LeaseToken) -> Result<()> {
        dispatch!(self, s => s.resign(role, token).await)
    }
    async fn leaders(&self) -> Result<Vec<Leader>> {
        dispatch!(self, s => s.leaders().await)
    }
    async fn fire(&self, fire: &Fire) -> Result<FireOutcome> {
        dispatch!(self, s => s.fire(fire).await)
    }
    async fn periodic(&self) -> Result<Vec<PeriodicInfo>> {
        dispatch!(self, s => s.periodic().await)
    }
    async fn trigger(&self, name: &str) -> Result<()> {
        dispatch!(self, s => s.trigger(name).await)
    }
    async fn set_paused(&self, queue: &QueueName, paused: bool) -> Result<()> {
        dispatch!(self, s => s.set_paused(queue, paused).await)
    }
    async fn set_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<()> {
        dispatch!(self, s => s.set_limits(queue, limits).await)
    }
    async fn queues(&self) -> Result<Vec<QueueInfo>> {
        dispatch!(self, s => s.queues().await)
    }
    fn subscribe(&self) -> Option<WorkSignal> {
        dispatch!(self, s => s.subscribe())
    }
    async fn independent(&self) -> Option<Self> {
        match *self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(ref s) => s.independent().await.map(Backend::Sqlite),
            #[cfg(feature = "postgres")]
            Backend::Postgres(ref s) => s.independent().await.map(Backend::Postgres),
            #[cfg(feature = "redis")]
            Backend::Redis(ref s) => s.independent().await.map(Backend::Redis),
        }
    }
    fn clock(&self) -> Clock {
        dispatch!(self, s => s.clock())
    }
}
