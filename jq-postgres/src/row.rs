//! Decoding a stored row into a [`jq_core::Job`]. Anything that does not
//! decode gives [`jq_core::Error::Corrupt`] for that job only.

use chrono::{DateTime, Utc};
use jq_core::storage::LeaseToken;
use jq_core::{
    AttemptError, CancelRequest, Error, Job, JobId, Lease, Payload, Priority, QueueName, Result, State, TraceContext,
};
use sqlx::Row;
use sqlx::postgres::PgRow;
use uuid::Uuid;

use crate::error::corrupt;

/// Reads column `i` of the columns listed in `schema::COLUMNS`.
fn col<'r, T>(row: &'r PgRow, id: Option<JobId>, i: usize, name: &str) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(i).map_err(|e| corrupt(id, format!("column {name}: {e}")))
}

/// Decodes a row selected with `schema::COLUMNS`.
pub(crate) fn decode_job(row: &PgRow) -> Result<Job> {
    let id = JobId(col::<Uuid>(row, None, 0, "id")?);
    let some = Some(id);
    let queue: String = col(row, some, 1, "queue")?;
    let queue = QueueName::new(queue).map_err(|e| corrupt(some, format!("column queue: {e}")))?;
    let kind: String = col(row, some, 2, "kind")?;
    let payload: String = col(row, some, 3, "payload")?;
    let priority: i16 = col(row, some, 4, "priority")?;
    let priority =
        Priority::from_i16(priority).ok_or_else(|| corrupt(some, format!("priority {priority} is not 0 to 3")))?;
    let state: String = col(row, some, 5, "state")?;
    let state: State = state.parse().map_err(|e: Error| corrupt(some, format!("column state: {e}")))?;
    let attempts = count(row, some, 6, "attempts")?;
    let max_attempts = count(row, some, 7, "max_attempts")?;
    let run_at: DateTime<Utc> = col(row, some, 8, "run_at")?;
    let created_at: DateTime<Utc> = col(row, some, 9, "created_at")?;
    let finished_at: Option<DateTime<Utc>> = col(row, some, 10, "finished_at")?;
    let token: Option<Uuid> = col(row, some, 11, "lease_token")?;
    let worker: Option<String> = col(row, some, 12, "lease_worker")?;
    let expires_at: Option<DateTime<Utc>> = col(row, some, 13, "lease_expires_at")?;
    let errors: String = col(row, some, 14, "errors")?;
    let errors: Vec<AttemptError> =
        serde_json::from_str(&errors).map_err(|e| corrupt(some, format!("column errors: {e}")))?;
    let unique_key: Option<String> = col(row, some, 15, "unique_key")?;
    let trace: Option<String> = col(row, some, 16, "trace")?;
    let timeout_ms: Option<i64> = col(row, some, 17, "timeout_ms")?;
    let timeout = timeout_ms
        .map(|ms| u64::try_from(ms).map(std::time::Duration::from_millis))
        .transpose()
        .map_err(|_| corrupt(some, "column timeout_ms is negative"))?;
    let cancel_at: Option<DateTime<Utc>> = col(row, some, 18, "cancel_requested_at")?;
    let cancel_reason: Option<String> = col(row, some, 19, "cancel_reason")?;
    let progress: Option<String> = col(row, some, 20, "progress")?;
    let key: Option<String> = col(row, some, 21, "key")?;
    let lease = match (state, token, expires_at) {
        (State::Running, Some(token), Some(expires_at)) => {
            Some(Lease { token: LeaseToken(token), worker: worker.unwrap_or_default(), expires_at })
        }
        (State::Running, _, _) => return Err(corrupt(some, "job is running but has no lease token or expiry")),
        _ => None,
    };
    Ok(Job {
        id,
        queue,
        kind,
        payload: Payload::from_stored(payload),
        priority,
        state,
        attempts,
        max_attempts,
        run_at,
        created_at,
        finished_at,
        lease,
        errors,
        unique_key,
        key,
        trace: trace.map(TraceContext::from_stored),
        timeout,
        cancel_requested: cancel_at.map(|at| CancelRequest { at, reason: cancel_reason.unwrap_or_default() }),
        progress,
    })
}

fn count(row: &PgRow, id: Option<JobId>, i: usize, name: &str) -> Result<u32> {
    let n: i32 = col(row, id, i, name)?;
    u32::try_from(n).map_err(|_| corrupt(id, format!("column {name} is negative ({n})")))
}

/// Decodes a state column read on its own.
pub(crate) fn decode_state(id: JobId, state: &str) -> Result<State> {
    state.parse().map_err(|e: Error| corrupt(Some(id), format!("column state: {e}")))
}

/// An instant as the RFC 3339 text stored in the error history (UTC, `Z`,
/// microseconds), independent of the session's time zone.
pub(crate) fn rfc3339(t: chrono::DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}
