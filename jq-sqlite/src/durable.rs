//! Durable jobs ([`DurableStorage`](jq_core::storage::DurableStorage)):
//! the journal, waits and signals of `sql/002_durable.sql`. The writes run
//! on the writer, each a command of its own (one transaction, or one
//! savepoint of a group), so the fence, the limits and the move of the job
//! are one atomic step; the journal is read on a reader.

use jq_core::durable::{
    Entry, EntryKind, Journal, Record, SignalInfo, Suspend, Suspended, Wait, check_append, check_signal, check_signals,
    check_step_name, mismatch, place,
};
use jq_core::storage::{LeaseRef, from_micros};
use jq_core::{Error, JobId, Payload, Result, State, Timestamp};
use rusqlite::{Connection, OptionalExtension, params};

use crate::counts::{ClaimedQueues, Tally, workflow_of};
use crate::error::db;
use crate::row::{blob, parse_state};
use crate::workflow::IN_WORKFLOW;

/// `jobs.flow` bit: the job has journal, signal or wait rows (purge
/// deletes them).
pub(crate) const DURABLE: i64 = 8;

const LEASED: &str = include_str!("sql/durable_leased.sql");
const MARK: &str = include_str!("sql/durable_mark.sql");
const SIZE: &str = include_str!("sql/durable_size.sql");
const ENTRY: &str = include_str!("sql/durable_entry.sql");
const ENTRIES: &str = include_str!("sql/durable_entries.sql");
const APPEND: &str = include_str!("sql/durable_append.sql");
const WAIT_GET: &str = include_str!("sql/durable_wait_get.sql");
const WAIT_PUT: &str = include_str!("sql/durable_wait_put.sql");
const WAIT_CLEAR: &str = include_str!("sql/durable_wait_clear.sql");
const SIGNAL_TAKE: &str = include_str!("sql/durable_signal_take.sql");
const SIGNAL_PEEK: &str = include_str!("sql/durable_signal_peek.sql");
const SIGNAL_PUT: &str = include_str!("sql/durable_signal_put.sql");
const SIGNAL_COUNT: &str = include_str!("sql/durable_signal_count.sql");
const SIGNALS: &str = include_str!("sql/durable_signals.sql");
const WAKE: &str = include_str!("sql/durable_wake.sql");
const PURGE: [&str; 3] = [
    include_str!("sql/durable_purge_journal.sql"),
    include_str!("sql/durable_purge_signals.sql"),
    include_str!("sql/durable_purge_waits.sql"),
];
const STATE: &str = include_str!("sql/admin_state.sql");
/// A release with a delay: the same move a sleep or a wait makes.
const PARK: &str = include_str!("sql/settle_release.sql");

/// The job's `flow` while `lease` holds it, else [`Error::LeaseLost`].
fn leased(conn: &Connection, lease: LeaseRef) -> Result<i64> {
    conn.prepare_cached(LEASED)
        .map_err(db)?
        .query_row(params![blob(&lease.id.0), blob(&lease.token.0)], |r| r.get(0))
        .optional()
        .map_err(db)?
        .ok_or(Error::LeaseLost { id: lease.id })
}

fn mark(conn: &Connection, id: JobId) -> Result<()> {
    conn.prepare_cached(MARK).map_err(db)?.execute(params![blob(&id.0)]).map_err(db)?;
    Ok(())
}

fn entry_of(id: JobId, r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<Entry>> {
    let index: i64 = r.get(0)?;
    let name: String = r.get(1)?;
    let kind: String = r.get(2)?;
    let value: Option<String> = r.get(3)?;
    let until: Option<i64> = r.get(4)?;
    let at: i64 = r.get(5)?;
    let Some(kind) = EntryKind::parse(&kind) else {
        return Ok(Err(Error::Corrupt {
            id: Some(id),
            reason: format!("journal entry {index}: unknown kind {kind:?}"),
        }));
    };
    Ok(Ok(Entry {
        index: u32::try_from(index).unwrap_or(u32::MAX),
        name,
        kind,
        value: value.map(Payload::from_stored),
        until: until.map(from_micros),
        at: from_micros(at),
    }))
}

/// The entry of `id` at `index`, if any.
fn entry_at(conn: &Connection, id: JobId, index: u32) -> Result<Option<Entry>> {
    conn.prepare_cached(ENTRY)
        .map_err(db)?
        .query_row(params![blob(&id.0), index], |r| entry_of(id, r))
        .optional()
        .map_err(db)?
        .transpose()
}

/// Appends `record` under the contract's places and limits: `true` when
/// appended, `false` when the same record is there (a resend).
fn append(conn: &Connection, id: JobId, record: &Record, now: Timestamp) -> Result<bool> {
    let (entries, bytes): (i64, i64) = conn
        .prepare_cached(SIZE)
        .map_err(db)?
        .query_row(params![blob(&id.0)], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(db)?;
    let entries = usize::try_from(entries).unwrap_or(usize::MAX);
    let at_place = entry_at(conn, id, record.index)?;
    if !place(id, entries, at_place.as_ref(), record)? {
        return Ok(false);
    }
    check_append(entries, usize::try_from(bytes).unwrap_or(usize::MAX), record)?;
    conn.prepare_cached(APPEND)
        .map_err(db)?
        .execute(params![
            blob(&id.0),
            record.index,
            record.name,
            record.kind.as_str(),
            record.value.as_ref().map(Payload::as_str),
            record.until.map(|t| t.timestamp_micros()),
            now.timestamp_micros(),
            record.bytes() as i64,
        ])
        .map_err(db)?;
    mark(conn, id)?;
    Ok(true)
}

/// [`DurableStorage::checkpoint`](jq_core::storage::DurableStorage::checkpoint).
pub(crate) fn checkpoint(conn: &Connection, lease: LeaseRef, record: &Record, now: Timestamp) -> Result<()> {
    if !matches!(record.kind, EntryKind::Step | EntryKind::Patch) {
        return Err(Error::invalid("checkpoint", format!("a {} is recorded by suspend", record.kind.as_str())));
    }
    leased(conn, lease)?;
    append(conn, lease.id, record, now)?;
    Ok(())
}

/// Running -> Scheduled until `until`, attempt given back, lease cleared;
/// a workflow step's move is counted.
fn park(conn: &Connection, lease: LeaseRef, flow: i64, until: Timestamp, claimed: &mut ClaimedQueues) -> Result<()> {
    let n = conn
        .prepare_cached(PARK)
        .map_err(db)?
        .execute(params![blob(&lease.id.0), blob(&lease.token.0), until.timestamp_micros(), false])
        .map_err(db)?;
    if n == 0 {
        return Err(Error::LeaseLost { id: lease.id });
    }
    // The claim's memory of the job is for its settle, which will not come.
    let cached = claimed.settled(lease.id);
    if flow & IN_WORKFLOW != 0 {
        let workflow = match cached.and_then(|c| c.workflow) {
            Some(workflow) => Some(workflow),
            None => workflow_of(conn, blob(&lease.id.0))?,
        };
        if let Some(workflow) = workflow {
            let mut tally = Tally::default();
            tally.step_moved(&workflow, State::Running, State::Scheduled);
            tally.apply(conn)?;
        }
    }
    Ok(())
}

/// [`DurableStorage::suspend`](jq_core::storage::DurableStorage::suspend).
pub(crate) fn suspend(
    conn: &Connection,
    lease: LeaseRef,
    suspend: &Suspend,
    now: Timestamp,
    claimed: &mut ClaimedQueues,
) -> Result<Suspended> {
    let flow = leased(conn, lease)?;
    let id = lease.id;
    match suspend {
        Suspend::Sleep { index, until } => {
            append(conn, id, &Suspend::sleep_record(*index, *until), now)?;
            // The recorded instant wins over a replay's ask.
            let until = entry_at(conn, id, *index)?.and_then(|e| e.until).unwrap_or(*until);
            if until <= now {
                return Ok(Suspended::Due);
            }
            park(conn, lease, flow, until, claimed)?;
            Ok(Suspended::Waiting)
        }
        Suspend::Wait { index, name, until } => {
            check_step_name(name)?;
            let mut record =
                Record { index: *index, name: name.clone(), kind: EntryKind::Timeout, value: None, until: None };
            if let Some(entry) = entry_at(conn, id, *index)? {
                if entry.kind.ends_a_wait() && entry.name == *name {
                    return Ok(match entry.value {
                        Some(payload) if entry.kind == EntryKind::Signal => Suspended::Signal(payload),
                        _ => Suspended::TimedOut,
                    });
                }
                record.kind = EntryKind::Signal;
                return Err(mismatch(id, &record, Some(entry.describe())));
            }
            let waiting = conn
                .prepare_cached(SIGNAL_PEEK)
                .map_err(db)?
                .query_row(params![blob(&id.0), name], |r| r.get::<_, String>(0))
                .optional()
                .map_err(db)?;
            if let Some(payload) = waiting {
                record.kind = EntryKind::Signal;
                record.value = Some(Payload::from_stored(payload));
                // Recorded first: a limit refuses the take and the signal stays.
                append(conn, id, &record, now)?;
                let taken = conn
                    .prepare_cached(SIGNAL_TAKE)
                    .map_err(db)?
                    .query_row(params![blob(&id.0), name], |r| r.get::<_, String>(0))
                    .map_err(db)?;
                conn.prepare_cached(WAIT_CLEAR).map_err(db)?.execute(params![blob(&id.0)]).map_err(db)?;
                return Ok(Suspended::Signal(Payload::from_stored(taken)));
            }
            let stored = conn
                .prepare_cached(WAIT_GET)
                .map_err(db)?
                .query_row(params![blob(&id.0)], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?))
                })
                .optional()
                .map_err(db)?;
            let until = match stored {
                Some((i, n, u)) if i == i64::from(*index) && n == *name => from_micros(u),
                _ => *until,
            };
            if until <= now {
                append(conn, id, &record, now)?;
                conn.prepare_cached(WAIT_CLEAR).map_err(db)?.execute(params![blob(&id.0)]).map_err(db)?;
                return Ok(Suspended::TimedOut);
            }
            let (entries, _): (i64, i64) = conn
                .prepare_cached(SIZE)
                .map_err(db)?
                .query_row(params![blob(&id.0)], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(db)?;
            if i64::from(*index) != entries {
                return Err(mismatch(id, &record, None));
            }
            conn.prepare_cached(WAIT_PUT)
                .map_err(db)?
                .execute(params![blob(&id.0), index, name, until.timestamp_micros()])
                .map_err(db)?;
            mark(conn, id)?;
            park(conn, lease, flow, until, claimed)?;
            Ok(Suspended::Waiting)
        }
    }
}

/// [`DurableStorage::signal`](jq_core::storage::DurableStorage::signal):
/// the signal, and `true` when it woke the job's wait.
pub(crate) fn signal(conn: &Connection, id: JobId, name: &str, payload: &Payload, now: Timestamp) -> Result<bool> {
    check_signal(name, payload)?;
    let state: Option<String> =
        conn.prepare_cached(STATE).map_err(db)?.query_row(params![blob(&id.0)], |r| r.get(0)).optional().map_err(db)?;
    let Some(state) = state else { return Err(Error::NotFound { id }) };
    let state = parse_state(&state)
        .ok_or_else(|| Error::Corrupt { id: Some(id), reason: format!("column state: unknown {state:?}") })?;
    if state.is_terminal() {
        return Err(Error::InvalidState { id, state, operation: "signal" });
    }
    let waiting: i64 =
        conn.prepare_cached(SIGNAL_COUNT).map_err(db)?.query_row(params![blob(&id.0)], |r| r.get(0)).map_err(db)?;
    check_signals(usize::try_from(waiting).unwrap_or(usize::MAX))?;
    conn.prepare_cached(SIGNAL_PUT)
        .map_err(db)?
        .execute(params![blob(&id.0), name, payload.as_str(), now.timestamp_micros()])
        .map_err(db)?;
    mark(conn, id)?;
    if state != State::Scheduled {
        return Ok(false);
    }
    let waits: Option<String> = conn
        .prepare_cached(WAIT_GET)
        .map_err(db)?
        .query_row(params![blob(&id.0)], |r| r.get(1))
        .optional()
        .map_err(db)?;
    if waits.as_deref() != Some(name) {
        return Ok(false);
    }
    let flow: Option<i64> = conn
        .prepare_cached(WAKE)
        .map_err(db)?
        .query_row(params![blob(&id.0), now.timestamp_micros()], |r| r.get(0))
        .optional()
        .map_err(db)?;
    if let Some(flow) = flow
        && flow & IN_WORKFLOW != 0
        && let Some(workflow) = workflow_of(conn, blob(&id.0))?
    {
        let mut tally = Tally::default();
        tally.step_moved(&workflow, State::Scheduled, State::Pending);
        tally.apply(conn)?;
    }
    Ok(flow.is_some())
}

/// [`DurableStorage::journal`](jq_core::storage::DurableStorage::journal), on a reader.
pub(crate) fn journal(conn: &Connection, id: JobId) -> Result<Journal> {
    let state: Option<String> =
        conn.prepare_cached(STATE).map_err(db)?.query_row(params![blob(&id.0)], |r| r.get(0)).optional().map_err(db)?;
    if state.is_none() {
        return Err(Error::NotFound { id });
    }
    let mut journal = Journal::default();
    {
        let mut stmt = conn.prepare_cached(ENTRIES).map_err(db)?;
        let mut rows = stmt.query(params![blob(&id.0)]).map_err(db)?;
        while let Some(r) = rows.next().map_err(db)? {
            journal.entries.push(entry_of(id, r).map_err(db)??);
        }
    }
    journal.wait = conn
        .prepare_cached(WAIT_GET)
        .map_err(db)?
        .query_row(params![blob(&id.0)], |r| {
            Ok(Wait {
                index: u32::try_from(r.get::<_, i64>(0)?).unwrap_or(u32::MAX),
                name: r.get(1)?,
                until: from_micros(r.get(2)?),
            })
        })
        .optional()
        .map_err(db)?;
    let mut stmt = conn.prepare_cached(SIGNALS).map_err(db)?;
    let mut rows = stmt.query(params![blob(&id.0)]).map_err(db)?;
    while let Some(r) = rows.next().map_err(db)? {
        journal.signals.push(SignalInfo { name: r.get(0).map_err(db)?, sent_at: from_micros(r.get(1).map_err(db)?) });
    }
    Ok(journal)
}

/// Deletes the durable rows of purged job `id` (a job with [`DURABLE`]).
pub(crate) fn purged(conn: &Connection, id: &[u8]) -> Result<()> {
    for sql in PURGE {
        conn.prepare_cached(sql).map_err(db)?.execute(params![id]).map_err(db)?;
    }
    Ok(())
}
