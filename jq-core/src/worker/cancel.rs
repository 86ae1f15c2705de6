//! Stopping a run before it returns: a stored cancel request (learnt from
//! the heartbeat's answer) or the attempt's timeout.
//!
//! Each run has a [`RunControl`], shared by the pool and the handler's
//! [`JobContext`](super::JobContext). Asking the run to stop fires its
//! `stop` token, which the handler sees through
//! [`JobContext::cancellation`](super::JobContext::cancellation); the
//! executor then gives it the pool's stop grace to return before dropping
//! its future. The token is a child of the run's hard token (lease lost,
//! shutdown grace over), so the handler sees those too.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio_util::sync::CancellationToken;

/// The stop signals and the pending progress of one run.
#[derive(Debug)]
pub(crate) struct RunControl {
    /// What the handler watches.
    pub(crate) stop: CancellationToken,
    cancel_requested: AtomicBool,
    timed_out: AtomicBool,
    /// The latest progress the handler reported that the heartbeat has not
    /// sent yet: only the newest value of an interval is stored.
    progress: Mutex<Option<String>>,
}

impl RunControl {
    /// The control of a run whose hard token is `hard`.
    pub(crate) fn new(hard: &CancellationToken) -> Self {
        RunControl {
            stop: hard.child_token(),
            cancel_requested: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
            progress: Mutex::new(None),
        }
    }

    /// A cancel request reached the pool: the run ends Cancelled unless its
    /// handler succeeds first. True the first time.
    pub(crate) fn request_cancel(&self) -> bool {
        let first = !self.cancel_requested.swap(true, Ordering::SeqCst);
        self.stop.cancel();
        first
    }

    /// The attempt ran out of time: it is a failed attempt unless its
    /// handler succeeds within the grace.
    pub(crate) fn time_out(&self) {
        self.timed_out.store(true, Ordering::SeqCst);
        self.stop.cancel();
    }

    /// True once a cancel request reached this run.
    pub(crate) fn is_cancel_requested(&self) -> bool {
        self.cancel_requested.load(Ordering::SeqCst)
    }

    /// True once the attempt's timeout passed.
    pub(crate) fn is_timed_out(&self) -> bool {
        self.timed_out.load(Ordering::SeqCst)
    }

    /// Keeps `value` (checked JSON) for the next heartbeat, replacing one
    /// not yet sent.
    pub(crate) fn set_progress(&self, value: String) {
        *self.progress.lock().unwrap_or_else(|e| e.into_inner()) = Some(value);
    }

    /// The progress to send, if the handler reported any since the last
    /// beat.
    pub(crate) fn take_progress(&self) -> Option<String> {
        self.progress.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Puts back a value whose sending failed, unless a newer one came.
    pub(crate) fn restore_progress(&self, value: String) {
        let mut slot = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handler_sees_stops_and_hard_cancellation() {
        let hard = CancellationToken::new();
        let control = RunControl::new(&hard);
        assert!(control.request_cancel());
        assert!(!control.request_cancel(), "a repeated request is not news");
        assert!(control.stop.is_cancelled() && !hard.is_cancelled(), "a stop leaves the hard token alone");

        let hard = CancellationToken::new();
        let control = RunControl::new(&hard);
        hard.cancel();
        assert!(control.stop.is_cancelled(), "a lost lease reaches the handler's token");
        assert!(!control.is_cancel_requested() && !control.is_timed_out());
    }

    #[test]
    fn only_the_newest_progress_waits() {
        let control = RunControl::new(&CancellationToken::new());
        control.set_progress("1".into());
        control.set_progress("2".into());
        assert_eq!(control.take_progress().as_deref(), Some("2"));
        assert_eq!(control.take_progress(), None);
        control.set_progress("3".into());
        control.restore_progress("2".into());
        assert_eq!(control.take_progress().as_deref(), Some("3"), "a failed send never overwrites a newer value");
    }
}
