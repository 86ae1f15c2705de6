//! [`State`]: where a job is in its life. Part of the ground: it depends
//! on no other module, so the error type can name a state (its text form,
//! which fails with that error, is in `parse.rs`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a job is in its life. See the state diagram in the repository's
/// `docs/CONTRACT.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Waiting for its parents in a workflow: not claimable until every
    /// parent is done with (see `docs/CONTRACT.md`, "Workflows").
    Waiting,
    /// Waiting for its `run_at`.
    Scheduled,
    /// Claimable now.
    Pending,
    /// Claimed: a worker holds a lease on it.
    Running,
    /// Acked. Terminal.
    Completed,
    /// Failed for good (no attempts left, buried, or poison). Terminal;
    /// an operator can retry it.
    Dead,
    /// Cancelled before it ran. Terminal.
    Cancelled,
}

impl State {
    /// Every state, in life order.
    pub const ALL: [State; 7] = [
        State::Waiting,
        State::Scheduled,
        State::Pending,
        State::Running,
        State::Completed,
        State::Dead,
        State::Cancelled,
    ];

    /// The lowercase name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Waiting => "waiting",
            State::Scheduled => "scheduled",
            State::Pending => "pending",
            State::Running => "running",
            State::Completed => "completed",
            State::Dead => "dead",
            State::Cancelled => "cancelled",
        }
    }

    /// True for Completed, Dead and Cancelled: nothing moves such a job
    /// except an operator's retry or a purge.
    pub fn is_terminal(self) -> bool {
        matches!(self, State::Completed | State::Dead | State::Cancelled)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
