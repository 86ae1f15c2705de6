//! Cancelling running jobs and storing their progress
//! ([`CancelStorage`](jq_core::storage::CancelStorage)).

use std::collections::HashSet;

use jq_core::storage::{CancelAnswer, ProgressReport, cancel_reason};
use jq_core::{Error, JobId, Result, State};
use sqlx::Row;
use uuid::Uuid;

use crate::Inner;
use crate::error::map_sqlx;
use crate::row::decode_state;

/// Cancels job `id` if it has not started, else stores the request on it
/// while it runs, in one statement; answers what happened.
pub(crate) async fn request(inner: &Inner, id: JobId, reason: &str) -> Result<CancelAnswer> {
    let reason = cancel_reason(reason);
    // A job that moved between the guarded update and the look-up (a
    // claim made it Running) is tried again; each round is one change of
    // state, so a few suffice.
    for _ in 0..4 {
        let now = inner.clock.now();
        let statement =
            inner.sql.cancel_request.query().bind(id.0).bind(now).bind(reason.as_str()).bind(&inner.channel);
        if let Some(row) = inner.db().fetch_optional(statement).await.map_err(map_sqlx)? {
            let state: String = row.try_get(0).map_err(map_sqlx)?;
            return Ok(match decode_state(id, &state)? {
                State::Running => CancelAnswer::Requested,
                _ => CancelAnswer::Cancelled,
            });
        }
        let row = inner.db().fetch_optional(inner.sql.state.query().bind(id.0)).await.map_err(map_sqlx)?;
        let Some(row) = row else { return Err(Error::NotFound { id }) };
        let state: String = row.try_get(0).map_err(map_sqlx)?;
        let state = decode_state(id, &state)?;
        if state.is_terminal() {
            return Ok(CancelAnswer::Finished(state));
        }
    }
    Err(Error::Backend {
        backend: crate::error::BACKEND,
        source: format!("cancel of job {id}: its state kept changing").into(),
    })
}

/// Stores each report on its job while its lease is held, in one
/// statement; returns the ids of the stale ones.
pub(crate) async fn progress(inner: &Inner, reports: &[ProgressReport]) -> Result<Vec<JobId>> {
    for report in reports {
        jq_core::storage::check_progress(&report.value)?;
    }
    if reports.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = reports.iter().map(|r| r.lease.id.0).collect();
    let tokens: Vec<Uuid> = reports.iter().map(|r| r.lease.token.0).collect();
    let values: Vec<&str> = reports.iter().map(|r| r.value.as_str()).collect();
    let statement = inner.sql.progress.query().bind(&ids).bind(&tokens).bind(&values);
    let rows = inner.db().fetch_all(statement).await.map_err(map_sqlx)?;
    let mut stored: HashSet<Uuid> = HashSet::with_capacity(rows.len());
    for row in &rows {
        stored.insert(row.try_get(0).map_err(map_sqlx)?);
    }
    Ok(reports.iter().filter(|r| !stored.contains(&r.lease.id.0)).map(|r| r.lease.id).collect())
}
