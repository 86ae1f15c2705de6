//! Retention: how long the maintaining pool keeps finished jobs before it
//! purges them ([`WorkerPool::retention`](super::WorkerPool::retention)).
//!
//! A store nobody purges grows for as long as it runs: every job ever
//! finished stays, and whatever reads the whole store (an operator's list
//! of a busy queue, a backup, a `VACUUM`) gets slower every day. So the
//! pool ships a default, like its peers (River keeps finished jobs 24 h):
//! completed and cancelled jobs for a day, dead ones for a week, long
//! enough for an operator to look at a failure after a weekend and retry
//! it. [`Retention::FOREVER`] (or [`WorkerPool::keep_forever`](super::WorkerPool::keep_forever))
//! turns it off.

use std::time::Duration;

use crate::state::State;

/// Default time a Completed job is kept: a day.
pub const DEFAULT_KEEP_COMPLETED: Duration = Duration::from_secs(24 * 3600);
/// Default time a Cancelled job is kept: a day, like a completed one (it
/// will never run; what remains is the record that it was cancelled).
pub const DEFAULT_KEEP_CANCELLED: Duration = Duration::from_secs(24 * 3600);
/// Default time a Dead job is kept: seven days, so a failure is still
/// there to read and retry after a weekend or a holiday.
pub const DEFAULT_KEEP_DEAD: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long finished jobs are kept, per terminal state, before the
/// maintaining pool purges them (by their `finished_at`); `None` keeps that
/// state's jobs forever. Only terminal states have a field: live jobs are
/// never purged.
///
/// ```
/// use std::time::Duration;
/// use jq_core::Retention;
///
/// // Completed jobs for an hour, the rest at the defaults.
/// let retention = Retention { completed: Some(Duration::from_secs(3600)), ..Retention::default() };
/// assert_eq!(retention.dead, Some(jq_core::DEFAULT_KEEP_DEAD));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// How long Completed jobs are kept (default [`DEFAULT_KEEP_COMPLETED`]).
    pub completed: Option<Duration>,
    /// How long Cancelled jobs are kept (default [`DEFAULT_KEEP_CANCELLED`]).
    pub cancelled: Option<Duration>,
    /// How long Dead jobs are kept (default [`DEFAULT_KEEP_DEAD`]).
    pub dead: Option<Duration>,
}

impl Retention {
    /// The default: completed and cancelled jobs a day, dead ones a week.
    pub const DEFAULT: Retention = Retention {
        completed: Some(DEFAULT_KEEP_COMPLETED),
        cancelled: Some(DEFAULT_KEEP_CANCELLED),
        dead: Some(DEFAULT_KEEP_DEAD),
    };

    /// Every finished job kept until an operator purges it.
    pub const FOREVER: Retention = Retention { completed: None, cancelled: None, dead: None };

    /// How long jobs finished in `state` are kept; `None` for a state that
    /// is kept forever, and for the live states (never purged).
    pub fn keep(&self, state: State) -> Option<Duration> {
        match state {
            State::Completed => self.completed,
            State::Cancelled => self.cancelled,
            State::Dead => self.dead,
            State::Waiting | State::Scheduled | State::Pending | State::Running => None,
        }
    }

    /// The terminal states with a retention, each with how long it is kept.
    pub fn rules(&self) -> impl Iterator<Item = (State, Duration)> + '_ {
        [State::Completed, State::Cancelled, State::Dead]
            .into_iter()
            .filter_map(|state| self.keep(state).map(|keep| (state, keep)))
    }

    /// True when nothing is ever purged.
    pub fn is_forever(&self) -> bool {
        self.rules().next().is_none()
    }
}

impl Default for Retention {
    fn default() -> Self {
        Retention::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_cover_the_terminal_states_with_a_retention() {
        let rules: Vec<_> = Retention::DEFAULT.rules().collect();
        assert_eq!(
            rules,
            vec![
                (State::Completed, DEFAULT_KEEP_COMPLETED),
                (State::Cancelled, DEFAULT_KEEP_CANCELLED),
                (State::Dead, DEFAULT_KEEP_DEAD)
            ]
        );
        assert!(Retention::FOREVER.is_forever());
        let dead_only = Retention { dead: Some(Duration::ZERO), ..Retention::FOREVER };
        assert_eq!(dead_only.rules().collect::<Vec<_>>(), vec![(State::Dead, Duration::ZERO)]);
        assert_eq!(Retention::DEFAULT.keep(State::Pending), None);
    }
}
