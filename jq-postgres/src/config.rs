//! [`PostgresConfig`]: where the database is and how jq uses it.

use std::time::Duration;

use jq_core::{Clock, DEFAULT_MAX_PAYLOAD_BYTES};

use crate::error::PostgresError;

/// Longest accepted schema name, in bytes. PostgreSQL allows 63 per
/// identifier; the wake-up channel name adds a prefix to the schema name.
pub const MAX_SCHEMA_BYTES: usize = 48;

/// Configuration of a [`PostgresStorage`](crate::PostgresStorage).
///
/// ```
/// let config = jq_postgres::PostgresConfig::new("postgres://postgres@127.0.0.1:5432/postgres")
///     .schema("billing_jobs")
///     .max_connections(8);
/// ```
#[derive(Clone)]
pub struct PostgresConfig {
    pub(crate) url: String,
    pub(crate) schema: String,
    pub(crate) clock: Clock,
    pub(crate) max_payload_bytes: usize,
    pub(crate) max_connections: u32,
    pub(crate) claim_connections: u32,
    pub(crate) acquire_timeout: Duration,
    pub(crate) statement_timeout: Option<Duration>,
    pub(crate) response_timeout: Duration,
    pub(crate) transaction_pooler: bool,
    pub(crate) listen_url: Option<String>,
    pub(crate) application_name: String,
}

/// Shows the URL without its password.
impl std::fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &jq_core::storage::redact_url(&self.url))
            .field("schema", &self.schema)
            .field("clock", &self.clock)
            .field("max_payload_bytes", &self.max_payload_bytes)
            .field("max_connections", &self.max_connections)
            .field("claim_connections", &self.claim_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("transaction_pooler", &self.transaction_pooler)
            .field("listen_url", &self.listen_url.as_deref().map(jq_core::storage::redact_url))
            .field("application_name", &self.application_name)
            .finish()
    }
}

impl PostgresConfig {
    /// Schema used unless [`PostgresConfig::schema`] says otherwise.
    pub const DEFAULT_SCHEMA: &'static str = "jq";
    /// Pool size used unless [`PostgresConfig::max_connections`] says otherwise.
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
    /// Claim connections used unless [`PostgresConfig::claim_connections`]
    /// says otherwise.
    pub const DEFAULT_CLAIM_CONNECTIONS: u32 = 2;
    /// How long an operation waits for a pooled connection before it fails
    /// with a retryable [`jq_core::Error::Unavailable`].
    pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
    /// How long one storage call waits for the server unless
    /// [`PostgresConfig::response_timeout`] says otherwise.
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
    /// The `application_name` of jq's connections unless
    /// [`PostgresConfig::application_name`], the URL or `PGAPPNAME` says
    /// otherwise.
    pub const DEFAULT_APPLICATION_NAME: &'static str = "jq";

    /// A configuration for the database at `url`
    /// (`postgres://user[:password]@host[:port]/database`), with the
    /// defaults: schema `jq`, system clock, 1 MiB payload limit, 10
    /// connections and 2 for the claims.
    ///
    /// The URL may list several hosts, as libpq's do, for a primary and
    /// its standbys: `postgres://jq@db1:5432,db2:5432/app?target_session_attrs=read-write`.
    /// jq connects to the first host in order that answers and, with
    /// `target_session_attrs=read-write` (or `primary`), takes writes;
    /// after a failover it finds the new primary the same way
    /// (docs/operations.md, "Failover"). `target_session_attrs` may also be
    /// `any` (the default); jq never connects to a standby by choice.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresConfig {
            url: url.into(),
            schema: Self::DEFAULT_SCHEMA.to_owned(),
            clock: Clock::system(),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            claim_connections: Self::DEFAULT_CLAIM_CONNECTIONS,
            acquire_timeout: Self::DEFAULT_ACQUIRE_TIMEOUT,
            statement_timeout: None,
            response_timeout: Self::DEFAULT_RESPONSE_TIMEOUT,
            transaction_pooler: false,
            listen_url: None,
            application_name: Self::DEFAULT_APPLICATION_NAME.to_owned(),
        }
    }

    /// The schema that holds jq's table (default `jq`), so several
    /// applications can keep separate queues in one database. Letters,
    /// digits and `_`, not starting with a digit, at most 48 bytes; checked
    /// when the storage is made.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The source of "now" (default: the system clock). Tests pass a
    /// [`jq_core::ManualClock`]'s clock. The database server's clock is
    /// never used.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The largest accepted payload, in bytes of JSON (default 1 MiB).
    pub fn max_payload_bytes(mut self, n: usize) -> Self {
        self.max_payload_bytes = n;
        self
    }

    /// The pool size of [`PostgresStorage::connect`](crate::PostgresStorage::connect)
    /// (default 10). The claims have connections of their own
    /// ([`PostgresConfig::claim_connections`]), and the wake-up listener,
    /// once subscribed, holds one more.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// How many connections the claims have to themselves (default 2, at
    /// least 1), opened on the first claims, beside the pool. A worker
    /// pool has one claim in flight at a time, so two serve two pools at
    /// once; more pools on one storage take turns. On these connections
    /// the claim statement is planned once, generically, when they open,
    /// instead of five times each in a worker's first seconds.
    pub fn claim_connections(mut self, n: u32) -> Self {
        self.claim_connections = n.max(1);
        self
    }

    /// How long an operation waits for a pooled connection (default 5 s).
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// A server-side `statement_timeout` for the pool's connections
    /// (default: the server's). A statement that runs longer fails with a
    /// retryable [`jq_core::Error::Unavailable`].
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = Some(timeout);
        self
    }

    /// How long one storage call (a claim, a settlement, a heartbeat,
    /// recover, ...: every method of `jq_core::storage::Storage`) waits for the
    /// server, connection included, before it fails with a retryable
    /// [`jq_core::Error::Unavailable`] (default 10 s). This is how a
    /// connection that went silent (a failover, a NAT that forgot it: no
    /// FIN, no RST, no answer) is noticed: the call's connection is
    /// dropped, and so is every connection opened before it, when next
    /// taken or handed back; the next call opens new ones. The wake-up
    /// listener pings its connection after this long without a message
    /// and reconnects when the ping gets no answer in this long either.
    ///
    /// It must exceed the longest statement a call runs on a healthy
    /// server, or such calls fail although the server finishes them (an
    /// enqueue of 100,000 jobs takes about half a second). A call that
    /// timed out may have been applied: resend the same jobs (their ids
    /// make the resend store nothing twice), not new ones; the worker
    /// pool does. Not applied to [`PostgresStorage::enqueue_in`](crate::PostgresStorage::enqueue_in)
    /// and [`PostgresStorage::enqueue_tx`](crate::PostgresStorage::enqueue_tx),
    /// which run on the caller's connection, nor to
    /// [`migrate`](jq_core::storage::Storage::migrate).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The URL reaches PostgreSQL through a connection pooler in
    /// transaction mode (PgBouncer `pool_mode = transaction`), which gives
    /// each transaction whichever server connection is free (default
    /// false; `?pooler=transaction` in a `jq::connect` URL). jq then keeps
    /// no state on a connection beyond a transaction: every statement is
    /// unnamed and runs in a transaction of its own, the driver sends no
    /// `extra_float_digits` (so PgBouncer needs no
    /// `ignore_startup_parameters`), the statement timeout is set per
    /// transaction, the claim connections are not pre-planned, and no
    /// `LISTEN` goes through the pooler: wake-ups come from
    /// [`PostgresConfig::listen_url`], or workers poll. Each storage call
    /// costs a `BEGIN` and a `COMMIT` more. A session-mode pooler needs
    /// none of this (only `ignore_startup_parameters = extra_float_digits`).
    ///
    /// [`PostgresStorage::enqueue_in`](crate::PostgresStorage::enqueue_in)
    /// must then be given a transaction or a connection inside one, never
    /// the pool: outside a transaction, the pooler may run the statement's
    /// two exchanges on two server connections.
    pub fn transaction_pooler(mut self, pooled: bool) -> Self {
        self.transaction_pooler = pooled;
        self
    }

    /// A URL that reaches PostgreSQL directly (not through a transaction
    /// pooler), for the wake-up listener's one `LISTEN` connection. Behind
    /// a transaction pooler without it, workers learn of new jobs by
    /// polling (`WorkerPool::poll_interval`) and a line in the log says
    /// so. Without a transaction pooler, the listener uses the main URL
    /// unless this is set.
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen_url = Some(url.into());
        self
    }

    /// The name jq's connections give the server (default `jq`): what
    /// `pg_stat_activity.application_name` shows for each of them (the
    /// pool's, the claims', the wake-up listener's), so an operator can
    /// count them, or end them (`pg_terminate_backend`), without guessing.
    /// An `application_name` in the URL (`?application_name=billing`) or
    /// in `PGAPPNAME` wins over it.
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        self.application_name = name.into();
        self
    }

    /// The configured schema name.
    pub fn schema_name(&self) -> &str {
        &self.schema
    }

    pub(crate) fn check(&self) -> Result<(), PostgresError> {
        let s = &self.schema;
        let ok = !s.is_empty()
            && s.len() <= MAX_SCHEMA_BYTES
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !s.as_bytes()[0].is_ascii_digit();
        if ok { Ok(()) } else { Err(PostgresError::InvalidSchema { schema: s.clone() }) }
    }
}
