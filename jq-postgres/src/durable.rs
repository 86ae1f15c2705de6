//! Durable jobs ([`DurableStorage`](jq_core::storage::DurableStorage)):
//! the journal, waits and signals of `migrations/0002_durable.sql`. Each
//! write is one transaction that first locks the job's row (under its
//! lease for checkpoint and suspend), so the fence, the limits and the
//! job's move are one atomic step; the limits are jq-core's functions,
//! the same on every backend.

use jq_core::durable::{
    Entry, EntryKind, Journal, MAX_JOURNAL_BYTES, MAX_STEPS, Record, SignalInfo, Suspend, Suspended, Wait,
    check_append, check_signal, check_signals, check_step_name, mismatch, place,
};
use jq_core::storage::LeaseRef;
use jq_core::{Error, JobId, Payload, Result, State, Timestamp};
use sqlx::postgres::PgRow;
use sqlx::{Postgres, Row, Transaction};

use crate::Inner;
use crate::error::map_sqlx;
use crate::pooler::PgQuery;
use crate::row::decode_state;

type Tx = Transaction<'static, Postgres>;

/// The flow bit of a job with durable rows (migrations/0002_durable.sql).
const DURABLE_ROWS: i16 = 4;

/// The job's `flow`, locked, while `lease` holds it; else [`Error::LeaseLost`].
async fn leased(inner: &Inner, tx: &mut Tx, lease: LeaseRef) -> Result<i16> {
    let row = inner
        .sql
        .durable_leased
        .query()
        .bind(lease.id.0)
        .bind(lease.token.0)
        .fetch_optional(&mut **tx)
        .await
        .map_err(map_sqlx)?;
    match row {
        Some(row) => row.try_get(0).map_err(map_sqlx),
        None => Err(Error::LeaseLost { id: lease.id }),
    }
}

async fn mark(inner: &Inner, tx: &mut Tx, id: JobId) -> Result<()> {
    inner.sql.durable_mark.query().bind(id.0).execute(&mut **tx).await.map_err(map_sqlx)?;
    Ok(())
}

fn entry_of(id: JobId, row: &PgRow) -> Result<Entry> {
    let index: i32 = row.try_get(0).map_err(map_sqlx)?;
    let kind: String = row.try_get(2).map_err(map_sqlx)?;
    let Some(kind) = EntryKind::parse(&kind) else {
        return Err(Error::Corrupt { id: Some(id), reason: format!("journal entry {index}: unknown kind {kind:?}") });
    };
    Ok(Entry {
        index: u32::try_from(index).unwrap_or(u32::MAX),
        name: row.try_get(1).map_err(map_sqlx)?,
        kind,
        value: row.try_get::<Option<String>, _>(3).map_err(map_sqlx)?.map(Payload::from_stored),
        until: row.try_get(4).map_err(map_sqlx)?,
        at: row.try_get(5).map_err(map_sqlx)?,
    })
}

async fn entry_at(inner: &Inner, tx: &mut Tx, id: JobId, index: u32) -> Result<Option<Entry>> {
    let index = i32::try_from(index).unwrap_or(i32::MAX);
    let row =
        inner.sql.durable_entry.query().bind(id.0).bind(index).fetch_optional(&mut **tx).await.map_err(map_sqlx)?;
    row.map(|r| entry_of(id, &r)).transpose()
}

async fn size(inner: &Inner, tx: &mut Tx, id: JobId) -> Result<(usize, usize)> {
    let row = inner.sql.durable_size.query().bind(id.0).fetch_one(&mut **tx).await.map_err(map_sqlx)?;
    let entries: i64 = row.try_get(0).map_err(map_sqlx)?;
    let bytes: i64 = row.try_get(1).map_err(map_sqlx)?;
    Ok((usize::try_from(entries).unwrap_or(usize::MAX), usize::try_from(bytes).unwrap_or(usize::MAX)))
}

/// Binds the journal row of `record` recorded at `now`, in the columns'
/// order (idx, name, kind, value, until, at, bytes): the checked append
/// and the checkpoint's one statement store it alike.
fn bind_entry<'q>(query: PgQuery<'q>, record: &'q Record, now: Timestamp) -> PgQuery<'q> {
    query
        .bind(i32::try_from(record.index).unwrap_or(i32::MAX))
        .bind(record.name.as_str())
        .bind(record.kind.as_str())
        .bind(record.value.as_ref().map(Payload::as_str))
        .bind(record.until)
        .bind(now)
        .bind(i32::try_from(record.bytes()).unwrap_or(i32::MAX))
}

/// Appends `record` under the contract's places and limits: `true` when
/// appended, `false` when the same record is there (a resend).
async fn append(inner: &Inner, tx: &mut Tx, id: JobId, record: &Record, now: Timestamp) -> Result<bool> {
    let (entries, bytes) = size(inner, tx, id).await?;
    let at_place = entry_at(inner, tx, id, record.index).await?;
    if !place(id, entries, at_place.as_ref(), record)? {
        return Ok(false);
    }
    check_append(entries, bytes, record)?;
    bind_entry(inner.sql.durable_append.query().bind(id.0), record, now).execute(&mut **tx).await.map_err(map_sqlx)?;
    mark(inner, tx, id).await?;
    Ok(true)
}

/// [`DurableStorage::checkpoint`](jq_core::storage::DurableStorage::checkpoint).
pub(crate) async fn checkpoint(inner: &Inner, lease: LeaseRef, record: &Record) -> Result<()> {
    if !matches!(record.kind, EntryKind::Step | EntryKind::Patch) {
        return Err(Error::invalid("checkpoint", format!("a {} is recorded by suspend", record.kind.as_str())));
    }
    let now = inner.clock.now();
    if append_at_end(inner, lease, record, now).await? {
        return Ok(());
    }
    let mut tx = inner.db().begin().await.map_err(map_sqlx)?;
    leased(inner, &mut tx, lease).await?;
    append(inner, &mut tx, lease.id, record, now).await?;
    tx.commit().await.map_err(map_sqlx)
}

/// A checkpoint's usual case in one statement and one commit
/// (sql/durable_checkpoint.sql): the record goes at the journal's end,
/// within the limits, under the lease. `false` when it did not append, for
/// the checked path to say why (lease lost, resend, mismatch, a limit); a
/// step of a durable job is its hot path, and the checked path's seven
/// round trips made PostgreSQL's steps a sixth of its plain jobs' rate.
async fn append_at_end(inner: &Inner, lease: LeaseRef, record: &Record, now: Timestamp) -> Result<bool> {
    if check_append(0, 0, record).is_err() {
        return Ok(false);
    }
    let query = bind_entry(inner.sql.durable_checkpoint.query().bind(lease.id.0).bind(lease.token.0), record, now)
        .bind(i64::try_from(MAX_STEPS).unwrap_or(i64::MAX))
        .bind(i64::try_from(MAX_JOURNAL_BYTES).unwrap_or(i64::MAX));
    let row = inner.db().fetch_optional(query).await.map_err(map_sqlx)?;
    let appended: i32 = match row {
        Some(row) => row.try_get(0).map_err(map_sqlx)?,
        None => 0,
    };
    Ok(appended == 1)
}

/// Running -> Scheduled until `until` (sql/durable_park.sql).
async fn park(inner: &Inner, tx: &mut Tx, lease: LeaseRef, until: Timestamp, now: Timestamp) -> Result<()> {
    let row = inner
        .sql
        .durable_park
        .query()
        .bind(lease.id.0)
        .bind(lease.token.0)
        .bind(until)
        .bind(now)
        .fetch_one(&mut **tx)
        .await
        .map_err(map_sqlx)?;
    let moved: i64 = row.try_get(0).map_err(map_sqlx)?;
    if moved == 0 {
        return Err(Error::LeaseLost { id: lease.id });
    }
    Ok(())
}

/// [`DurableStorage::suspend`](jq_core::storage::DurableStorage::suspend).
pub(crate) async fn suspend(inner: &Inner, lease: LeaseRef, suspend: &Suspend) -> Result<Suspended> {
    let now = inner.clock.now();
    let id = lease.id;
    let mut tx = inner.db().begin().await.map_err(map_sqlx)?;
    leased(inner, &mut tx, lease).await?;
    let answer = match suspend {
        Suspend::Sleep { index, until } => {
            append(inner, &mut tx, id, &Suspend::sleep_record(*index, *until), now).await?;
            // The recorded instant wins over a replay's ask.
            let until = entry_at(inner, &mut tx, id, *index).await?.and_then(|e| e.until).unwrap_or(*until);
            if until <= now {
                Suspended::Due
            } else {
                park(inner, &mut tx, lease, until, now).await?;
                Suspended::Waiting
            }
        }
        Suspend::Wait { index, name, until } => wait(inner, &mut tx, lease, *index, name, *until, now).await?,
    };
    tx.commit().await.map_err(map_sqlx)?;
    Ok(answer)
}

/// The wait of [`suspend`], in its transaction.
async fn wait(
    inner: &Inner,
    tx: &mut Tx,
    lease: LeaseRef,
    index: u32,
    name: &str,
    until: Timestamp,
    now: Timestamp,
) -> Result<Suspended> {
    let id = lease.id;
    check_step_name(name)?;
    let mut record = Record { index, name: name.to_owned(), kind: EntryKind::Timeout, value: None, until: None };
    if let Some(entry) = entry_at(inner, tx, id, index).await? {
        if entry.kind.ends_a_wait() && entry.name == name {
            return Ok(match entry.value {
                Some(payload) if entry.kind == EntryKind::Signal => Suspended::Signal(payload),
                _ => Suspended::TimedOut,
            });
        }
        record.kind = EntryKind::Signal;
        return Err(mismatch(id, &record, Some(entry.describe())));
    }
    let stored = inner
        .sql
        .durable_signal_peek
        .query()
        .bind(id.0)
        .bind(name)
        .fetch_optional(&mut **tx)
        .await
        .map_err(map_sqlx)?;
    if let Some(row) = stored {
        let signal: uuid::Uuid = row.try_get(0).map_err(map_sqlx)?;
        let payload = Payload::from_stored(row.try_get(1).map_err(map_sqlx)?);
        record.kind = EntryKind::Signal;
        record.value = Some(payload.clone());
        // Recorded first: a limit refuses the take and the signal stays.
        append(inner, tx, id, &record, now).await?;
        inner.sql.durable_signal_take.query().bind(id.0).bind(signal).execute(&mut **tx).await.map_err(map_sqlx)?;
        inner.sql.durable_wait_clear.query().bind(id.0).execute(&mut **tx).await.map_err(map_sqlx)?;
        return Ok(Suspended::Signal(payload));
    }
    let open = inner.sql.durable_wait_get.query().bind(id.0).fetch_optional(&mut **tx).await.map_err(map_sqlx)?;
    let mut deadline = until;
    if let Some(row) = open {
        let (i, n): (i32, String) = (row.try_get(0).map_err(map_sqlx)?, row.try_get(1).map_err(map_sqlx)?);
        if i64::from(i) == i64::from(index) && n == name {
            deadline = row.try_get(2).map_err(map_sqlx)?;
        }
    }
    if deadline <= now {
        append(inner, tx, id, &record, now).await?;
        inner.sql.durable_wait_clear.query().bind(id.0).execute(&mut **tx).await.map_err(map_sqlx)?;
        return Ok(Suspended::TimedOut);
    }
    let (entries, _) = size(inner, tx, id).await?;
    if index as usize != entries {
        return Err(mismatch(id, &record, None));
    }
    inner
        .sql
        .durable_wait_put
        .query()
        .bind(id.0)
        .bind(i32::try_from(index).unwrap_or(i32::MAX))
        .bind(name)
        .bind(deadline)
        .execute(&mut **tx)
        .await
        .map_err(map_sqlx)?;
    mark(inner, tx, id).await?;
    park(inner, tx, lease, deadline, now).await?;
    Ok(Suspended::Waiting)
}

/// [`DurableStorage::signal`](jq_core::storage::DurableStorage::signal).
pub(crate) async fn signal(inner: &Inner, id: JobId, name: &str, payload: &Payload) -> Result<()> {
    check_signal(name, payload)?;
    let now = inner.clock.now();
    let mut tx = inner.db().begin().await.map_err(map_sqlx)?;
    let row = inner.sql.durable_lock.query().bind(id.0).fetch_optional(&mut *tx).await.map_err(map_sqlx)?;
    let Some(row) = row else { return Err(Error::NotFound { id }) };
    let state: String = row.try_get(0).map_err(map_sqlx)?;
    let state = decode_state(id, &state)?;
    if state.is_terminal() {
        return Err(Error::InvalidState { id, state, operation: "signal" });
    }
    let waiting: i64 = inner
        .sql
        .durable_signal_count
        .query()
        .bind(id.0)
        .fetch_one(&mut *tx)
        .await
        .map_err(map_sqlx)?
        .try_get(0)
        .map_err(map_sqlx)?;
    check_signals(usize::try_from(waiting).unwrap_or(usize::MAX))?;
    inner
        .sql
        .durable_signal_put
        .query()
        .bind(id.0)
        .bind(JobId::new().0)
        .bind(name)
        .bind(payload.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(map_sqlx)?;
    mark(inner, &mut tx, id).await?;
    let mut woke = None;
    if state == State::Scheduled {
        let open = inner.sql.durable_wait_get.query().bind(id.0).fetch_optional(&mut *tx).await.map_err(map_sqlx)?;
        let waits_for = open.map(|r| r.try_get::<String, _>(1)).transpose().map_err(map_sqlx)?;
        if waits_for.as_deref() == Some(name) {
            let row = inner
                .sql
                .durable_wake
                .query()
                .bind(id.0)
                .bind(now)
                .bind(&inner.channel)
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_sqlx)?;
            if let Some(row) = row {
                let queue: String = row.try_get(0).map_err(map_sqlx)?;
                let priority: i16 = row.try_get(1).map_err(map_sqlx)?;
                let run_at: Timestamp = row.try_get(2).map_err(map_sqlx)?;
                woke = Some((queue, priority, run_at));
            }
        }
    }
    tx.commit().await.map_err(map_sqlx)?;
    if let Some((queue, priority, run_at)) = woke {
        // Pending again at now: claims of this storage must not start past it.
        inner.hints.arrived([(queue.as_str(), priority, run_at)]);
    }
    Ok(())
}

/// [`DurableStorage::journal`](jq_core::storage::DurableStorage::journal).
pub(crate) async fn journal(inner: &Inner, id: JobId) -> Result<Journal> {
    // A durable job's run reads its journal first: for a job that has no
    // durable row yet (every first run), one statement instead of a
    // transaction of four.
    let flow = inner.db().fetch_optional(inner.sql.durable_flow.query().bind(id.0)).await.map_err(map_sqlx)?;
    let Some(flow) = flow else {
        return Err(Error::NotFound { id });
    };
    if flow.try_get::<i16, _>(0).map_err(map_sqlx)? & DURABLE_ROWS == 0 {
        return Ok(Journal::default());
    }
    let mut tx = inner.db().begin().await.map_err(map_sqlx)?;
    let exists = inner.sql.state.query().bind(id.0).fetch_optional(&mut *tx).await.map_err(map_sqlx)?;
    if exists.is_none() {
        return Err(Error::NotFound { id });
    }
    let rows = inner.sql.durable_entries.query().bind(id.0).fetch_all(&mut *tx).await.map_err(map_sqlx)?;
    let entries = rows.iter().map(|r| entry_of(id, r)).collect::<Result<Vec<_>>>()?;
    let wait = inner.sql.durable_wait_get.query().bind(id.0).fetch_optional(&mut *tx).await.map_err(map_sqlx)?;
    let wait = match wait {
        Some(r) => Some(Wait {
            index: u32::try_from(r.try_get::<i32, _>(0).map_err(map_sqlx)?).unwrap_or(u32::MAX),
            name: r.try_get(1).map_err(map_sqlx)?,
            until: r.try_get(2).map_err(map_sqlx)?,
        }),
        None => None,
    };
    let rows = inner.sql.durable_signals.query().bind(id.0).fetch_all(&mut *tx).await.map_err(map_sqlx)?;
    let signals = rows
        .iter()
        .map(|r| Ok(SignalInfo { name: r.try_get(0).map_err(map_sqlx)?, sent_at: r.try_get(1).map_err(map_sqlx)? }))
        .collect::<Result<Vec<_>>>()?;
    tx.commit().await.map_err(map_sqlx)?;
    Ok(Journal { entries, wait, signals })
}
