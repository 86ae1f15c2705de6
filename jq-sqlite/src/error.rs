//! [`SqliteError`] for opening and migrating a database, and the mapping of
//! driver errors to [`jq_core::Error`] for everything else.

use std::path::PathBuf;

use rusqlite::ErrorCode;

/// The backend's name in [`jq_core::Error`] values.
pub(crate) const BACKEND: &str = "sqlite";

/// Why [`SqliteStorage::open`](crate::SqliteStorage::open) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteError {
    /// The URL given to [`SqliteConfig::from_url`](crate::SqliteConfig::from_url) is not one we understand.
    #[error("invalid SQLite URL {url:?}: use sqlite://PATH (e.g. sqlite://jobs.db) or sqlite::memory:")]
    InvalidUrl {
        /// The rejected URL.
        url: String,
    },
    /// The database file could not be opened or configured.
    #[error("cannot open SQLite database {path:?}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The driver's error.
        #[source]
        source: rusqlite::Error,
    },
    /// Migrating the schema failed; the database stays at the previous version.
    #[error("migrating {path:?} to schema version {version} failed: {source}")]
    Migrate {
        /// The file.
        path: PathBuf,
        /// The version that could not be reached.
        version: u32,
        /// The driver's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The file has a schema version but not jq-sqlite's application id
    /// ([`crate::schema::APPLICATION_ID`]): an unreleased development
    /// build of jq wrote it, whose schema versions no released jq-sqlite
    /// knows (nothing published wrote them), or another program did. It is
    /// left as it is, never migrated.
    #[error(
        "database {path:?} has schema version {found} of an unreleased development build of jq (or is not jq's): \
         no released jq-sqlite wrote it, and none migrates it; finish its jobs with the build that wrote it, then \
         start from a new file"
    )]
    DevelopmentSchema {
        /// The file.
        path: PathBuf,
        /// Its `PRAGMA user_version`.
        found: u32,
    },
    /// The file was written by a newer jq-sqlite.
    #[error(
        "database {path:?} has schema version {found}, newer than the {known} this jq-sqlite knows; upgrade jq-sqlite"
    )]
    SchemaTooNew {
        /// The file.
        path: PathBuf,
        /// Its `PRAGMA user_version`.
        found: u32,
        /// The newest version this crate knows.
        known: u32,
    },
    /// The writer thread died (a panic outside any one command): every call
    /// of the storage fails from then on with [`jq_core::Error::Fatal`]
    /// carrying this; only a new storage (a restarted process) helps.
    #[error("the SQLite writer thread died (see the log for its panic): restart the process")]
    WriterGone,
    /// The writer thread could not be started.
    #[error("cannot start the SQLite writer thread: {0}")]
    Thread(#[source] std::io::Error),
}

impl SqliteError {
    /// True when opening may succeed later (the file is busy or locked, the
    /// disk is full, a thread could not start).
    pub fn is_unavailable(&self) -> bool {
        match self {
            SqliteError::Open { source, .. } | SqliteError::Migrate { source, .. } => is_unavailable(source),
            SqliteError::Thread(_) => true,
            SqliteError::InvalidUrl { .. }
            | SqliteError::DevelopmentSchema { .. }
            | SqliteError::SchemaTooNew { .. }
            | SqliteError::WriterGone => false,
        }
    }
}

impl From<SqliteError> for jq_core::Error {
    fn from(e: SqliteError) -> Self {
        if matches!(e, SqliteError::WriterGone) {
            return jq_core::Error::Fatal { backend: BACKEND, source: Box::new(e) };
        }
        if e.is_unavailable() {
            jq_core::Error::Unavailable { backend: BACKEND, source: Box::new(e) }
        } else {
            jq_core::Error::Backend { backend: BACKEND, source: Box::new(e) }
        }
    }
}

/// True for errors that may go away when retried later: the database is
/// busy or locked beyond the busy timeout, or the file system failed.
pub(crate) fn is_unavailable(e: &rusqlite::Error) -> bool {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => matches!(
            f.code,
            ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::SystemIoFailure
                | ErrorCode::CannotOpen
                | ErrorCode::DiskFull
                | ErrorCode::FileLockingProtocolFailed
                | ErrorCode::OutOfMemory
        ),
        _ => false,
    }
}

/// True for an error of reading one row's value (a column of another type
/// than jq wrote, a value out of range), not of the database: admin reads
/// leave such a row out, log it, and go on.
pub(crate) fn is_decoding(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::Utf8Error(..)
    )
}

/// Maps a driver error to [`jq_core::Error`]: busy/locked/I-O errors are
/// [`jq_core::Error::Unavailable`], the rest [`jq_core::Error::Backend`].
pub(crate) fn db(e: rusqlite::Error) -> jq_core::Error {
    if is_unavailable(&e) {
        jq_core::Error::Unavailable { backend: BACKEND, source: Box::new(e) }
    } else {
        jq_core::Error::Backend { backend: BACKEND, source: Box::new(e) }
    }
}

/// A driver error that must be reported to several callers (a failed group
/// commit): [`jq_core::Error`] is not `Clone`, so keep what makes one.
#[derive(Clone, Debug)]
pub(crate) struct SharedFailure {
    unavailable: bool,
    message: String,
}

impl SharedFailure {
    pub(crate) fn new(context: &str, e: &rusqlite::Error) -> Self {
        SharedFailure { unavailable: is_unavailable(e), message: format!("{context}: {e}") }
    }

    /// Innocent commands of a group rolled back because another command
    /// of the group panicked: retrying them can succeed.
    pub(crate) fn panicked(message: &str) -> Self {
        SharedFailure {
            unavailable: true,
            message: format!("rolled back with another command of its group, which panicked: {message}"),
        }
    }

    pub(crate) fn to_error(&self) -> jq_core::Error {
        let source = self.message.clone().into();
        if self.unavailable {
            jq_core::Error::Unavailable { backend: BACKEND, source }
        } else {
            jq_core::Error::Backend { backend: BACKEND, source }
        }
    }
}

/// The writer thread ended: every call of this storage fails from now on
/// ([`jq_core::Error::Fatal`] with [`SqliteError::WriterGone`]).
pub(crate) fn writer_gone() -> jq_core::Error {
    jq_core::Error::Fatal { backend: BACKEND, source: Box::new(SqliteError::WriterGone) }
}

/// A command's answer was dropped while the writer lives on: the command
/// panicked and was rolled back (see the log).
pub(crate) fn command_panicked() -> jq_core::Error {
    jq_core::Error::Backend {
        backend: BACKEND,
        source: "the SQLite writer command panicked (see the log); it was rolled back and the writer carries on".into(),
    }
}
