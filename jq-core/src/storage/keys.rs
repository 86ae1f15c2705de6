//! Keyed jobs ([`Capability::Keys`]): per-key limits stored in the
//! backend and honoured inside every claim's atomic step, and the fair
//! rotation between a queue's keys.

use async_trait::async_trait;

use super::capability::{Capability, unsupported};
use crate::control::QueueLimits;
use crate::error::Result;
use crate::job::{NewJob, QueueName};
use crate::keys::KeyReport;

/// Keyed jobs: per-key concurrency and rate limits, and claims that take
/// a queue's keys in turn ([`Capability::Keys`]). A backend with it stores
/// [`NewJob::key`] and keeps the contract's "Keyed jobs" in its claim; one
/// without it refuses keyed jobs ([`refuse_keys`]).
#[async_trait]
pub trait KeyStorage: Send + Sync {
    /// Sets the limits of one key of `queue` (`Some(key)`: its override),
    /// or the queue's default that every key without an override follows
    /// (`None`). An override of `QueueLimits::none()` makes the key
    /// unlimited whatever the default; a default of `QueueLimits::none()`
    /// lifts the default. Checked inside every claim's atomic step like
    /// [`ControlStorage::set_limits`](super::ControlStorage::set_limits),
    /// per key: at most `concurrency` Running jobs of the key (counted from
    /// their leases), at most `rate.limit` starts of the key in any window
    /// `(t - period, t]`. [`Error::InvalidInput`](crate::Error::InvalidInput)
    /// when [`QueueLimits::check`] fails or the key is bad
    /// ([`check_key`](super::check_key)). Works on a queue or key that
    /// holds no job yet.
    async fn set_key_limits(&self, queue: &QueueName, key: Option<&str>, limits: &QueueLimits) -> Result<()>;

    /// Removes `key`'s override: the key follows the queue's default
    /// again. Nothing changes when it has none.
    async fn clear_key_limits(&self, queue: &QueueName, key: &str) -> Result<()>;

    /// `queue`'s default, its overrides (by key) and its `top` busiest keys
    /// ([`KeyReport::busiest`]).
    async fn keys(&self, queue: &QueueName, top: usize) -> Result<KeyReport>;
}

/// [`Error::Unsupported`](crate::Error::Unsupported) naming
/// [`Capability::Keys`] when any of `jobs` has a key: what a backend
/// without the capability calls on every job it is given (enqueue, a
/// workflow's steps, a periodic job's tick) before storing any, so that a
/// key is never silently dropped.
pub fn refuse_keys<'a>(jobs: impl IntoIterator<Item = &'a NewJob>) -> Result<()> {
    if jobs.into_iter().any(|job| job.key.is_some()) {
        return Err(unsupported(Capability::Keys));
    }
    Ok(())
}
