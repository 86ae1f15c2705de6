//! Decoding a stored row into a [`jq_core::Job`]; whatever cannot be
//! decoded is [`Error::Corrupt`], never a panic.
//!
//! Every `SELECT`/`RETURNING` that yields jobs lists the columns in the
//! order of [`COLUMNS`].

use jq_core::storage::LeaseToken;
use jq_core::storage::from_micros;
use jq_core::{
    AttemptError, CancelRequest, Error, Job, JobId, Lease, Payload, Priority, QueueName, Result, State, TraceContext,
};
use rusqlite::Row;
use rusqlite::types::ValueRef;
use uuid::Uuid;

/// The column list of a job, in decoding order.
pub(crate) const COLUMNS: &str = "id, queue, kind, payload, priority, state, attempts, max_attempts, run_at, \
     created_at, finished_at, lease_token, lease_worker, lease_expires_at, errors, unique_key, trace, \
     timeout_ms, cancel_requested_at, cancel_reason, progress, key";
/// How many columns [`COLUMNS`] lists: a query that selects more puts them
/// from this index on.
pub(crate) const COLUMN_COUNT: usize = 22;

/// The stored form of a state.
pub(crate) fn parse_state(s: &str) -> Option<State> {
    State::ALL.into_iter().find(|st| st.as_str() == s)
}

/// A stored job, or [`Error::Corrupt`] saying which column is wrong.
pub(crate) fn decode(row: &Row<'_>) -> Result<Job> {
    let id = match row.get_ref(0) {
        Ok(ValueRef::Blob(b)) => Uuid::from_slice(b).map(JobId).ok(),
        _ => None,
    };
    let Some(id) = id else {
        return Err(Error::Corrupt { id: None, reason: "column id is not a 16-byte UUID".into() });
    };
    let corrupt = |reason: String| Error::Corrupt { id: Some(id), reason };
    let text = |i: usize, name: &str| -> Result<String> {
        match row.get_ref(i) {
            Ok(ValueRef::Text(t)) => {
                String::from_utf8(t.to_vec()).map_err(|_| corrupt(format!("column {name} is not UTF-8")))
            }
            _ => Err(corrupt(format!("column {name} is not text"))),
        }
    };
    let int = |i: usize, name: &str| -> Result<i64> {
        match row.get_ref(i) {
            Ok(ValueRef::Integer(n)) => Ok(n),
            _ => Err(corrupt(format!("column {name} is not an integer"))),
        }
    };
    let opt_int = |i: usize, name: &str| -> Result<Option<i64>> {
        match row.get_ref(i) {
            Ok(ValueRef::Null) => Ok(None),
            Ok(ValueRef::Integer(n)) => Ok(Some(n)),
            _ => Err(corrupt(format!("column {name} is not an integer"))),
        }
    };
    let count = |i: usize, name: &str| -> Result<u32> {
        u32::try_from(int(i, name)?).map_err(|_| corrupt(format!("column {name} is out of range")))
    };

    let queue = QueueName::new(text(1, "queue")?).map_err(|e| corrupt(format!("column queue: {e}")))?;
    let kind = text(2, "kind")?;
    let payload = Payload::from_stored(text(3, "payload")?);
    let priority = i16::try_from(int(4, "priority")?)
        .ok()
        .and_then(Priority::from_i16)
        .ok_or_else(|| corrupt("column priority is not 0 to 3".into()))?;
    let state_text = text(5, "state")?;
    let state = parse_state(&state_text).ok_or_else(|| corrupt(format!("column state: unknown {state_text:?}")))?;
    let attempts = count(6, "attempts")?;
    let max_attempts = count(7, "max_attempts")?;
    let run_at = from_micros(int(8, "run_at")?);
    let created_at = from_micros(int(9, "created_at")?);
    let finished_at = opt_int(10, "finished_at")?.map(from_micros);
    let lease = match row.get_ref(11) {
        Ok(ValueRef::Null) => None,
        Ok(ValueRef::Blob(b)) => {
            let token = Uuid::from_slice(b).map_err(|_| corrupt("column lease_token is not a UUID".into()))?;
            let worker = match row.get_ref(12) {
                Ok(ValueRef::Text(t)) => String::from_utf8_lossy(t).into_owned(),
                Ok(ValueRef::Null) => String::new(),
                _ => return Err(corrupt("column lease_worker is not text".into())),
            };
            let expires_at =
                opt_int(13, "lease_expires_at")?.ok_or_else(|| corrupt("a lease without lease_expires_at".into()))?;
            Some(Lease { token: LeaseToken(token), worker, expires_at: from_micros(expires_at) })
        }
        _ => return Err(corrupt("column lease_token is not a UUID".into())),
    };
    let errors = decode_errors(&text(14, "errors")?).map_err(|e| corrupt(format!("column errors: {e}")))?;
    let unique_key = match row.get_ref(15) {
        Ok(ValueRef::Null) => None,
        Ok(ValueRef::Text(t)) => Some(String::from_utf8_lossy(t).into_owned()),
        _ => return Err(corrupt("column unique_key is not text".into())),
    };
    let trace = match row.get_ref(16) {
        Ok(ValueRef::Null) => None,
        Ok(ValueRef::Text(t)) => Some(TraceContext::from_stored(String::from_utf8_lossy(t).into_owned())),
        _ => return Err(corrupt("column trace is not text".into())),
    };
    let timeout = opt_int(17, "timeout_ms")?
        .map(|ms| u64::try_from(ms).map(std::time::Duration::from_millis))
        .transpose()
        .map_err(|_| corrupt("column timeout_ms is negative".into()))?;
    let opt_text = |i: usize, name: &str| -> Result<Option<String>> {
        match row.get_ref(i) {
            Ok(ValueRef::Null) => Ok(None),
            Ok(ValueRef::Text(t)) => Ok(Some(String::from_utf8_lossy(t).into_owned())),
            _ => Err(corrupt(format!("column {name} is not text"))),
        }
    };
    let cancel_requested = opt_int(18, "cancel_requested_at")?
        .map(|at| -> Result<CancelRequest> {
            Ok(CancelRequest { at: from_micros(at), reason: opt_text(19, "cancel_reason")?.unwrap_or_default() })
        })
        .transpose()?;
    let progress = opt_text(20, "progress")?;
    let key = opt_text(21, "key")?;
    Ok(Job {
        id,
        queue,
        kind,
        payload,
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
        trace,
        timeout,
        cancel_requested,
        progress,
    })
}

/// One entry of the `errors` JSON array as stored.
#[derive(serde::Deserialize)]
struct StoredError {
    attempt: u32,
    at: i64,
    message: String,
}

fn decode_errors(json: &str) -> std::result::Result<Vec<AttemptError>, serde_json::Error> {
    if json == "[]" {
        return Ok(Vec::new());
    }
    let stored: Vec<StoredError> = serde_json::from_str(json)?;
    Ok(stored
        .into_iter()
        .map(|e| AttemptError { attempt: e.attempt, at: from_micros(e.at), message: e.message })
        .collect())
}

/// The stored form of an id or a token.
pub(crate) fn blob(uuid: &Uuid) -> &[u8; 16] {
    uuid.as_bytes()
}
