//! [`FaultyStorage`]: any storage, with failures injected where a test says.
//!
//! A failure comes in one of two shapes ([`When`]): *before* the call (the
//! inner storage is not called: nothing happened, as when the server was
//! unreachable) or *after its effect* (the inner storage did the work, and
//! the answer is replaced by an error: as when the connection dropped
//! while the reply was on its way). The second is the hard one: the caller
//! cannot tell it from the first, and must not lose what the call did.
//!
//! ```
//! use jq_core::Error;
//! use jq_core::storage::{Operation, Storage};
//! use jq_testkit::faults::{FaultyStorage, When};
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let storage = FaultyStorage::new(jq_testkit::MemoryStorage::new());
//! storage.fail(Operation::Stats, 2, When::AfterEffect); // the 2nd stats call
//! assert!(storage.stats().await.is_ok());
//! assert!(matches!(storage.stats().await, Err(Error::Unavailable { .. })));
//! assert!(storage.stats().await.is_ok());
//! assert_eq!((storage.calls(Operation::Stats), storage.injected()), (3, 1));
//! # });
//! ```
//!
//! Clones share the counters and the planned faults, so a test keeps one
//! clone and hands another to a worker pool. Calls are numbered per
//! operation from 1, in the order they start.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::BoxFuture;
use jq_core::storage::{Operation, Storage, Wrapper, async_trait};
use jq_core::{Error, Result};

/// Where an injected failure strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// The inner storage is not called.
    Before,
    /// The inner storage is called, then its answer is replaced by the error.
    AfterEffect,
}

/// Where `operation` counts its calls.
fn index(operation: Operation) -> usize {
    Operation::ALL.iter().position(|o| *o == operation).unwrap_or(0)
}

/// Makes the error a fault returns.
type MakeError = Arc<dyn Fn() -> Error + Send + Sync>;

struct Fault {
    operation: Operation,
    nth: u64,
    when: When,
    error: MakeError,
}

struct Faults {
    calls: [AtomicU64; Operation::ALL.len()],
    injected: AtomicU64,
    planned: Mutex<Vec<Fault>>,
}

// By hand: arrays of more than 32 elements have no derived `Default`.
impl Default for Faults {
    fn default() -> Self {
        Faults {
            calls: std::array::from_fn(|_| AtomicU64::new(0)),
            injected: AtomicU64::new(0),
            planned: Mutex::new(Vec::new()),
        }
    }
}

impl Faults {
    fn planned(&self) -> MutexGuard<'_, Vec<Fault>> {
        self.planned.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A [`Storage`] that forwards every call to `S` (a [`Wrapper`]), counts the
/// calls per [`Operation`], and fails the ones a test planned
/// ([`FaultyStorage::fail`]). It declares the capabilities of `S`.
/// Cheap to clone when `S` is; clones share counters and plans.
#[derive(Clone)]
pub struct FaultyStorage<S> {
    inner: S,
    faults: Arc<Faults>,
}

impl<S> fmt::Debug for FaultyStorage<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyStorage").field("injected", &self.injected()).finish_non_exhaustive()
    }
}

impl<S> FaultyStorage<S> {
    /// `inner` with no fault planned.
    pub fn new(inner: S) -> Self {
        FaultyStorage { inner, faults: Arc::default() }
    }

    /// The wrapped storage (its calls are not counted).
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Fails the `nth` call of `operation` (1 is the first call this
    /// wrapper and its clones ever see) with a retryable
    /// [`Error::Unavailable`] from backend `"fault"`.
    pub fn fail(&self, operation: Operation, nth: u64, when: When) {
        self.fail_with(operation, nth, when, move || Error::Unavailable {
            backend: "fault",
            source: format!("injected fault: {operation:?} call {nth}, {when:?}").into(),
        });
    }

    /// Fails the next call of `operation`; returns its number.
    pub fn fail_next(&self, operation: Operation, when: When) -> u64 {
        let nth = self.calls(operation) + 1;
        self.fail(operation, nth, when);
        nth
    }

    /// Fails the `nth` call of `operation` with the error `error` makes
    /// (a fatal one, say).
    pub fn fail_with(
        &self,
        operation: Operation,
        nth: u64,
        when: When,
        error: impl Fn() -> Error + Send + Sync + 'static,
    ) {
        self.faults.planned().push(Fault { operation, nth, when, error: Arc::new(error) });
    }

    /// How many calls of `operation` have started.
    pub fn calls(&self, operation: Operation) -> u64 {
        self.faults.calls[index(operation)].load(Ordering::SeqCst)
    }

    /// How many planned faults have struck.
    pub fn injected(&self) -> u64 {
        self.faults.injected.load(Ordering::SeqCst)
    }

    /// Counts a call and takes the fault planned for it, if any.
    fn start(&self, operation: Operation) -> Option<(When, Error)> {
        let nth = self.faults.calls[index(operation)].fetch_add(1, Ordering::SeqCst) + 1;
        let mut planned = self.faults.planned();
        let i = planned.iter().position(|f| f.operation == operation && f.nth == nth)?;
        let fault = planned.swap_remove(i);
        drop(planned);
        self.faults.injected.fetch_add(1, Ordering::SeqCst);
        tracing::debug!(?operation, nth, when = ?fault.when, "injecting a storage fault");
        Some((fault.when, (fault.error)()))
    }
}

#[async_trait]
impl<S: Storage> Wrapper for FaultyStorage<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    /// Runs `call` on the inner storage unless a fault planned for this
    /// call of `op` says otherwise.
    async fn around<T: Send>(&self, op: Operation, call: BoxFuture<'_, Result<T>>) -> Result<T> {
        match self.start(op) {
            None => call.await,
            Some((When::Before, error)) => Err(error),
            Some((When::AfterEffect, error)) => {
                let _ = call.await;
                Err(error)
            }
        }
    }
}
