//! A job to be enqueued ([`NewJob`]) and the builder that checks it
//! ([`JobBuilder`]).

use std::time::Duration;

use super::name::{QueueName, check_key, check_name};
use super::payload::Payload;
use super::priority::Priority;
use super::stored::Job;
use super::unique::UniqueRule;
use crate::clock::{Timestamp, truncate_micros};
use crate::error::{Error, Result};
use crate::id::JobId;
use crate::state::State;
use crate::trace::TraceContext;

/// Default number of claims a job gets before it goes to Dead
/// (Sidekiq and River use 25 as well).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 25;
/// Default queue of jobs whose type does not name one.
pub const DEFAULT_QUEUE: &str = "default";

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
    /// What the enqueue does when jobs hold the unique key already
    /// (debounce, unique for a period, replace); `None`: a live holder
    /// deduplicates it. Needs a unique key ([`UniqueRule::check`]).
    pub unique_rule: Option<UniqueRule>,
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
            unique_rule: None,
            max_delay: None,
            key: None,
            trace: None,
            timeout: None,
            id: None,
        }
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
        if let Some(rule) = &self.unique_rule {
            rule.check(self.unique_key.as_deref(), self.run_at, self.key.as_deref())?;
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
    pub(super) kind: String,
    pub(super) payload: Result<Payload>,
    pub(super) queue: String,
    priority: Priority,
    run_at: Option<Timestamp>,
    delay: Option<Duration>,
    pub(super) max_attempts: u32,
    unique_key: Option<String>,
    unique_rule: Option<UniqueRule>,
    /// [`JobBuilder::max_delay`]'s, joined to the debounce at build time.
    max_delay: Option<Duration>,
    pub(super) key: Option<String>,
    /// `None`: capture the current span's context at build time.
    trace: Option<Option<TraceContext>>,
    timeout: Option<Duration>,
    /// `None`: a fresh id at build time.
    id: Option<JobId>,
}

impl JobBuilder {
    /// The job's id (default: a fresh one, [`JobId::new`], a UUIDv7), for
    /// an enqueue that is safe to send again: a job whose id is already
    /// stored is not stored again, whatever its state; the enqueue returns
    /// its id and leaves the stored job as it is (the contract's
    /// "enqueue"). So a producer that lost an enqueue's answer (a timeout,
    /// a dropped connection) resends the same job with the same id and
    /// stores it once. Resend it to the same queue: Redis looks for the id
    /// in the job's own queue, so an id reused for another queue is not
    /// detected there. Claims order jobs of one priority and `run_at` by
    /// id, so a UUIDv7 made when the job is first built keeps that order.
    /// The HTTP API's `id` field is this.
    ///
    /// ```
    /// use jq_core::{JobId, NewJob, Payload};
    /// let id = JobId::new(); // kept with the request, for resends
    /// let job = NewJob::builder("report", Payload::from_json("{}")?).id(id).build()?;
    /// assert_eq!(job.id, id);
    /// # Ok::<(), jq_core::Error>(())
    /// ```
    pub fn id(mut self, id: JobId) -> Self {
        self.id = Some(id);
        self
    }

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

    /// Trailing debounce (the contract's "Unique rules"): the enqueues of
    /// this unique key become one run. While a job of the key waits
    /// (Scheduled or Pending), an enqueue gives it this job's payload and
    /// moves its run time to `window` from now (the storage's clock), so it
    /// runs once the key has been quiet for `window`; bound that with
    /// [`JobBuilder::max_delay`]. A running job is never changed: an
    /// enqueue while it runs stores a new job for after it. Needs
    /// [`JobBuilder::unique_key`]; takes no `run_at` or delay.
    ///
    /// ```
    /// use std::time::Duration;
    /// use jq_core::{NewJob, Payload};
    /// let job = NewJob::builder("reindex", Payload::from_json(r#"{"doc":7}"#)?)
    ///     .unique_key("reindex:7")
    ///     .debounce(Duration::from_secs(5))
    ///     .max_delay(Duration::from_secs(60))
    ///     .build()?;
    /// assert!(job.unique_rule.is_some());
    /// # Ok::<(), jq_core::Error>(())
    /// ```
    pub fn debounce(mut self, window: Duration) -> Self {
        self.unique_rule = Some(UniqueRule::Debounce { window, max_delay: None });
        self
    }

    /// The latest a debounced job runs after its first enqueue, however
    /// many enqueues follow within its windows ([`JobBuilder::debounce`]);
    /// refused without a debounce.
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = Some(max_delay);
        self
    }

    /// Leading debounce: the first enqueue of the unique key runs at once,
    /// and the enqueues within `window` after it are dropped, whatever
    /// that job's state. It is [`JobBuilder::unique_for`]`(window)`.
    pub fn debounce_leading(self, window: Duration) -> Self {
        self.unique_for(window)
    }

    /// Unique for a period: nothing is stored (the enqueue answers the
    /// holder's id) while a live job holds the unique key, or a job of the
    /// queue with the key, whatever its state, was created less than
    /// `period` ago (the storage's clock). Needs [`JobBuilder::unique_key`].
    pub fn unique_for(mut self, period: Duration) -> Self {
        self.unique_rule = Some(UniqueRule::Period(period));
        self
    }

    /// Replace: while a job of the unique key waits (Scheduled or Pending),
    /// the enqueue gives it this job's payload and run time instead of
    /// storing a new one, and answers its id. A running job is never
    /// changed: with none waiting, this job is stored. Needs
    /// [`JobBuilder::unique_key`].
    pub fn replace(mut self) -> Self {
        self.unique_rule = Some(UniqueRule::Replace);
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
    /// over its kind's [`JobType::TIMEOUT`](crate::JobType::TIMEOUT) and the pool's
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
        let unique_rule = match (self.unique_rule, self.max_delay) {
            (Some(UniqueRule::Debounce { window, .. }), Some(max)) => {
                Some(UniqueRule::Debounce { window, max_delay: Some(max) })
            }
            (_, Some(_)) => return Err(Error::invalid("debounce max delay", "it bounds a debounce: call debounce")),
            (rule, None) => rule,
        };
        if let Some(rule) = &unique_rule {
            rule.check(self.unique_key.as_deref(), run_at, self.key.as_deref())?;
        }
        Ok(NewJob {
            id: self.id.unwrap_or_default(),
            queue,
            kind: self.kind,
            payload: self.payload?,
            priority: self.priority,
            run_at,
            max_attempts: self.max_attempts,
            unique_key: self.unique_key,
            unique_rule,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::MAX_KEY_BYTES;

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
