//! [`PostgresError`] for setup (connect, migrate), and the mapping of sqlx
//! errors to [`jq_core::Error`] for the storage operations.

use jq_core::{Error, JobId};

/// The backend name in [`jq_core::Error`] values.
pub(crate) const BACKEND: &str = "postgres";

/// What can go wrong while connecting or migrating. Storage operations
/// return [`jq_core::Error`] instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresError {
    /// The schema name is not a plain identifier.
    #[error("schema name {schema:?} is invalid: use 1 to 48 bytes of letters, digits and _, not starting with a digit")]
    InvalidSchema {
        /// The rejected name.
        schema: String,
    },
    /// The URL could not be parsed.
    #[error("invalid PostgreSQL URL: {0}")]
    InvalidUrl(#[source] sqlx::Error),
    /// The server could not be reached or refused the connection.
    #[error(
        "cannot connect to PostgreSQL at {target}: {source} (is the server running and the URL right? \
         in this repository, run scripts/start-services.sh)"
    )]
    Connect {
        /// host:port/database, without credentials.
        target: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A connection pooler (PgBouncer) refused a startup parameter the
    /// driver sends: `extra_float_digits` (sqlx sends it; PgBouncer refuses
    /// it unless its `ignore_startup_parameters` lists it) or `options`
    /// (which carries [`crate::PostgresConfig::statement_timeout`]).
    #[error(
        "the connection pooler at {target} refused the startup parameter {parameter} ({source}): {advice}",
        advice = startup_advice(parameter)
    )]
    StartupParameter {
        /// host:port/database, without credentials.
        target: String,
        /// The parameter refused.
        parameter: String,
        /// The pooler's error.
        #[source]
        source: sqlx::Error,
    },
    /// Two of jq's client connections met the same server connection with
    /// prepared statements of the same name: a connection pooler in
    /// transaction mode is between jq and PostgreSQL, and jq was not told.
    /// Carried by the fatal [`jq_core::Error::Fatal`]: going on could run
    /// one client's statement with another's parameters.
    #[error(
        "a connection pooler in transaction mode (PgBouncer pool_mode = transaction) is between jq and PostgreSQL, \
         and jq's prepared statements clash on its shared server connections: connect with ?pooler=transaction \
         (PostgresConfig::transaction_pooler(true)), or give jq a direct URL or a session-mode pool (with it set \
         already: give enqueue_in a transaction, not the pool); {source}"
    )]
    TransactionPooler {
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A migration failed; the transaction was rolled back, so the schema is
    /// as it was before the call.
    #[error("migrating schema {schema:?} failed at version {version}: {source}")]
    Migrate {
        /// The schema.
        schema: String,
        /// The migration that failed (0: taking the lock or reading the
        /// applied versions).
        version: i32,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// Installing the functions failed (after the migrations, in their
    /// transaction, which was rolled back: the schema is as it was before
    /// the call).
    #[error("installing generation {generation} of jq's functions in schema {schema:?} failed: {source}")]
    Functions {
        /// The schema.
        schema: String,
        /// The generation being installed.
        generation: i32,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The schema was migrated, or its functions installed, by a newer
    /// jq-postgres than this one. Nothing was changed: an older build
    /// neither runs migrations on tables it does not know nor replaces
    /// newer functions with its own.
    #[error(
        "schema {schema:?} is at {part} {found}, newer than this jq-postgres knows ({known}); upgrade jq-postgres",
        part = part.noun()
    )]
    TooNew {
        /// The schema.
        schema: String,
        /// What is newer: the migrations or the functions.
        part: SchemaPart,
        /// The newest version (or generation) recorded in the schema.
        found: i32,
        /// The newest this build knows ([`crate::SCHEMA_VERSION`] or
        /// [`crate::FUNCTIONS_VERSION`]).
        known: i32,
    },
    /// A migration this build has was applied to the schema with another
    /// text: its recorded checksum differs from the file's. A released
    /// migration is never edited, so either this build's copy was, or the
    /// schema was made by a build before the 0.1 baseline (its
    /// `jq_migrations` has no checksums: `found` is `None`). Nothing was
    /// changed; migrating again cannot help.
    #[error(
        "schema {schema:?} recorded migration {version} ({name}) with checksum {found}, but this jq-postgres's \
         has {known}: {why}; migrate a new schema, or run the build that made this one",
        found = found.as_deref().unwrap_or("none"),
        why = if found.is_some() {
            "the migration was edited after the schema applied it, and a released migration never changes"
        } else {
            "the schema was made by a jq-postgres before 0.1, whose migrations the 0.1 baseline replaced"
        }
    )]
    MigrationChanged {
        /// The schema.
        schema: String,
        /// The migration's version.
        version: i32,
        /// Its name as recorded.
        name: String,
        /// The recorded checksum (hex); `None` when the schema records none.
        found: Option<String>,
        /// This build's checksum of the file (hex).
        known: String,
    },
    /// The schema's functions are this build's generation
    /// ([`crate::FUNCTIONS_VERSION`]) with other texts: two builds disagree
    /// on what that generation is (one edited a function without a new
    /// generation). Nothing was changed.
    #[error(
        "schema {schema:?} has generation {generation} of jq's functions with checksum {found}, but this \
         jq-postgres's generation {generation} has {known}: two builds disagree on that generation's functions \
         (one was edited without a new FUNCTIONS_VERSION); run one build of jq-postgres on this schema"
    )]
    FunctionsChanged {
        /// The schema.
        schema: String,
        /// The generation both record.
        generation: i32,
        /// The checksum recorded in the schema (hex).
        found: String,
        /// This build's checksum (hex).
        known: String,
    },
    /// The server refuses new connections because its `max_connections`
    /// are taken (SQLSTATE 53300 too_many_connections), and a call found no
    /// pooled connection within the acquire timeout. Carried by the
    /// retryable [`jq_core::Error::Unavailable`]: the worker pool retries,
    /// and goes on as soon as a slot frees.
    #[error(
        "PostgreSQL at {target} has no connection left to give (SQLSTATE 53300 too_many_connections, \"{message}\"): \
         its max_connections are taken by other clients; jq retries and goes on when a slot frees (raise \
         max_connections, or make the other clients' pools smaller)"
    )]
    NoConnectionLeft {
        /// host:port/database, without credentials.
        target: String,
        /// What the server said.
        message: String,
    },
    /// The server answered a write with SQLSTATE 25006
    /// (read_only_sql_transaction): it is a standby, or the old primary
    /// after a failover (demoted, or left read-only). Carried by the
    /// retryable [`jq_core::Error::Unavailable`]: the connection, and every
    /// one opened before it, is dropped rather than used again, and the
    /// call retried on a new one (on a URL of several hosts, to the first
    /// that takes writes).
    #[error(
        "PostgreSQL answered read-only (SQLSTATE 25006 read_only_sql_transaction): the server is a standby or a \
         demoted primary, as after a failover; jq drops its connections and retries on new ones (list every host \
         in the URL with ?target_session_attrs=read-write, or point it at a name that follows the primary); {source}"
    )]
    ReadOnly {
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// No host of the URL could be used when connecting: each is
    /// unreachable, or (with `target_session_attrs=read-write`) a standby
    /// or read-only. Retryable: a failover may be under way.
    #[error(
        "no host of {hosts:?} could be used: each is down, or (with target_session_attrs=read-write) a standby or \
         read-only; a failover may be under way (retry), or the URL lists no primary"
    )]
    NoPrimary {
        /// host:port of each host tried, in the URL's order.
        hosts: Vec<String>,
    },
    /// jq's tables are missing from the store: the schema was never
    /// migrated, or is older than this jq (SQLSTATE 42P01 undefined table
    /// or 3F000 undefined schema on jq's own tables). Carried by the fatal
    /// [`jq_core::Error::Fatal`]: retrying cannot help until someone
    /// migrates.
    #[error(
        "jq's tables are missing (the schema was never migrated, or is older than this jq): run `jqctl migrate` \
         or `client.migrate()` once, then restart; {source}"
    )]
    SchemaMissing {
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
}

/// What of a schema [`PostgresError::TooNew`] found newer than this build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchemaPart {
    /// The migrations: the tables, indexes and constraints
    /// ([`crate::SCHEMA_VERSION`]).
    Migrations,
    /// The functions ([`crate::FUNCTIONS_VERSION`]).
    Functions,
}

impl SchemaPart {
    /// How the error names it: "version" or "functions generation".
    fn noun(self) -> &'static str {
        match self {
            SchemaPart::Migrations => "version",
            SchemaPart::Functions => "functions generation",
        }
    }
}

/// What to do about a refused startup parameter.
fn startup_advice(parameter: &str) -> &'static str {
    match parameter {
        "extra_float_digits" => {
            "add `ignore_startup_parameters = extra_float_digits` to the [pgbouncer] section of its configuration \
             and reload it; in transaction pooling mode, connect with ?pooler=transaction \
             (PostgresConfig::transaction_pooler(true)) instead, with which jq does not send it"
        }
        "options" => {
            "the parameter carries the statement timeout: behind PgBouncer connect with ?pooler=transaction \
             (PostgresConfig::transaction_pooler(true)), which sets it per transaction, or set it on the role \
             (ALTER ROLE ... SET statement_timeout) and leave PostgresConfig::statement_timeout unset"
        }
        _ => "add it to `ignore_startup_parameters` in the [pgbouncer] section of its configuration and reload it",
    }
}

impl PostgresError {
    /// A failed connect to `target`: [`PostgresError::StartupParameter`]
    /// when a pooler refused a startup parameter, else
    /// [`PostgresError::Connect`].
    pub(crate) fn connect(target: String, source: sqlx::Error) -> Self {
        let refused = match &source {
            sqlx::Error::Database(db) => {
                db.message().strip_prefix("unsupported startup parameter: ").map(|p| p.trim().to_owned())
            }
            _ => None,
        };
        match refused {
            Some(parameter) => PostgresError::StartupParameter { target, parameter, source },
            None => PostgresError::Connect { target, source },
        }
    }

    /// True when the server could not be reached; retrying later may work.
    pub fn is_unavailable(&self) -> bool {
        match self {
            PostgresError::Connect { source, .. }
            | PostgresError::Migrate { source, .. }
            | PostgresError::Functions { source, .. } => is_transient(source),
            PostgresError::NoConnectionLeft { .. }
            | PostgresError::ReadOnly { .. }
            | PostgresError::NoPrimary { .. } => true,
            _ => false,
        }
    }
}

impl From<PostgresError> for Error {
    fn from(e: PostgresError) -> Self {
        if e.is_unavailable() {
            Error::Unavailable { backend: BACKEND, source: Box::new(e) }
        } else {
            Error::Backend { backend: BACKEND, source: Box::new(e) }
        }
    }
}

/// SQLSTATE codes after which the same call may succeed later: connection
/// exceptions (class 08), operator intervention (57: admin/crash shutdown,
/// cannot connect now, statement timeout / query cancelled), too many
/// connections, serialization failure and deadlock.
fn is_transient_code(code: &str) -> bool {
    code.starts_with("08") || code.starts_with("57") || matches!(code, "53300" | "53400" | "40001" | "40P01" | "55P03")
}

/// True for errors after which retrying may succeed.
pub(crate) fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| is_transient_code(&c)),
        _ => false,
    }
}

/// True for errors one row of a statement causes while the others would
/// apply: a value the server cannot take (data exception, class 22: a NUL
/// in text, a timestamp out of range), a constraint (class 23), a trigger's
/// exception (P0001), a program limit (class 54), or a value the driver
/// could not encode. A batch failing so is applied item by item.
pub(crate) fn is_row_specific(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Encode(_) => true,
        sqlx::Error::Database(db) => {
            db.code().is_some_and(|c| c.starts_with("22") || c.starts_with("23") || c.starts_with("54") || c == "P0001")
        }
        _ => false,
    }
}

/// SQLSTATE codes that mean jq's tables are not there: undefined table
/// (42P01), undefined schema (3F000). jq's statements touch only its own
/// tables, so the schema was never migrated, or is older than this build.
fn is_schema_missing_code(code: &str) -> bool {
    matches!(code, "42P01" | "3F000")
}

/// True when `e` is a prepared statement of jq's found on, or missing
/// from, a server connection another client set up: "prepared statement
/// "sqlx_s_1" already exists" (42P05), "... does not exist" (26000), or
/// "bind message supplies 1 parameters, but prepared statement ...
/// requires 2" (08P01). Only a transaction pooler shares server
/// connections so.
fn is_statement_clash(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else { return false };
    db.code().is_some_and(|c| matches!(c.as_ref(), "42P05" | "26000" | "08P01"))
        && db.message().contains("prepared statement")
}

/// SQLSTATE read_only_sql_transaction: a write on a standby or on a
/// primary made read-only (a failover's old primary).
pub(crate) const READ_ONLY_SQL_TRANSACTION: &str = "25006";

/// Maps a driver error of a storage operation.
pub(crate) fn map_sqlx(e: sqlx::Error) -> Error {
    if let sqlx::Error::Database(db) = &e
        && db.code().is_some_and(|c| is_schema_missing_code(&c))
    {
        return Error::Fatal { backend: BACKEND, source: Box::new(PostgresError::SchemaMissing { source: e }) };
    }
    if let sqlx::Error::Database(db) = &e
        && db.code().as_deref() == Some(READ_ONLY_SQL_TRANSACTION)
    {
        return Error::Unavailable { backend: BACKEND, source: Box::new(PostgresError::ReadOnly { source: e }) };
    }
    if is_statement_clash(&e) {
        return Error::Fatal { backend: BACKEND, source: Box::new(PostgresError::TransactionPooler { source: e }) };
    }
    if is_transient(&e) {
        Error::Unavailable { backend: BACKEND, source: Box::new(e) }
    } else {
        Error::Backend { backend: BACKEND, source: Box::new(e) }
    }
}

/// A row that could not be decoded.
pub(crate) fn corrupt(id: Option<JobId>, reason: impl Into<String>) -> Error {
    Error::Corrupt { id, reason: reason.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_codes() {
        for code in ["08006", "08001", "57P01", "57014", "53300", "40001", "40P01"] {
            assert!(is_transient_code(code), "{code}");
        }
        for code in ["23505", "42P01", "22P02"] {
            assert!(!is_transient_code(code), "{code}");
        }
        assert!(is_schema_missing_code("42P01") && is_schema_missing_code("3F000") && !is_schema_missing_code("42601"));
        assert!(map_sqlx(sqlx::Error::PoolTimedOut).is_retryable());
        assert!(!map_sqlx(sqlx::Error::RowNotFound).is_retryable());
    }
}
