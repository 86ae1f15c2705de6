//! How long the pool's tasks wait: a jittered interval ([`jitter`]), and
//! the bounded backoff after a storage error ([`ErrorBackoff`]).

use std::time::Duration;

use rand::Rng;

/// `d` scaled by a random factor in [1 - spread, 1 + spread], so that many
/// workers started together do not hit the storage in step.
pub(crate) fn jitter(d: Duration, spread: f64) -> Duration {
    let factor = rand::rng().random_range((1.0 - spread)..=(1.0 + spread));
    d.mul_f64(factor.max(0.0))
}

/// A bounded exponential backoff for storage errors inside the pool: 100 ms
/// doubling to 5 s, jittered.
#[derive(Debug, Default)]
pub(crate) struct ErrorBackoff {
    failures: u32,
}

impl ErrorBackoff {
    const BASE: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(5);

    /// The next wait after one more failure.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let d = Self::BASE.saturating_mul(1u32 << self.failures.min(16)).min(Self::MAX);
        self.failures = self.failures.saturating_add(1);
        jitter(d, 0.2)
    }

    /// Back to the shortest wait after a success.
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }
}
