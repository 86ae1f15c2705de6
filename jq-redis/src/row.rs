//! Decoding a stored job (the field/value list `job_fields` in
//! `lua/common/base.lua` makes, or the fields `claim.lua` returns) into a
//! `jq_core::Job`.

use jq_core::storage::LeaseToken;
use jq_core::storage::from_micros;
use jq_core::{
    AttemptError, CancelRequest, Error, Job, JobId, Lease, Payload, Priority, QueueName, Result, State, TraceContext,
};
use serde::Deserialize;
use uuid::Uuid;

/// One entry of the `errors` field, as the scripts write it.
#[derive(Deserialize)]
struct StoredError {
    attempt: u32,
    at: i64,
    message: String,
}

/// A job's fields as stored, each `None` when absent.
#[derive(Default)]
struct Stored {
    id: Option<String>,
    queue: Option<String>,
    kind: Option<String>,
    payload: Option<String>,
    priority: Option<String>,
    state: Option<String>,
    max_attempts: Option<String>,
    run_at: Option<String>,
    created_at: Option<String>,
    attempts: Option<String>,
    errors: Option<String>,
    finished_at: Option<String>,
    lease_token: Option<String>,
    lease_worker: Option<String>,
    lease_expires_at: Option<String>,
    unique_key: Option<String>,
    trace: Option<String>,
    timeout_ms: Option<String>,
    cancel_at: Option<String>,
    cancel_reason: Option<String>,
    progress: Option<String>,
    key: Option<String>,
}

/// Decodes one job of a `claim.lua` reply: kind, payload, priority,
/// max_attempts, created_at, trace, attempts, run_at, unique_key, errors,
/// timeout_ms, cancel_at, cancel_reason, progress (`None` when absent),
/// then the id and the queue's 1-based index into
/// `queues`, and a keyed job's key. The job is Running under `lease`, which the claim sent, so
/// none of it is read back or parsed again per job.
pub(crate) fn decode_claimed(row: Vec<Option<String>>, queues: &[&str], lease: &Lease) -> Result<Job> {
    let mut values = row.into_iter();
    let mut next = || values.next().flatten();
    let mut stored = Stored {
        kind: next(),
        payload: next(),
        priority: next(),
        max_attempts: next(),
        created_at: next(),
        trace: next(),
        attempts: next(),
        run_at: next(),
        unique_key: next(),
        errors: next(),
        timeout_ms: next(),
        cancel_at: next(),
        cancel_reason: next(),
        progress: next(),
        ..Stored::default()
    };
    let id = next();
    let queue = next().and_then(|i| i.parse::<usize>().ok()).and_then(|i| queues.get(i.checked_sub(1)?));
    let (Some(id), Some(queue)) = (id, queue) else {
        return Err(Error::Corrupt { id: None, reason: "claim returned a job without id or queue".to_owned() });
    };
    stored.id = Some(id);
    stored.queue = Some((*queue).to_owned());
    // a keyed job's row has its key next, then "k" (claim.lua)
    stored.key = next();
    stored.state = Some("running".to_owned());
    build(stored, Some(lease))
}

/// Decodes a flat `field, value, field, value, ...` reply (`job_fields`)
/// of a job of `queue`; fields jq does not know are ignored.
pub(crate) fn decode(flat: Vec<String>, queue: &QueueName) -> Result<Job> {
    let mut stored = Stored { queue: Some(queue.as_str().to_owned()), ..Stored::default() };
    let mut it = flat.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        let slot = match k.as_str() {
            "id" => &mut stored.id,
            "kind" => &mut stored.kind,
            "payload" => &mut stored.payload,
            "priority" => &mut stored.priority,
            "state" => &mut stored.state,
            "max_attempts" => &mut stored.max_attempts,
            "run_at" => &mut stored.run_at,
            "created_at" => &mut stored.created_at,
            "attempts" => &mut stored.attempts,
            "errors" => &mut stored.errors,
            "finished_at" => &mut stored.finished_at,
            "lease_token" => &mut stored.lease_token,
            "lease_worker" => &mut stored.lease_worker,
            "lease_expires_at" => &mut stored.lease_expires_at,
            "unique_key" => &mut stored.unique_key,
            "trace" => &mut stored.trace,
            "timeout_ms" => &mut stored.timeout_ms,
            "cancel_at" => &mut stored.cancel_at,
            "cancel_reason" => &mut stored.cancel_reason,
            "progress" => &mut stored.progress,
            "key" => &mut stored.key,
            _ => continue,
        };
        *slot = Some(v);
    }
    build(stored, None)
}

/// The job `stored` holds; `claimed` is its lease when a claim just made
/// it Running (the stored lease fields are not read then).
fn build(stored: Stored, claimed: Option<&Lease>) -> Result<Job> {
    let id = stored.id.as_deref().and_then(|s| Uuid::parse_str(s).ok()).map(JobId);
    let corrupt = |reason: String| Error::Corrupt { id, reason };
    let Some(id) = id else {
        return Err(corrupt(format!("field id is missing or not a UUID ({:?})", stored.id)));
    };
    let take = |name: &str, v: Option<String>| v.ok_or_else(|| corrupt(format!("field {name} is missing")));
    let queue = take("queue", stored.queue)?;
    let kind = take("kind", stored.kind)?;
    let payload = take("payload", stored.payload)?;
    let priority = take("priority", stored.priority)?;
    let state = take("state", stored.state)?;
    let max_attempts = take("max_attempts", stored.max_attempts)?;
    let run_at = take("run_at", stored.run_at)?;
    let created_at = take("created_at", stored.created_at)?;
    // absent until the first claim (enqueue writes as few fields as it can)
    let attempts = stored.attempts.unwrap_or_else(|| "0".to_owned());
    let errors = stored.errors.unwrap_or_default();
    let finished_at = stored.finished_at;
    let unique_key = stored.unique_key.filter(|k| !k.is_empty());
    let trace = stored.trace.filter(|t| !t.is_empty()).map(TraceContext::from_stored);

    let queue = QueueName::new(queue).map_err(|e| corrupt(e.to_string()))?;
    let priority = priority
        .parse::<i16>()
        .ok()
        .and_then(Priority::from_i16)
        .ok_or_else(|| corrupt(format!("priority {priority:?} is not 0..=3")))?;
    let state: State = state.parse().map_err(|_| corrupt(format!("state {state:?} is unknown")))?;
    let int = |name: &str, v: &str| v.parse::<i64>().map_err(|_| corrupt(format!("{name} {v:?} is not an integer")));
    let count = |name: &str, v: &str| v.parse::<u32>().map_err(|_| corrupt(format!("{name} {v:?} is not a count")));
    let attempts = count("attempts", &attempts)?;
    let max_attempts = count("max_attempts", &max_attempts)?;
    let run_at = from_micros(int("run_at", &run_at)?);
    let created_at = from_micros(int("created_at", &created_at)?);
    let finished_at = finished_at.map(|v| int("finished_at", &v).map(from_micros)).transpose()?;
    // The lease fields mean something only while Running: the scripts that
    // end a lease leave them behind (see settle.lua).
    let lease = match (state, stored.lease_token, stored.lease_worker, stored.lease_expires_at) {
        (State::Running, ..) if claimed.is_some() => claimed.cloned(),
        (State::Running, Some(token), Some(worker), Some(expires)) => Some(Lease {
            token: LeaseToken(Uuid::parse_str(&token).map_err(|_| corrupt(format!("lease token {token:?}")))?),
            worker,
            expires_at: from_micros(int("lease_expires_at", &expires)?),
        }),
        (State::Running, ..) => return Err(corrupt("a running job without complete lease fields".to_owned())),
        _ => None,
    };
    let errors = if errors.is_empty() {
        Vec::new()
    } else {
        serde_json::from_str::<Vec<StoredError>>(&errors)
            .map_err(|e| corrupt(format!("errors are not a JSON list: {e}")))?
            .into_iter()
            .map(|e| AttemptError { attempt: e.attempt, at: from_micros(e.at), message: e.message })
            .collect()
    };
    let timeout = stored
        .timeout_ms
        .map(|v| v.parse::<u64>().map(std::time::Duration::from_millis))
        .transpose()
        .map_err(|_| corrupt("timeout_ms is not a count of milliseconds".to_owned()))?;
    let cancel_requested = stored
        .cancel_at
        .map(|at| int("cancel_at", &at))
        .transpose()?
        .map(|at| CancelRequest { at: from_micros(at), reason: stored.cancel_reason.unwrap_or_default() });
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
        key: stored.key.filter(|k| !k.is_empty()),
        trace,
        timeout,
        cancel_requested,
        progress: stored.progress,
    })
}
