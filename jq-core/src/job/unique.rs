//! The unique rules ([`UniqueRule`]): what an enqueue with a unique key
//! does with the jobs that already hold the key (debounce, unique for a
//! period, replace), and the one decision every backend takes for it
//! ([`decide`]), with the storage's clock.

use std::time::Duration;

use crate::clock::{Timestamp, add, sub};
use crate::error::{Error, Result};
use crate::id::JobId;
use crate::state::State;

/// Longest debounce window, maximum delay or unique period: a year, far
/// beyond any sensible one, so that every instant computed from it fits
/// every backend's timestamps.
pub const MAX_UNIQUE_WINDOW: Duration = Duration::from_secs(366 * 24 * 3600);

/// What an enqueue with a unique key does when jobs of its queue hold the
/// key (the contract's "Unique rules"). Without one ([`NewJob::unique_rule`]
/// `None`) a live holder deduplicates the enqueue (the contract's
/// "Uniqueness"). Set with [`JobBuilder::debounce`], [`JobBuilder::unique_for`]
/// and [`JobBuilder::replace`].
///
/// [`NewJob::unique_rule`]: super::NewJob::unique_rule
/// [`JobBuilder::debounce`]: super::JobBuilder::debounce
/// [`JobBuilder::unique_for`]: super::JobBuilder::unique_for
/// [`JobBuilder::replace`]: super::JobBuilder::replace
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UniqueRule {
    /// Trailing debounce: the key's waiting holder (Scheduled or Pending)
    /// takes this job's payload and runs `window` after this enqueue, but
    /// no later than `max_delay` after the holder was created; with no
    /// waiting holder the job is stored to run `window` from now.
    Debounce {
        /// How long the key must be quiet before its job runs.
        window: Duration,
        /// How long after its first enqueue the job runs at the latest,
        /// however many enqueues follow (`None`: no bound).
        max_delay: Option<Duration>,
    },
    /// Unique for a period (also leading debounce): nothing is stored
    /// while a live job holds the key or a job of the key, in any state,
    /// was created less than this long ago.
    Period(Duration),
    /// Replace: the key's waiting holder (Scheduled or Pending) takes this
    /// job's payload and run time; with no waiting holder the job is
    /// stored.
    Replace,
}

impl UniqueRule {
    /// [`Error::InvalidInput`] unless every duration is 1 µs to
    /// [`MAX_UNIQUE_WINDOW`] (durations are kept at microseconds, the
    /// storage's precision), and the rule fits its job: it needs a unique
    /// key, a debounced job takes its run time from its window (no
    /// `run_at`), and a job with a key (capability keys) takes no rule.
    pub fn check(&self, unique_key: Option<&str>, run_at: Option<Timestamp>, key: Option<&str>) -> Result<()> {
        let bounded = |what: &'static str, d: Duration| {
            if d < Duration::from_micros(1) || d > MAX_UNIQUE_WINDOW {
                return Err(Error::invalid(what, format!("{d:?}: use 1 µs to 366 days")));
            }
            Ok(())
        };
        match *self {
            UniqueRule::Debounce { window, max_delay } => {
                bounded("debounce window", window)?;
                if let Some(max) = max_delay {
                    bounded("debounce max delay", max)?;
                }
                if run_at.is_some() {
                    return Err(Error::invalid(
                        "unique rule",
                        "a debounced job runs at its window's end: drop its run_at or delay",
                    ));
                }
            }
            UniqueRule::Period(period) => bounded("unique period", period)?,
            UniqueRule::Replace => {}
        }
        if unique_key.is_none() {
            return Err(Error::invalid("unique rule", "it needs a unique key: set one with unique_key"));
        }
        if key.is_some() {
            return Err(Error::invalid(
                "unique rule",
                "a job with a key (capability keys) takes no debounce, period or replace",
            ));
        }
        Ok(())
    }
}

/// A job that holds the unique key an enqueue names, as [`decide`] needs
/// it: a live one (Scheduled, Pending, Running), or, for
/// [`UniqueRule::Period`], any job of the key created within the period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Its id.
    pub id: JobId,
    /// Its state.
    pub state: State,
    /// When it was enqueued.
    pub created_at: Timestamp,
}

/// What an enqueue does with one job under a unique rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Store nothing; answer this id.
    Answer(JobId),
    /// Give the waiting holder `id` the job's payload and this run time
    /// (Pending when `run_at <= now`, else Scheduled); answer `id`.
    Update {
        /// The holder changed.
        id: JobId,
        /// Its new run time.
        run_at: Timestamp,
    },
    /// Store the job with this run time (`None`: now); answer its id.
    Store {
        /// Its run time.
        run_at: Option<Timestamp>,
        /// True when live jobs (all Running) hold the key already: the new
        /// job holds it beside them, as a retried job does.
        beside: bool,
    },
}

/// The decision of every backend for a job with unique rule `rule` and run
/// time `run_at`, enqueued at `now`, whose key `holders` hold (in any
/// order; a backend passes at least every live holder and, for a period,
/// every job of the key created after `now - period`). The contract's
/// "Unique rules", in code.
pub fn decide(rule: UniqueRule, run_at: Option<Timestamp>, holders: &[Holder], now: Timestamp) -> Decision {
    let live = |h: &&Holder| !h.state.is_terminal();
    let beside = holders.iter().any(|h| live(&h));
    let waiting = holders.iter().filter(|h| matches!(h.state, State::Scheduled | State::Pending)).min_by_key(|h| h.id);
    match rule {
        UniqueRule::Period(period) => {
            let after = sub(now, period);
            match holders.iter().filter(|h| live(h) || h.created_at > after).min_by_key(|h| h.id) {
                Some(h) => Decision::Answer(h.id),
                None => Decision::Store { run_at, beside: false },
            }
        }
        UniqueRule::Replace => match waiting {
            Some(h) => Decision::Update { id: h.id, run_at: run_at.unwrap_or(now) },
            None => Decision::Store { run_at, beside },
        },
        UniqueRule::Debounce { window, max_delay } => {
            let quiet = add(now, window);
            match waiting {
                Some(h) => {
                    let latest = max_delay.map_or(quiet, |m| add(h.created_at, m));
                    Decision::Update { id: h.id, run_at: quiet.min(latest) }
                }
                None => {
                    let first = max_delay.map_or(quiet, |m| quiet.min(add(now, m)));
                    Decision::Store { run_at: Some(first), beside }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;

    fn holder(state: State, created_at: Timestamp) -> Holder {
        Holder { id: JobId::new(), state, created_at }
    }

    #[test]
    fn debounce_moves_the_waiting_holder_and_caps_it() {
        let now = Clock::system().now();
        let w = Duration::from_secs(10);
        let rule = UniqueRule::Debounce { window: w, max_delay: Some(Duration::from_secs(25)) };
        assert_eq!(decide(rule, None, &[], now), Decision::Store { run_at: Some(add(now, w)), beside: false });
        let h = holder(State::Scheduled, sub(now, Duration::from_secs(20)));
        assert_eq!(
            decide(rule, None, &[h], now),
            Decision::Update { id: h.id, run_at: add(h.created_at, Duration::from_secs(25)) }
        );
        let running = holder(State::Running, now);
        assert_eq!(decide(rule, None, &[running], now), Decision::Store { run_at: Some(add(now, w)), beside: true });
    }

    #[test]
    fn a_period_counts_finished_jobs_within_it() {
        let now = Clock::system().now();
        let p = Duration::from_secs(60);
        let done = holder(State::Completed, sub(now, Duration::from_secs(59)));
        assert_eq!(decide(UniqueRule::Period(p), None, &[done], now), Decision::Answer(done.id));
        let old = holder(State::Completed, sub(now, p));
        assert_eq!(decide(UniqueRule::Period(p), None, &[old], now), Decision::Store { run_at: None, beside: false });
    }

    #[test]
    fn a_rule_needs_a_unique_key_and_bounded_windows() {
        let rule = UniqueRule::Period(Duration::from_secs(1));
        assert!(rule.check(None, None, None).is_err());
        assert!(rule.check(Some("u"), None, Some("k")).is_err());
        assert!(UniqueRule::Period(Duration::ZERO).check(Some("u"), None, None).is_err());
        let debounce = UniqueRule::Debounce { window: Duration::from_secs(1), max_delay: None };
        assert!(debounce.check(Some("u"), Some(Clock::system().now()), None).is_err());
        assert!(debounce.check(Some("u"), None, None).is_ok());
    }
}
