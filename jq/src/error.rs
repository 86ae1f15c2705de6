//! [`SetupError`]: what can go wrong while connecting. Operations on jobs
//! return [`jq_core::Error`] (re-exported as [`crate::Error`]) instead, as
//! every backend's do.

use jq_core::BoxError;

/// Why [`crate::connect`] failed. The variants are kinds, the same for
/// every backend; the backend's own error (`jq::sqlite::SqliteError`,
/// `jq::postgres::PostgresError`, `jq::redis::RedisError`) is the `source`,
/// for its message and for `downcast_ref` when a caller needs the detail.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// The URL names no backend jq knows, or is incomplete. Nothing was
    /// opened or created.
    #[error("invalid store URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL given (without its password).
        url: String,
        /// What is wrong and what would be accepted.
        reason: String,
    },
    /// The URL names a backend this build of jq does not include.
    #[error(
        "this build of jq has no {backend} backend: enable the `{feature}` feature of the jq-queue crate \
         (jq-queue = {{ version = \"...\", features = [\"{feature}\"] }})"
    )]
    NotCompiled {
        /// The backend's name, for people ("SQLite", "PostgreSQL", "Redis").
        backend: &'static str,
        /// The Cargo feature that compiles it in.
        feature: &'static str,
    },
    /// A [`ConnectOptions`](crate::ConnectOptions) setting the backend has
    /// no use for (a pool size for Redis): refused, not ignored.
    #[error("option {option} does not apply to the {backend} backend: leave it unset for this URL")]
    InvalidOption {
        /// The option's method name on `ConnectOptions`.
        option: &'static str,
        /// The backend the URL names (its feature name).
        backend: &'static str,
    },
    /// The backend refused part of the URL or a setting (a bad schema name
    /// or key prefix, a URL its driver cannot parse). Nothing was opened
    /// or created.
    #[error("{source}")]
    Invalid {
        /// The backend (its feature name).
        backend: &'static str,
        /// The backend's own error.
        #[source]
        source: BoxError,
    },
    /// The server could not be reached, or the file could not be opened
    /// for now (busy, out of space): trying again later may succeed.
    #[error("{source}")]
    Unavailable {
        /// The backend (its feature name).
        backend: &'static str,
        /// The backend's own error.
        #[source]
        source: BoxError,
    },
    /// Anything else the backend refused (a bad schema name, a store
    /// written by a newer jq, a failed migration).
    #[error("{source}")]
    Backend {
        /// The backend (its feature name).
        backend: &'static str,
        /// The backend's own error.
        #[source]
        source: BoxError,
    },
}

/// How a backend's own setup error is sorted.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
enum Kind {
    Invalid,
    Unavailable,
    Backend,
}

impl SetupError {
    /// Wraps a backend's own error as the kind the backend says it is.
    #[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
    fn of(backend: &'static str, error: impl std::error::Error + Send + Sync + 'static, kind: Kind) -> Self {
        let source = Box::new(error);
        match kind {
            Kind::Invalid => SetupError::Invalid { backend, source },
            Kind::Unavailable => SetupError::Unavailable { backend, source },
            Kind::Backend => SetupError::Backend { backend, source },
        }
    }

    #[cfg(feature = "sqlite")]
    pub(crate) fn sqlite(e: jq_sqlite::SqliteError) -> Self {
        let kind = match e {
            jq_sqlite::SqliteError::InvalidUrl { .. } => Kind::Invalid,
            ref e if e.is_unavailable() => Kind::Unavailable,
            _ => Kind::Backend,
        };
        Self::of("sqlite", e, kind)
    }

    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(e: jq_postgres::PostgresError) -> Self {
        let kind = match e {
            jq_postgres::PostgresError::InvalidUrl(_) | jq_postgres::PostgresError::InvalidSchema { .. } => {
                Kind::Invalid
            }
            ref e if e.is_unavailable() => Kind::Unavailable,
            _ => Kind::Backend,
        };
        Self::of("postgres", e, kind)
    }

    #[cfg(feature = "redis")]
    pub(crate) fn redis(e: jq_redis::RedisError) -> Self {
        let kind = match e {
            jq_redis::RedisError::InvalidUrl { .. } | jq_redis::RedisError::InvalidPrefix { .. } => Kind::Invalid,
            jq_redis::RedisError::Connect { .. } => Kind::Unavailable,
            _ => Kind::Backend,
        };
        Self::of("redis", e, kind)
    }
}

/// For `?` in code that returns [`jq_core::Error`]: a bad URL, a missing
/// feature, a misplaced option or a setting the backend refused is
/// `InvalidInput`; an unreachable server
/// `Unavailable` (retryable); the rest `Backend`.
impl From<SetupError> for jq_core::Error {
    fn from(e: SetupError) -> Self {
        match e {
            SetupError::InvalidUrl { .. }
            | SetupError::NotCompiled { .. }
            | SetupError::InvalidOption { .. }
            | SetupError::Invalid { .. } => jq_core::Error::InvalidInput { what: "store URL", reason: e.to_string() },
            SetupError::Unavailable { backend, source } => jq_core::Error::Unavailable { backend, source },
            SetupError::Backend { backend, source } => jq_core::Error::Backend { backend, source },
        }
    }
}
