//! Recurring periodic jobs ([`PeriodicStorage::fire`](jq_core::storage::PeriodicStorage::fire)): one row
//! per periodic job in `periodic_jobs`. A step reads the row and, when it is the
//! one expected, writes it and inserts the jobs, all in the writer's
//! `BEGIN IMMEDIATE` transaction: writers of every process are serialised
//! by it, so the comparison and the write are one atomic step.

use jq_core::periodic::{Fire, FireOutcome, PeriodicInfo};
use jq_core::storage::from_micros;
use jq_core::{Error, JobId, Result, Timestamp};
use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use crate::enqueue;
use crate::error::{db, is_decoding};
use crate::row::blob;

const GET: &str = include_str!("sql/periodic_get.sql");
const PUT: &str = include_str!("sql/periodic_put.sql");
const LIST: &str = include_str!("sql/periodic_list.sql");
const TRIGGER: &str = include_str!("sql/periodic_trigger.sql");

/// One step; the outcome and how many jobs were inserted. Runs on the
/// writer, inside its transaction.
pub(crate) fn fire(conn: &Connection, fire: &Fire, now: Timestamp) -> Result<(FireOutcome, usize)> {
    let before = conn.prepare_cached(GET).map_err(db)?.query_row(params![fire.name], decode).optional().map_err(db)?;
    let before = before.transpose()?;
    if !fire.matches(before.as_ref()) {
        return Ok((FireOutcome::Moved, 0));
    }
    let (ids, stored) = enqueue::insert(conn, &fire.jobs, now)?;
    let row = fire.applied(before.as_ref(), now, &ids);
    conn.prepare_cached(PUT)
        .map_err(db)?
        .execute(params![
            row.name,
            row.queue,
            row.spec,
            row.zone,
            row.cursor.timestamp_micros(),
            row.last_job.map(|id| blob(&id.0).to_vec()),
            i64::try_from(row.missed).unwrap_or(i64::MAX),
            row.last_missed.map(|t| t.timestamp_micros()),
            row.declared_at.timestamp_micros(),
        ])
        .map_err(db)?;
    Ok((FireOutcome::Fired(ids), stored))
}

/// Every periodic job row that can be decoded. A row that cannot (a column
/// of the wrong type, a last job that is not a UUID) is left out and logged
/// at error level with its name, as `list` does with jobs: *one bad row
/// must not stop every pool's periodic jobs.*
pub(crate) fn list(conn: &Connection) -> Result<Vec<PeriodicInfo>> {
    let mut stmt = conn.prepare_cached(LIST).map_err(db)?;
    let mut rows = stmt.query([]).map_err(db)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(db)? {
        match decode(row) {
            Ok(Ok(info)) => out.push(info),
            Ok(Err(error)) => tracing::error!(%error, "periodic skips a periodic job row that cannot be decoded"),
            Err(error) if is_decoding(&error) => {
                let name = row.get_ref(0).ok().map(|v| format!("{v:?}")).unwrap_or_default();
                tracing::error!(periodic = %name, %error, "periodic skips a periodic job row that cannot be decoded");
            }
            Err(error) => return Err(db(error)),
        }
    }
    Ok(out)
}

/// Sets the trigger of `name`; runs on the writer.
pub(crate) fn trigger(conn: &Connection, name: &str, now: Timestamp) -> Result<()> {
    let changed =
        conn.prepare_cached(TRIGGER).map_err(db)?.execute(params![name, now.timestamp_micros()]).map_err(db)?;
    if changed == 0 {
        return Err(Error::PeriodicNotFound { name: name.to_owned() });
    }
    Ok(())
}

/// A row of `periodic_jobs`; the inner error for a last job that is not a UUID.
fn decode(r: &Row<'_>) -> rusqlite::Result<Result<PeriodicInfo>> {
    let name: String = r.get(0)?;
    let last_job: Option<Vec<u8>> = r.get(5)?;
    let last_job = match last_job.map(|b| Uuid::from_slice(&b)) {
        None => None,
        Some(Ok(id)) => Some(JobId(id)),
        Some(Err(_)) => {
            return Ok(Err(Error::Corrupt {
                id: None,
                reason: format!("periodic job {name:?} has a last job that is not a UUID"),
            }));
        }
    };
    let missed: i64 = r.get(6)?;
    Ok(Ok(PeriodicInfo {
        queue: r.get(1)?,
        spec: r.get(2)?,
        zone: r.get(3)?,
        cursor: from_micros(r.get(4)?),
        last_job,
        missed: u64::try_from(missed).unwrap_or(0),
        last_missed: r.get::<_, Option<i64>>(7)?.map(from_micros),
        declared_at: from_micros(r.get(8)?),
        triggered_at: r.get::<_, Option<i64>>(9)?.map(from_micros),
        name,
    }))
}
