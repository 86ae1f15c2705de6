//! [`SetupError`]: what can go wrong while connecting or migrating.
//! Operations on jobs return [`jq_core::Error`] (re-exported as
//! [`crate::Error`]) instead, as every backend's do.

/// Why [`crate::connect`] or [`crate::Backend::migrate`] failed.
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
        "this build of jq has no {backend} backend: enable the `{feature}` feature of the jq crate \
         (jq = {{ version = \"...\", features = [\"{feature}\"] }})"
    )]
    NotCompiled {
        /// The backend's name, for people ("SQLite", "PostgreSQL", "Redis").
        backend: &'static str,
        /// The Cargo feature that compiles it in.
        feature: &'static str,
    },
    /// Opening or migrating the SQLite file failed.
    #[cfg(feature = "sqlite")]
    #[error(transparent)]
    Sqlite(#[from] jq_sqlite::SqliteError),
    /// Connecting to or migrating PostgreSQL failed.
    #[cfg(feature = "postgres")]
    #[error(transparent)]
    Postgres(#[from] jq_postgres::PostgresError),
    /// Connecting to Redis failed.
    #[cfg(feature = "redis")]
    #[error(transparent)]
    Redis(#[from] jq_redis::RedisError),
}

/// For `?` in code that returns [`jq_core::Error`]: a bad URL or a missing
/// feature is `InvalidInput`; an unreachable server `Unavailable`
/// (retryable); the rest `Backend`.
impl From<SetupError> for jq_core::Error {
    fn from(e: SetupError) -> Self {
        match e {
            SetupError::InvalidUrl { .. } | SetupError::NotCompiled { .. } => {
                jq_core::Error::InvalidInput { what: "store URL", reason: e.to_string() }
            }
            #[cfg(feature = "sqlite")]
            SetupError::Sqlite(e) => e.into(),
            #[cfg(feature = "postgres")]
            SetupError::Postgres(e) => e.into(),
            #[cfg(feature = "redis")]
            SetupError::Redis(e @ jq_redis::RedisError::Connect { .. }) => {
                jq_core::Error::Unavailable { backend: "redis", source: Box::new(e) }
            }
            #[cfg(feature = "redis")]
            SetupError::Redis(e) => jq_core::Error::Backend { backend: "redis", source: Box::new(e) },
        }
    }
}
