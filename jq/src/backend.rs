//! [`Backend`]: one storage of whichever compiled-in backend a URL named,
//! statically dispatched, and how it is opened ([`ConnectOptions`]).

use std::time::Duration;

use jq_core::Clock;

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
    ($backend:ident, $s:ident => $body:expr) => {
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
#[derive(Clone, Default)]
pub struct ConnectOptions {
    clock: Option<Clock>,
    max_payload_bytes: Option<usize>,
    max_connections: Option<u32>,
    acquire_timeout: Option<Duration>,
    response_timeout: Option<Duration>,
    keepalive: Option<Option<Duration>>,
    listen_url: Option<String>,
}

// Hand-written: the listen URL may carry a password.
impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("clock", &self.clock)
            .field("max_payload_bytes", &self.max_payload_bytes)
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("keepalive", &self.keepalive)
            .field("listen_url", &self.listen_url.as_deref().map(jq_core::storage::redact_url))
            .finish()
    }
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

    /// PostgreSQL: the size of the connection pool (default 10). Another
    /// backend refuses it ([`SetupError::InvalidOption`]).
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = Some(n);
        self
    }

    /// PostgreSQL: how long an operation waits for a pooled connection
    /// (default 5 s). Another backend refuses it
    /// ([`SetupError::InvalidOption`]).
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = Some(timeout);
        self
    }

    /// PostgreSQL and Redis: how long a storage call waits for the server
    /// (default 10 s) before it fails as retryable and its connection is
    /// dropped: how soon a connection that went silent is noticed. See
    /// `jq_postgres::PostgresConfig::response_timeout` and
    /// `jq_redis::RedisConfig::response_timeout`. SQLite refuses it
    /// ([`SetupError::InvalidOption`]).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = Some(timeout);
        self
    }

    /// PostgreSQL: a URL that reaches the server directly, for the wake-up
    /// listener's `LISTEN` connection, when the store URL goes through a
    /// connection pooler in transaction mode (`?pooler=transaction`); see
    /// `jq_postgres::PostgresConfig::listen_url`. Another backend refuses
    /// it ([`SetupError::InvalidOption`]).
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen_url = Some(url.into());
        self
    }

    /// Redis: TCP keepalive on its connections (default 15 s; `None` turns
    /// it off); see `jq_redis::RedisConfig::keepalive`. Another backend
    /// refuses it ([`SetupError::InvalidOption`]).
    pub fn keepalive(mut self, idle: Option<Duration>) -> Self {
        self.keepalive = Some(idle);
        self
    }
}

impl ConnectOptions {
    /// The first option set that `backend` (its feature name) has no use
    /// for: refused rather than ignored, so a setting the operator believes
    /// in is never silently dropped.
    fn unused_by(&self, backend: &'static str) -> Option<&'static str> {
        let set: [(&'static str, bool, &[&str]); 5] = [
            ("max_connections", self.max_connections.is_some(), &["postgres"]),
            ("listen_url", self.listen_url.is_some(), &["postgres"]),
            ("acquire_timeout", self.acquire_timeout.is_some(), &["postgres"]),
            ("response_timeout", self.response_timeout.is_some(), &["postgres", "redis"]),
            ("keepalive", self.keepalive.is_some(), &["redis"]),
        ];
        set.into_iter().find(|(_, is_set, owners)| *is_set && !owners.contains(&backend)).map(|(option, ..)| option)
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
    ///   [`Client::migrate`](crate::Client::migrate)), because schema changes are a deployment step
    ///   that an application starting several replicas should run once, not
    ///   race for at every start.
    /// - Redis: connects and loads the scripts; there is no schema.
    ///
    /// A URL whose backend is not compiled in gives
    /// [`SetupError::NotCompiled`] naming the feature to enable; an option
    /// the backend has no use for, [`SetupError::InvalidOption`].
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres", feature = "redis")), allow(unused_variables))]
    pub async fn open(url: &BackendUrl, options: &ConnectOptions) -> Result<Self, SetupError> {
        if let Some(option) = options.unused_by(url.backend()) {
            return Err(SetupError::InvalidOption { option, backend: url.backend() });
        }
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
                Ok(Backend::Sqlite(jq_sqlite::SqliteStorage::open(config).map_err(SetupError::sqlite)?))
            }
            #[cfg(feature = "postgres")]
            BackendUrl::Postgres { url, schema, transaction_pooler } => {
                let mut config = jq_postgres::PostgresConfig::new(url.as_str()).transaction_pooler(*transaction_pooler);
                if let Some(listen) = &options.listen_url {
                    config = config.listen_url(listen.as_str());
                }
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
                Ok(Backend::Postgres(
                    jq_postgres::PostgresStorage::connect(config).await.map_err(SetupError::postgres)?,
                ))
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
                Ok(Backend::Redis(jq_redis::RedisStorage::connect(config).await.map_err(SetupError::redis)?))
            }
            #[allow(unreachable_patterns)] // every backend compiled in
            other => Err(not_compiled(other)),
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

// Every operation is the same operation of the backend inside: one `match`,
// written once in jq-core's forwarding macro.
jq_core::forward_storage!(
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres", feature = "redis")), allow(unused_variables))]
    impl[] for Backend,
    via dispatch
);
