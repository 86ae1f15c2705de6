//! The `Idempotency-Key` header (draft-ietf-httpapi-idempotency-key-header,
//! revision 09) on the enqueue routes.
//!
//! The key is remembered by the jobs it makes, not in a table of its own:
//! each job's id is derived from the key, the route and the job's place in
//! the request ([`IdempotencyKey::job_id`]), and the store's rule for a resent id
//! (stored once, its id answered) makes a repeat store nothing. A repeat is
//! told from a reuse with another body by reading the jobs stored under
//! those ids and comparing them with the request ([`Expected`]). So the
//! rule holds on every backend with no new storage, and a key lasts
//! exactly as long as the first job it made is stored.

use axum::extract::FromRequestParts;
use axum::http::HeaderName;
use axum::http::request::Parts;
use futures::{StreamExt as _, TryStreamExt as _};
use jq::storage::Storage;
use jq::{JobId, NewJob};
use sha2::{Digest, Sha256};

use super::error::{ApiError, ApiResult};

/// The header's name.
pub(crate) const HEADER: HeaderName = HeaderName::from_static("idempotency-key");

/// The longest key accepted, in bytes once unquoted: room for any UUID,
/// ULID or vendor event id, and a bound on what a caller makes us hash.
pub const MAX_KEY_BYTES: usize = 255;

/// How many of a keyed request's jobs are read back at once: a batch of
/// thousands is not read one round trip after another, nor all at once
/// against a pool of a few connections.
const READS_AT_ONCE: usize = 16;

/// Which route a key was sent to: a key is scoped to its route, so the
/// same key on `/jobs` and `/jobs/batch` names two different requests.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Route {
    /// `POST /api/v1/jobs`.
    One,
    /// `POST /api/v1/jobs/batch`.
    Batch,
}

impl Route {
    fn tag(self) -> &'static [u8] {
        match self {
            Route::One => b"jobs",
            Route::Batch => b"jobs/batch",
        }
    }
}

/// A request's idempotency key, unquoted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The id of the job at `index` of a request with this key on `route`:
    /// a UUID version 8 from SHA-256 over a fixed domain tag, the route,
    /// the key and the index. *Every API server in front of one store
    /// derives the same id with no secret to share; ids are not secrets
    /// (reading a job needs a token), so an unkeyed hash gives nothing
    /// away.*
    pub(crate) fn job_id(&self, route: Route, index: usize) -> JobId {
        let mut hash = Sha256::new();
        hash.update(b"jq idempotency-key v1\0");
        hash.update(route.tag());
        hash.update(b"\0");
        hash.update((self.0.len() as u64).to_be_bytes());
        hash.update(self.0.as_bytes());
        hash.update((index as u64).to_be_bytes());
        let digest = hash.finalize();
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        JobId(uuid::Builder::from_custom_bytes(bytes).into_uuid())
    }

    /// The key as sent (unquoted), for messages.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// The request's `Idempotency-Key`, when it has one; a malformed one is
/// refused (400) before the body is read. Reads the header in place: a
/// request without it costs one header lookup.
pub(crate) struct IdempotencyHeader(pub Option<IdempotencyKey>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyHeader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let mut values = parts.headers.get_all(&HEADER).iter();
        let Some(value) = values.next() else { return Ok(IdempotencyHeader(None)) };
        if values.next().is_some() {
            return Err(malformed("send the header once, with one key"));
        }
        parse(value.as_bytes()).map(|key| IdempotencyHeader(Some(key)))
    }
}

/// 400 naming the header.
fn malformed(why: &str) -> ApiError {
    ApiError::invalid(
        HEADER.as_str(),
        format!(
            "the Idempotency-Key header is malformed: {why}; send a quoted string of 1 to {MAX_KEY_BYTES} printable \
             ASCII characters, e.g. Idempotency-Key: \"8e03978e-40d5-43e8-bc93-6894a57f9324\""
        ),
    )
}

/// The header's value as the draft has it: a Structured Field sf-string
/// (RFC 8941: `"`, printable ASCII with `\"` and `\\` escaped, `"`),
/// surrounded by optional spaces. Parameters are refused: the draft
/// defines none.
pub(crate) fn parse(value: &[u8]) -> ApiResult<IdempotencyKey> {
    let value = value.trim_ascii();
    let Some(inner) = value.strip_prefix(b"\"") else {
        return Err(malformed("it is not a quoted string"));
    };
    let mut key = String::new();
    let mut bytes = inner.iter();
    loop {
        match bytes.next() {
            None => return Err(malformed("the closing quote is missing")),
            Some(b'"') => break,
            Some(b'\\') => match bytes.next() {
                Some(&c @ (b'"' | b'\\')) => key.push(char::from(c)),
                _ => return Err(malformed("a backslash escapes only \" or \\")),
            },
            Some(&c) if (0x20..=0x7e).contains(&c) => key.push(char::from(c)),
            Some(_) => return Err(malformed("only printable ASCII is allowed")),
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(malformed(&format!("it is longer than {MAX_KEY_BYTES} bytes")));
        }
    }
    if bytes.next().is_some() {
        return Err(malformed("there is more after the closing quote"));
    }
    if key.is_empty() {
        return Err(malformed("the key is empty"));
    }
    Ok(IdempotencyKey(key))
}

/// What a request with a key asks of each of its jobs, compared with what
/// is stored under its derived id: every field a stored job keeps as it
/// was enqueued. *`run_at` is not among them: a `delay_ms` counts from
/// each request's arrival, and a retry's backoff moves a stored job's
/// `run_at`; so a repeat that differs only in its timing gets the first
/// answer.*
#[derive(Debug)]
struct Expected {
    id: JobId,
    queue: jq::QueueName,
    kind: String,
    payload: String,
    priority: jq::Priority,
    max_attempts: u32,
    key: Option<String>,
}

impl Expected {
    fn of(job: &NewJob) -> Self {
        Expected {
            id: job.id,
            queue: job.queue.clone(),
            kind: job.kind.clone(),
            payload: job.payload.as_str().to_owned(),
            priority: job.priority,
            max_attempts: job.max_attempts,
            key: job.key.clone(),
        }
    }

    /// The first field in which `stored` differs, if any.
    fn differs(&self, stored: &jq::Job) -> Option<&'static str> {
        if stored.queue != self.queue {
            Some("queue")
        } else if stored.kind != self.kind {
            Some("kind")
        } else if stored.payload.as_str() != self.payload {
            Some("payload")
        } else if stored.priority != self.priority {
            Some("priority")
        } else if stored.max_attempts != self.max_attempts {
            Some("max_attempts")
        } else if stored.key != self.key {
            Some("key")
        } else {
            None
        }
    }
}

/// Stores `jobs` (their ids already derived from `key` on `route`) once,
/// and answers their ids; 422 when the key already made other jobs.
///
/// Reads the key's first job: absent, the jobs are enqueued (a concurrent
/// repeat's enqueue stores nothing twice, by the resent-id rule). Then,
/// stored by this request or an earlier one, every job is read back and
/// compared with the request, and the id after the last is checked absent
/// (an earlier request with more jobs). *Reading back after the enqueue is
/// what makes two concurrent requests with one key and two bodies end with
/// one stored and the other refused, never both answered.*
pub(crate) async fn enqueue<S: Storage>(
    client: &jq::Client<S>,
    key: &IdempotencyKey,
    route: Route,
    jobs: Vec<NewJob>,
) -> ApiResult<Vec<JobId>> {
    let expected: Vec<Expected> = jobs.iter().map(Expected::of).collect();
    let Some(first) = expected.first() else { return Ok(Vec::new()) };
    if find(client, first.id).await?.is_none() {
        super::handlers::store(client, jobs, matches!(route, Route::Batch)).await?;
    }
    // One read per job, at most READS_AT_ONCE in flight: the storage has
    // no read of many ids in one call.
    let after = key.job_id(route, expected.len());
    let wanted: Vec<JobId> = expected.iter().map(|e| e.id).chain([after]).collect();
    let mut found: Vec<Option<jq::Job>> =
        futures::stream::iter(wanted).map(|id| find(client, id)).buffered(READS_AT_ONCE).try_collect().await?;
    let beyond = found.pop().flatten();
    let mut existing = Vec::with_capacity(expected.len());
    let mut mismatch = None;
    for ((index, want), stored) in expected.iter().enumerate().zip(found) {
        match stored {
            Some(stored) => {
                existing.push(stored.id);
                if mismatch.is_none()
                    && let Some(field) = want.differs(&stored)
                {
                    mismatch = Some(format!("its job {index} had another {field}"));
                }
            }
            // Purged since (a key lasts as long as its first job), or
            // never made by the first request: either way not this body.
            None if mismatch.is_none() => mismatch = Some(format!("its job {index} is not stored")),
            None => {}
        }
    }
    if mismatch.is_none() && beyond.is_some() {
        mismatch = Some(format!("it had more than {} jobs", expected.len()));
    }
    match mismatch {
        None => Ok(existing),
        Some(why) => Err(ApiError::key_reused(key.as_str(), &why, existing)),
    }
}

/// The job stored under `id`, if any.
async fn find<S: Storage>(client: &jq::Client<S>, id: JobId) -> ApiResult<Option<jq::Job>> {
    match client.get(id).await {
        Ok(job) => Ok(Some(job)),
        Err(jq::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(ApiError::from_core(e, "")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn field(value: &str) -> Option<String> {
        parse(value.as_bytes()).err().map(|e| e.body().field.clone().unwrap())
    }

    #[test]
    fn the_header_is_a_quoted_string() {
        assert_eq!(parse(br#""abc-123""#).unwrap().as_str(), "abc-123");
        assert_eq!(parse(br#"  "a b"  "#).unwrap().as_str(), "a b");
        assert_eq!(parse(br#""say \"hi\" \\o/""#).unwrap().as_str(), r#"say "hi" \o/"#);
        let longest = format!("\"{}\"", "k".repeat(MAX_KEY_BYTES));
        assert_eq!(parse(longest.as_bytes()).unwrap().as_str().len(), MAX_KEY_BYTES);
        for bad in [
            "abc",
            "\"abc",
            "\"\"",
            "\"a\";p=1",
            "\"a\" \"b\"",
            "\"a\\nb\"",
            "\"caf\u{e9}\"",
            "\"a\tb\"",
            "",
            &format!("\"{}\"", "k".repeat(MAX_KEY_BYTES + 1)),
        ] {
            assert_eq!(field(bad).as_deref(), Some("idempotency-key"), "{bad:?} is refused");
        }
    }

    #[test]
    fn ids_depend_on_key_route_and_index_only() {
        let a = parse(br#""a""#).unwrap();
        let id = a.job_id(Route::One, 0);
        assert_eq!(id, parse(br#""a""#).unwrap().job_id(Route::One, 0));
        assert_eq!(id.0.get_version_num(), 8);
        assert_eq!(id.0.get_variant(), uuid::Variant::RFC4122);
        assert_ne!(id, a.job_id(Route::Batch, 0));
        assert_ne!(id, a.job_id(Route::One, 1));
        assert_ne!(id, parse(br#""b""#).unwrap().job_id(Route::One, 0));
    }
}
