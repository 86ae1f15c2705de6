//! [`SqliteConfig`]: where the database lives and how the backend behaves.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jq_core::{Clock, DEFAULT_MAX_PAYLOAD_BYTES};

use crate::error::SqliteError;

/// Where the jobs live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Location {
    /// A database file (created when missing), shared by every process that
    /// opens it.
    File(PathBuf),
    /// A private in-memory database: gone when the storage is dropped, and
    /// not shared with other [`SqliteStorage::open`](crate::SqliteStorage::open) calls.
    Memory,
}

/// How to open a [`SqliteStorage`](crate::SqliteStorage). Builder style:
///
/// ```
/// use std::time::Duration;
/// let config = jq_sqlite::SqliteConfig::new("jobs.db")
///     .busy_timeout(Duration::from_secs(10))
///     .max_payload_bytes(64 * 1024);
/// # let _ = config;
/// ```
#[derive(Clone, Debug)]
pub struct SqliteConfig {
    pub(crate) location: Location,
    pub(crate) clock: Clock,
    pub(crate) max_payload_bytes: usize,
    pub(crate) busy_timeout: Duration,
    pub(crate) readers: usize,
    pub(crate) max_group: usize,
    pub(crate) purge_batch: usize,
    pub(crate) checkpoint_wal_bytes: u64,
}

impl SqliteConfig {
    /// A database file at `path` (created when missing). The path
    /// `:memory:` gives a private in-memory database.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let location = if path == Path::new(":memory:") { Location::Memory } else { Location::File(path) };
        SqliteConfig {
            location,
            clock: Clock::system(),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            busy_timeout: Duration::from_secs(5),
            readers: 4,
            max_group: 256,
            purge_batch: 10_000,
            checkpoint_wal_bytes: 64 * 1024 * 1024,
        }
    }

    /// A private in-memory database (tests, examples): not shared with any
    /// other storage, gone when the last clone of the storage is dropped.
    pub fn memory() -> Self {
        Self::new(":memory:")
    }

    /// Parses `sqlite://PATH` (`sqlite:///abs/path`, `sqlite://rel/path`;
    /// a `?query` part is ignored) or `sqlite::memory:`.
    pub fn from_url(url: &str) -> Result<Self, SqliteError> {
        if url == "sqlite::memory:" || url == "sqlite://:memory:" {
            return Ok(Self::memory());
        }
        let rest = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"));
        let path = rest.map(|r| r.split('?').next().unwrap_or(r)).filter(|p| !p.is_empty());
        match path {
            Some(path) => Ok(Self::new(path)),
            None => Err(SqliteError::InvalidUrl { url: url.to_owned() }),
        }
    }

    /// Takes "now" from `clock` (default: the system clock). Tests pass a
    /// [`jq_core::ManualClock`]'s clock.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Refuses payloads over `bytes` of JSON (default
    /// [`jq_core::DEFAULT_MAX_PAYLOAD_BYTES`], 1 MiB).
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = bytes;
        self
    }

    /// How long a write waits for another process's write transaction
    /// before giving up with [`jq_core::Error::Unavailable`] (default 5 s).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// The most read connections (get, list, stats, leaders) open at once
    /// (default 4); more reads at once wait for a free one.
    pub fn readers(mut self, n: usize) -> Self {
        self.readers = n.max(1);
        self
    }

    /// At most this many queued writes share one transaction (group commit;
    /// default 256).
    pub fn max_group(mut self, n: usize) -> Self {
        self.max_group = n.max(1);
        self
    }

    /// Rows deleted per statement by purge (default 10,000).
    pub fn purge_batch(mut self, n: usize) -> Self {
        self.purge_batch = n.max(1);
        self
    }

    /// When the write-ahead log grows past this many bytes, the writer runs
    /// `PRAGMA wal_checkpoint(TRUNCATE)` (default 64 MiB). Constant readers
    /// can otherwise keep the WAL growing without bound.
    pub fn checkpoint_wal_bytes(mut self, bytes: u64) -> Self {
        self.checkpoint_wal_bytes = bytes;
        self
    }

    /// The database file, or `None` for an in-memory database.
    pub fn path(&self) -> Option<&Path> {
        match &self.location {
            Location::File(p) => Some(p),
            Location::Memory => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(SqliteConfig::from_url("sqlite::memory:").unwrap().location, Location::Memory);
        assert_eq!(SqliteConfig::from_url("sqlite://jobs.db").unwrap().path(), Some(Path::new("jobs.db")));
        assert_eq!(SqliteConfig::from_url("sqlite:///tmp/j.db?mode=rwc").unwrap().path(), Some(Path::new("/tmp/j.db")));
        assert!(SqliteConfig::from_url("postgres://x").is_err());
        assert!(SqliteConfig::from_url("sqlite://").is_err());
    }
}
