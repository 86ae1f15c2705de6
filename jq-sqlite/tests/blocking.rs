//! Handlers that block every thread of their runtime keep their leases:
//! the pool's heartbeat runs on a thread of its own.

use jq_sqlite::{SqliteConfig, SqliteStorage};

#[test]
fn handlers_blocking_every_runtime_thread_keep_their_leases() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("jobs.db");
    jq_testkit::blocking::blocking_handlers_keep_their_leases(move || {
        let path = path.clone();
        async move { SqliteStorage::open(SqliteConfig::new(path)).expect("open") }
    });
}
