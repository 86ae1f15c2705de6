//! The one writer of a storage: an OS thread that owns the write connection
//! and runs every write command sent to it.
//!
//! Group commit: the thread takes every command already queued (up to
//! `max_group`) and runs them in ONE `BEGIN IMMEDIATE` transaction, each in
//! its own SAVEPOINT so that one command's error undoes only that command,
//! then answers all of them after COMMIT. A lone command needs no savepoint.
//! `BEGIN IMMEDIATE` with the busy timeout is also what serialises the
//! writers of several processes sharing the file.
//!
//! A command that panics does not take the writer down: the panic is
//! caught, its transaction rolled back, the other commands that ran in it
//! are answered with a retryable error, and the writer carries on. Its
//! own caller sees its answer dropped while the writer is alive (see
//! [`Alive`]) and gets a plain backend error. Should the thread end anyway,
//! every call gets the fatal [`jq_core::Error::Fatal`].

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use jq_core::periodic::{Fire, FireOutcome};
use jq_core::storage::ClaimAnswer;
use jq_core::storage::{
    Beat, CancelAnswer, ClaimRequest, Election, LeaseRef, LeaseToken, ProgressReport, Settled, Settlement,
};
use jq_core::{Clock, JobId, NewJob, QueueLimits, QueueName, Result, State, Timestamp};
use rusqlite::Connection;
use tokio::sync::{oneshot, watch};

use crate::counts::ClaimedQueues;
use crate::error::SharedFailure;
use crate::{
    admin, cancel, claim, control, durable, election, enqueue, keyed, maintenance, periodic, settle, workflow,
};

/// Where a command's answer goes.
pub(crate) type Reply<T> = oneshot::Sender<Result<T>>;

/// A unit of work for the writer thread.
pub(crate) enum Command {
    Enqueue {
        jobs: Vec<NewJob>,
        reply: Reply<Vec<JobId>>,
    },
    EnqueueWorkflow {
        plan: Box<jq_core::workflow::WorkflowPlan>,
        reply: Reply<Vec<JobId>>,
    },
    Claim {
        request: ClaimRequest,
        reply: Reply<ClaimAnswer>,
    },
    Settle {
        batch: Vec<Settlement>,
        reply: Reply<Vec<Settled>>,
    },
    Heartbeat {
        leases: Vec<LeaseRef>,
        lease: Duration,
        reply: Reply<Beat>,
    },
    RequestCancel {
        id: JobId,
        reason: String,
        reply: Reply<CancelAnswer>,
    },
    Progress {
        reports: Vec<ProgressReport>,
        reply: Reply<Vec<JobId>>,
    },
    Checkpoint {
        lease: LeaseRef,
        record: Box<jq_core::durable::Record>,
        reply: Reply<()>,
    },
    Suspend {
        lease: LeaseRef,
        suspend: Box<jq_core::durable::Suspend>,
        reply: Reply<jq_core::durable::Suspended>,
    },
    Signal {
        id: JobId,
        name: String,
        payload: jq_core::Payload,
        reply: Reply<()>,
    },
    Promote {
        reply: Reply<u64>,
    },
    Recover {
        reply: Reply<u64>,
    },
    RetryDead {
        id: JobId,
        reply: Reply<()>,
    },
    Cancel {
        id: JobId,
        reply: Reply<()>,
    },
    PurgeBatch {
        state: State,
        older_than: Timestamp,
        limit: usize,
        reply: Reply<u64>,
    },
    Elect {
        election: Election,
        reply: Reply<bool>,
    },
    Resign {
        role: String,
        token: LeaseToken,
        reply: Reply<()>,
    },
    Fire {
        fire: Box<Fire>,
        reply: Reply<FireOutcome>,
    },
    Trigger {
        name: String,
        reply: Reply<()>,
    },
    SetPaused {
        queue: QueueName,
        paused: bool,
        reply: Reply<()>,
    },
    SetLimits {
        queue: QueueName,
        limits: QueueLimits,
        reply: Reply<()>,
    },
    SetKeyLimits {
        queue: QueueName,
        key: Option<String>,
        limits: QueueLimits,
        reply: Reply<()>,
    },
    ClearKeyLimits {
        queue: QueueName,
        key: String,
        reply: Reply<()>,
    },
    /// Runs a closure in the group transaction (tests of the writer itself).
    #[cfg(test)]
    Test {
        run: Box<dyn FnOnce(&Connection) + Send>,
        reply: Reply<()>,
    },
    /// Ends the writer thread (tests of what callers see then).
    #[cfg(test)]
    Exit,
    /// A read run on the write connection (in-memory databases, which other
    /// connections cannot see). Runs outside any write transaction.
    Read(Box<dyn FnOnce(&Connection) + Send>),
}

/// A command's result, held until its transaction commits.
enum Answer {
    Ids(Reply<Vec<JobId>>, Result<Vec<JobId>>),
    Jobs(Reply<ClaimAnswer>, Result<ClaimAnswer>),
    Settlements(Reply<Vec<Settled>>, Result<Vec<Settled>>),
    Count(Reply<u64>, Result<u64>),
    Unit(Reply<()>, Result<()>),
    Bool(Reply<bool>, Result<bool>),
    Fired(Reply<FireOutcome>, Result<FireOutcome>),
    Beat(Reply<Beat>, Result<Beat>),
    Cancel(Reply<CancelAnswer>, Result<CancelAnswer>),
    Suspended(Reply<jq_core::durable::Suspended>, Result<jq_core::durable::Suspended>),
}

macro_rules! each_answer {
    ($answer:expr, |$reply:ident, $result:ident| $body:expr) => {
        match $answer {
            Answer::Ids($reply, $result) => $body,
            Answer::Jobs($reply, $result) => $body,
            Answer::Settlements($reply, $result) => $body,
            Answer::Count($reply, $result) => $body,
            Answer::Unit($reply, $result) => $body,
            Answer::Bool($reply, $result) => $body,
            Answer::Fired($reply, $result) => $body,
            Answer::Beat($reply, $result) => $body,
            Answer::Cancel($reply, $result) => $body,
            Answer::Suspended($reply, $result) => $body,
        }
    };
}

struct Done {
    answer: Answer,
    /// True when this command, once committed, may have made work claimable.
    wakes: bool,
}

impl Done {
    fn is_ok(&self) -> bool {
        each_answer!(&self.answer, |_r, result| result.is_ok())
    }

    /// The transaction did not commit: an Ok answer becomes `failure`.
    fn fail(&mut self, failure: &SharedFailure) {
        each_answer!(&mut self.answer, |_r, result| if result.is_ok() {
            *result = Err(failure.to_error());
        })
    }

    fn send(self) {
        // The caller may have gone away (a dropped future); nothing to do.
        each_answer!(self.answer, |reply, result| drop(reply.send(result)))
    }
}

impl Command {
    /// Runs the command on `conn` (inside the group transaction).
    fn execute(self, conn: &Connection, now: Timestamp, claimed: &mut ClaimedQueues) -> Done {
        let (answer, wakes) = match self {
            Command::Enqueue { jobs, reply } => {
                let r = enqueue::insert(conn, &jobs, now);
                let wakes = matches!(&r, Ok((_, stored)) if *stored > 0);
                (Answer::Ids(reply, r.map(|(ids, _)| ids)), wakes)
            }
            Command::Claim { request, reply } => {
                (Answer::Jobs(reply, claim::claim(conn, &request, now, claimed)), false)
            }
            Command::Settle { batch, reply } => {
                let r = settle::settle(conn, batch, now, claimed);
                let wakes = matches!(&r, Ok((_, true)));
                (Answer::Settlements(reply, r.map(|(results, _)| results)), wakes)
            }
            Command::Heartbeat { leases, lease, reply } => {
                (Answer::Beat(reply, settle::heartbeat(conn, &leases, lease, now)), false)
            }
            Command::RequestCancel { id, reason, reply } => {
                (Answer::Cancel(reply, cancel::request(conn, id, &reason, now)), false)
            }
            Command::Progress { reports, reply } => (Answer::Ids(reply, cancel::progress(conn, &reports)), false),
            Command::Checkpoint { lease, record, reply } => {
                (Answer::Unit(reply, durable::checkpoint(conn, lease, &record, now)), false)
            }
            Command::Suspend { lease, suspend, reply } => {
                (Answer::Suspended(reply, durable::suspend(conn, lease, &suspend, now, claimed)), false)
            }
            Command::Signal { id, name, payload, reply } => {
                let r = durable::signal(conn, id, &name, &payload, now);
                let wakes = matches!(r, Ok(true));
                (Answer::Unit(reply, r.map(drop)), wakes)
            }
            Command::Promote { reply } => {
                let r = maintenance::promote(conn, now);
                let wakes = matches!(&r, Ok(n) if *n > 0);
                (Answer::Count(reply, r), wakes)
            }
            Command::Recover { reply } => {
                let r = maintenance::recover(conn, now);
                let wakes = matches!(&r, Ok(n) if *n > 0);
                (Answer::Count(reply, r), wakes)
            }
            Command::RetryDead { id, reply } => (Answer::Unit(reply, admin::retry(conn, id, now)), true),
            Command::Cancel { id, reply } => {
                let r = admin::cancel(conn, id, now);
                let wakes = matches!(r, Ok(true));
                (Answer::Unit(reply, r.map(drop)), wakes)
            }
            Command::EnqueueWorkflow { plan, reply } => {
                let r = workflow::enqueue(conn, &plan, now);
                let wakes = matches!(&r, Ok((_, true)));
                (Answer::Ids(reply, r.map(|(ids, _)| ids)), wakes)
            }
            Command::PurgeBatch { state, older_than, limit, reply } => {
                (Answer::Count(reply, maintenance::purge_batch(conn, state, older_than, limit)), false)
            }
            Command::Elect { election, reply } => (Answer::Bool(reply, election::elect(conn, &election, now)), false),
            Command::Resign { role, token, reply } => {
                (Answer::Unit(reply, election::resign(conn, &role, token)), false)
            }
            Command::Fire { fire, reply } => {
                let r = periodic::fire(conn, &fire, now);
                let wakes = matches!(&r, Ok((_, stored)) if *stored > 0);
                (Answer::Fired(reply, r.map(|(outcome, _)| outcome)), wakes)
            }
            Command::Trigger { name, reply } => (Answer::Unit(reply, periodic::trigger(conn, &name, now)), false),
            // A resume or a changed limit may make jobs claimable.
            Command::SetPaused { queue, paused, reply } => {
                (Answer::Unit(reply, control::set_paused(conn, &queue, paused, now)), !paused)
            }
            Command::SetLimits { queue, limits, reply } => {
                (Answer::Unit(reply, control::set_limits(conn, &queue, &limits)), true)
            }
            Command::SetKeyLimits { queue, key, limits, reply } => {
                (Answer::Unit(reply, keyed::set(conn, &queue, key.as_deref(), &limits)), true)
            }
            Command::ClearKeyLimits { queue, key, reply } => {
                let r = keyed::clear(conn, &queue, &key);
                let wakes = matches!(r, Ok(true));
                (Answer::Unit(reply, r.map(drop)), wakes)
            }
            #[cfg(test)]
            Command::Test { run, reply } => {
                run(conn);
                (Answer::Unit(reply, Ok(())), false)
            }
            #[cfg(test)]
            Command::Exit => (Answer::Unit(oneshot::channel().0, Ok(())), false),
            Command::Read(read) => {
                // Never reached: reads are split off before a group starts.
                read(conn);
                return Done { answer: Answer::Unit(oneshot::channel().0, Ok(())), wakes: false };
            }
        };
        Done { answer, wakes }
    }

    /// Answers the command with `failure` without running it.
    fn refuse(self, failure: &SharedFailure) -> Done {
        let answer = match self {
            Command::Enqueue { reply, .. } | Command::EnqueueWorkflow { reply, .. } => {
                Answer::Ids(reply, Err(failure.to_error()))
            }
            Command::Claim { reply, .. } => Answer::Jobs(reply, Err(failure.to_error())),
            Command::Settle { reply, .. } => Answer::Settlements(reply, Err(failure.to_error())),
            Command::Heartbeat { reply, .. } => Answer::Beat(reply, Err(failure.to_error())),
            Command::RequestCancel { reply, .. } => Answer::Cancel(reply, Err(failure.to_error())),
            Command::Progress { reply, .. } => Answer::Ids(reply, Err(failure.to_error())),
            Command::Suspend { reply, .. } => Answer::Suspended(reply, Err(failure.to_error())),
            Command::Checkpoint { reply, .. } | Command::Signal { reply, .. } => {
                Answer::Unit(reply, Err(failure.to_error()))
            }
            Command::Promote { reply } | Command::Recover { reply } | Command::PurgeBatch { reply, .. } => {
                Answer::Count(reply, Err(failure.to_error()))
            }
            Command::RetryDead { reply, .. }
            | Command::Cancel { reply, .. }
            | Command::Resign { reply, .. }
            | Command::Trigger { reply, .. }
            | Command::SetPaused { reply, .. }
            | Command::SetLimits { reply, .. }
            | Command::SetKeyLimits { reply, .. }
            | Command::ClearKeyLimits { reply, .. } => Answer::Unit(reply, Err(failure.to_error())),
            Command::Fire { reply, .. } => Answer::Fired(reply, Err(failure.to_error())),
            Command::Elect { reply, .. } => Answer::Bool(reply, Err(failure.to_error())),
            #[cfg(test)]
            Command::Test { reply, .. } => Answer::Unit(reply, Err(failure.to_error())),
            #[cfg(test)]
            Command::Exit => Answer::Unit(oneshot::channel().0, Err(failure.to_error())),
            Command::Read(read) => {
                drop(read);
                Answer::Unit(oneshot::channel().0, Err(failure.to_error()))
            }
        };
        Done { answer, wakes: false }
    }
}

/// How long the writer polls for the next command before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

/// The next command: polled for [`SPIN`] first, then waited for. A caller
/// awaiting one answer after another sends its next command within tens of
/// microseconds, and waking a sleeping thread costs more than that.
fn next(commands: &Receiver<Command>) -> Option<Command> {
    let start = Instant::now();
    loop {
        match commands.try_recv() {
            Ok(cmd) => return Some(cmd),
            Err(std::sync::mpsc::TryRecvError::Disconnected) => return None,
            Err(std::sync::mpsc::TryRecvError::Empty) if start.elapsed() < SPIN => std::thread::yield_now(),
            Err(std::sync::mpsc::TryRecvError::Empty) => return commands.recv().ok(),
        }
    }
}

/// Whether the writer thread still runs: false once it ended, however.
/// Tells a caller whose answer was dropped whether its command panicked
/// (the writer lives on) or the writer died.
#[derive(Debug)]
pub(crate) struct Alive(AtomicBool);

impl Alive {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Alive(AtomicBool::new(true)))
    }

    pub(crate) fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Marks the writer dead when dropped: at the end of its thread, by
/// return or by panic.
struct AliveGuard(Arc<Alive>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.0.store(false, Ordering::SeqCst);
    }
}

/// The text of a caught panic.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// The writer thread's state.
pub(crate) struct Writer {
    pub(crate) conn: Connection,
    pub(crate) clock: Clock,
    pub(crate) max_group: usize,
    pub(crate) signal: Arc<watch::Sender<u64>>,
    /// The database file, for WAL checkpoints; `None` in memory.
    pub(crate) path: Option<PathBuf>,
    pub(crate) checkpoint_wal_bytes: u64,
    pub(crate) alive: Arc<Alive>,
    /// The queues of the jobs this writer claimed, for the acks' counts.
    pub(crate) claimed: ClaimedQueues,
}

/// How often the writer looks at the WAL's size at most.
const WAL_CHECK_EVERY: Duration = Duration::from_secs(2);

impl Writer {
    /// Runs until every sender is gone (the last storage clone dropped).
    pub(crate) fn run(mut self, commands: Receiver<Command>) {
        let mut batch = Vec::with_capacity(self.max_group);
        // Declared after `batch`, so dropped before it and before the
        // channel: a caller whose command is dropped with them already
        // sees the writer dead.
        let _dead_on_exit = AliveGuard(self.alive.clone());
        let mut last_wal_check = Instant::now();
        let mut purged = false;
        while let Some(first) = next(&commands) {
            #[cfg(test)]
            if matches!(first, Command::Exit) {
                return;
            }
            batch.push(first);
            while batch.len() < self.max_group {
                match commands.try_recv() {
                    Ok(cmd) => batch.push(cmd),
                    Err(_) => break,
                }
            }
            purged |= batch.iter().any(|c| matches!(c, Command::PurgeBatch { .. }));
            self.process(&mut batch);
            if let Some(path) = &self.path
                && (purged || last_wal_check.elapsed() >= WAL_CHECK_EVERY)
            {
                maintenance::checkpoint_if_large(&self.conn, path, self.checkpoint_wal_bytes);
                last_wal_check = Instant::now();
                purged = false;
            }
        }
        tracing::debug!("SQLite writer thread stops: the storage was dropped");
    }

    fn process(&mut self, batch: &mut Vec<Command>) {
        let mut writes = Vec::with_capacity(batch.len());
        for cmd in batch.drain(..) {
            match cmd {
                Command::Read(read) => {
                    self.commit_group(std::mem::take(&mut writes));
                    // A panicking read drops its answer; the writer carries on.
                    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| read(&self.conn))) {
                        tracing::error!(panic = %panic_message(&*panic), "a SQLite read on the writer panicked");
                    }
                }
                write => writes.push(write),
            }
        }
        self.commit_group(writes);
    }

    fn exec(&self, sql: &str) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql)?.execute([]).map(drop)
    }

    /// Runs `writes` in as few transactions as possible (one, unless SQLite
    /// itself aborts a transaction), then answers every command.
    fn commit_group(&mut self, writes: Vec<Command>) {
        if writes.is_empty() {
            return;
        }
        let mut done: Vec<Done> = Vec::with_capacity(writes.len());
        let mut cmds = writes.into_iter();
        while cmds.len() > 0 {
            let start = done.len();
            if let Err(e) = self.exec("BEGIN IMMEDIATE") {
                let failure = SharedFailure::new("cannot begin a write transaction", &e);
                tracing::warn!(error = %e, "SQLite write transaction could not start");
                done.extend(cmds.by_ref().map(|c| c.refuse(&failure)));
                break;
            }
            let single = cmds.len() == 1;
            let mut lost: Option<SharedFailure> = None;
            let mut single_failed = false;
            for cmd in cmds.by_ref() {
                if !single && let Err(e) = self.exec("SAVEPOINT jq_cmd") {
                    let failure = SharedFailure::new("cannot open a savepoint", &e);
                    done.push(cmd.refuse(&failure));
                    lost = Some(failure);
                    break;
                }
                let now = self.clock.now();
                let d = match catch_unwind(AssertUnwindSafe(|| cmd.execute(&self.conn, now, &mut self.claimed))) {
                    Ok(d) => d,
                    Err(panic) => {
                        // Its answer went with it (its caller learns from
                        // `Alive`); whatever it wrote is undone with the
                        // group, whose other commands may be retried.
                        let message = panic_message(&*panic);
                        tracing::error!(
                            panic = %message,
                            "a SQLite writer command panicked: its transaction is rolled back, the writer carries on"
                        );
                        lost = Some(SharedFailure::panicked(&message));
                        break;
                    }
                };
                if self.conn.is_autocommit() {
                    // SQLite rolled the whole transaction back (disk full,
                    // I/O error, ...): nothing of this group stands.
                    lost = Some(SharedFailure::new(
                        "SQLite aborted the write transaction",
                        &rusqlite::Error::SqliteFailure(
                            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                            Some("transaction rolled back by SQLite".into()),
                        ),
                    ));
                    done.push(d);
                    break;
                }
                let ok = d.is_ok();
                done.push(d);
                if single {
                    single_failed = !ok;
                } else {
                    let end = if ok {
                        self.exec("RELEASE jq_cmd")
                    } else {
                        self.exec("ROLLBACK TO jq_cmd").and_then(|()| self.exec("RELEASE jq_cmd"))
                    };
                    if let Err(e) = end {
                        lost = Some(SharedFailure::new("cannot close a savepoint", &e));
                        break;
                    }
                }
            }
            if lost.is_none() && single_failed {
                // A lone failed command: its own error stands, undo its writes.
                if let Err(e) = self.exec("ROLLBACK") {
                    tracing::warn!(error = %e, "SQLite rollback failed");
                }
                continue;
            }
            if lost.is_none()
                && let Err(e) = self.exec("COMMIT")
            {
                tracing::warn!(error = %e, "SQLite commit failed");
                lost = Some(SharedFailure::new("commit failed", &e));
            }
            if let Some(failure) = lost {
                if !self.conn.is_autocommit()
                    && let Err(e) = self.exec("ROLLBACK")
                {
                    tracing::warn!(error = %e, "SQLite rollback failed");
                }
                for d in &mut done[start..] {
                    d.fail(&failure);
                }
            }
        }
        if done.iter().any(|d| d.wakes && d.is_ok()) {
            self.signal.send_modify(|n| *n = n.wrapping_add(1));
        }
        for d in done {
            d.send();
        }
    }
}
