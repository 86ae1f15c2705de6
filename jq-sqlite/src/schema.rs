//! The schema, versioned with `PRAGMA user_version`, and how connections
//! are opened.
//!
//! Migration `n` (1-based) brings a database from version `n - 1` to `n`;
//! an existing file goes through every missing one in order, each in its own
//! `BEGIN IMMEDIATE` transaction, so several processes opening the same file
//! at once migrate it exactly once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use crate::error::SqliteError;

/// Every migration, oldest first: (name, SQL).
pub const MIGRATIONS: &[(&str, &str)] = &[
    ("001_jobs", include_str!("sql/001_jobs.sql")),
    ("002_maintenance", include_str!("sql/002_maintenance.sql")),
    ("003_leaders", include_str!("sql/003_leaders.sql")),
    ("004_schedules", include_str!("sql/004_schedules.sql")),
    ("005_queue_controls", include_str!("sql/005_queue_controls.sql")),
    ("006_trace", include_str!("sql/006_trace.sql")),
    ("007_job_counts", include_str!("sql/007_job_counts.sql")),
    ("008_cancel", include_str!("sql/008_cancel.sql")),
    ("009_workflows", include_str!("sql/009_workflows.sql")),
    ("010_workflow_counts", include_str!("sql/010_workflow_counts.sql")),
    ("011_keys", include_str!("sql/011_keys.sql")),
    ("012_keyed_wait", include_str!("sql/012_keyed_wait.sql")),
];

/// The schema version this crate writes.
pub fn current_version() -> u32 {
    MIGRATIONS.len() as u32
}

/// The database's `PRAGMA user_version`.
pub fn version(conn: &Connection) -> rusqlite::Result<u32> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// Brings the schema up to [`current_version`], one migration per
/// transaction. `path` is for error messages.
pub fn migrate(conn: &mut Connection, path: &Path) -> Result<(), SqliteError> {
    let known = current_version();
    loop {
        let next = version(conn).map_err(|source| SqliteError::Open { path: path.into(), source })? + 1;
        if next > known {
            if next - 1 > known {
                return Err(SqliteError::SchemaTooNew { path: path.into(), found: next - 1, known });
            }
            return Ok(());
        }
        let fail = |source| SqliteError::Migrate { path: path.into(), version: next, source };
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(fail)?;
        // Another process may have migrated while we waited for the lock.
        let found = version(&tx).map_err(fail)?;
        if found + 1 == next {
            let (name, sql) = MIGRATIONS[(next - 1) as usize];
            tx.execute_batch(sql).map_err(fail)?;
            tx.pragma_update(None, "user_version", next).map_err(fail)?;
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

    #[test]
    fn migrations_reach_the_current_version_and_are_idempotent() {
        let mut conn = open(None, Role::Writer, Duration::from_secs(1)).unwrap();
        migrate(&mut conn, Path::new(":memory:")).unwrap();
        assert_eq!(version(&conn).unwrap(), current_version());
        migrate(&mut conn, Path::new(":memory:")).unwrap();
        assert_eq!(version(&conn).unwrap(), current_version());
    }

    #[test]
    fn newer_schema_is_refused() {
        let mut conn = open(None, Role::Writer, Duration::from_secs(1)).unwrap();
        conn.pragma_update(None, "user_version", current_version() + 1).unwrap();
        assert!(matches!(migrate(&mut conn, Path::new(":memory:")), Err(SqliteError::SchemaTooNew { .. })));
    }
}
