//! Cancelling running jobs and storing their progress
//! ([`CancelStorage`](jq_core::storage::CancelStorage)), on the writer.

use jq_core::storage::{CancelAnswer, ProgressReport, cancel_reason};
use jq_core::{JobId, Result, State, Timestamp};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::db;
use crate::row::{blob, parse_state};

const REQUEST: &str = include_str!("sql/cancel_request.sql");
const STATE: &str = include_str!("sql/admin_state.sql");
const PROGRESS: &str = include_str!("sql/progress.sql");

/// Cancels job `id` if it has not started, else stores the request on it
/// while it runs; answers what happened. One writer command, so the state
/// read and the write see the same row.
pub(crate) fn request(conn: &Connection, id: JobId, reason: &str, now: Timestamp) -> Result<CancelAnswer> {
    let now_us = now.timestamp_micros();
    let state: Option<String> =
        conn.prepare_cached(STATE).map_err(db)?.query_row(params![blob(&id.0)], |r| r.get(0)).optional().map_err(db)?;
    let Some(state) = state else { return Err(jq_core::Error::NotFound { id }) };
    let state = parse_state(&state)
        .ok_or_else(|| jq_core::Error::Corrupt { id: Some(id), reason: format!("column state: unknown {state:?}") })?;
    match state {
        State::Waiting | State::Scheduled | State::Pending => {
            crate::admin::cancel(conn, id, now)?;
            Ok(CancelAnswer::Cancelled)
        }
        State::Running => {
            let stored = conn
                .prepare_cached(REQUEST)
                .map_err(db)?
                .query_row(params![blob(&id.0), now_us, cancel_reason(reason)], |_| Ok(()))
                .optional()
                .map_err(db)?;
            debug_assert!(stored.is_some(), "the writer read Running in the same transaction");
            Ok(CancelAnswer::Requested)
        }
        finished => Ok(CancelAnswer::Finished(finished)),
    }
}

/// Stores each report on its job while its lease is held; returns the ids
/// of the stale ones.
pub(crate) fn progress(conn: &Connection, reports: &[ProgressReport]) -> Result<Vec<JobId>> {
    let mut stmt = conn.prepare_cached(PROGRESS).map_err(db)?;
    let mut lost = Vec::new();
    for r in reports {
        let n = stmt.execute(params![blob(&r.lease.id.0), blob(&r.lease.token.0), r.value]).map_err(db)?;
        if n == 0 {
            lost.push(r.lease.id);
        }
    }
    Ok(lost)
}
