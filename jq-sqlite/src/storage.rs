//! [`SqliteStorage`]: the [`Storage`] implementation, routing writes to the
//! writer thread and reads to a small pool of read connections.

use std::fmt;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use jq_core::{
    ClaimRequest, Clock, Completion, CompletionResult, Error, Job, JobFilter, JobId, LeaseRef, NewJob, Result, State,
    Stats, Storage, Timestamp, WorkSignal,
};
use rusqlite::{Connection, Transaction};
use tokio::sync::{oneshot, watch};

use crate::config::{Location, SqliteConfig};
use crate::error::{BACKEND, SqliteError, writer_gone};
use crate::schema::{self, Role};
use crate::writer::{Command, Reply, Writer};
use crate::{admin, enqueue, wake};

/// The embedded SQLite backend. Cheap to clone (an `Arc` inside); the
/// writer thread stops when the last clone is dropped.
///
/// One storage owns one writer thread with the only write connection of
/// this process (writes are queued and group-committed) and up to
/// [`SqliteConfig::readers`] read connections. Several processes may open
/// the same file: `BEGIN IMMEDIATE` and the busy timeout serialise their
/// writers, and no job is ever claimed twice.
#[derive(Clone)]
pub struct SqliteStorage {
    inner: Arc<Inner>,
}

struct Inner {
    config: SqliteConfig,
    commands: Sender<Command>,
    readers: Option<Readers>,
    signal: Arc<watch::Sender<u64>>,
}

impl fmt::Debug for SqliteStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStorage").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

/// Idle read connections of a file database, opened on demand.
struct Readers {
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    fn take(&self, config: &SqliteConfig) -> Result<Connection> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match idle {
            Some(conn) => Ok(conn),
            None => schema::open(config.path(), Role::Reader, config.busy_timeout).map_err(Error::from),
        }
    }

    fn put(&self, conn: Connection, max: usize) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < max {
            idle.push(conn);
        }
    }
}

impl SqliteStorage {
    /// Opens (creating when missing) and migrates the database, and starts
    /// the writer thread. Synchronous: call it at start-up, or inside
    /// `spawn_blocking` from async code that must not block.
    pub fn open(config: SqliteConfig) -> Result<SqliteStorage, SqliteError> {
        let path = config.path().map(|p| p.to_path_buf());
        let display = path.clone().unwrap_or_else(|| ":memory:".into());
        let mut conn = schema::open(path.as_deref(), Role::Writer, config.busy_timeout)?;
        schema::migrate(&mut conn, &display)?;
        if path.is_some() {
            // Lets SQLite shrink the WAL file back after it was reset.
            let limit = i64::try_from(config.checkpoint_wal_bytes).unwrap_or(i64::MAX);
            conn.pragma_update(None, "journal_size_limit", limit)
                .map_err(|source| SqliteError::Open { path: display.clone(), source })?;
            // Checkpoint every 8,192 pages (32 MiB) instead of SQLite's 1,000:
            // the hot pages (index tails) are rewritten by nearly every
            // commit, so a longer interval copies each of them once instead
            // of many times.
            conn.pragma_update(None, "wal_autocheckpoint", 8192)
                .map_err(|source| SqliteError::Open { path: display.clone(), source })?;
        }
        let (signal, _) = watch::channel(0u64);
        let signal = Arc::new(signal);
        let (commands, receiver) = mpsc::channel();
        let writer = Writer {
            conn,
            clock: config.clock.clone(),
            max_group: config.max_group,
            signal: signal.clone(),
            path: path.clone(),
            checkpoint_wal_bytes: config.checkpoint_wal_bytes,
        };
        std::thread::Builder::new()
            .name("jq-sqlite-writer".into())
            .spawn(move || writer.run(receiver))
            .map_err(SqliteError::Thread)?;
        let readers = match config.location {
            Location::File(_) => Some(Readers { idle: Mutex::new(Vec::new()) }),
            Location::Memory => None,
        };
        Ok(SqliteStorage { inner: Arc::new(Inner { config, commands, readers, signal }) })
    }

    /// Enqueues `jobs` inside the caller's own transaction on the same
    /// database file: the jobs exist if and only if the caller commits.
    ///
    /// Same rules as [`Storage::enqueue`] (payload limit checked first,
    /// unique keys, this storage's clock for "now"). Start the transaction
    /// with `TransactionBehavior::Immediate` and give the connection a busy
    /// timeout: a deferred transaction that turns into a write fails with
    /// SQLITE_BUSY at once when another writer is active.
    ///
    /// The wake-up rides the commit: this process's workers (the
    /// [`Storage::subscribe`] signal) are woken right after the commit has
    /// happened and never for a rollback. For that it installs hooks on the
    /// transaction's connection, replacing that connection's own commit,
    /// rollback and WAL hooks (see the `wake` module); SQLite's automatic
    /// checkpoint keeps working. Workers of other processes see the jobs at
    /// their next poll.
    pub fn enqueue_tx(&self, tx: &Transaction<'_>, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        enqueue::check(&jobs, self.inner.config.max_payload_bytes)?;
        let (ids, stored) = enqueue::insert(tx, &jobs, self.inner.config.clock.now())?;
        if stored > 0 {
            wake::arm(tx, &self.inner.signal)?;
        }
        Ok(ids)
    }

    /// The configuration this storage was opened with.
    pub fn config(&self) -> &SqliteConfig {
        &self.inner.config
    }

    async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T> {
        let (reply, answer) = oneshot::channel();
        self.inner.commands.send(make(reply)).map_err(|_| writer_gone())?;
        answer.await.map_err(|_| writer_gone())?
    }

    /// Runs `read` on a read connection (on the blocking pool), or on the
    /// writer for an in-memory database.
    async fn read<T, F>(&self, read: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        if self.inner.readers.is_none() {
            let (reply, answer) = oneshot::channel();
            let job: Box<dyn FnOnce(&Connection) + Send> = Box::new(move |conn| drop(reply.send(read(conn))));
            self.inner.commands.send(Command::Read(job)).map_err(|_| writer_gone())?;
            return answer.await.map_err(|_| writer_gone())?;
        }
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let readers = inner.readers.as_ref().ok_or_else(writer_gone)?;
            let conn = readers.take(&inner.config)?;
            let result = read(&conn);
            readers.put(conn, inner.config.readers);
            result
        })
        .await
        .map_err(|e| Error::Backend { backend: BACKEND, source: Box::new(e) })?
    }
}

#[async_trait]
impl Storage for SqliteStorage {
    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        enqueue::check(&jobs, self.inner.config.max_payload_bytes)?;
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        self.call(|reply| Command::Enqueue { jobs, reply }).await
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Job>> {
        if request.limit == 0 || request.queues.is_empty() {
            return Ok(Vec::new());
        }
        let request = request.clone();
        self.call(|reply| Command::Claim { request, reply }).await
    }

    async fn complete(&self, batch: Vec<Completion>) -> Result<Vec<CompletionResult>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        self.call(|reply| Command::Complete { batch, reply }).await
    }

    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<Vec<JobId>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let leases = leases.to_vec();
        self.call(|reply| Command::Heartbeat { leases, lease, reply }).await
    }

    async fn promote(&self) -> Result<u64> {
        self.call(|reply| Command::Promote { reply }).await
    }

    async fn recover(&self) -> Result<u64> {
        self.call(|reply| Command::Recover { reply }).await
    }

    async fn get(&self, id: JobId) -> Result<Job> {
        self.read(move |conn| admin::get(conn, id)).await
    }

    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        let filter = filter.clone();
        self.read(move |conn| admin::list(conn, &filter)).await
    }

    async fn stats(&self) -> Result<Stats> {
        self.read(admin::stats).await
    }

    async fn retry(&self, id: JobId) -> Result<()> {
        self.call(|reply| Command::RetryDead { id, reply }).await
    }

    async fn cancel(&self, id: JobId) -> Result<()> {
        self.call(|reply| Command::Cancel { id, reply }).await
    }

    async fn purge(&self, state: State, older_than: Timestamp) -> Result<u64> {
        admin::check_purge_state(state)?;
        let limit = self.inner.config.purge_batch;
        let mut total = 0;
        // One bounded DELETE per writer command, so other writes interleave
        // with a long purge.
        loop {
            let n = self.call(|reply| Command::PurgeBatch { state, older_than, limit, reply }).await?;
            total += n;
            if n < limit as u64 {
                return Ok(total);
            }
        }
    }

    fn subscribe(&self) -> Option<WorkSignal> {
        Some(self.inner.signal.subscribe())
    }

    fn clock(&self) -> Clock {
        self.inner.config.clock.clone()
    }
}
