//! The job: its identity, state, priority and the builder used to enqueue it.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::clock::{Timestamp, truncate_micros};
use crate::error::{Error, Result};
use crate::id::{JobId, LeaseToken};
use crate::state::State;
use crate::trace::TraceContext;

/// Default number of claims a job gets before it goes to Dead
/// (Sidekiq and River use 25 as well).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 25;
/// Default queue of jobs whose type does not name one.
pub const DEFAULT_QUEUE: &str = "default";
/// Default payload size limit of a backend, in bytes of serialized JSON.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
/// Longest accepted queue name, kind and unique key, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// Longest accepted job key ([`JobBuilder::key`]), in bytes: keys are
/// often outside identifiers (a tenant, an account, a host name), so they
/// get more room than names.
pub const MAX_KEY_BYTES: usize = 255;

/// How urgent a job is. Claims take higher priorities first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Stored as 0.
    Low = 0,
    /// Stored as 1; the default.
    #[default]
    Normal = 1,
    /// Stored as 2.
    High = 2,
    /// Stored as 3.
    Critical = 3,
}

impl Priority {
    /// Every priority, lowest first.
    pub const ALL: [Priority; 4] = [Priority::Low, Priority::Normal, Priority::High, Priority::Critical];

    /// The stored integer.
    pub fn as_i16(self) -> i16 {
        self as i16
    }

    /// The priority stored as `n`, or `None` for an out-of-range value.
    pub fn from_i16(n: i16) -> Option<Self> {
        Self::ALL.get(usize::try_from(n).ok()?).copied()
    }

    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
            Priority::Critical => "critical",
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Priority {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| Error::invalid("priority", format!("{s:?}: use low, normal, high or critical")))
    }
}

/// A validated queue name: 1 to 128 bytes of `A-Z a-z 0-9 _ - . :`,
/// optionally after a *hash tag* `{tag}` (the tag 1 or more of those
/// characters). Queues that share a hash tag share a Redis Cluster hash
/// slot, so a workflow may span them there (docs/CONTRACT.md, "Workflows");
/// elsewhere the tag is just part of the name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct QueueName(String);

/// A byte a queue name may hold outside its hash tag's braces.
fn plain_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':')
}

/// True for 1 to 128 bytes of `A-Z a-z 0-9 _ - . :` with no brace: the
/// rule of role and schedule names (a queue name may add a hash tag).
pub(crate) fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_BYTES && name.bytes().all(plain_name_byte)
}

/// `name` without its leading hash tag's braces (`{tag}rest` -> `tagrest`),
/// or `name` itself; a tag that is empty or unclosed leaves a brace, which
/// the check refuses.
fn untagged(name: &str) -> std::borrow::Cow<'_, str> {
    match name.strip_prefix('{').and_then(|rest| rest.split_once('}')) {
        Some((tag, rest)) if !tag.is_empty() => std::borrow::Cow::Owned(format!("{tag}{rest}")),
        _ => std::borrow::Cow::Borrowed(name),
    }
}

impl QueueName {
    /// Checks `name` and wraps it.
    pub fn new(name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        let reason = if name.is_empty() {
            Some("it is empty")
        } else if name.len() > MAX_NAME_BYTES {
            Some("it is longer than 128 bytes")
        } else if !untagged(&name).bytes().all(plain_name_byte) {
            Some("it has a character outside A-Z a-z 0-9 _ - . : (or braces other than one leading {tag})")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(Error::InvalidQueue { name, reason }),
            None => Ok(QueueName(name)),
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for QueueName {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        QueueName::new(s)
    }
}

impl<'de> Deserialize<'de> for QueueName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        QueueName::new(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// A job's payload: JSON text.
///
/// Payloads made by jq are checked to be JSON; payloads read back from
/// storage are not re-parsed (the handler parses them once), so a payload
/// corrupted in storage surfaces as a deserialization failure of the
/// handler, which sends the job to Dead with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payload(String);

impl Payload {
    /// Serializes `value` to JSON.
    /// [`Error::InvalidPayload`] when serde fails, or when a string holds
    /// a NUL character, which PostgreSQL's `jsonb` cannot store (see
    /// "Text from outside" in the repository's `docs/CONTRACT.md`).
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Result<Self> {
        let text = serde_json::to_string(value).map_err(|e| Error::InvalidPayload(e.to_string()))?;
        crate::text::check_payload_text(&text)?;
        Ok(Payload(text))
    }

    /// Checks that `text` is JSON without the escape `\u0000` (see "Text
    /// from outside" in the repository's `docs/CONTRACT.md`) and wraps it.
    pub fn from_json(text: impl Into<String>) -> Result<Self> {
        let text = text.into();
        serde_json::from_str::<serde::de::IgnoredAny>(&text).map_err(|e| Error::InvalidPayload(e.to_string()))?;
        crate::text::check_payload_text(&text)?;
        Ok(Payload(text))
    }

    /// Wraps text read back from storage without checking it.
    pub fn from_stored(text: String) -> Self {
        Payload(text)
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Size of the JSON text in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True for an empty text (never the case for a payload made by jq).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Deserializes the payload into `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> std::result::Result<T, serde_json::Error> {
        serde_json::from_str(&self.0)
    }
}

/// A claim's hold on a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The claim's token; every later state change must present it.
    pub token: LeaseToken,
    /// Who claimed it (a worker's name, for operators; not used for fencing).
    pub worker: String,
    /// When the lease runs out unless a heartbeat extends it.
    pub expires_at: Timestamp,
}

/// One failed attempt of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptError {
    /// The attempt number that failed (1 for the first claim).
    pub attempt: u32,
    /// When the failure was recorded.
    pub at: Timestamp,
    /// What went wrong.
    pub message: String,
}

/// A stored job, as read back from a backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// Its id.
    pub id: JobId,
    /// The queue it waits in.
    pub queue: QueueName,
    /// Which handler runs it.
    pub kind: String,
    /// Its arguments, JSON.
    pub payload: Payload,
    /// Its priority.
    pub priority: Priority,
    /// Its state.
    pub state: State,
    /// How many times it has been claimed (a release gives one back).
    pub attempts: u32,
    /// How many claims it is allowed in all.
    pub max_attempts: u32,
    /// Not claimable before this instant.
    pub run_at: Timestamp,
    /// When it was enqueued.
    pub created_at: Timestamp,
    /// When it reached a terminal state.
    pub finished_at: Option<Timestamp>,
    /// The current lease, while Running.
    pub lease: Option<Lease>,
    /// Every failure, oldest first.
    pub errors: Vec<AttemptError>,
    /// Its uniqueness key, if any.
    pub unique_key: Option<String>,
    /// Its key, if any: the per-key limits and the fair rotation between
    /// keys apply to it ([`JobBuilder::key`]).
    pub key: Option<String>,
    /// The trace context of the span that enqueued it; every run's span
    /// links to it.
    pub trace: Option<TraceContext>,
    /// How long one attempt may run before the pool stops it (`None`: the
    /// kind's or the pool's limit); see [`JobBuilder::timeout`].
    pub timeout: Option<Duration>,
    /// A stored request to stop the job while it runs
    /// ([`CancelStorage::request_cancel`](crate::storage::CancelStorage::request_cancel)).
    pub cancel_requested: Option<CancelRequest>,
    /// The latest progress its handler reported (JSON text), kept after it
    /// finishes ([`JobContext::progress`](crate::JobContext::progress)).
    pub progress: Option<String>,
}

/// A request to cancel a running job, stored on the job until it ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelRequest {
    /// When it was first asked for (a resend keeps the first instant).
    pub at: Timestamp,
    /// Why, as the operator said it (may be empty).
    pub reason: String,
}

impl Job {
    /// The lease token of a claimed job.
    pub fn token(&self) -> Option<LeaseToken> {
        self.lease.as_ref().map(|l| l.token)
    }

    /// A reference to the current lease, for heartbeats and settlements.
    pub fn lease_ref(&self) -> Option<LeaseRef> {
        self.token().map(|token| LeaseRef { id: self.id, token })
    }
}

/// A job id with the token of the claim that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaseRef {
    /// The job.
    pub id: JobId,
    /// The claim's token.
    pub token: LeaseToken,
}

/// A job to be enqueued. Made by [`NewJob::builder`] or [`NewJob::typed`],
/// which check every field; backends check the payload size against their
/// own limit with [`NewJob::check_payload`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewJob {
    /// Its id, made on the client.
    pub id: JobId,
    /// The queue.
    pub queue: QueueName,
    /// The handler's kind name.
    pub kind: String,
    /// The arguments.
    pub payload: Payload,
    /// The priority.
    pub priority: Priority,
    /// When it becomes claimable; `None` means at enqueue time.
    pub run_at: Option<Timestamp>,
    /// How many claims it is allowed; at least 1.
    pub max_attempts: u32,
    /// Deduplicates against live (non-terminal) jobs of the same queue.
    pub unique_key: Option<String>,
    /// The key whose limits and place in the rotation it takes
    /// ([`JobBuilder::key`]); only backends with
    /// [`Capability::Keys`](crate::storage::Capability::Keys) store one.
    pub key: Option<String>,
    /// The trace context of the span that enqueued it (captured by
    /// [`JobBuilder::build_at`] with the `opentelemetry` feature).
    pub trace: Option<TraceContext>,
    /// How long one attempt may run; see [`JobBuilder::timeout`].
    pub timeout: Option<Duration>,
}

impl NewJob {
    /// [`NewJob::timeout`] as the whole milliseconds every backend stores
    /// (`timeout_ms`); [`check_timeout`] bounds it far below `i64::MAX`.
    pub fn timeout_ms(&self) -> Option<i64> {
        self.timeout.map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX))
    }

    /// The job as a store holds it once enqueued at `now`: Pending when it
    /// is due, else Scheduled; no attempt, lease or error yet. For backends
    /// that keep `Job` values in memory.
    pub fn stored_at(self, now: Timestamp) -> Job {
        let run_at = self.run_at.unwrap_or(now);
        Job {
            id: self.id,
            queue: self.queue,
            kind: self.kind,
            payload: self.payload,
            priority: self.priority,
            state: if run_at <= now { State::Pending } else { State::Scheduled },
            attempts: 0,
            max_attempts: self.max_attempts,
            run_at,
            created_at: now,
            finished_at: None,
            lease: None,
            errors: Vec::new(),
            unique_key: self.unique_key,
            key: self.key,
            trace: self.trace,
            timeout: self.timeout,
            cancel_requested: None,
            progress: None,
        }
    }

    /// Starts a job of `kind` with a payload, in the default queue.
    pub fn builder(kind: impl Into<String>, payload: Payload) -> JobBuilder {
        JobBuilder {
            kind: kind.into(),
            payload: Ok(payload),
            queue: DEFAULT_QUEUE.to_owned(),
            priority: Priority::Normal,
            run_at: None,
            delay: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            unique_key: None,
            key: None,
            trace: None,
            timeout: None,
        }
    }

    /// Starts a job from a typed value: its kind, queue and max attempts
    /// come from the [`JobType`] impl, its key from [`JobType::key`].
    pub fn typed<T: JobType>(job: &T) -> JobBuilder {
        let mut builder = Self::builder(T::KIND, Payload::from_stored(String::new()));
        builder.payload = Payload::of(job);
        builder.queue = T::QUEUE.to_owned();
        builder.max_attempts = T::MAX_ATTEMPTS;
        builder.key = job.key();
        builder
    }

    /// Checks the payload against a backend's size limit, and every text
    /// against what every backend can store (the contract's "Text from
    /// outside"): a payload
    /// holding `\u0000` is [`Error::InvalidPayload`]; a kind, unique key or
    /// trace context with a NUL is [`Error::InvalidInput`], and so is a key
    /// that [`check_key`] refuses. Backends call
    /// it on every job before storing any, since a `NewJob` can be made
    /// without the builder's checks.
    pub fn check_payload(&self, max_payload_bytes: usize) -> Result<()> {
        if self.payload.len() > max_payload_bytes {
            return Err(Error::PayloadTooLarge { size: self.payload.len(), limit: max_payload_bytes });
        }
        crate::text::check_payload_text(self.payload.as_str())?;
        crate::text::check_no_nul("kind", &self.kind)?;
        if let Some(key) = &self.unique_key {
            crate::text::check_no_nul("unique key", key)?;
        }
        if let Some(key) = &self.key {
            check_key(key)?;
        }
        if let Some(trace) = &self.trace {
            crate::text::check_no_nul("trace context", trace.as_stored())?;
        }
        if let Some(timeout) = self.timeout {
            check_timeout(timeout)?;
        }
        Ok(())
    }
}

/// Collects a job's options; [`JobBuilder::build`] checks them.
#[derive(Debug)]
#[must_use = "a builder does nothing until build() is called"]
pub struct JobBuilder {
    kind: String,
    payload: Result<Payload>,
    queue: String,
    priority: Priority,
    run_at: Option<Timestamp>,
    delay: Option<Duration>,
    max_attempts: u32,
    unique_key: Option<String>,
    key: Option<String>,
    /// `None`: capture the current span's context at build time.
    trace: Option<Option<TraceContext>>,
    timeout: Option<Duration>,
}

impl JobBuilder {
    /// The queue (default `"default"`).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// The priority (default Normal).
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// Not claimable before `at`.
    pub fn run_at(mut self, at: Timestamp) -> Self {
        self.run_at = Some(truncate_micros(at));
        self.delay = None;
        self
    }

    /// Not claimable until `delay` after the job is built: [`JobBuilder::build`]
    /// adds it to the system clock's now, [`JobBuilder::build_at`] to the
    /// instant you give (use the storage's clock there in tests with a
    /// [`ManualClock`](crate::ManualClock)).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self.run_at = None;
        self
    }

    /// How many claims the job gets in all (default 25). A job that fails
    /// on its last attempt goes to Dead. `max_attempts(1)` means no retry.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// Deduplicates: while a job of the same queue with this key is not
    /// terminal, enqueueing returns that job's id and stores nothing.
    pub fn unique_key(mut self, key: impl Into<String>) -> Self {
        self.unique_key = Some(key.into());
        self
    }

    /// The job's key (a tenant, an account, a host): jobs of one queue with
    /// the same key share that key's limits
    /// ([`KeyStorage::set_key_limits`](crate::storage::KeyStorage::set_key_limits)),
    /// and claims take the keys of a queue in turn, so one busy key cannot
    /// hold the others back. 1 to 255 bytes, no NUL ([`check_key`]). A
    /// backend without [`Capability::Keys`](crate::storage::Capability::Keys)
    /// refuses a keyed job with [`Error::Unsupported`].
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// How long one attempt of this job may run, stored with it: it wins
    /// over its kind's [`JobType::TIMEOUT`] and the pool's
    /// [`WorkerPool::job_timeout`](crate::WorkerPool::job_timeout). At
    /// the limit the handler's [`JobContext::cancellation`](crate::JobContext::cancellation)
    /// fires; after the pool's grace its future is dropped; the attempt
    /// counts as failed (a nack, retried by the policy). Whole
    /// milliseconds, at least 1.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The trace context to store instead of the current span's (`None`:
    /// store none). For a job enqueued on behalf of a request whose context
    /// arrived in headers rather than in a `tracing` span.
    pub fn trace(mut self, trace: Option<TraceContext>) -> Self {
        self.trace = Some(trace);
        self
    }

    /// Checks every field and makes the job. A delay is turned into `run_at`
    /// with `now`. With the `opentelemetry` feature, the current `tracing`
    /// span's trace context is stored with the job unless
    /// [`JobBuilder::trace`] chose one.
    pub fn build_at(self, now: Timestamp) -> Result<NewJob> {
        let queue = QueueName::new(self.queue)?;
        check_name("kind", &self.kind)?;
        if let Some(key) = &self.unique_key {
            check_name("unique key", key)?;
        }
        if let Some(key) = &self.key {
            check_key(key)?;
        }
        if self.max_attempts == 0 {
            return Err(Error::invalid("max attempts", "0: a job needs at least 1 attempt"));
        }
        let timeout = self.timeout.map(check_timeout).transpose()?;
        let run_at = match (self.run_at, self.delay) {
            (Some(at), _) => Some(at),
            (None, Some(d)) if !d.is_zero() => Some(crate::clock::add(now, d)),
            _ => None,
        };
        Ok(NewJob {
            id: JobId::new(),
            queue,
            kind: self.kind,
            payload: self.payload?,
            priority: self.priority,
            run_at,
            max_attempts: self.max_attempts,
            unique_key: self.unique_key,
            key: self.key,
            trace: self.trace.unwrap_or_else(current_trace),
            timeout,
        })
    }

    /// [`JobBuilder::build_at`] with the system clock.
    pub fn build(self) -> Result<NewJob> {
        self.build_at(crate::clock::Clock::system().now())
    }
}

/// The current span's trace context, where tracing-opentelemetry gives one.
fn current_trace() -> Option<TraceContext> {
    #[cfg(feature = "opentelemetry")]
    {
        TraceContext::current()
    }
    #[cfg(not(feature = "opentelemetry"))]
    {
        None
    }
}

/// Longest per-job timeout: backends store it as whole milliseconds in a
/// signed 64-bit integer; a year is far beyond any sensible attempt.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(366 * 24 * 3600);

/// A job timeout truncated to whole milliseconds (what every backend
/// stores), or [`Error::InvalidInput`] under 1 ms or over [`MAX_TIMEOUT`].
pub fn check_timeout(timeout: Duration) -> Result<Duration> {
    let millis = Duration::from_millis(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
    if millis.is_zero() || timeout > MAX_TIMEOUT {
        return Err(Error::invalid("timeout", format!("{timeout:?}: use 1 ms to 366 days")));
    }
    Ok(millis)
}

/// Checks a job key ([`JobBuilder::key`]): [`Error::InvalidInput`] when it
/// is empty, longer than [`MAX_KEY_BYTES`], or holds a NUL (which
/// PostgreSQL cannot store). Any other text is a key: keys come from
/// outside (tenant ids, host names) and are compared byte for byte.
pub fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid("key", "it is empty"));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::invalid("key", format!("{} bytes, over the limit of {MAX_KEY_BYTES}", key.len())));
    }
    crate::text::check_no_nul("key", key)
}

fn check_name(what: &'static str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(what, "it is empty"));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(Error::invalid(what, format!("{} bytes, over the limit of {MAX_NAME_BYTES}", value.len())));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(what, format!("{value:?} has a control character")));
    }
    Ok(())
}

/// A typed job: a serde struct with a kind name. Register a handler for it
/// on the worker pool and enqueue values of it with [`NewJob::typed`].
///
/// ```
/// use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize)]
/// struct SendEmail { to: String }
/// impl jq_core::JobType for SendEmail {
///     const KIND: &'static str = "send_email";
///     const QUEUE: &'static str = "mail";
/// }
/// let job = jq_core::NewJob::typed(&SendEmail { to: "a@example.com".into() }).build().unwrap();
/// assert_eq!(job.kind, "send_email");
/// ```
pub trait JobType: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The kind name stored with the job; it selects the handler.
    const KIND: &'static str;
    /// The queue jobs of this type go to unless the builder says otherwise.
    const QUEUE: &'static str = DEFAULT_QUEUE;
    /// Claims allowed in all unless the builder says otherwise.
    const MAX_ATTEMPTS: u32 = DEFAULT_MAX_ATTEMPTS;
    /// How long one attempt of this kind may run on a pool that registered
    /// it with [`WorkerPool::register`](crate::WorkerPool::register) (`None`: the pool's
    /// [`WorkerPool::job_timeout`](crate::WorkerPool::job_timeout)); a job's own
    /// [`JobBuilder::timeout`] wins over it.
    const TIMEOUT: Option<Duration> = None;

    /// The key of this job ([`JobBuilder::key`]), derived from the value
    /// (a tenant id, an account): [`NewJob::typed`] sets it, and the
    /// builder may change it. `None` (the default): no key.
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// #[derive(Serialize, Deserialize)]
    /// struct Export { tenant: String }
    /// impl jq_core::JobType for Export {
    ///     const KIND: &'static str = "export";
    ///     fn key(&self) -> Option<String> { Some(self.tenant.clone()) }
    /// }
    /// let job = jq_core::NewJob::typed(&Export { tenant: "acme".into() }).build().unwrap();
    /// assert_eq!(job.key.as_deref(), Some("acme"));
    /// ```
    fn key(&self) -> Option<String> {
        None
    }
}

/// Anything that becomes one job to enqueue: a [`JobType`] value (its
/// type's defaults), a [`JobBuilder`] (options set, not yet built), or a
/// built [`NewJob`]. Handles that enqueue take it, so one method covers
/// every form:
///
/// ```
/// # use serde::{Deserialize, Serialize};
/// # use std::time::Duration;
/// use jq_core::{IntoJob, JobType, NewJob, Priority};
/// #[derive(Serialize, Deserialize)]
/// struct SendEmail { to: String }
/// impl JobType for SendEmail { const KIND: &'static str = "send_email"; }
///
/// let now = jq_core::Clock::system().now();
/// let plain = SendEmail { to: "a@example.com".into() }.into_job(now).unwrap();
/// let later = NewJob::typed(&SendEmail { to: "b@example.com".into() })
///     .priority(Priority::High)
///     .delay(Duration::from_secs(60))
///     .into_job(now)
///     .unwrap();
/// assert_eq!(later.run_at, Some(jq_core::storage::add(now, Duration::from_secs(60))));
/// # let _ = plain;
/// ```
pub trait IntoJob {
    /// The job, with a delay turned into `run_at` from `now` (the storage's
    /// clock, so a [`ManualClock`](crate::ManualClock) applies).
    fn into_job(self, now: Timestamp) -> Result<NewJob>;
}

impl<T: JobType> IntoJob for T {
    fn into_job(self, now: Timestamp) -> Result<NewJob> {
        NewJob::typed(&self).build_at(now)
    }
}

impl IntoJob for JobBuilder {
    fn into_job(self, now: Timestamp) -> Result<NewJob> {
        self.build_at(now)
    }
}

impl IntoJob for NewJob {
    fn into_job(self, _now: Timestamp) -> Result<NewJob> {
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_are_checked() {
        assert!(QueueName::new("mail:high-1.x_y").is_ok());
        for bad in ["", "a b", "é", "a/b", &"x".repeat(129)] {
            assert!(matches!(QueueName::new(bad), Err(Error::InvalidQueue { .. })), "{bad:?}");
        }
        assert!(QueueName::new("x".repeat(128)).is_ok());
        // a leading hash tag, and no other brace
        assert!(QueueName::new("{t}a").is_ok());
        assert!(QueueName::new("{flow:1}resize.x").is_ok());
        for bad in ["{}a", "{t", "a{t}b", "{t}{u}a", "{t}a}", "}a", "{t b}a"] {
            assert!(matches!(QueueName::new(bad), Err(Error::InvalidQueue { .. })), "{bad:?}");
        }
    }

    #[test]
    fn priority_and_state_round_trip() {
        for p in Priority::ALL {
            assert_eq!(Priority::from_i16(p.as_i16()), Some(p));
            assert_eq!(p.as_str().parse::<Priority>().ok(), Some(p));
        }
        assert_eq!(Priority::from_i16(4), None);
        assert_eq!(Priority::from_i16(-1), None);
        for s in State::ALL {
            assert_eq!(s.as_str().parse::<State>().ok(), Some(s));
        }
    }

    #[test]
    fn typed_jobs_derive_their_key() {
        #[derive(Serialize, Deserialize)]
        struct PerTenant {
            tenant: String,
        }
        impl JobType for PerTenant {
            const KIND: &'static str = "per_tenant";
            fn key(&self) -> Option<String> {
                Some(self.tenant.clone())
            }
        }
        #[derive(Serialize, Deserialize)]
        struct Plain;
        impl JobType for Plain {
            const KIND: &'static str = "plain";
        }
        let job = NewJob::typed(&PerTenant { tenant: "acme".into() }).build().unwrap();
        assert_eq!(job.key.as_deref(), Some("acme"));
        let job = NewJob::typed(&PerTenant { tenant: "acme".into() }).key("other").build().unwrap();
        assert_eq!(job.key.as_deref(), Some("other"), "the builder wins over the derived key");
        assert_eq!(NewJob::typed(&Plain).build().unwrap().key, None);
        let bad = NewJob::typed(&PerTenant { tenant: String::new() }).build();
        assert!(matches!(bad, Err(Error::InvalidInput { what: "key", .. })), "{bad:?}");
        assert_eq!(Plain.into_job(crate::clock::Clock::system().now()).unwrap().key, None);
    }

    #[test]
    fn builder_checks_fields() {
        let p = Payload::from_json("{}").unwrap();
        assert!(NewJob::builder("k", p.clone()).max_attempts(0).build().is_err());
        assert!(NewJob::builder("", p.clone()).build().is_err());
        assert!(NewJob::builder("k", p.clone()).unique_key("").build().is_err());
        for bad in [String::new(), "a\0b".to_owned(), "x".repeat(MAX_KEY_BYTES + 1)] {
            let got = NewJob::builder("k", p.clone()).key(bad.clone()).build();
            assert!(matches!(got, Err(Error::InvalidInput { what: "key", .. })), "{bad:?}: {got:?}");
        }
        let job = NewJob::builder("k", p.clone()).key("x".repeat(MAX_KEY_BYTES)).build().unwrap();
        assert_eq!(job.key.as_deref().map(str::len), Some(MAX_KEY_BYTES));
        let mut forged = job.clone();
        forged.key = Some(String::new());
        assert!(matches!(forged.check_payload(usize::MAX), Err(Error::InvalidInput { what: "key", .. })));
        assert!(matches!(NewJob::builder("k", p.clone()).queue("a b").build(), Err(Error::InvalidQueue { .. })));
        let job = NewJob::builder("k", p).delay(Duration::from_secs(1)).build().unwrap();
        assert!(job.run_at.is_some());
        assert!(matches!(Payload::from_json("{"), Err(Error::InvalidPayload(_))));
    }
}
