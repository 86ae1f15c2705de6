//! A job's stored fields read and written around the scripts, packed as
//! [`crate::schema`] describes. jq itself never goes through here: this is
//! for an operator repairing a job by hand and for tests that corrupt one
//! on purpose (a corrupt job does not decode, so `get` cannot show it).

use jq_core::JobId;
use redis::aio::ConnectionLike;

use crate::schema::{Keys, id_hex};

/// The fields of a job's value in the `jobs` hash, in their packed order.
pub const BODY_FIELDS: [&str; 6] = ["kind", "payload", "priority", "max_attempts", "created_at", "trace"];

/// The fields of a job's value in the `states` hash, in their packed order.
pub const STATE_FIELDS: [&str; 8] =
    ["state", "attempts", "run_at", "unique_key", "lease_expires_at", "lease_token", "lease_worker", "finished_at"];

/// Sets one stored field (a name of [`BODY_FIELDS`], [`STATE_FIELDS`], or
/// `errors`) of job `id` of `queue` to the bytes `value`, as they are: a
/// value holding a NUL shifts the fields after it, which is what a test of
/// unsplittable jobs wants. An unknown field or a job that is not stored
/// is an error of kind `Client` saying so.
pub async fn set_field(
    conn: &mut impl ConnectionLike,
    keys: &Keys,
    queue: &str,
    id: JobId,
    field: &str,
    value: &[u8],
) -> redis::RedisResult<()> {
    let hex = id_hex(id);
    if field == "errors" {
        return redis::cmd("HSET").arg(keys.errors(queue)).arg(&hex).arg(value).query_async(conn).await;
    }
    let (key, at) = match (BODY_FIELDS.iter().position(|f| *f == field), STATE_FIELDS.iter().position(|f| *f == field))
    {
        (Some(at), _) => (keys.jobs(queue), at),
        (None, Some(at)) => (keys.states(queue), at),
        (None, None) => return Err(invalid("no such stored field", field.to_owned())),
    };
    let packed: Option<Vec<u8>> = redis::cmd("HGET").arg(&key).arg(&hex).query_async(conn).await?;
    let packed = packed.ok_or_else(|| invalid("no such job", hex.clone()))?;
    let mut fields: Vec<&[u8]> = packed.split(|b| *b == 0).collect();
    let slot = fields.get_mut(at).ok_or_else(|| invalid("stored value has too few fields", hex.clone()))?;
    *slot = value;
    redis::cmd("HSET").arg(&key).arg(&hex).arg(fields.join(&0u8)).query_async(conn).await
}

/// The stored state and the JSON error history of job `id` of `queue`,
/// `""` for what is not stored.
pub async fn state_and_errors(
    conn: &mut impl ConnectionLike,
    keys: &Keys,
    queue: &str,
    id: JobId,
) -> redis::RedisResult<(String, String)> {
    let hex = id_hex(id);
    let (state, errors): (Option<String>, Option<String>) = redis::pipe()
        .cmd("HGET")
        .arg(keys.states(queue))
        .arg(&hex)
        .cmd("HGET")
        .arg(keys.errors(queue))
        .arg(&hex)
        .query_async(conn)
        .await?;
    let state = state.as_deref().and_then(|s| s.split('\0').next()).unwrap_or_default().to_owned();
    Ok((state, errors.unwrap_or_default()))
}

fn invalid(what: &'static str, detail: String) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Client, what, detail))
}
