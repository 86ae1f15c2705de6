//! Time as the storage sees it.
//!
//! Every backend takes "now" from a [`Clock`] rather than from the database
//! server, so that tests can move time forward without sleeping and so that
//! every backend agrees on what "due" means.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};

/// An instant in UTC. jq keeps instants at microsecond precision everywhere
/// (PostgreSQL's precision), so what is stored reads back equal.
pub type Timestamp = DateTime<Utc>;

/// The source of "now" for a storage. Cheap to clone; clones share time.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    manual: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The system's wall clock.
    pub fn system() -> Self {
        Clock { manual: None }
    }

    /// The current instant, truncated to microseconds.
    pub fn now(&self) -> Timestamp {
        match &self.manual {
            None => truncate_micros(Utc::now()),
            Some(micros) => from_micros(micros.load(Ordering::SeqCst)),
        }
    }

    /// True when time only moves by [`ManualClock`] calls.
    pub fn is_manual(&self) -> bool {
        self.manual.is_some()
    }
}

/// A clock that stands still until a test moves it. Hand
/// [`ManualClock::clock`] to the storage and keep this handle.
#[derive(Clone, Debug)]
pub struct ManualClock {
    micros: Arc<AtomicI64>,
}

impl ManualClock {
    /// A manual clock that starts at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock { micros: Arc::new(AtomicI64::new(start.timestamp_micros())) }
    }

    /// A manual clock that starts at the current wall-clock instant.
    pub fn starting_now() -> Self {
        Self::new(Utc::now())
    }

    /// The [`Clock`] to give to a storage; it follows this handle.
    pub fn clock(&self) -> Clock {
        Clock { manual: Some(self.micros.clone()) }
    }

    /// The current manual instant.
    pub fn now(&self) -> Timestamp {
        from_micros(self.micros.load(Ordering::SeqCst))
    }

    /// Moves time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let micros = i64::try_from(by.as_micros()).unwrap_or(i64::MAX);
        self.micros.fetch_add(micros, Ordering::SeqCst);
    }

    /// Sets time to `to` (it may move backwards: tests of clock skew).
    pub fn set(&self, to: Timestamp) {
        self.micros.store(to.timestamp_micros(), Ordering::SeqCst);
    }
}

/// Drops the sub-microsecond part of an instant.
pub fn truncate_micros(t: Timestamp) -> Timestamp {
    from_micros(t.timestamp_micros())
}

/// The instant `micros` microseconds after the Unix epoch.
pub fn from_micros(micros: i64) -> Timestamp {
    Utc.timestamp_micros(micros).single().unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `t + d`, saturating instead of overflowing.
pub fn add(t: Timestamp, d: Duration) -> Timestamp {
    chrono::Duration::from_std(d).ok().and_then(|d| t.checked_add_signed(d)).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `t - d`, saturating instead of overflowing.
pub fn sub(t: Timestamp, d: Duration) -> Timestamp {
    chrono::Duration::from_std(d).ok().and_then(|d| t.checked_sub_signed(d)).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let manual = ManualClock::starting_now();
        let clock = manual.clock();
        let t0 = clock.now();
        assert_eq!(clock.now(), t0);
        manual.advance(Duration::from_secs(5));
        assert_eq!(clock.now(), add(t0, Duration::from_secs(5)));
    }

    #[test]
    fn system_clock_is_microsecond_precise() {
        let now = Clock::system().now();
        assert_eq!(now.timestamp_subsec_nanos() % 1_000, 0);
    }
}
