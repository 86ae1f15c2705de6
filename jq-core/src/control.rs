//! Queue controls: a pause and limits that every claimer of a queue
//! honours, stored in the backend ([`ControlStorage::set_paused`],
//! [`ControlStorage::set_limits`], [`ControlStorage::queues`]).
//!
//! - A paused queue gives no job to any claim; enqueue still stores, and
//!   running jobs finish.
//! - A concurrency limit `N` caps the queue's Running jobs at `N`, counted
//!   from their leases: a job whose lease expired keeps its slot until
//!   recover (or its ack) ends it, so no slot is lost or double-counted.
//! - A rate limit `N / period` caps the claims' starts: no window
//!   `(t - period, t]` of the storage's clock holds more than `N` of them
//!   (a sliding log, so there is no edge where twice `N` fit).
//!
//! Backends check all three inside the claim's atomic step, and a job a
//! limit holds back is not touched.
//!
//! [`ControlStorage::set_paused`]: crate::storage::ControlStorage::set_paused
//! [`ControlStorage::set_limits`]: crate::storage::ControlStorage::set_limits
//! [`ControlStorage::queues`]: crate::storage::ControlStorage::queues

use std::time::Duration;

use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::job::QueueName;

/// At most `limit` job starts in any window of `period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Starts allowed per window; above zero.
    pub limit: u32,
    /// The window's length; at least one microsecond (the stored precision).
    pub period: Duration,
}

/// The longest rate period: 100 years (of 365.25 days). Every backend
/// can store the start of such a window (PostgreSQL's timestamps begin in
/// 4713 BC, SQLite and Redis count microseconds in 64 bits).
pub const MAX_RATE_PERIOD: Duration = Duration::from_secs(36_525 * 86_400);

/// The largest concurrency or rate limit: PostgreSQL keeps them in a
/// 32-bit signed integer.
pub const MAX_LIMIT: u32 = i32::MAX as u32;

impl Rate {
    /// `limit` starts per `period`.
    pub fn new(limit: u32, period: Duration) -> Self {
        Rate { limit, period }
    }

    /// The window in microseconds, as backends store it.
    pub fn period_micros(&self) -> i64 {
        i64::try_from(self.period.as_micros()).unwrap_or(i64::MAX)
    }

    /// Parses `N/PERIOD`, where PERIOD is `s`, `m`, `h`, or a number and a
    /// unit (`ms`, `s`, `m`, `h`): `1000/s`, `50/10s`, `5/250ms`.
    pub fn parse(text: &str) -> Result<Rate> {
        let bad = || Error::invalid("rate", format!("{text:?}: use N/PERIOD, e.g. 1000/s, 50/10s, 5/250ms, 100/m"));
        let (n, period) = text.split_once('/').ok_or_else(bad)?;
        let limit: u32 = n.trim().parse().map_err(|_| bad())?;
        let period = period.trim();
        let digits = period.find(|c: char| !c.is_ascii_digit()).unwrap_or(period.len());
        let (count, unit) = period.split_at(digits);
        let count: u64 = if count.is_empty() { 1 } else { count.parse().map_err(|_| bad())? };
        let unit = match unit {
            "ms" => Duration::from_millis(1),
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(bad()),
        };
        let rate = Rate { limit, period: unit.saturating_mul(u32::try_from(count).map_err(|_| bad())?) };
        rate.check()?;
        Ok(rate)
    }

    fn check(&self) -> Result<()> {
        if self.limit == 0 {
            return Err(Error::invalid("rate", "0 starts per period: pause the queue instead"));
        }
        if self.limit > MAX_LIMIT {
            return Err(Error::invalid(
                "rate",
                format!("{} starts per period, over the most, {MAX_LIMIT}", self.limit),
            ));
        }
        if self.period < Duration::from_micros(1) {
            return Err(Error::invalid("rate", "a period under 1 µs: instants are kept in microseconds"));
        }
        if self.period > MAX_RATE_PERIOD {
            return Err(Error::invalid(
                "rate",
                format!(
                    "a period of {} s, over the longest, 100 years ({} s): a window that long cannot be stored",
                    self.period.as_secs(),
                    MAX_RATE_PERIOD.as_secs()
                ),
            ));
        }
        Ok(())
    }

    /// The earliest instant whose starts still count at `now`: starts at
    /// instants strictly after this one are in the window.
    pub fn window_after(&self, now: Timestamp) -> Timestamp {
        crate::clock::sub(now, self.period)
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.period;
        if p.subsec_nanos() == 0 && p.as_secs().is_multiple_of(3600) {
            write!(f, "{}/{}h", self.limit, p.as_secs() / 3600)
        } else if p.subsec_nanos() == 0 && p.as_secs().is_multiple_of(60) {
            write!(f, "{}/{}m", self.limit, p.as_secs() / 60)
        } else if p.subsec_nanos() == 0 {
            write!(f, "{}/{}s", self.limit, p.as_secs())
        } else {
            write!(f, "{}/{}ms", self.limit, p.as_millis())
        }
    }
}

/// The limits of one queue ([`ControlStorage::set_limits`](crate::storage::ControlStorage::set_limits)
/// replaces both at once). `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueLimits {
    /// At most this many of the queue's jobs Running at once, across every
    /// worker; above zero.
    pub concurrency: Option<u32>,
    /// At most this many starts per window, across every worker.
    pub rate: Option<Rate>,
}

impl QueueLimits {
    /// No limit at all.
    pub fn none() -> Self {
        QueueLimits::default()
    }

    /// True when neither limit is set.
    pub fn is_none(&self) -> bool {
        self.concurrency.is_none() && self.rate.is_none()
    }

    /// [`Error::InvalidInput`] for a concurrency of 0 (pause instead), a
    /// rate of 0, a concurrency or rate over [`MAX_LIMIT`], or a period
    /// under a microsecond or over [`MAX_RATE_PERIOD`]: what every backend
    /// can store.
    pub fn check(&self) -> Result<()> {
        if self.concurrency == Some(0) {
            return Err(Error::invalid("concurrency", "0: pause the queue instead"));
        }
        if let Some(n) = self.concurrency.filter(|n| *n > MAX_LIMIT) {
            return Err(Error::invalid("concurrency", format!("{n}, over the most, {MAX_LIMIT}")));
        }
        self.rate.as_ref().map_or(Ok(()), Rate::check)
    }
}

/// A queue as [`ControlStorage::queues`](crate::storage::ControlStorage::queues) reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueInfo {
    /// The queue.
    pub queue: QueueName,
    /// When it was paused (the storage's clock), or `None` when it is not.
    pub paused_at: Option<Timestamp>,
    /// Its limits.
    pub limits: QueueLimits,
    /// The claimers that met a control on this queue, by worker name: the
    /// instant of each one's latest claim that asked for the queue while a
    /// control (pause or limit) was set, and whether the queue was paused
    /// then; only claims within the last [`SEEN_TTL`]. A pool has seen the
    /// pause when its entry is `paused` at or after `paused_at`.
    pub seen: Vec<Seen>,
}

impl QueueInfo {
    /// True while the queue is paused.
    pub fn paused(&self) -> bool {
        self.paused_at.is_some()
    }
}

/// One claimer's latest claim on a controlled queue; see [`QueueInfo::seen`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The claimer's name ([`ClaimRequest::worker`](crate::storage::ClaimRequest::worker)).
    pub worker: String,
    /// When it claimed (the storage's clock).
    pub at: Timestamp,
    /// Whether the queue was paused then.
    pub paused: bool,
}

/// How long a claimer's entry in [`QueueInfo::seen`] lasts after its
/// latest claim of the queue: a day. Older entries are not listed, and
/// backends delete them (at a claim of the queue) so that the entries of
/// pools long gone, one per worker name ever used, do not pile up.
pub const SEEN_TTL: Duration = Duration::from_secs(24 * 3600);

/// Entries of [`QueueInfo::seen`] at or before this instant are forgotten
/// at `now` ([`SEEN_TTL`]).
pub fn seen_forgotten_at(now: Timestamp) -> Timestamp {
    crate::clock::sub(now, SEEN_TTL)
}

/// How many jobs a claim may take from one queue, given its control:
/// `want` capped by the pause (none), by `concurrency - running`, and by
/// `rate.limit - started` (the starts in the current window).
pub fn allowance(paused: bool, limits: &QueueLimits, running: u64, started: u64, want: usize) -> usize {
    if paused {
        return 0;
    }
    let mut allow = want as u64;
    if let Some(n) = limits.concurrency {
        allow = allow.min(u64::from(n).saturating_sub(running));
    }
    if let Some(rate) = limits.rate {
        allow = allow.min(u64::from(rate.limit).saturating_sub(started));
    }
    usize::try_from(allow).unwrap_or(want)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_print() {
        assert_eq!(Rate::parse("1000/s").unwrap(), Rate::new(1000, Duration::from_secs(1)));
        assert_eq!(Rate::parse("50/10s").unwrap(), Rate::new(50, Duration::from_secs(10)));
        assert_eq!(Rate::parse("5/250ms").unwrap(), Rate::new(5, Duration::from_millis(250)));
        assert_eq!(Rate::parse("100/m").unwrap().period, Duration::from_secs(60));
        assert_eq!(Rate::parse("1/2h").unwrap().period, Duration::from_secs(7200));
        for bad in ["", "10", "x/s", "10/", "10/d", "0/s", "10/0s", "-1/s", "1/99999999h", "1/876601h", "2147483648/s"]
        {
            assert!(matches!(Rate::parse(bad), Err(Error::InvalidInput { .. })), "{bad}");
        }
        for text in ["1000/1s", "50/10s", "5/250ms", "100/1m", "1/2h"] {
            assert_eq!(Rate::parse(text).unwrap().to_string(), text);
        }
    }

    #[test]
    fn allowance_takes_the_tightest_cap() {
        let limits = QueueLimits { concurrency: Some(5), rate: Some(Rate::new(10, Duration::from_secs(1))) };
        assert_eq!(allowance(true, &QueueLimits::none(), 0, 0, 7), 0);
        assert_eq!(allowance(false, &QueueLimits::none(), 100, 100, 7), 7);
        assert_eq!(allowance(false, &limits, 2, 0, 7), 3);
        assert_eq!(allowance(false, &limits, 0, 8, 7), 2);
        assert_eq!(allowance(false, &limits, 9, 20, 7), 0);
        assert!(QueueLimits { concurrency: Some(0), rate: None }.check().is_err());
        assert!(QueueLimits { concurrency: Some(MAX_LIMIT + 1), rate: None }.check().is_err());
        assert!(
            QueueLimits { concurrency: Some(MAX_LIMIT), rate: Some(Rate::new(MAX_LIMIT, MAX_RATE_PERIOD)) }
                .check()
                .is_ok()
        );
        let too_long = Rate::new(1, MAX_RATE_PERIOD + Duration::from_micros(1));
        assert!(QueueLimits { concurrency: None, rate: Some(too_long) }.check().is_err());
        assert!(Rate::parse("1/876600h").is_ok());
        assert!(limits.check().is_ok());
    }
}
