//! Retry backoff policies.

use std::time::Duration;

use rand::Rng;

/// Chooses how long a failed job waits before its next attempt.
/// Replace the default by passing your own to the worker pool.
pub trait Backoff: Send + Sync + 'static {
    /// The delay after failed attempt number `attempt` (1 for the first).
    fn delay(&self, attempt: u32) -> Duration;
}

/// Exponential backoff with full jitter: a uniform random delay between 0
/// and `min(max, base * 2^(attempt-1))`. Full jitter spreads retries of jobs
/// that failed together (an outage) instead of sending them back in a herd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExponentialBackoff {
    /// The ceiling of the first retry's delay.
    pub base: Duration,
    /// The cap on any delay's ceiling.
    pub max: Duration,
}

impl Default for ExponentialBackoff {
    /// 1 s doubling up to 1 h: with the default 25 attempts, a job keeps
    /// trying for about a day.
    fn default() -> Self {
        ExponentialBackoff { base: Duration::from_secs(1), max: Duration::from_secs(3600) }
    }
}

impl ExponentialBackoff {
    /// The ceiling of the delay after `attempt`, before jitter.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(32);
        self.base.saturating_mul(1u32 << exp.min(31)).min(self.max)
    }
}

impl Backoff for ExponentialBackoff {
    fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self.ceiling(attempt);
        if ceiling.is_zero() {
            return ceiling;
        }
        rand::rng().random_range(Duration::ZERO..=ceiling)
    }
}

/// Always the same delay; handy in tests and for jobs that poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConstantBackoff(pub Duration);

impl Backoff for ConstantBackoff {
    fn delay(&self, _attempt: u32) -> Duration {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_backoff_is_capped_and_jittered() {
        let b = ExponentialBackoff { base: Duration::from_millis(100), max: Duration::from_secs(1) };
        assert_eq!(b.ceiling(1), Duration::from_millis(100));
        assert_eq!(b.ceiling(2), Duration::from_millis(200));
        assert_eq!(b.ceiling(10), Duration::from_secs(1));
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(1));
        for attempt in 1..40 {
            assert!(b.delay(attempt) <= b.ceiling(attempt));
        }
    }
}
