//! [`SqliteStorage`]: the [`Storage`] implementation, routing writes to the
//! writer thread and reads to a small pool of read connections.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use jq_core::periodic::{Fire, FireOutcome, PeriodicInfo};
use jq_core::storage::{
    Beat, CancelAnswer, CancelStorage, Capabilities, ClaimAnswer, ClaimRequest, ControlStorage, DurableStorage,
    Election, KeyStorage, Leader, LeaseRef, LeaseToken, PeriodicStorage, ProgressReport, RoleStorage, Settled,
    Settlement, Storage, ThroughputStorage, WorkSignal,
};
use jq_core::{
    Clock, Error, Job, JobFilter, JobId, KeyReport, NewJob, QueueInfo, QueueLimits, QueueName, Result, State, Stats,
    Throughput, Timestamp,
};
use rusqlite::{Connection, Transaction};
use tokio::sync::{Semaphore, oneshot, watch};

use crate::config::{Location, SqliteConfig};
use crate::error::{BACKEND, SqliteError, command_panicked, writer_gone};
use crate::schema::{self, Role};
use crate::writer::{Alive, Command, Reply, Writer, panic_message};
use crate::{admin, control, durable, election, enqueue, keyed, periodic, wake, workflow};
use jq_core::durable::{Journal, Record, Suspend, Suspended};
use jq_core::workflow::{JobLinks, ParentResult, StepInfo, WorkflowId, WorkflowInfo, WorkflowPlan};

/// The embedded SQLite backend. Cheap to clone (an `Arc` inside); the
/// writer thread stops when the last clone is dropped.
///
/// One storage owns one writer thread with the only write connection of
/// this process (writes are queued and group-committed) and up to
/// [`SqliteConfig::readers`] read connections (reads beyond that wait for
/// a free one). Several processes may open
/// the same file: `BEGIN IMMEDIATE` and the busy timeout serialise their
/// writers, and no job is ever claimed twice.
#[derive(Clone)]
pub struct SqliteStorage {
    inner: Arc<Inner>,
}

struct Inner {
    config: SqliteConfig,
    commands: Sender<Command>,
    /// False once the writer thread ended.
    alive: Arc<Alive>,
    readers: Option<Readers>,
    signal: Arc<watch::Sender<u64>>,
}

impl fmt::Debug for SqliteStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStorage").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

/// The read connections of a file database, opened on demand and kept
/// idle between reads.
struct Readers {
    /// One permit per connection that may exist: a read holds one from
    /// before it takes a connection until it puts it back, so no more than
    /// [`SqliteConfig::readers`] are ever open and the others wait here
    /// (a semaphore, not a lock: nothing is held across `.await`).
    slots: Arc<Semaphore>,
    idle: Mutex<Vec<Connection>>,
    /// Connections opened so far (for the tests of the bound).
    opened: AtomicUsize,
}

impl Readers {
    fn new(readers: usize) -> Self {
        Readers { slots: Arc::new(Semaphore::new(readers)), idle: Mutex::new(Vec::new()), opened: AtomicUsize::new(0) }
    }

    /// An idle connection, or a new one. Call while holding a slot.
    fn take(&self, config: &SqliteConfig) -> Result<Connection> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match idle {
            Some(conn) => Ok(conn),
            None => {
                let conn = schema::open(config.path(), Role::Reader, config.busy_timeout).map_err(Error::from)?;
                self.opened.fetch_add(1, Ordering::Relaxed);
                Ok(conn)
            }
        }
    }

    /// Keeps `conn` for the next read (before its slot is released).
    fn put(&self, conn: Connection) {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).push(conn);
    }
}

/// Opens the writer connection and migrates, trying again while another
/// process holds the file busy, for up to `busy_timeout`: two processes
/// opening a new file at once (a worker and `jqctl enqueue`) race to turn
/// on WAL and migrate, and SQLite answers some of those steps `database is
/// locked` at once instead of waiting in its busy handler.
fn open_and_migrate(path: Option<&Path>, display: &Path, busy_timeout: Duration) -> Result<Connection, SqliteError> {
    let deadline = std::time::Instant::now() + busy_timeout;
    loop {
        let attempt = schema::open(path, Role::Writer, busy_timeout)
            .and_then(|mut conn| schema::migrate(&mut conn, display).map(|()| conn));
        match attempt {
            Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                tracing::debug!(error = %e, "SQLite file busy while opening; trying again");
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// `database is busy` or `locked` while opening or migrating.
fn is_busy(e: &SqliteError) -> bool {
    match e {
        SqliteError::Open { source: rusqlite::Error::SqliteFailure(f, _), .. }
        | SqliteError::Migrate { source: rusqlite::Error::SqliteFailure(f, _), .. } => {
            matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        }
        _ => false,
    }
}

impl SqliteStorage {
    /// Opens (creating when missing) and migrates the database, and starts
    /// the writer thread. Synchronous: call it at start-up, or inside
    /// `spawn_blocking` from async code that must not block.
    pub fn open(config: SqliteConfig) -> Result<SqliteStorage, SqliteError> {
        let path = config.path().map(|p| p.to_path_buf());
        let display = path.clone().unwrap_or_else(|| ":memory:".into());
        let conn = open_and_migrate(path.as_deref(), &display, config.busy_timeout)?;
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
        let alive = Alive::new();
        let writer = Writer {
            conn,
            clock: config.clock.clone(),
            max_group: config.max_group,
            signal: signal.clone(),
            path: path.clone(),
            checkpoint_wal_bytes: config.checkpoint_wal_bytes,
            alive: alive.clone(),
            claimed: Default::default(),
        };
        std::thread::Builder::new()
            .name("jq-sqlite-writer".into())
            .spawn(move || {
                if let Err(panic) = catch_unwind(AssertUnwindSafe(|| writer.run(receiver))) {
                    tracing::error!(
                        panic = %panic_message(&*panic),
                        "the SQLite writer thread died: every call of this storage fails now; restart the process"
                    );
                }
            })
            .map_err(SqliteError::Thread)?;
        let readers = match config.location {
            Location::File(_) => Some(Readers::new(config.readers)),
            Location::Memory => None,
        };
        Ok(SqliteStorage { inner: Arc::new(Inner { config, commands, alive, readers, signal }) })
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
    ///
    /// The same shape as `PostgresStorage::enqueue_tx` (`&mut` the caller's
    /// transaction, a future of the ids), but rusqlite is synchronous: the
    /// jobs are written before this returns, and the future is already
    /// complete. `.await` it in async code; in synchronous code take the
    /// result with [`std::future::Ready::into_inner`].
    pub fn enqueue_tx(&self, tx: &mut Transaction<'_>, jobs: Vec<NewJob>) -> std::future::Ready<Result<Vec<JobId>>> {
        std::future::ready(self.enqueue_in(tx, jobs))
    }

    /// [`SqliteStorage::enqueue_tx`]'s work, done before it returns.
    fn enqueue_in(&self, tx: &Transaction<'_>, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        enqueue::check(&jobs, self.inner.config.max_payload_bytes)?;
        let (ids, stored) = enqueue::insert(tx, &jobs, self.inner.config.clock.now())?;
        if stored > 0 {
            wake::arm(tx, &self.inner.signal)?;
        }
        jq_core::observe::EnqueueTally::of(&jobs).record();
        Ok(ids)
    }

    /// Stores a workflow ([`WorkflowStorage::enqueue_workflow`](jq_core::storage::WorkflowStorage::enqueue_workflow))
    /// inside the caller's transaction `tx`: its steps commit or roll back
    /// with the caller's own writes. Like [`SqliteStorage::enqueue_tx`],
    /// the work is done before this returns.
    pub fn enqueue_workflow_tx(
        &self,
        tx: &mut Transaction<'_>,
        plan: &WorkflowPlan,
    ) -> std::future::Ready<Result<Vec<JobId>>> {
        std::future::ready((|| {
            plan.check(self.inner.config.max_payload_bytes)?;
            let (ids, stored) = workflow::enqueue(tx, plan, self.inner.config.clock.now())?;
            if stored {
                wake::arm(tx, &self.inner.signal)?;
            }
            Ok(ids)
        })())
    }

    /// The configuration this storage was opened with.
    pub fn config(&self) -> &SqliteConfig {
        &self.inner.config
    }

    async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T> {
        let (reply, answer) = oneshot::channel();
        self.inner.commands.send(make(reply)).map_err(|_| writer_gone())?;
        answer.await.map_err(|_| self.dropped())?
    }

    /// Why an answer was dropped: the command panicked (the writer lives
    /// on), or the writer died.
    fn dropped(&self) -> Error {
        if self.inner.alive.get() { command_panicked() } else { writer_gone() }
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
            return answer.await.map_err(|_| self.dropped())?;
        }
        let slots = self.inner.readers.as_ref().map(|r| r.slots.clone()).ok_or_else(writer_gone)?;
        let slot = slots.acquire_owned().await.map_err(|e| Error::Backend { backend: BACKEND, source: Box::new(e) })?;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let readers = inner.readers.as_ref().ok_or_else(writer_gone)?;
            let conn = readers.take(&inner.config)?;
            let result = read(&conn);
            readers.put(conn);
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
        let tally = jq_core::observe::EnqueueTally::of(&jobs);
        let ids = self.call(|reply| Command::Enqueue { jobs, reply }).await?;
        tally.record();
        Ok(ids)
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimAnswer> {
        request.check()?;
        if request.limit == 0 || request.queues.is_empty() {
            return Ok(ClaimAnswer::default());
        }
        let request = request.clone();
        self.call(|reply| Command::Claim { request, reply }).await
    }

    async fn settle(&self, batch: Vec<Settlement>) -> Result<Vec<Settled>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        self.call(|reply| Command::Settle { batch, reply }).await
    }

    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<Beat> {
        if leases.is_empty() {
            return Ok(Beat::default());
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
        jq_core::storage::check_purge_state(state)?;
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
    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities {
            roles: Some(self),
            periodic: Some(self),
            controls: Some(self),
            throughput: Some(self),
            cancellation: Some(self),
            workflows: Some(self),
            keys: Some(self),
            durable: Some(self),
        }
    }
}

#[async_trait]
impl KeyStorage for SqliteStorage {
    async fn set_key_limits(&self, queue: &QueueName, key: Option<&str>, limits: &QueueLimits) -> Result<()> {
        limits.check()?;
        if let Some(key) = key {
            jq_core::storage::check_key(key)?;
        }
        let (queue, key, limits) = (queue.clone(), key.map(str::to_owned), *limits);
        self.call(|reply| Command::SetKeyLimits { queue, key, limits, reply }).await
    }

    async fn clear_key_limits(&self, queue: &QueueName, key: &str) -> Result<()> {
        jq_core::storage::check_key(key)?;
        let (queue, key) = (queue.clone(), key.to_owned());
        self.call(|reply| Command::ClearKeyLimits { queue, key, reply }).await
    }

    async fn keys(&self, queue: &QueueName, top: usize) -> Result<KeyReport> {
        let queue = queue.clone();
        self.read(move |conn| keyed::report(conn, &queue, top)).await
    }
}

#[async_trait]
impl jq_core::storage::WorkflowStorage for SqliteStorage {
    async fn enqueue_workflow(&self, plan: &WorkflowPlan) -> Result<Vec<JobId>> {
        plan.check(self.inner.config.max_payload_bytes)?;
        let plan = Box::new(plan.clone());
        self.call(|reply| Command::EnqueueWorkflow { plan, reply }).await
    }

    async fn result(&self, id: JobId) -> Result<Option<jq_core::Payload>> {
        self.read(move |conn| workflow::result(conn, id)).await
    }

    async fn links(&self, id: JobId) -> Result<JobLinks> {
        self.read(move |conn| workflow::links(conn, id)).await
    }

    async fn parent_results(&self, id: JobId) -> Result<Vec<ParentResult>> {
        self.read(move |conn| workflow::parent_results(conn, id)).await
    }

    async fn workflow(&self, id: WorkflowId) -> Result<WorkflowInfo> {
        self.read(move |conn| workflow::workflow(conn, id)).await
    }

    async fn workflow_steps(&self, id: WorkflowId) -> Result<Vec<StepInfo>> {
        self.read(move |conn| workflow::workflow_steps(conn, id)).await
    }
}

#[async_trait]
impl RoleStorage for SqliteStorage {
    async fn elect(&self, election: &Election) -> Result<bool> {
        election.check()?;
        let election = election.clone();
        self.call(|reply| Command::Elect { election, reply }).await
    }

    async fn resign(&self, role: &str, token: LeaseToken) -> Result<()> {
        jq_core::storage::check_role(role)?;
        let role = role.to_owned();
        self.call(|reply| Command::Resign { role, token, reply }).await
    }

    async fn leaders(&self) -> Result<Vec<Leader>> {
        self.read(election::leaders).await
    }
}

#[async_trait]
impl PeriodicStorage for SqliteStorage {
    async fn fire(&self, fire: &Fire) -> Result<FireOutcome> {
        fire.check()?;
        enqueue::check(&fire.jobs, self.inner.config.max_payload_bytes)?;
        let fire = Box::new(fire.clone());
        self.call(|reply| Command::Fire { fire, reply }).await
    }

    async fn periodic(&self) -> Result<Vec<PeriodicInfo>> {
        self.read(periodic::list).await
    }

    async fn trigger(&self, name: &str) -> Result<()> {
        jq_core::periodic::check_name(name)?;
        let name = name.to_owned();
        self.call(|reply| Command::Trigger { name, reply }).await
    }
}

#[async_trait]
impl ControlStorage for SqliteStorage {
    async fn set_paused(&self, queue: &QueueName, paused: bool) -> Result<()> {
        let queue = queue.clone();
        self.call(|reply| Command::SetPaused { queue, paused, reply }).await
    }

    async fn set_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<()> {
        limits.check()?;
        let (queue, limits) = (queue.clone(), *limits);
        self.call(|reply| Command::SetLimits { queue, limits, reply }).await
    }

    async fn queues(&self) -> Result<Vec<QueueInfo>> {
        let now = self.inner.config.clock.now();
        self.read(move |conn| control::queues(conn, now)).await
    }
}

#[async_trait]
impl ThroughputStorage for SqliteStorage {
    async fn throughput(&self, since: Timestamp) -> Result<Vec<Throughput>> {
        self.read(move |conn| admin::throughput(conn, since)).await
    }
}

#[async_trait]
impl DurableStorage for SqliteStorage {
    async fn checkpoint(&self, lease: LeaseRef, record: &Record) -> Result<()> {
        let record = Box::new(record.clone());
        self.call(|reply| Command::Checkpoint { lease, record, reply }).await
    }

    async fn suspend(&self, lease: LeaseRef, suspend: &Suspend) -> Result<Suspended> {
        let suspend = Box::new(suspend.clone());
        self.call(|reply| Command::Suspend { lease, suspend, reply }).await
    }

    async fn signal(&self, id: JobId, name: &str, payload: &jq_core::Payload) -> Result<()> {
        // Refused before the writer's queue: the same check runs in the command.
        jq_core::durable::check_signal(name, payload)?;
        let (name, payload) = (name.to_owned(), payload.clone());
        self.call(|reply| Command::Signal { id, name, payload, reply }).await
    }

    async fn journal(&self, id: JobId) -> Result<Journal> {
        self.read(move |conn| durable::journal(conn, id)).await
    }
}

#[async_trait]
impl CancelStorage for SqliteStorage {
    async fn request_cancel(&self, id: JobId, reason: &str) -> Result<CancelAnswer> {
        let reason = reason.to_owned();
        self.call(|reply| Command::RequestCancel { id, reason, reply }).await
    }

    async fn progress(&self, reports: &[ProgressReport]) -> Result<Vec<JobId>> {
        for report in reports {
            jq_core::storage::check_progress(&report.value)?;
        }
        if reports.is_empty() {
            return Ok(Vec::new());
        }
        let reports = reports.to_vec();
        self.call(|reply| Command::Progress { reports, reply }).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use jq_core::storage::StorageExt;
    use jq_core::{NewJob, Payload, QueueName};

    use super::*;

    fn job() -> NewJob {
        NewJob::builder("test", Payload::from_json("{}").unwrap()).queue("q").build().unwrap()
    }

    fn open() -> (tempfile::TempDir, SqliteStorage) {
        let dir = tempfile::tempdir().unwrap();
        let storage = SqliteStorage::open(SqliteConfig::new(dir.path().join("jobs.db")).readers(2)).unwrap();
        (dir, storage)
    }

    /// Sends `command` without waiting for its answer.
    fn send(storage: &SqliteStorage, command: Command) {
        storage.inner.commands.send(command).unwrap();
    }

    fn test_command(run: impl FnOnce(&Connection) + Send + 'static) -> (Command, oneshot::Receiver<Result<()>>) {
        let (reply, answer) = oneshot::channel();
        (Command::Test { run: Box::new(run), reply }, answer)
    }

    #[tokio::test]
    async fn a_panicking_command_is_rolled_back_and_the_writer_carries_on() {
        let (_dir, storage) = open();
        let id = storage.enqueue_one(job()).await.unwrap();
        // Hold the writer until the next three commands are queued, so that
        // they form one group. A channel, not a sleep: on a loaded machine
        // a 100 ms sleep ended before they were sent (CI, seen once).
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let (hold, held) = test_command(move |_| {
            let _ = wait.recv_timeout(Duration::from_secs(30));
        });
        send(&storage, hold);
        let (before, before_answer) = oneshot::channel();
        let early = job();
        send(&storage, Command::Enqueue { jobs: vec![early.clone()], reply: before });
        let (panics, panic_answer) = test_command(|conn| {
            conn.execute("UPDATE jobs SET kind = 'scribbled'", []).unwrap();
            panic!("boom");
        });
        send(&storage, panics);
        let (after, after_answer) = oneshot::channel();
        let late = job();
        send(&storage, Command::Enqueue { jobs: vec![late.clone()], reply: after });
        release.send(()).unwrap();
        let _ = held.await; // in the group of the panic, or alone

        let err = before_answer.await.unwrap().expect_err("rolled back with the panicking command");
        assert!(err.is_retryable(), "an innocent command of the group may be retried: {err:?}");
        assert!(panic_answer.await.is_err(), "the panicking command's answer went with it");
        assert_eq!(after_answer.await.unwrap().unwrap(), vec![late.id], "the next group commits");
        // What the caller of the panicking command sees: not fatal.
        let err = storage.call(|reply| Command::Test { run: Box::new(|_| panic!("again")), reply }).await.unwrap_err();
        assert!(matches!(err, Error::Backend { .. }) && !err.is_fatal(), "{err:?}");

        assert_eq!(storage.get(id).await.unwrap().kind, "test", "the panicking command's write was undone");
        assert!(matches!(storage.get(early.id).await, Err(Error::NotFound { .. })));
        let request = ClaimRequest::new(vec![QueueName::new("q").unwrap()], 10, Duration::from_secs(30), "w");
        assert_eq!(storage.claim(&request).await.unwrap().jobs.len(), 2, "the writer still works");
    }

    #[tokio::test]
    async fn a_dead_writer_gives_a_fatal_error() {
        let (_dir, storage) = open();
        send(&storage, Command::Exit);
        let err = storage.enqueue_one(job()).await.expect_err("the writer is gone");
        assert!(
            matches!(&err, Error::Fatal { backend: "sqlite", source } if matches!(source.downcast_ref(), Some(crate::SqliteError::WriterGone)))
                && err.is_fatal(),
            "{err:?}"
        );
        assert!(err.to_string().contains("restart the process"), "{err}");
        assert!(storage.stats().await.is_ok(), "reads of a file database do not need the writer");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn reads_wait_for_one_of_the_configured_connections() {
        let (_dir, storage) = open();
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let reads: Vec<_> = (0..16)
            .map(|_| {
                let (storage, running, most) = (storage.clone(), running.clone(), most.clone());
                tokio::spawn(async move {
                    storage
                        .read(move |conn| {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(10));
                            running.fetch_sub(1, Ordering::SeqCst);
                            admin::stats(conn)
                        })
                        .await
                })
            })
            .collect();
        for read in reads {
            read.await.unwrap().unwrap();
        }
        let opened = storage.inner.readers.as_ref().unwrap().opened.load(Ordering::SeqCst);
        assert_eq!(opened, 2, "16 concurrent reads share the 2 configured connections");
        assert!(most.load(Ordering::SeqCst) <= 2, "{} reads ran at once", most.load(Ordering::SeqCst));
    }
}
