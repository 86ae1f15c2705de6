//! The API's request and response bodies: what a producer in any language
//! sends and reads, and what the OpenAPI document describes.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use jq::{JobId, NewJob, Payload, Priority, State, StateCounts};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};

use super::error::{ApiError, ApiResult};

/// Longest accepted delay: a century, so `run_at` stays a date every
/// backend can store.
const MAX_DELAY_MS: u64 = 100 * 365 * 24 * 3600 * 1000;

/// One job to enqueue: the fields of `NewJob` / `JobBuilder` in Rust, with
/// the same defaults and checks.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    /// Which handler runs it: 1 to 128 bytes, no control character.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]+$",
        example = "send_email"
    )]
    pub kind: String,
    /// Its arguments: any JSON value, at most the backend's payload limit
    /// (1 MiB by default) once serialized; no `\u0000` in a string.
    #[schema(value_type = Value, example = json!({"to": "a@example.com"}))]
    pub payload: Box<RawValue>,
    /// The queue (default `default`): 1 to 128 bytes of `A-Z a-z 0-9 _ - . :`, optionally after a hash tag `{tag}`.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^(\{[A-Za-z0-9_.:-]+\})?[A-Za-z0-9_.:-]*$",
        example = "mail"
    )]
    pub queue: Option<String>,
    /// Its priority (default `normal`); higher priorities are claimed first.
    #[serde(default)]
    pub priority: Option<PriorityName>,
    /// Not claimable before this instant (RFC 3339, from 1970 to 9999).
    /// Give `run_at` or `delay_ms`, not both; neither: claimable at once.
    #[serde(default)]
    pub run_at: Option<DateTime<Utc>>,
    /// Not claimable until this many milliseconds after the enqueue (at
    /// most a century).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 3153600000000_u64)]
    pub delay_ms: Option<u64>,
    /// How many claims it gets in all (default 25); 1 means no retry.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 2147483647)]
    pub max_attempts: Option<u32>,
    /// Deduplicates: while a job of the same queue with this key is not
    /// finished, the enqueue returns that job's id and stores nothing.
    /// 1 to 128 bytes, no control character.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 128, pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]+$")]
    pub unique_key: Option<String>,
    /// Trailing debounce, with `unique_key`: while a job of the key waits
    /// (scheduled or pending), the enqueue gives it this payload and moves
    /// it to run this many milliseconds from now, so it runs once the key
    /// was quiet that long; its id comes back. A running job is never
    /// changed: a new one is stored for after it. No `run_at` or
    /// `delay_ms` with it. 1 ms to 366 days.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 31622400000_u64)]
    pub debounce_ms: Option<u64>,
    /// With `debounce_ms`: the job runs at the latest this many
    /// milliseconds after the key's first enqueue, however many follow.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 31622400000_u64)]
    pub max_delay_ms: Option<u64>,
    /// Unique for a period, with `unique_key` (also leading debounce):
    /// nothing is stored while a job of the key was created less than this
    /// many milliseconds ago, whatever its state, or a live one holds it;
    /// that job's id comes back. 1 ms to 366 days.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 31622400000_u64)]
    pub unique_for_ms: Option<u64>,
    /// Replace, with `unique_key`: while a job of the key waits (scheduled
    /// or pending), it takes this payload and run time instead of a new job
    /// being stored, and its id comes back.
    #[serde(default)]
    pub replace: Option<bool>,
    /// The job's key (a tenant, an account, a host): the jobs of one key
    /// share the key's limits, and claims take a queue's keys in turn.
    /// 1 to 255 bytes, no NUL.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 255, pattern = "^[^\\u0000]+$")]
    pub key: Option<String>,
    /// The job's id, chosen by the producer (a UUID; a UUIDv7 keeps ids in
    /// creation order). A request resent with the same id stores nothing
    /// twice: the job already stored is left as it is and its id returned.
    #[serde(default)]
    pub id: Option<uuid::Uuid>,
}

impl EnqueueRequest {
    /// The job, checked as `JobBuilder::build_at(now)` checks it; errors
    /// name the field, after `prefix` (`jobs[3].` in a batch).
    pub(crate) fn into_job(self, now: DateTime<Utc>, prefix: &str) -> ApiResult<NewJob> {
        let field = |name: &str| format!("{prefix}{name}");
        // The parser has checked the JSON already: no second parse (the
        // check for `\u0000` comes with `check_payload` below).
        let payload = Payload::from_stored(Box::<str>::from(self.payload).into_string());
        let mut builder = NewJob::builder(self.kind, payload);
        if let Some(queue) = self.queue {
            builder = builder.queue(queue);
        }
        if let Some(priority) = self.priority {
            builder = builder.priority(priority.into());
        }
        match (self.run_at, self.delay_ms) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid(field("delay_ms"), "give run_at or delay_ms, not both"));
            }
            (Some(at), None) => {
                let earliest = DateTime::<Utc>::UNIX_EPOCH;
                let latest = chrono::NaiveDate::from_ymd_opt(9999, 12, 31)
                    .and_then(|d| d.and_hms_opt(23, 59, 59))
                    .map(|t| t.and_utc())
                    .unwrap_or(earliest);
                if at < earliest || at > latest {
                    return Err(ApiError::invalid(field("run_at"), "give an instant from 1970 to 9999"));
                }
                builder = builder.run_at(at);
            }
            (None, Some(ms)) if ms > MAX_DELAY_MS => {
                return Err(ApiError::invalid(
                    field("delay_ms"),
                    format!("{ms} ms: at most {MAX_DELAY_MS} (a century)"),
                ));
            }
            (None, Some(ms)) => builder = builder.delay(Duration::from_millis(ms)),
            (None, None) => {}
        }
        if let Some(n) = self.max_attempts {
            // PostgreSQL's column is a 32-bit integer: refused alike everywhere.
            if i32::try_from(n).is_err() {
                return Err(ApiError::invalid(field("max_attempts"), format!("{n}: at most {}", i32::MAX)));
            }
            builder = builder.max_attempts(n);
        }
        if let Some(key) = self.unique_key {
            builder = builder.unique_key(key);
        }
        if let Some(key) = self.key {
            builder = builder.key(key);
        }
        let rules = [self.debounce_ms.is_some(), self.unique_for_ms.is_some(), self.replace == Some(true)];
        if rules.iter().filter(|r| **r).count() > 1 {
            return Err(ApiError::invalid(field("unique_key"), "give one of debounce_ms, unique_for_ms and replace"));
        }
        if let Some(ms) = self.debounce_ms {
            builder = builder.debounce(Duration::from_millis(ms));
        }
        if let Some(ms) = self.max_delay_ms {
            builder = builder.max_delay(Duration::from_millis(ms));
        }
        if let Some(ms) = self.unique_for_ms {
            builder = builder.unique_for(Duration::from_millis(ms));
        }
        if self.replace == Some(true) {
            builder = builder.replace();
        }
        if let Some(id) = self.id {
            builder = builder.id(JobId(id));
        }
        let job = builder.build_at(now).map_err(|e| ApiError::from_core(e, prefix))?;
        // Every text against what every backend stores (the size limit is
        // the backend's, checked when it stores the batch).
        job.check_payload(usize::MAX).map_err(|e| ApiError::from_core(e, prefix))?;
        Ok(job)
    }
}

/// Jobs to enqueue together: every one or none.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnqueueBatchRequest {
    /// The jobs, stored in one step; ids come back in this order.
    #[schema(value_type = Vec<EnqueueRequest>)]
    pub jobs: Vec<Object<EnqueueRequest>>,
}

/// A `T` read from a JSON object only: serde's derived structs also take
/// an array of their fields in order, which the API's schema does not
/// describe and a producer sending one almost surely meant otherwise.
#[derive(Debug)]
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Fields<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_map(Fields(std::marker::PhantomData)).map(Object)
    }
}

/// A signal for a durable job (`jq::Client::signal`): kept until the job's
/// wait of that name takes it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// The signal's name, as the handler's `wait_for` names it: 1 to 128
    /// bytes, no control character.
    #[schema(min_length = 1, max_length = 128, example = "approved")]
    pub name: String,
    /// Its payload: any JSON value (default null), at most 64 KiB
    /// serialized; no `\u0000` in a string.
    #[serde(default)]
    #[schema(value_type = Value, example = json!({"by": "ops"}))]
    pub payload: Option<Box<RawValue>>,
}

/// The id of an enqueued job: the new job's, or (a resent id, a unique key
/// a live job holds) the id of the job already stored.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EnqueueResponse {
    /// The job's id.
    pub id: uuid::Uuid,
}

/// The ids of a batch, one per job, in the order sent.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EnqueueBatchResponse {
    /// The jobs' ids.
    pub ids: Vec<uuid::Uuid>,
}

/// A job's priority.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PriorityName {
    /// Claimed last.
    Low,
    /// The default.
    Normal,
    /// Before normal.
    High,
    /// First.
    Critical,
}

impl From<PriorityName> for Priority {
    fn from(p: PriorityName) -> Self {
        match p {
            PriorityName::Low => Priority::Low,
            PriorityName::Normal => Priority::Normal,
            PriorityName::High => Priority::High,
            PriorityName::Critical => Priority::Critical,
        }
    }
}

impl From<Priority> for PriorityName {
    fn from(p: Priority) -> Self {
        match p {
            Priority::Low => PriorityName::Low,
            Priority::Normal => PriorityName::Normal,
            Priority::High => PriorityName::High,
            Priority::Critical => PriorityName::Critical,
        }
    }
}

/// A job's state; `completed`, `dead` and `cancelled` are final. Its
/// names are jq's ([`State::ALL`]), so the API and its schema gain a state
/// with jq, never lag behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StateName(pub State);

impl From<State> for StateName {
    fn from(s: State) -> Self {
        StateName(s)
    }
}

impl utoipa::PartialSchema for StateName {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some("A job's state; `completed`, `dead` and `cancelled` are final."))
            .enum_values(Some(State::ALL.map(State::as_str)))
            .into()
    }
}

impl ToSchema for StateName {}

/// A stored job.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct JobView {
    /// Its id.
    pub id: uuid::Uuid,
    /// Its queue.
    pub queue: String,
    /// Which handler runs it.
    pub kind: String,
    /// Its arguments.
    #[schema(value_type = Value)]
    pub payload: Box<RawValue>,
    /// Its priority.
    pub priority: PriorityName,
    /// Its state.
    pub state: StateName,
    /// How many times it has been claimed.
    #[schema(minimum = 0)]
    pub attempts: u32,
    /// How many claims it gets in all.
    #[schema(minimum = 1)]
    pub max_attempts: u32,
    /// Not claimable before this instant.
    pub run_at: DateTime<Utc>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When it reached a final state.
    pub finished_at: Option<DateTime<Utc>>,
    /// The worker holding it, while running.
    pub lease: Option<LeaseView>,
    /// Every failed attempt, oldest first.
    pub errors: Vec<AttemptErrorView>,
    /// Its unique key, if any.
    pub unique_key: Option<String>,
    /// Its key, if any.
    pub key: Option<String>,
    /// What its handler stored as its result (`JobContext::set_result`), once
    /// it is Completed; absent when it stored none, or on a backend that does
    /// not keep results (one without the workflows capability).
    #[schema(value_type = Option<Value>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Box<RawValue>>,
}

/// Who holds a running job, and until when unless it heartbeats.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LeaseView {
    /// The worker's name.
    pub worker: String,
    /// When the lease runs out.
    pub expires_at: DateTime<Utc>,
}

/// One failed attempt.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AttemptErrorView {
    /// The attempt that failed (1 for the first claim).
    pub attempt: u32,
    /// When.
    pub at: DateTime<Utc>,
    /// What went wrong.
    pub message: String,
}

impl TryFrom<jq::Job> for JobView {
    type Error = jq::Error;

    /// Fails (`Corrupt`) only when the stored payload is not JSON.
    fn try_from(job: jq::Job) -> Result<Self, jq::Error> {
        let payload = RawValue::from_string(job.payload.as_str().to_owned())
            .map_err(|e| jq::Error::Corrupt { id: Some(job.id), reason: format!("the payload is not JSON: {e}") })?;
        Ok(JobView {
            id: job.id.0,
            queue: job.queue.as_str().to_owned(),
            kind: job.kind,
            payload,
            priority: job.priority.into(),
            state: job.state.into(),
            attempts: job.attempts,
            max_attempts: job.max_attempts,
            run_at: job.run_at,
            created_at: job.created_at,
            finished_at: job.finished_at,
            lease: job.lease.map(|l| LeaseView { worker: l.worker, expires_at: l.expires_at }),
            errors: job
                .errors
                .into_iter()
                .map(|e| AttemptErrorView { attempt: e.attempt, at: e.at, message: e.message })
                .collect(),
            unique_key: job.unique_key,
            key: job.key,
            result: None,
        })
    }
}

/// What a wait ended with: the job, and whether it finished in time.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WaitResponse {
    /// True when the job is in a final state (`completed`, `dead`,
    /// `cancelled`); false when the wait timed out first.
    pub finished: bool,
    /// The job as last read.
    pub job: JobView,
}

/// Job counts per queue and state.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StatsResponse {
    /// Per queue name.
    pub queues: BTreeMap<String, StateCountsView>,
}

/// One queue's job counts: one per state of [`State::ALL`], by its name.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StateCountsView(pub StateCounts);

impl utoipa::PartialSchema for StateCountsView {
    fn schema() -> RefOr<Schema> {
        let mut object = ObjectBuilder::new().schema_type(Type::Object).description(Some("One queue's job counts."));
        for state in State::ALL {
            let count = ObjectBuilder::new()
                .schema_type(Type::Integer)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                .description(Some(format!("The number of `{state}` jobs.")))
                .minimum(Some(0));
            object = object.property(state.as_str(), count).required(state.as_str());
        }
        object.into()
    }
}

impl ToSchema for StateCountsView {}

impl From<jq::Stats> for StatsResponse {
    fn from(stats: jq::Stats) -> Self {
        let queues = stats.queues.into_iter().map(|(queue, counts)| (queue, StateCountsView(counts))).collect();
        StatsResponse { queues }
    }
}
