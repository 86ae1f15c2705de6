//! The first fatal storage error of a pool ([`Error::is_fatal`]).
//!
//! Whichever task meets it first (fetcher, settler, heartbeat,
//! maintenance) reports it here: it is logged once at error level, the
//! pool's stop token is cancelled so the graceful shutdown begins, and the
//! handle returns it once the shutdown is done. Later reports (the other
//! tasks meeting the same error) change nothing.

use std::sync::{Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

use crate::error::Error;

/// Where a pool keeps its fatal error.
#[derive(Debug)]
pub(crate) struct Failure {
    error: Mutex<Option<Error>>,
    /// The pool's stop token: cancelled on the first report.
    stop: CancellationToken,
}

impl Failure {
    /// A slot that cancels `stop` when a fatal error is reported.
    pub(crate) fn new(stop: CancellationToken) -> Self {
        Failure { error: Mutex::new(None), stop }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Error>> {
        // Only ever holds a finished value: a poisoned lock is still usable.
        self.error.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records `error` (met by the pool's `role` task) when it is the
    /// first, logs it, and starts the shutdown.
    pub(crate) fn report(&self, role: &'static str, error: Error) {
        {
            let mut slot = self.lock();
            if slot.is_none() {
                tracing::error!(%error, role, "fatal storage error: the worker pool stops (retrying cannot help)");
                *slot = Some(error);
            }
        }
        self.stop.cancel();
    }

    /// True once a fatal error was reported.
    pub(crate) fn happened(&self) -> bool {
        self.lock().is_some()
    }

    /// The fatal error, if one was reported (taken: the handle returns it once).
    pub(crate) fn take(&self) -> Option<Error> {
        self.lock().take()
    }
}
