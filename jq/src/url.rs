//! [`BackendUrl`]: which backend a URL names, and its jq-specific parts.
//! One parser for the library ([`crate::connect`]) and for `jqctl --url`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use jq_core::storage::take_query_param;

use crate::error::SetupError;

/// A parsed store URL. Parsing never looks at which backends are compiled
/// in: [`crate::connect`] says which feature a URL needs.
#[derive(Clone, PartialEq, Eq)]
pub enum BackendUrl {
    /// `sqlite://PATH`: a file path, relative to the working directory
    /// unless absolute (`sqlite:///var/lib/jq.db`); `sqlite::memory:` is a
    /// private in-memory database. A `?query` part is ignored.
    Sqlite(PathBuf),
    /// `postgres://...` or `postgresql://...`; a `schema=NAME` query
    /// parameter (jq's own) picks the schema holding the jobs (default `jq`);
    /// `pooler=transaction` (jq's own) says the URL reaches PostgreSQL
    /// through a connection pooler in transaction mode (PgBouncer), see
    /// `jq_postgres::PostgresConfig::transaction_pooler`.
    Postgres {
        /// The URL for the driver, without `schema=` and `pooler=`.
        url: String,
        /// The schema, when given.
        schema: Option<String>,
        /// True with `pooler=transaction`.
        transaction_pooler: bool,
    },
    /// `redis://...` or `rediss://...`; a `prefix=NAME` query parameter
    /// (jq's own) picks the key prefix (default `jq`).
    Redis {
        /// The URL for the driver, without `prefix=`.
        url: String,
        /// The key prefix, when given.
        prefix: Option<String>,
    },
}

impl BackendUrl {
    /// Parses `url`; an unknown scheme or a SQLite URL without a path is
    /// [`SetupError::InvalidUrl`].
    pub fn parse(url: &str) -> Result<Self, SetupError> {
        if url.eq_ignore_ascii_case("sqlite::memory:") {
            return Ok(BackendUrl::Sqlite(":memory:".into()));
        }
        let (scheme, rest) = url.split_once("://").ok_or_else(|| unsupported(url))?;
        match scheme.to_ascii_lowercase().as_str() {
            "sqlite" => {
                // Query parameters (`?mode=rwc`) are not ours to interpret.
                let path = rest.split_once('?').map_or(rest, |(p, _)| p);
                if path.is_empty() {
                    return Err(SetupError::InvalidUrl {
                        url: url.to_owned(),
                        reason: "it names no file; write sqlite://jq.db or sqlite:///absolute/path.db".into(),
                    });
                }
                Ok(BackendUrl::Sqlite(path.into()))
            }
            "postgres" | "postgresql" => {
                let (rest, schema) = take_query_param(url, "schema");
                let (rest, pooler) = take_query_param(&rest, "pooler");
                let transaction_pooler = match pooler.as_deref() {
                    None => false,
                    Some("transaction") => true,
                    Some(other) => {
                        return Err(SetupError::InvalidUrl {
                            url: redacted(url),
                            reason: format!(
                                "pooler={other:?}: the one value is pooler=transaction, for a pooler in transaction \
                                 mode (PgBouncer pool_mode = transaction); a session-mode pooler needs none"
                            ),
                        });
                    }
                };
                Ok(BackendUrl::Postgres { url: rest, schema, transaction_pooler })
            }
            "redis" | "rediss" => {
                let (url, prefix) = take_query_param(url, "prefix");
                Ok(BackendUrl::Redis { url, prefix })
            }
            _ => Err(unsupported(url)),
        }
    }

    /// The backend's name: `"sqlite"`, `"postgres"` or `"redis"`, which is
    /// also the Cargo feature that compiles it in.
    pub fn backend(&self) -> &'static str {
        match self {
            BackendUrl::Sqlite(_) => "sqlite",
            BackendUrl::Postgres { .. } => "postgres",
            BackendUrl::Redis { .. } => "redis",
        }
    }
}

impl FromStr for BackendUrl {
    type Err = SetupError;
    fn from_str(s: &str) -> Result<Self, SetupError> {
        BackendUrl::parse(s)
    }
}

/// Shows the URL without the password of a server URL.
impl fmt::Debug for BackendUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendUrl::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            BackendUrl::Postgres { url, schema, transaction_pooler } => f
                .debug_struct("Postgres")
                .field("url", &redacted(url))
                .field("schema", schema)
                .field("transaction_pooler", transaction_pooler)
                .finish(),
            BackendUrl::Redis { url, prefix } => {
                f.debug_struct("Redis").field("url", &redacted(url)).field("prefix", prefix).finish()
            }
        }
    }
}

/// `url` without its credentials (`jq_core::storage::redact_url`).
fn redacted(url: &str) -> String {
    jq_core::storage::redact_url(url)
}

fn unsupported(url: &str) -> SetupError {
    SetupError::InvalidUrl {
        url: redacted(url),
        reason: "unsupported backend URL; use sqlite://PATH, postgres://USER@HOST:PORT/DB or redis://HOST:PORT".into(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(BackendUrl::parse("sqlite://jq.db").unwrap(), BackendUrl::Sqlite("jq.db".into()));
        assert_eq!(BackendUrl::parse("sqlite:///tmp/x.db?mode=rwc").unwrap(), BackendUrl::Sqlite("/tmp/x.db".into()));
        assert_eq!(BackendUrl::parse("sqlite::memory:").unwrap(), BackendUrl::Sqlite(":memory:".into()));
        assert_eq!(
            BackendUrl::parse("postgresql://u@h/db?sslmode=disable&schema=app_jobs").unwrap(),
            BackendUrl::Postgres {
                url: "postgresql://u@h/db?sslmode=disable".into(),
                schema: Some("app_jobs".into()),
                transaction_pooler: false
            }
        );
        assert_eq!(
            BackendUrl::parse("postgres://u@h:6432/db?pooler=transaction&schema=s").unwrap(),
            BackendUrl::Postgres {
                url: "postgres://u@h:6432/db".into(),
                schema: Some("s".into()),
                transaction_pooler: true
            }
        );
        assert!(matches!(
            BackendUrl::parse("postgres://u:s3cret@h/db?pooler=session"),
            Err(SetupError::InvalidUrl { url, .. }) if !url.contains("s3cret")
        ));
        assert_eq!(
            BackendUrl::parse("redis://127.0.0.1?prefix=jq1").unwrap(),
            BackendUrl::Redis { url: "redis://127.0.0.1".into(), prefix: Some("jq1".into()) }
        );
        assert_eq!(
            BackendUrl::parse("redis://127.0.0.1").unwrap(),
            BackendUrl::Redis { url: "redis://127.0.0.1".into(), prefix: None }
        );
        for bad in ["jq.db", "mysql://x", "sqlite://", ""] {
            assert!(matches!(BackendUrl::parse(bad), Err(SetupError::InvalidUrl { .. })), "{bad:?}");
        }
    }

    #[test]
    fn passwords_stay_out_of_messages() {
        let url = BackendUrl::parse("postgres://app:s3cret@db:5432/x?schema=jobs").unwrap();
        let shown = format!("{url:?}");
        assert!(!shown.contains("s3cret") && shown.contains("app:***@db:5432/x"), "{shown}");
        let err = BackendUrl::parse("mysql://app:s3cret@db/x").unwrap_err().to_string();
        assert!(!err.contains("s3cret"), "{err}");
        assert_eq!(redacted("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }
}
