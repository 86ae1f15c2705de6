//! Choosing and opening the backend named by `--url`.
//!
//! Commands are generic functions over `S: jq_core::Storage`; [`Backend`]
//! holds the one storage this run opened and [`with_storage!`] calls a
//! command with it, so every call is statically dispatched.

use crate::error::{CliError, CliResult};

/// A parsed `--url`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendUrl {
    /// `sqlite://PATH`: a file path, relative to the working directory
    /// unless absolute (`sqlite:///var/lib/jq.db`).
    Sqlite(std::path::PathBuf),
    /// `postgres://...` or `postgresql://...`; a `schema=NAME` query
    /// parameter (jq's own) picks the schema holding the jobs (default `jq`).
    Postgres {
        /// The URL for the driver, without `schema=`.
        url: String,
        /// The schema, when given.
        schema: Option<String>,
    },
    /// `redis://...` or `rediss://...`; a `prefix=NAME` query parameter
    /// (jq's own) picks the key prefix.
    Redis {
        /// The URL for the driver, without `prefix=`.
        url: String,
        /// The key prefix, when given.
        prefix: Option<String>,
    },
}

impl BackendUrl {
    /// Parses `url`; an unknown scheme is bad input.
    pub fn parse(url: &str) -> CliResult<Self> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad_url(url))?;
        match scheme.to_ascii_lowercase().as_str() {
            "sqlite" => {
                // Query parameters (`?mode=rwc`) are not ours to interpret.
                let path = rest.split_once('?').map_or(rest, |(p, _)| p);
                if path.is_empty() {
                    return Err(CliError::bad_input(format!(
                        "{url:?} names no file; write sqlite://jq.db or sqlite:///absolute/path.db"
                    )));
                }
                Ok(BackendUrl::Sqlite(path.into()))
            }
            "postgres" | "postgresql" => {
                let (url, schema) = take_query_param(url, "schema");
                Ok(BackendUrl::Postgres { url, schema })
            }
            "redis" | "rediss" => {
                let (url, prefix) = take_query_param(url, "prefix");
                Ok(BackendUrl::Redis { url, prefix })
            }
            _ => Err(bad_url(url)),
        }
    }
}

/// Removes `name=VALUE` from `url`'s query and returns the rest and VALUE.
fn take_query_param(url: &str, name: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else { return (url.to_owned(), None) };
    let mut value = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.split_once('=') {
            Some((key, v)) if key == name => {
                value = Some(v.to_owned());
                false
            }
            _ => !pair.is_empty(),
        })
        .collect();
    let url = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    (url, value)
}

fn bad_url(url: &str) -> CliError {
    CliError::bad_input(format!(
        "unsupported backend URL {url:?}; use sqlite://PATH, postgres://USER@HOST:PORT/DB or redis://HOST:PORT \
         (with --url or JQ_URL)"
    ))
}

#[allow(dead_code)] // Only used when a backend's feature is off.
fn feature_off(name: &str, feature: &str) -> CliError {
    CliError::bad_input(format!(
        "this jqctl was built without {name} support; reinstall it with \
         `cargo install jq-cli --features {feature}` (or build with `--features {feature}`)"
    ))
}

/// The storage this run works on.
pub enum Backend {
    /// A SQLite file.
    #[cfg(feature = "sqlite")]
    Sqlite(jq_sqlite::SqliteStorage),
    /// A PostgreSQL database.
    #[cfg(feature = "postgres")]
    Postgres(jq_postgres::PostgresStorage),
    /// A Redis server.
    #[cfg(feature = "redis")]
    Redis(jq_redis::RedisStorage),
}

/// Calls `$body` with `$s` bound to the concrete storage of `$backend`.
macro_rules! with_storage {
    ($backend:expr, |$s:ident| $body:expr) => {
        match $backend {
            #[cfg(feature = "sqlite")]
            $crate::backend::Backend::Sqlite($s) => $body,
            #[cfg(feature = "postgres")]
            $crate::backend::Backend::Postgres($s) => $body,
            #[cfg(feature = "redis")]
            $crate::backend::Backend::Redis($s) => $body,
        }
    };
}
pub(crate) use with_storage;

impl Backend {
    /// Opens the backend `url` names. Refuses a URL whose backend is not
    /// compiled in, and a SQLite file in a directory that does not exist.
    pub async fn open(url: &BackendUrl) -> CliResult<Self> {
        match url {
            #[cfg(feature = "sqlite")]
            BackendUrl::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
                    && !dir.is_dir()
                {
                    return Err(CliError::bad_input(format!(
                        "directory {} does not exist; create it, or point --url at a file in an existing directory",
                        dir.display()
                    )));
                }
                let config = jq_sqlite::SqliteConfig::new(path);
                let storage = jq_sqlite::SqliteStorage::open(config).map_err(|e| CliError::Storage(e.into()))?;
                Ok(Backend::Sqlite(storage))
            }
            #[cfg(not(feature = "sqlite"))]
            BackendUrl::Sqlite(_) => Err(feature_off("SQLite", "sqlite")),

            #[cfg(feature = "postgres")]
            BackendUrl::Postgres { url, schema } => {
                let mut config = jq_postgres::PostgresConfig::new(url.as_str());
                if let Some(schema) = schema {
                    config = config.schema(schema.as_str());
                }
                let storage =
                    jq_postgres::PostgresStorage::connect(config).await.map_err(|e| CliError::Storage(e.into()))?;
                Ok(Backend::Postgres(storage))
            }
            #[cfg(not(feature = "postgres"))]
            BackendUrl::Postgres { .. } => Err(feature_off("PostgreSQL", "postgres")),

            #[cfg(feature = "redis")]
            BackendUrl::Redis { url, prefix } => {
                let mut config = jq_redis::RedisConfig::new(url.as_str());
                if let Some(prefix) = prefix {
                    config = config.prefix(prefix.as_str());
                }
                let storage = jq_redis::RedisStorage::connect(config).await.map_err(|e| match e {
                    jq_redis::RedisError::InvalidUrl { .. } | jq_redis::RedisError::InvalidPrefix { .. } => {
                        CliError::bad_input(e.to_string())
                    }
                    _ => CliError::Other(e.to_string()),
                })?;
                Ok(Backend::Redis(storage))
            }
            #[cfg(not(feature = "redis"))]
            BackendUrl::Redis { .. } => Err(feature_off("Redis", "redis")),
        }
    }

    /// Creates or upgrades the schema, and says what was done.
    pub async fn migrate(&self) -> CliResult<String> {
        match self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(_) => {
                Ok("SQLite: nothing to do; jq creates and upgrades the schema when it opens the file".into())
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => {
                let applied = s.migrate().await.map_err(|e| CliError::Storage(e.into()))?;
                Ok(format!(
                    "PostgreSQL: applied {applied} migration(s) to schema {}; it is up to date (schema version {})",
                    s.schema(),
                    jq_postgres::SCHEMA_VERSION
                ))
            }
            #[cfg(feature = "redis")]
            Backend::Redis(_) => Ok("Redis: nothing to do; Redis has no schema".into()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(BackendUrl::parse("sqlite://jq.db").unwrap(), BackendUrl::Sqlite("jq.db".into()));
        assert_eq!(BackendUrl::parse("sqlite:///tmp/x.db").unwrap(), BackendUrl::Sqlite("/tmp/x.db".into()));
        assert_eq!(
            BackendUrl::parse("postgresql://u@h/db?sslmode=disable&schema=app_jobs").unwrap(),
            BackendUrl::Postgres { url: "postgresql://u@h/db?sslmode=disable".into(), schema: Some("app_jobs".into()) }
        );
        assert_eq!(
            BackendUrl::parse("redis://127.0.0.1?prefix=jq1").unwrap(),
            BackendUrl::Redis { url: "redis://127.0.0.1".into(), prefix: Some("jq1".into()) }
        );
        assert_eq!(
            BackendUrl::parse("redis://127.0.0.1").unwrap(),
            BackendUrl::Redis { url: "redis://127.0.0.1".into(), prefix: None }
        );
        for bad in ["jq.db", "mysql://x", "sqlite://", ""] {
            assert!(matches!(BackendUrl::parse(bad), Err(CliError::BadInput(_))), "{bad:?}");
        }
    }
}
