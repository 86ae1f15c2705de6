//! The CLI's error type and how it maps to exit codes.

use std::process::ExitCode;

/// Exit code for bad input: the request was refused as given and nothing was
/// stored or changed. The message says what to fix.
pub const EXIT_BAD_INPUT: u8 = 2;
/// Exit code for everything else: an unreachable backend, a driver error, a
/// corrupt row, an I/O failure.
pub const EXIT_FAILURE: u8 = 1;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The user's input cannot be acted on (exit 2).
    #[error("{0}")]
    BadInput(String),
    /// The storage refused or failed; the exit code depends on the variant.
    #[error(transparent)]
    Storage(#[from] jq::Error),
    /// Anything else (exit 1).
    #[error("{0}")]
    Other(String),
}

impl CliError {
    /// A bad-input error with a message that says what to fix.
    pub fn bad_input(message: impl Into<String>) -> Self {
        CliError::BadInput(message.into())
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            CliError::BadInput(_) => EXIT_BAD_INPUT,
            CliError::Storage(e) if is_bad_input(e) => EXIT_BAD_INPUT,
            CliError::Storage(_) | CliError::Other(_) => EXIT_FAILURE,
        })
    }

    /// A hint printed after the message, when there is one.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            CliError::Storage(jq::Error::Unavailable { .. }) => {
                Some("check --url (or JQ_URL) and that the server is running")
            }
            // jq-postgres never migrates on its own: a fresh database has no tables yet.
            CliError::Storage(jq::Error::Fatal { source, .. }) if is_schema_missing(source.as_ref()) => {
                Some("`jqctl migrate` (with this --url) creates or upgrades jq's schema")
            }
            _ => None,
        }
    }
}

/// True when a fatal error is PostgreSQL's schema never migrated.
#[cfg(feature = "postgres")]
fn is_schema_missing(source: &(dyn std::error::Error + 'static)) -> bool {
    matches!(source.downcast_ref(), Some(jq::postgres::PostgresError::SchemaMissing { .. }))
}

/// Without PostgreSQL no store has a schema to migrate.
#[cfg(not(feature = "postgres"))]
fn is_schema_missing(_source: &(dyn std::error::Error + 'static)) -> bool {
    false
}

/// Errors whose cause is in the command line: the user can fix them by
/// changing what they typed (an argument, a job id, the job they act on).
fn is_bad_input(e: &jq::Error) -> bool {
    use jq::Error as E;
    matches!(
        e,
        E::InvalidQueue { .. }
            | E::InvalidInput { .. }
            | E::InvalidPayload(_)
            | E::PayloadTooLarge { .. }
            | E::NotFound { .. }
            | E::PeriodicNotFound { .. }
            | E::WorkflowNotFound { .. }
            | E::ResultTooLarge { .. }
            | E::DurableLimit { .. }
            | E::JournalMismatch { .. }
            | E::InvalidState { .. }
            | E::Unsupported { .. }
    )
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        CliError::Other(format!("I/O error: {e}"))
    }
}

impl From<serde_json::Error> for CliError {
    fn from(e: serde_json::Error) -> Self {
        CliError::Other(format!("JSON output failed: {e}"))
    }
}

/// Shorthand for results whose error is [`CliError`].
pub type CliResult<T = ()> = Result<T, CliError>;
