//! Stopping a run before it returns: a stored cancel request (learnt from
//! the heartbeat's answer) or the attempt's timeout.
//!
//! Each run has a [`RunControl`], shared by the pool and the handler's
//! [`JobContext`](super::JobContext). Asking the run to stop fires its
//! `stop` token, which the handler sees through
//! [`JobContext::cancellation`](super::JobContext::cancellation); the
//! executor then gives it the pool's stop grace to return before dropping
//! its future. A lost lease and the end of the shutdown grace (the pool's
//! abort token, the parent of every run's) fire the same token, so the
//! handler sees those too, and the executor drops the future at once.
//!
//! One token per run, not a hard one and a soft child of it: creating,
//! awaiting and dropping a token takes its parent's lock, and the drain
//! pays that for every job.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::job::Payload;

/// The stop signals and the pending progress of one run.
#[derive(Debug)]
pub(crate) struct RunControl {
    /// What the handler watches: fires on a cancel request, the timeout, a
    /// lost lease and the end of the shutdown grace.
    pub(crate) stop: CancellationToken,
    /// The lease is gone: the handler is dropped without a grace.
    lost: AtomicBool,
    /// Wakes an executor already in the stop grace when the lease is lost
    /// (`notify_one` keeps a permit, so a loss before the wait is not
    /// missed).
    lost_signal: Notify,
    cancel_requested: AtomicBool,
    timed_out: AtomicBool,
    /// The latest progress the handler reported that the heartbeat has not
    /// sent yet: only the newest value of an interval is stored.
    progress: Mutex<Option<String>>,
    /// What [`JobContext::set_result`](super::JobContext::set_result)
    /// stored: here rather than in an `Arc` of the context's own, one
    /// allocation per run fewer.
    result: Mutex<Option<Payload>>,
}

impl RunControl {
    /// The control of a run under the pool's `abort` token.
    pub(crate) fn new(abort: &CancellationToken) -> Self {
        RunControl {
            stop: abort.child_token(),
            lost: AtomicBool::new(false),
            lost_signal: Notify::new(),
            cancel_requested: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
            progress: Mutex::new(None),
            result: Mutex::new(None),
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

    /// The run's lease is gone (reported lost, or the job claimed again by
    /// this pool): its handler is dropped without a grace.
    pub(crate) fn lose(&self) {
        self.lost.store(true, Ordering::SeqCst);
        self.lost_signal.notify_one();
        self.stop.cancel();
    }

    /// True once the run's lease was lost.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Completes once the lease is lost (at once if it was already).
    pub(crate) async fn lost(&self) {
        self.lost_signal.notified().await;
    }

    /// True once a cancel request reached this run.
    pub(crate) fn is_cancel_requested(&self) -> bool {
        self.cancel_requested.load(Ordering::SeqCst)
    }

    /// True once the attempt's timeout passed.
    pub(crate) fn is_timed_out(&self) -> bool {
        self.timed_out.load(Ordering::SeqCst)
    }

    /// Keeps the handler's result (checked), replacing an earlier one.
    pub(crate) fn set_result(&self, value: Payload) {
        *self.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(value);
    }

    /// The result set so far, taken (the settler sends it with the ack).
    pub(crate) fn take_result(&self) -> Option<Payload> {
        self.result.lock().unwrap_or_else(|e| e.into_inner()).take()
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
        let abort = CancellationToken::new();
        let control = RunControl::new(&abort);
        assert!(control.request_cancel());
        assert!(!control.request_cancel(), "a repeated request is not news");
        assert!(control.stop.is_cancelled() && !abort.is_cancelled() && !control.is_lost(), "a stop is not a loss");

        let control = RunControl::new(&CancellationToken::new());
        control.lose();
        assert!(control.stop.is_cancelled() && control.is_lost(), "a lost lease reaches the handler's token");
        assert!(!control.is_cancel_requested() && !control.is_timed_out());

        let abort = CancellationToken::new();
        let control = RunControl::new(&abort);
        abort.cancel();
        assert!(control.stop.is_cancelled(), "the end of the shutdown grace reaches the handler's token");
        assert!(!control.is_lost());
    }

    #[tokio::test]
    async fn a_loss_before_the_wait_is_not_missed() {
        let control = RunControl::new(&CancellationToken::new());
        control.lose();
        tokio::time::timeout(std::time::Duration::from_secs(5), control.lost()).await.expect("lost() completes");
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
