//! What a durable handler sees ([`DurableContext`]): steps whose results
//! are checkpointed with the job, durable sleeps, waits for signals and
//! patches, replayed from the job's journal on every later run (the
//! contract's "Durable jobs"); and the wrapper that registers such a
//! handler beside the plain ones, so a plain job pays nothing for it.

use std::collections::HashSet;
use std::future::Future;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::handler::{Action, ErasedHandler, HandlerError, HandlerResult, JobContext};
use crate::clock::{Clock, Timestamp};
use crate::durable::{Entry, EntryKind, Journal, Record, Suspend, Suspended, check_append, describe};
use crate::error::{Error, Result};
use crate::job::{Job, JobType, LeaseRef, Payload};
use crate::storage::{Storage, StorageExt};

/// The storage's durable operations, with the storage's type erased.
pub(crate) trait DurableOps: Send + Sync {
    fn checkpoint(&self, lease: LeaseRef, record: Record) -> BoxFuture<'static, Result<()>>;
    fn suspend(&self, lease: LeaseRef, suspend: Suspend) -> BoxFuture<'static, Result<Suspended>>;
    fn journal(&self, id: crate::id::JobId) -> BoxFuture<'static, Result<Journal>>;
}

/// [`DurableOps`] over a pool's storage.
struct Over<S>(Arc<S>);

impl<S: Storage> DurableOps for Over<S> {
    fn checkpoint(&self, lease: LeaseRef, record: Record) -> BoxFuture<'static, Result<()>> {
        let storage = self.0.clone();
        Box::pin(async move { storage.require_durable()?.checkpoint(lease, &record).await })
    }
    fn suspend(&self, lease: LeaseRef, suspend: Suspend) -> BoxFuture<'static, Result<Suspended>> {
        let storage = self.0.clone();
        Box::pin(async move { storage.require_durable()?.suspend(lease, &suspend).await })
    }
    fn journal(&self, id: crate::id::JobId) -> BoxFuture<'static, Result<Journal>> {
        let storage = self.0.clone();
        Box::pin(async move { storage.require_durable()?.journal(id).await })
    }
}

/// What durable handlers reach of the pool's storage; filled once when the
/// pool starts (the handlers are registered before there is a storage
/// handle to give them).
pub(crate) struct DurableAccess {
    ops: Arc<dyn DurableOps>,
    clock: Clock,
}

/// The slot a pool's durable handlers share, filled by `start`.
pub(crate) type DurableSlot = Arc<OnceLock<Arc<DurableAccess>>>;

/// Fills `slot` with access to `storage` (once; a second pool start never
/// happens, the builder is consumed).
pub(crate) fn fill<S: Storage>(slot: &DurableSlot, storage: &Arc<S>) {
    let _ = slot.set(Arc::new(DurableAccess { ops: Arc::new(Over(storage.clone())), clock: storage.clock() }));
}

/// How a wait ended ([`DurableContext::wait_for`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waited<T> {
    /// A signal came: its payload.
    Signal(T),
    /// The timeout passed first.
    TimedOut,
}

/// The journal as this run knows it, and where the run is in it.
#[derive(Default)]
struct RunState {
    /// Read from the store at the run's first durable call.
    journal: Option<Vec<Entry>>,
    /// The next entry the code asks for.
    cursor: usize,
    /// Step names asked for in this run (unique in a run).
    names: HashSet<String>,
    /// Why the run must end Dead, whatever the handler returns (a
    /// mismatch, a limit): a handler that swallows the error cannot
    /// turn it into a retry.
    poisoned: Option<String>,
    /// The run stopped to sleep or wait: whatever the handler returns,
    /// nothing is settled.
    suspended: bool,
}

/// What a durable handler gets: the run's [`JobContext`] (through `Deref`)
/// and the durable calls, replayed from the job's journal.
///
/// Every call is replayed in order: on a later run (a retry, a killed
/// worker, the end of a sleep) a completed step returns its recorded
/// result without running its body, a sleep that ended returns at once,
/// a wait that took a signal returns it again. The code must ask for the
/// recorded entries in their order: a run whose code asks for something
/// else at a recorded place ends Dead with an error naming both (change a
/// durable handler under running jobs with [`DurableContext::patched`]).
///
/// A call that stops the run (a sleep not over, a wait without a signal)
/// returns an error that is a [`HandlerError`]: return it with `?`; the job
/// waits in the store, holding no worker slot and no lease, and runs again
/// at its time.
#[derive(Clone)]
pub struct DurableContext {
    ctx: JobContext,
    access: Arc<DurableAccess>,
    state: Arc<Mutex<RunState>>,
}

impl Deref for DurableContext {
    type Target = JobContext;
    fn deref(&self) -> &JobContext {
        &self.ctx
    }
}

impl std::fmt::Debug for DurableContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableContext").field("job", &self.ctx.id).finish_non_exhaustive()
    }
}

/// What the entry at the cursor says about what the code asks for.
enum AtCursor {
    /// The entry answers it.
    Recorded(Entry),
    /// Past the journal's end: new ground, run it.
    New(u32),
}

impl DurableContext {
    fn state(&self) -> MutexGuard<'_, RunState> {
        // Each critical section below leaves the state whole before
        // anything that can panic.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The error that ends this run as it must end (a poisoned or a
    /// suspended run), if it must.
    fn stopped(&self) -> Option<HandlerError> {
        let state = self.state();
        if let Some(message) = &state.poisoned {
            return Some(HandlerError::bury(message));
        }
        state.suspended.then_some(HandlerError { action: Action::Suspended })
    }

    /// Ends the run Dead with `message`, whatever the handler does next.
    fn poison(&self, message: String) -> HandlerError {
        tracing::error!(job = %self.ctx.id, %message, "durable run ends Dead");
        let mut state = self.state();
        state.poisoned.get_or_insert(message.clone());
        HandlerError::bury(message)
    }

    fn suspended(&self) -> HandlerError {
        self.state().suspended = true;
        HandlerError { action: Action::Suspended }
    }

    /// Reads the journal at the run's first durable call.
    async fn load(&self) -> Result<(), HandlerError> {
        if self.state().journal.is_some() {
            return Ok(());
        }
        let journal = self.access.ops.journal(self.ctx.id).await.map_err(HandlerError::nack)?;
        let mut state = self.state();
        if state.journal.is_none() {
            state.journal = Some(journal.entries);
        }
        Ok(())
    }

    /// The entry at the cursor for `kind` and `name`: recorded (and
    /// matching: consumed), new, or a mismatch (the run is poisoned).
    async fn at_cursor(&self, kind: EntryKind, name: &str) -> Result<AtCursor, HandlerError> {
        if let Some(stop) = self.stopped() {
            return Err(stop);
        }
        self.load().await?;
        let mut state = self.state();
        let cursor = state.cursor;
        let entry = state.journal.as_ref().and_then(|j| j.get(cursor)).cloned();
        match entry {
            None => Ok(AtCursor::New(cursor as u32)),
            Some(entry) if matches_ask(&entry, kind, name) => {
                state.cursor += 1;
                Ok(AtCursor::Recorded(entry))
            }
            Some(entry) => {
                drop(state);
                Err(self.poison(mismatch_message(self.ctx.id, cursor, kind, name, Some(&entry))))
            }
        }
    }

    /// Appends `entry` to the run's journal (the store has it) and moves past it.
    fn recorded(&self, entry: Entry) {
        let mut state = self.state();
        state.journal.get_or_insert_with(Vec::new).push(entry);
        state.cursor += 1;
    }

    /// The error of a store call: a mismatch or a limit ends the run Dead
    /// (no retry can change it), anything else is a failed attempt.
    fn store_error(&self, error: Error) -> HandlerError {
        match error {
            Error::JournalMismatch { .. } | Error::DurableLimit { .. } | Error::InvalidInput { .. } => {
                self.poison(error.to_string())
            }
            other => HandlerError::from(other),
        }
    }

    /// Checks the journal before a new record is sent (the store checks
    /// again, in its atomic step): the same limits, refused before a trip.
    fn check_local(&self, record: &Record) -> Result<(), HandlerError> {
        let (entries, bytes) = {
            let state = self.state();
            let journal = state.journal.as_deref().unwrap_or_default();
            (journal.len(), journal.iter().map(Entry::bytes).sum::<usize>())
        };
        check_append(entries, bytes, record).map_err(|e| self.store_error(e))
    }

    /// Runs `body` once as step `name` and records its result with the
    /// job, fenced by this run's lease; on every later run of the job the
    /// recorded result is returned and `body` does not run.
    ///
    /// - `body`'s error is the run's: a nack follows the job's retry
    ///   policy (the step runs again on the next attempt), a bury ends it.
    /// - Names are unique in a run: a second step of the same name ends
    ///   the run Dead (a bug that no retry fixes), as does a result over
    ///   [`MAX_STEP_RESULT_BYTES`](crate::durable::MAX_STEP_RESULT_BYTES)
    ///   or a journal over its limits ([`Error::DurableLimit`] names it).
    /// - A recorded result that no longer deserializes into `T` ends the
    ///   run Dead naming the step.
    pub async fn step<T, E, F>(&self, name: &str, body: F) -> Result<T, HandlerError>
    where
        T: Serialize + DeserializeOwned,
        E: Into<HandlerError>,
        F: Future<Output = Result<T, E>>,
    {
        if !self.state().names.insert(name.to_owned()) {
            return Err(self.poison(format!("job {}: step {name:?} is asked for twice in one run", self.ctx.id)));
        }
        let index = match self.at_cursor(EntryKind::Step, name).await? {
            AtCursor::Recorded(entry) => return self.decode(&entry),
            AtCursor::New(index) => index,
        };
        let value = body.await.map_err(Into::into)?;
        let result = Payload::of(&value).map_err(|e| self.poison(format!("step {name:?}: {e}")))?;
        let record = Record::step(index, name, result);
        self.check_local(&record)?;
        self.access.ops.checkpoint(self.ctx.lease, record.clone()).await.map_err(|e| self.store_error(e))?;
        self.recorded(record.entry(self.access.clock.now()));
        Ok(value)
    }

    fn decode<T: DeserializeOwned>(&self, entry: &Entry) -> Result<T, HandlerError> {
        let value = entry.value.as_ref().map_or("null", Payload::as_str);
        serde_json::from_str(value).map_err(|e| {
            self.poison(format!(
                "job {}: the recorded {} does not deserialize into {}: {e}",
                self.ctx.id,
                entry.describe(),
                std::any::type_name::<T>()
            ))
        })
    }

    /// Sleeps `duration` in the store: the run ends here without counting
    /// an attempt, the job waits Scheduled (no worker slot, no lease) and
    /// runs again after it, replaying its steps. Return the error with `?`.
    pub async fn sleep(&self, duration: Duration) -> Result<(), HandlerError> {
        let until = crate::clock::add(self.access.clock.now(), duration);
        self.sleep_until(until).await
    }

    /// [`DurableContext::sleep`] until `until` (recorded on the first run;
    /// a replay sleeps until the recorded instant, whatever it asks).
    pub async fn sleep_until(&self, until: Timestamp) -> Result<(), HandlerError> {
        let (index, until) = match self.at_cursor(EntryKind::Sleep, "sleep").await? {
            AtCursor::Recorded(entry) => {
                let until = entry.until.unwrap_or(until);
                if until <= self.access.clock.now() {
                    return Ok(());
                }
                // Woke early (clocks apart): sleep the rest; the store
                // finds its own entry there and appends nothing.
                (entry.index, until)
            }
            AtCursor::New(index) => {
                self.check_local(&Suspend::sleep_record(index, until))?;
                (index, until)
            }
        };
        let now = self.access.clock.now();
        match self.access.ops.suspend(self.ctx.lease, Suspend::Sleep { index, until }).await {
            Ok(Suspended::Waiting) => Err(self.suspended()),
            Ok(_) => {
                let mut state = self.state();
                if state.journal.as_ref().is_some_and(|j| j.len() == index as usize) {
                    state.journal.get_or_insert_with(Vec::new).push(Suspend::sleep_record(index, until).entry(now));
                    state.cursor = index as usize + 1;
                }
                Ok(())
            }
            Err(e) => Err(self.store_error(e)),
        }
    }

    /// Waits for signal `name` for at most `timeout` (counted from the
    /// first run that reached this wait): a signal sent before the wait
    /// is kept and taken by it, one sent later wakes the job. Each signal
    /// is taken once. While it waits the run ends (return the error with
    /// `?`) and the job holds no slot. A timeout is
    /// [`Waited::TimedOut`]; a payload that does not deserialize into `T`
    /// ends the run Dead.
    pub async fn wait_for<T: DeserializeOwned>(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<Waited<T>, HandlerError> {
        let index = match self.at_cursor(EntryKind::Signal, name).await? {
            AtCursor::Recorded(entry) if entry.kind == EntryKind::Timeout => return Ok(Waited::TimedOut),
            AtCursor::Recorded(entry) => return self.decode(&entry).map(Waited::Signal),
            AtCursor::New(index) => index,
        };
        crate::durable::check_step_name(name).map_err(|e| self.store_error(e))?;
        let until = crate::clock::add(self.access.clock.now(), timeout);
        let wait = Suspend::Wait { index, name: name.to_owned(), until };
        let now = self.access.clock.now();
        match self.access.ops.suspend(self.ctx.lease, wait).await.map_err(|e| self.store_error(e))? {
            Suspended::Waiting => Err(self.suspended()),
            Suspended::Signal(payload) => {
                let record =
                    Record { index, name: name.to_owned(), kind: EntryKind::Signal, value: Some(payload), until: None };
                let entry = record.entry(now);
                self.recorded(entry.clone());
                self.decode(&entry).map(Waited::Signal)
            }
            Suspended::TimedOut | Suspended::Due => {
                let record =
                    Record { index, name: name.to_owned(), kind: EntryKind::Timeout, value: None, until: None };
                self.recorded(record.entry(now));
                Ok(Waited::TimedOut)
            }
        }
    }

    /// A patch: how a durable handler changes under runs in flight. A run
    /// that reaches this place for the first time with this code records
    /// the patch and gets `true` (take the new way); a run whose journal
    /// was recorded by the older code at this place gets `false` (take the
    /// old way, so its recorded steps still match), and so does every
    /// replay of it. Once no run of the old code is left, remove the old
    /// way and keep the call (or remove both with a new kind).
    pub async fn patched(&self, name: &str) -> Result<bool, HandlerError> {
        if let Some(stop) = self.stopped() {
            return Err(stop);
        }
        self.load().await?;
        let (cursor, entry) = {
            let state = self.state();
            (state.cursor, state.journal.as_ref().and_then(|j| j.get(state.cursor)).cloned())
        };
        match entry {
            Some(entry) if matches_ask(&entry, EntryKind::Patch, name) => {
                self.state().cursor += 1;
                Ok(true)
            }
            // Recorded by the code before the patch: the old way.
            Some(_) => Ok(false),
            None => {
                let record = Record::patch(cursor as u32, name);
                self.check_local(&record)?;
                self.access.ops.checkpoint(self.ctx.lease, record.clone()).await.map_err(|e| self.store_error(e))?;
                self.recorded(record.entry(self.access.clock.now()));
                Ok(true)
            }
        }
    }

    /// How the run ends, given what the handler returned: a poisoned run
    /// Dead, a suspended one unsettled, a successful one that left
    /// recorded entries unasked Dead naming the first of them.
    async fn finish(&self, returned: HandlerResult) -> HandlerResult {
        if let Some(stop) = self.stopped() {
            return Err(stop);
        }
        returned?;
        // Read now if the run never did: a journal it did not ask for at
        // all is a change of code too.
        self.load().await?;
        let unasked = {
            let state = self.state();
            state.journal.as_ref().and_then(|j| j.get(state.cursor)).cloned().map(|e| (state.cursor, e))
        };
        match unasked {
            None => Ok(()),
            Some((cursor, entry)) => Err(self.poison(format!(
                "job {}: journal mismatch at entry {cursor}: the code returned without asking for the recorded {}",
                self.ctx.id,
                entry.describe()
            ))),
        }
    }
}

/// True when `entry` answers the code's ask of `kind` and `name` (a wait
/// asks for a signal and is answered by a signal or a timeout).
fn matches_ask(entry: &Entry, kind: EntryKind, name: &str) -> bool {
    let kind_matches = match kind {
        EntryKind::Signal | EntryKind::Timeout => entry.kind.ends_a_wait(),
        other => entry.kind == other,
    };
    kind_matches && entry.name == name
}

fn mismatch_message(id: crate::id::JobId, index: usize, kind: EntryKind, name: &str, entry: Option<&Entry>) -> String {
    Error::JournalMismatch {
        id,
        index: index as u32,
        asked: describe(kind, name),
        recorded: entry.map(Entry::describe),
    }
    .to_string()
}

/// Wraps a typed durable handler: decodes the payload into `T` (a payload
/// that does not decode buries the job, as for a plain handler), gives it
/// a [`DurableContext`] over the pool's storage, and applies the run's end
/// ([`DurableContext::finish`]).
pub(crate) fn typed<T, F, Fut>(slot: DurableSlot, handler: F) -> ErasedHandler
where
    T: JobType,
    F: Fn(T, DurableContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    let handler = Arc::new(handler);
    Arc::new(move |job: Job, ctx: JobContext| -> BoxFuture<'static, HandlerResult> {
        let Some(access) = slot.get().cloned() else {
            // `WorkerPool::start` refuses a durable handler on a storage
            // without the capability, so this is never reached.
            return Box::pin(std::future::ready(Err(HandlerError::nack(
                "durable handler run before its pool started",
            ))));
        };
        let value = match job.payload.decode::<T>() {
            Ok(value) => value,
            Err(e) => {
                let error = HandlerError::bury(format!(
                    "payload does not deserialize into {} (kind {:?}): {e}",
                    std::any::type_name::<T>(),
                    job.kind
                ));
                return Box::pin(std::future::ready(Err(error)));
            }
        };
        let durable = DurableContext { ctx, access, state: Arc::default() };
        let handler = handler.clone();
        Box::pin(async move {
            let returned = handler(value, durable.clone()).await;
            durable.finish(returned).await
        })
    })
}
