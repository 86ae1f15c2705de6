//! Enqueue: one transaction per batch (the writer's group transaction, or
//! the caller's own with [`SqliteStorage::enqueue_tx`](crate::SqliteStorage::enqueue_tx)).

use jq_core::{Error, JobId, NewJob, Result, State, Timestamp};
use rusqlite::{Connection, OptionalExtension, params};
use uuid::Uuid;

use crate::error::db;
use crate::row::blob;

const INSERT: &str = include_str!("sql/enqueue_insert.sql");
const UNIQUE: &str = include_str!("sql/enqueue_unique.sql");
const EXISTS: &str = include_str!("sql/enqueue_exists.sql");

/// Checks every job of the batch (payload, key) before anything is
/// written.
pub(crate) fn check(jobs: &[NewJob], max_payload_bytes: usize) -> Result<()> {
    jobs.iter().try_for_each(|job| job.check_payload(max_payload_bytes))
}

/// Stores the batch on `conn`, inside a transaction the caller owns, and
/// returns one id per job and how many rows were inserted. A job whose
/// unique key matches a live job of its queue (stored, or earlier in this
/// batch) gets that job's id; a job whose id is already stored is not stored
/// again.
pub(crate) fn insert(conn: &Connection, jobs: &[NewJob], now: Timestamp) -> Result<(Vec<JobId>, usize)> {
    let now_us = now.timestamp_micros();
    let mut insert = conn.prepare_cached(INSERT).map_err(db)?;
    let mut ids = Vec::with_capacity(jobs.len());
    let mut stored = 0;
    for job in jobs {
        if let Some(key) = &job.unique_key {
            // Same order as the reference model: a re-sent job first, then
            // a live job with the key.
            let mut exists = conn.prepare_cached(EXISTS).map_err(db)?;
            if exists.exists(params![blob(&job.id.0)]).map_err(db)? {
                ids.push(job.id);
                continue;
            }
            let mut unique = conn.prepare_cached(UNIQUE).map_err(db)?;
            let found: Option<Vec<u8>> =
                unique.query_row(params![job.queue.as_str(), key], |r| r.get(0)).optional().map_err(db)?;
            if let Some(found) = found {
                let id = Uuid::from_slice(&found).map_err(|_| Error::Corrupt {
                    id: None,
                    reason: format!("the live job with unique key {key:?} has an id that is not a UUID"),
                })?;
                ids.push(JobId(id));
                continue;
            }
        }
        let run_at = job.run_at.map_or(now_us, |t| t.timestamp_micros());
        let state = if run_at <= now_us { State::Pending } else { State::Scheduled };
        stored += insert
            .execute(params![
                blob(&job.id.0),
                job.queue.as_str(),
                job.kind,
                job.payload.as_str(),
                i64::from(job.priority.as_i16()),
                state.as_str(),
                i64::from(job.max_attempts),
                run_at,
                now_us,
                job.unique_key,
                job.trace.as_ref().map(|t| t.as_stored()),
                job.timeout_ms(),
                job.key,
            ])
            .map_err(db)?;
        ids.push(job.id);
    }
    Ok((ids, stored))
}
