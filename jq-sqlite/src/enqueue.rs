//! Enqueue: one transaction per batch (the writer's group transaction, or
//! the caller's own with [`SqliteStorage::enqueue_tx`](crate::SqliteStorage::enqueue_tx)).

use jq_core::storage::{Decision, Holder, decide, from_micros, sub};
use jq_core::{Error, JobId, NewJob, Result, State, Timestamp, UniqueRule};
use rusqlite::{Connection, OptionalExtension, params};
use uuid::Uuid;

use crate::error::db;
use crate::row::blob;

const INSERT: &str = include_str!("sql/enqueue_insert.sql");
const UNIQUE: &str = include_str!("sql/enqueue_unique.sql");
const EXISTS: &str = include_str!("sql/enqueue_exists.sql");
const HOLDERS: &str = include_str!("sql/enqueue_holders.sql");
const RECENT: &str = include_str!("sql/enqueue_recent.sql");
const UPDATE: &str = include_str!("sql/enqueue_update.sql");

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
        let mut run_at = job.run_at;
        if let Some(key) = &job.unique_key {
            // Same order as the reference model: a re-sent job first, then
            // a live job with the key.
            let mut exists = conn.prepare_cached(EXISTS).map_err(db)?;
            if exists.exists(params![blob(&job.id.0)]).map_err(db)? {
                ids.push(job.id);
                continue;
            }
            if let Some(rule) = job.unique_rule {
                // The contract's "Unique rules": decided on this writer
                // transaction, so concurrent producers take turns.
                match decide(rule, job.run_at, &holders(conn, job, key, rule, now)?, now) {
                    Decision::Answer(id) => {
                        ids.push(id);
                        continue;
                    }
                    Decision::Update { id, run_at } => {
                        let at = run_at.timestamp_micros();
                        let state = if at <= now_us { State::Pending } else { State::Scheduled };
                        let mut update = conn.prepare_cached(UPDATE).map_err(db)?;
                        stored += update
                            .execute(params![blob(&id.0), job.payload.as_str(), at, state.as_str()])
                            .map_err(db)?;
                        ids.push(id);
                        continue;
                    }
                    Decision::Store { run_at: at, .. } => run_at = at,
                }
            } else {
                let mut unique = conn.prepare_cached(UNIQUE).map_err(db)?;
                let found: Option<Vec<u8>> =
                    unique.query_row(params![job.queue.as_str(), key], |r| r.get(0)).optional().map_err(db)?;
                if let Some(found) = found {
                    ids.push(JobId(uuid_of(&found, key)?));
                    continue;
                }
            }
        }
        let run_at = run_at.map_or(now_us, |t| t.timestamp_micros());
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

/// The holders of `job`'s unique key that `rule` needs: the live ones, and
/// for a period every one created within it.
fn holders(conn: &Connection, job: &NewJob, key: &str, rule: UniqueRule, now: Timestamp) -> Result<Vec<Holder>> {
    let mut out = Vec::new();
    let mut read = |sql: &str, since: Option<i64>| -> Result<()> {
        let mut stmt = conn.prepare_cached(sql).map_err(db)?;
        let mut rows = match since {
            Some(since) => stmt.query(params![job.queue.as_str(), key, since]),
            None => stmt.query(params![job.queue.as_str(), key]),
        }
        .map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            let id: Vec<u8> = row.get(0).map_err(db)?;
            let state: String = row.get(1).map_err(db)?;
            let created_at: i64 = row.get(2).map_err(db)?;
            let state = crate::row::parse_state(&state).ok_or_else(|| Error::Corrupt {
                id: None,
                reason: format!("a job with unique key {key:?} has the state {state:?}"),
            })?;
            out.push(Holder { id: JobId(uuid_of(&id, key)?), state, created_at: from_micros(created_at) });
        }
        Ok(())
    };
    read(HOLDERS, None)?;
    if let UniqueRule::Period(period) = rule {
        read(RECENT, Some(sub(now, period).timestamp_micros()))?;
    }
    Ok(out)
}

/// A stored id read back as a UUID.
fn uuid_of(bytes: &[u8], key: &str) -> Result<Uuid> {
    Uuid::from_slice(bytes).map_err(|_| Error::Corrupt {
        id: None,
        reason: format!("the live job with unique key {key:?} has an id that is not a UUID"),
    })
}
