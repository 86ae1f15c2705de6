//! [`RedisError`], and how driver errors become `jq_core::Error`.

use redis::{ErrorKind, ServerErrorKind};

/// What can go wrong while connecting ([`crate::RedisStorage::connect`]).
/// Operations of the `Storage` trait return `jq_core::Error` instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisError {
    /// The URL could not be parsed.
    #[error("invalid Redis URL {url:?}: {source}")]
    InvalidUrl {
        /// The URL given, without its password.
        url: String,
        /// The driver's error.
        #[source]
        source: redis::RedisError,
    },
    /// The key prefix is unusable.
    #[error("invalid key prefix {prefix:?}: {reason}")]
    InvalidPrefix {
        /// The prefix given.
        prefix: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The server could not be reached, or refused the connection.
    #[error("cannot connect to Redis at {url}: {source}; is the server running (scripts/start-services.sh)?")]
    Connect {
        /// The URL given, without its password.
        url: String,
        /// The driver's error.
        #[source]
        source: redis::RedisError,
    },
    /// The server evicts keys when its memory is full: jq would lose jobs
    /// without an error, so it refuses to use it.
    #[error(
        "Redis{} evicts keys when its memory is full (maxmemory-policy {policy}): jq would lose jobs without an \
         error. Set `maxmemory-policy noeviction` (in redis.conf, with CONFIG SET maxmemory-policy noeviction, or \
         in a managed service's parameters), then connect again",
        node.as_ref().map(|n| format!(" node {n}")).unwrap_or_default()
    )]
    Evicting {
        /// The policy found (`allkeys-lru`, `volatile-ttl`, ...).
        policy: String,
        /// The cluster node that has it; None for a single server.
        node: Option<String>,
    },
    /// The server answered the setup commands with an error.
    #[error("Redis setup failed: {0}")]
    Setup(#[source] redis::RedisError),
    /// The prefix holds a key layout newer than this build's
    /// ([`crate::LAYOUT`]), named by its marker `P:layout`: a newer
    /// jq-redis wrote it, and this one would misread its jobs.
    #[error(
        "Redis prefix {prefix:?} holds key layout {found}, newer than the layout {known} this jq-redis knows; \
         upgrade jq-redis"
    )]
    LayoutTooNew {
        /// The key prefix.
        prefix: String,
        /// The layout its marker names.
        found: u32,
        /// The layout this build knows.
        known: u32,
    },
    /// The prefix's layout marker `P:layout` holds something that is not
    /// a layout number: not written by jq-redis.
    #[error(
        "Redis key {prefix}:layout holds {found:?}, not a key layout of jq-redis: it was not written by jq; \
         use another prefix, or delete that key if nothing else owns it"
    )]
    UnknownLayout {
        /// The key prefix.
        prefix: String,
        /// What the marker holds.
        found: String,
    },
    /// The prefix holds jobs in the key layout of an unreleased development
    /// build of jq (keys `P:{P:Q}:v2:*`, without a layout marker): no
    /// released jq-redis reads that layout, and none carries it over.
    #[error(
        "Redis prefix {prefix:?} holds jobs in the key layout of an unreleased development build of jq (queue \
         {queue:?}, keys {prefix}:{{{prefix}:{queue}}}:v2:*); no released jq-redis reads or converts that layout: \
         finish those jobs with the build that wrote them, then delete the prefix's keys \
         (RedisStorage::delete_all_keys) or use another prefix"
    )]
    DevelopmentLayout {
        /// The key prefix.
        prefix: String,
        /// A queue that holds such jobs.
        queue: String,
    },
}

const BACKEND: &str = "redis";

/// True for errors after which the same call may succeed: the server was
/// unreachable, dropped the connection, timed out, is loading its data set,
/// runs another client's script still (BUSY, past the call's response
/// timeout), or asked to try again (cluster resharding).
pub(crate) fn is_transient(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || is_busy(e)
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
            ) | ErrorKind::ClusterConnectionNotFound
        )
}

/// True when the server refused every command of the call with BUSY (a
/// script of another client runs): matched by the error's code, as every
/// server error here, never by its text (Valkey reworded several).
pub(crate) fn is_busy(e: &redis::RedisError) -> bool {
    if e.code() == Some("BUSY") {
        return true;
    }
    e.clone()
        .into_server_errors()
        .is_some_and(|errors| !errors.is_empty() && errors.iter().all(|(_, s)| s.code() == "BUSY"))
}

/// Maps a driver error to `jq_core::Error`: transient ones to
/// `Unavailable` (the pool retries them), the rest to `Backend`.
pub(crate) fn map(e: redis::RedisError) -> jq_core::Error {
    if is_transient(&e) {
        jq_core::Error::Unavailable { backend: BACKEND, source: Box::new(e) }
    } else {
        jq_core::Error::Backend { backend: BACKEND, source: Box::new(e) }
    }
}

/// A `Backend` error for a reply of an unexpected shape.
pub(crate) fn unexpected(what: impl Into<String>) -> jq_core::Error {
    jq_core::Error::Backend { backend: BACKEND, source: what.into().into() }
}
