//! The shared conformance and property suites of jq-testkit, run on SQLite.
//!
//! Each test gets a fresh temp directory; every `connect` opens a NEW
//! `SqliteStorage` (its own writer thread and connections) on the same file,
//! like separate worker processes would.
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::PathBuf;
use std::sync::Mutex;

use jq_core::Clock;
use jq_sqlite::{SqliteConfig, SqliteStorage};
use tempfile::TempDir;

struct SqliteHarness {
    /// `None` once cleaned up. Dropped without cleanup (a failed scenario),
    /// the directory is kept for inspection.
    dir: Mutex<Option<TempDir>>,
    path: PathBuf,
}

#[async_trait::async_trait]
impl jq_testkit::Harness for SqliteHarness {
    type Storage = SqliteStorage;

    async fn connect(&self, clock: Clock) -> SqliteStorage {
        SqliteStorage::open(SqliteConfig::new(&self.path).clock(clock))
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.path.display()))
    }

    async fn cleanup(&self) {
        drop(self.dir.lock().unwrap().take());
    }
}

impl Drop for SqliteHarness {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            eprintln!("scenario failed: its database is kept at {}", dir.keep().display());
        }
    }
}

async fn setup() -> SqliteHarness {
    let dir = tempfile::Builder::new().prefix("jq-sqlite-").tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    SqliteHarness { dir: Mutex::new(Some(dir)), path }
}

jq_testkit::conformance!(setup; roles, periodic, controls, throughput, cancellation, workflows, keys, durable);
jq_testkit::properties!(setup; periodic, workflows);
