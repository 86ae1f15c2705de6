//! Decoding a job hash (an `HGETALL` reply) into a `jq_core::Job`.

use std::collections::HashMap;

use jq_core::clock::from_micros;
use jq_core::{
    AttemptError, Error, Job, JobId, Lease, LeaseToken, Payload, Priority, QueueName, Result, State, TraceContext,
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

/// The fields `claim.lua` returns per job, in its order; then id and the
/// queue's 1-based index.
const CLAIMED: [&str; 10] = [
    "kind",
    "payload",
    "priority",
    "max_attempts",
    "run_at",
    "created_at",
    "attempts",
    "errors",
    "unique_key",
    "trace",
];

/// Decodes one job of a `claim.lua` reply: [`CLAIMED`] values (nil when
/// absent), the id and the queue index into `queues`; state, lease token,
/// worker and expiry are what the claim sent.
pub(crate) fn decode_claimed(
    row: Vec<Option<String>>,
    queues: &[&str],
    token: String,
    worker: &str,
    expires: &str,
) -> Result<Job> {
    let mut values = row.into_iter();
    let mut flat: Vec<String> = Vec::with_capacity(2 * (CLAIMED.len() + 6));
    for name in CLAIMED {
        if let Some(v) = values.next().flatten() {
            flat.push(name.to_owned());
            flat.push(v);
        }
    }
    let id = values.next().flatten();
    let queue =
        values.next().flatten().and_then(|i| i.parse::<usize>().ok()).and_then(|i| queues.get(i.checked_sub(1)?));
    let (Some(id), Some(queue)) = (id, queue) else {
        return Err(Error::Corrupt { id: None, reason: "claim returned a job without id or queue".to_owned() });
    };
    for (name, v) in [
        ("id", id),
        ("queue", (*queue).to_owned()),
        ("state", "running".to_owned()),
        ("lease_token", token),
        ("lease_worker", worker.to_owned()),
        ("lease_expires_at", expires.to_owned()),
    ] {
        flat.push(name.to_owned());
        flat.push(v);
    }
    decode(flat)
}

/// Decodes a flat `field, value, field, value, ...` reply.
pub(crate) fn decode(flat: Vec<String>) -> Result<Job> {
    let mut fields: HashMap<String, String> = HashMap::with_capacity(flat.len() / 2);
    let mut it = flat.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        fields.insert(k, v);
    }
    let id = fields.get("id").and_then(|s| Uuid::parse_str(s).ok()).map(JobId);
    let corrupt = |reason: String| Error::Corrupt { id, reason };
    let Some(id) = id else {
        return Err(corrupt(format!("field id is missing or not a UUID ({:?})", fields.get("id"))));
    };
    let mut take = |name: &str| fields.remove(name).ok_or_else(|| corrupt(format!("field {name} is missing")));
    let queue = take("queue")?;
    let kind = take("kind")?;
    let payload = take("payload")?;
    let priority = take("priority")?;
    let state = take("state")?;
    let max_attempts = take("max_attempts")?;
    let run_at = take("run_at")?;
    let created_at = take("created_at")?;
    // absent until the first claim (enqueue writes as few fields as it can)
    let attempts = fields.remove("attempts").unwrap_or_else(|| "0".to_owned());
    let errors = fields.remove("errors").unwrap_or_default();
    let finished_at = fields.remove("finished_at");
    let token = fields.remove("lease_token");
    let worker = fields.remove("lease_worker");
    let expires = fields.remove("lease_expires_at");
    let unique_key = fields.remove("unique_key").filter(|k| !k.is_empty());
    let trace = fields.remove("trace").filter(|t| !t.is_empty()).map(TraceContext::from_stored);

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
    // end a lease leave them behind (see complete.lua).
    let lease = match (state, token, worker, expires) {
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
        trace,
    })
}
