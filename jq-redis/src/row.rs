//! Decoding a job hash (an `HGETALL` reply) into a `jq_core::Job`.

use std::collections::HashMap;

use jq_core::clock::from_micros;
use jq_core::{AttemptError, Error, Job, JobId, Lease, LeaseToken, Payload, Priority, QueueName, Result, State};
use serde::Deserialize;
use uuid::Uuid;

/// One entry of the `errors` field, as the scripts write it.
#[derive(Deserialize)]
struct StoredError {
    attempt: u32,
    at: i64,
    message: String,
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
    let lease = match (token, worker, expires) {
        (Some(token), Some(worker), Some(expires)) => Some(Lease {
            token: LeaseToken(Uuid::parse_str(&token).map_err(|_| corrupt(format!("lease token {token:?}")))?),
            worker,
            expires_at: from_micros(int("lease_expires_at", &expires)?),
        }),
        (None, None, None) => None,
        _ => return Err(corrupt("lease fields are incomplete".to_owned())),
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
    })
}
