//! The schema, versioned with `PRAGMA user_version`, and how connections
//! are opened.
//!
//! Version `n` (1-based) is [`MIGRATIONS`]`[n - 1]`, which brings a file
//! from version `n - 1` to `n`: a new file gets every version in order,
//! each in its own `BEGIN IMMEDIATE` transaction, so several processes
//! opening the same file at once migrate it exactly once. Version 1 is the
//! schema 0.1 released; a released version is never edited
//! (`tests/schema.rs` holds each one's checksum), a change is a new one.
//!
//! A file jq-sqlite migrated also carries [`APPLICATION_ID`] in its header
//! (`PRAGMA application_id`). A file with a schema version but without it
//! was written by an unreleased development build of jq, whose versions
//! were not these (nothing published wrote them): it is refused with
//! [`SqliteError::DevelopmentSchema`], never migrated.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use crate::error::SqliteError;

/// Every schema version, oldest first: (name, SQL).
pub const MIGRATIONS: &[(&str, &str)] = &[
    ("001_schema", include_str!("sql/001_schema.sql")),
    ("002_durable", include_str!("sql/002_durable.sql")),
    ("003_unique_created", include_str!("sql/003_unique_created.sql")),
];

/// The `PRAGMA application_id` of every file jq-sqlite migrated: the bytes
/// `jqdb` (offset 68 of the file's header).
pub const APPLICATION_ID: i32 = i32::from_be_bytes(*b"jqdb");

/// The schema version this crate writes.
pub fn current_version() -> u32 {
    MIGRATIONS.len() as u32
}

/// The database's `PRAGMA user_version`.
pub fn version(conn: &Connection) -> rusqlite::Result<u32> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// The database's `PRAGMA application_id`.
fn application_id(conn: &Connection) -> rusqlite::Result<i32> {
    conn.pragma_query_value(None, "application_id", |row| row.get(0))
}

/// The version of the file's schema, refused when this crate cannot use
/// it: written by a development build ([`SqliteError::DevelopmentSchema`])
/// or by a newer jq-sqlite ([`SqliteError::SchemaTooNew`]).
fn usable_version(conn: &Connection, path: &Path) -> Result<u32, SqliteError> {
    let read = |source| SqliteError::Open { path: path.into(), source };
    let found = version(conn).map_err(read)?;
    if found == 0 {
        return Ok(0);
    }
    if application_id(conn).map_err(read)? != APPLICATION_ID {
        return Err(SqliteError::DevelopmentSchema { path: path.into(), found });
    }
    let known = current_version();
    if found > known {
        return Err(SqliteError::SchemaTooNew { path: path.into(), found, known });
    }
    Ok(found)
}

/// Brings the schema up to [`current_version`], one version per
/// transaction. `path` is for error messages.
pub fn migrate(conn: &mut Connection, path: &Path) -> Result<(), SqliteError> {
    loop {
        let next = usable_version(conn, path)? + 1;
        if next > current_version() {
            return Ok(());
        }
        let fail = |source| SqliteError::Migrate { path: path.into(), version: next, source };
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(fail)?;
        // Another process may have migrated while we waited for the lock.
        if usable_version(&tx, path)? + 1 == next {
            let (name, sql) = MIGRATIONS[(next - 1) as usize];
            tx.execute_batch(sql).map_err(fail)?;
            tx.pragma_update(None, "user_version", next).map_err(fail)?;
            tx.pragma_update(None, "application_id", APPLICATION_ID).map_err(fail)?;
            tracing::info!(path = %path.display(), version = next, migration = name, "migrated SQLite schema");
        }
        tx.commit().map_err(fail)?;
    }
}

/// How a connection is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The one write connection of a storage.
    Writer,
    /// A pooled connection for get, list and stats.
    Reader,
}

/// Opens `path` (`None`: a private in-memory database) and sets the pragmas
/// every connection needs.
pub(crate) fn open(path: Option<&Path>, role: Role, busy_timeout: Duration) -> Result<Connection, SqliteError> {
    let shown: PathBuf = path.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(":memory:"));
    let fail = |source| SqliteError::Open { path: shown.clone(), source };
    let mut flags = OpenFlags::SQLITE_OPEN_NO_MUTEX;
    flags |= match role {
        Role::Writer => OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
        Role::Reader => OpenFlags::SQLITE_OPEN_READ_ONLY,
    };
    let conn = match path {
        Some(p) => Connection::open_with_flags(p, flags),
        None => Connection::open_in_memory_with_flags(flags),
    }
    .map_err(fail)?;
    // First, so that every later statement waits for other processes.
    conn.busy_timeout(busy_timeout).map_err(fail)?;
    conn.set_prepared_statement_cache_capacity(64);
    if role == Role::Writer && path.is_some() {
        // WAL: readers never block the writer nor the other way round.
        // NORMAL: no fsync per commit; a power cut may lose the last commits
        // but never corrupts the file.
        let mode: String = conn.pragma_update_and_check(None, "journal_mode", "wal", |r| r.get(0)).map_err(fail)?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(path = ?shown, mode, "SQLite refused WAL mode; concurrency will suffer");
        }
    }
    conn.pragma_update(None, "synchronous", "NORMAL").map_err(fail)?;
    conn.pragma_update(None, "temp_store", "MEMORY").map_err(fail)?;
    // Page cache in KiB (negative): the writer keeps the hot index pages,
    // readers need less.
    let cache_kib = if role == Role::Writer { -16_000 } else { -4_000 };
    conn.pragma_update(None, "cache_size", cache_kib).map_err(fail)?;
    Ok(conn)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn memory() -> Connection {
        open(None, Role::Writer, Duration::from_secs(1)).unwrap()
    }

    #[test]
    fn a_new_database_gets_the_current_version_and_opening_again_changes_nothing() {
        let mut conn = memory();
        migrate(&mut conn, Path::new(":memory:")).unwrap();
        assert_eq!((version(&conn).unwrap(), application_id(&conn).unwrap()), (current_version(), APPLICATION_ID));
        migrate(&mut conn, Path::new(":memory:")).unwrap();
        assert_eq!(version(&conn).unwrap(), current_version());
    }

    #[test]
    fn newer_schema_is_refused() {
        let mut conn = memory();
        migrate(&mut conn, Path::new(":memory:")).unwrap();
        conn.pragma_update(None, "user_version", current_version() + 1).unwrap();
        let err = migrate(&mut conn, Path::new(":memory:")).unwrap_err();
        let known = current_version();
        assert!(
            matches!(err, SqliteError::SchemaTooNew { found, known: k, .. } if found == known + 1 && k == known),
            "{err:?}"
        );
    }

    /// Every version of the development chain (1 to 12), none carrying
    /// the application id: refused, and the file left as it was.
    #[test]
    fn a_development_builds_schema_is_refused_and_left_alone() {
        for found in 1..=12 {
            let mut conn = memory();
            conn.execute_batch("CREATE TABLE jobs (seq INTEGER PRIMARY KEY)").unwrap();
            conn.pragma_update(None, "user_version", found).unwrap();
            let err = migrate(&mut conn, Path::new(":memory:")).unwrap_err();
            assert!(matches!(err, SqliteError::DevelopmentSchema { found: f, .. } if f == found), "{err:?}");
            assert!(!err.is_unavailable());
            let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0)).unwrap();
            assert_eq!((version(&conn).unwrap(), application_id(&conn).unwrap(), tables), (found, 0, 1));
        }
    }
}
