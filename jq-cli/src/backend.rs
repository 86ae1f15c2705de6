//! Opening the store `--url` names, through `jq::Backend`: the library's
//! parser and its enum over the compiled-in backends (this crate's features
//! are jq's), so every command runs statically dispatched on it.

use jq::storage::Storage;
use jq::{Backend, BackendUrl, SetupError};

use crate::error::{CliError, CliResult};

/// Parses `--url`; an unknown scheme is bad input.
pub fn parse(url: &str) -> CliResult<BackendUrl> {
    BackendUrl::parse(url).map_err(CliError::from)
}

/// Opens the store `url` names, with `listen_url` for PostgreSQL's
/// wake-ups. Refuses a URL whose backend is not compiled in, and a SQLite
/// file in a directory that does not exist.
pub async fn open(url: &BackendUrl, listen_url: Option<&str>) -> CliResult<Backend> {
    let mut options = jq::ConnectOptions::default();
    if let Some(listen) = listen_url {
        options = options.listen_url(listen);
    }
    Backend::open(url, &options).await.map_err(CliError::from)
}

/// Creates or upgrades the schema, and says what was done.
pub async fn migrate(backend: &Backend) -> CliResult<String> {
    let applied = backend.migrate().await?;
    Ok(match *backend {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite(_) => "SQLite: nothing to do; jq creates and upgrades the schema when it opens the file".into(),
        #[cfg(feature = "postgres")]
        Backend::Postgres(ref s) => format!(
            "PostgreSQL: applied {applied} migration(s) to schema {}; it is up to date (schema version {}, functions \
             generation {})",
            s.schema(),
            jq::postgres::SCHEMA_VERSION,
            jq::postgres::FUNCTIONS_VERSION
        ),
        #[cfg(feature = "redis")]
        Backend::Redis(_) => "Redis: nothing to do; Redis has no schema".into(),
        #[allow(unreachable_patterns)] // Backend is non_exhaustive
        _ => format!("{}: applied {applied} migration(s)", backend.name()),
    })
}

impl From<SetupError> for CliError {
    fn from(e: SetupError) -> Self {
        match e {
            SetupError::InvalidUrl { .. } => CliError::bad_input(format!("{e} (with --url or JQ_URL)")),
            SetupError::NotCompiled { backend, feature } => CliError::bad_input(format!(
                "this jqctl was built without {backend} support; reinstall it with \
                 `cargo install jq-cli --features {feature}` (or build with `--features {feature}`)"
            )),
            SetupError::Invalid { .. } | SetupError::InvalidOption { .. } => CliError::bad_input(e.to_string()),
            other => CliError::Storage(other.into()),
        }
    }
}
