//! Typed jobs ([`JobType`]: a serde type with a kind name) and
//! [`IntoJob`], what every enqueue takes.

use std::time::Duration;

use serde::{Serialize, de::DeserializeOwned};

use super::new::{DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, JobBuilder, NewJob};
use super::payload::Payload;
use crate::clock::Timestamp;
use crate::error::Result;

impl NewJob {
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
    use serde::Deserialize;

    use super::*;
    use crate::error::Error;

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
}
