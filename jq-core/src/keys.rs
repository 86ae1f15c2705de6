//! Keyed jobs: what [`KeyStorage::keys`](crate::storage::KeyStorage::keys)
//! reports about a queue's keys ([`KeyReport`]), and how limits are named
//! per key ([`KeyLimit`], [`KeyInfo`]).
//!
//! A job's key ([`JobBuilder::key`](crate::JobBuilder::key)) groups the
//! jobs of one queue that share a limit (one tenant, one account, one
//! host). The limits are [`QueueLimits`] again, per key: a queue has a
//! *default* that every key follows, and *overrides* for named keys. Claims
//! take a queue's keys in turn (the *rotation*), so a key with many jobs
//! waiting cannot hold back a key with few.

use crate::control::QueueLimits;
use crate::job::QueueName;

/// A queue's keys, as [`KeyStorage::keys`](crate::storage::KeyStorage::keys)
/// reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyReport {
    /// The queue.
    pub queue: QueueName,
    /// The limits every key of the queue follows unless it has an override
    /// (`QueueLimits::none()` when none were set).
    pub default: QueueLimits,
    /// The keys with limits of their own, by key (bytes).
    pub overrides: Vec<KeyLimit>,
    /// The keys with a Running, Pending or Scheduled job, by their
    /// Running plus Pending jobs descending, then by key; at most the
    /// number asked for.
    pub busiest: Vec<KeyInfo>,
}

/// One key's own limits (an override of the queue's default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyLimit {
    /// The key.
    pub key: String,
    /// Its limits; `QueueLimits::none()` means this key is unlimited
    /// whatever the default.
    pub limits: QueueLimits,
}

/// One key of a queue and what it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyInfo {
    /// The key.
    pub key: String,
    /// Its Running jobs (an expired lease still counts until recover ends
    /// it, as it does for the limit).
    pub running: u64,
    /// Its Pending and Scheduled jobs.
    pub pending: u64,
    /// The limits it follows: its override, else the queue's default.
    pub limits: QueueLimits,
}
