//! Every way of being another storage (an `Arc`, a `Wrapper`, a type made
//! with `forward_storage!`) answers what the inner storage answers: its
//! capabilities and no others, its clock, its wake-up signal, and its own
//! answer to an operation with a default (`migrate`), never the default.
//! The operations come from one list, so each of them is forwarded; these
//! are the members written beside the list.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use jq_core::storage::{
    Beat, Capabilities, Capability, ClaimRequest, LeaseRef, Operation, Settled, Settlement, Storage, StorageExt,
    WorkSignal, Wrapper, async_trait,
};
use jq_core::{Clock, Error, Job, JobFilter, JobId, ManualClock, NewJob, Result, State, Stats, Timestamp};
use jq_testkit::MemoryStorage;

/// What `Partial::migrate` answers: not the trait's default (0).
const MIGRATIONS: usize = 7;

/// `MemoryStorage` declaring only roles and keys, with a migrate of its own.
struct Partial(MemoryStorage);

#[async_trait]
impl Storage for Partial {
    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        self.0.enqueue(jobs).await
    }
    async fn claim(&self, request: &ClaimRequest) -> Result<jq_core::storage::ClaimAnswer> {
        self.0.claim(request).await
    }
    async fn settle(&self, batch: Vec<Settlement>) -> Result<Vec<Settled>> {
        self.0.settle(batch).await
    }
    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<Beat> {
        self.0.heartbeat(leases, lease).await
    }
    async fn promote(&self) -> Result<u64> {
        self.0.promote().await
    }
    async fn recover(&self) -> Result<u64> {
        self.0.recover().await
    }
    async fn get(&self, id: JobId) -> Result<Job> {
        self.0.get(id).await
    }
    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        self.0.list(filter).await
    }
    async fn stats(&self) -> Result<Stats> {
        self.0.stats().await
    }
    async fn retry(&self, id: JobId) -> Result<()> {
        self.0.retry(id).await
    }
    async fn cancel(&self, id: JobId) -> Result<()> {
        self.0.cancel(id).await
    }
    async fn purge(&self, state: State, older_than: Timestamp) -> Result<u64> {
        self.0.purge(state, older_than).await
    }
    async fn migrate(&self) -> Result<usize> {
        Ok(MIGRATIONS)
    }
    fn subscribe(&self) -> Option<WorkSignal> {
        self.0.subscribe()
    }
    fn clock(&self) -> Clock {
        Storage::clock(&self.0)
    }
    fn capabilities(&self) -> Capabilities<'_> {
        let all = self.0.capabilities();
        Capabilities { roles: all.roles, keys: all.keys, ..Capabilities::NONE }
    }
}

/// A wrapper that changes nothing but counts what it forwards.
struct Counting<S> {
    inner: S,
    calls: AtomicU64,
}

#[async_trait]
impl<S: Storage> Wrapper for Counting<S> {
    type Inner = S;
    fn inner(&self) -> &S {
        &self.inner
    }
    async fn around<T: Send>(&self, _op: Operation, call: BoxFuture<'_, Result<T>>) -> Result<T> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        call.await
    }
}

/// A named handle, written with `forward_storage!`.
struct Named<S> {
    inner: S,
}

macro_rules! inner {
    ($this:ident, $s:ident => $body:expr) => {{
        let $s = &$this.inner;
        $body
    }};
}
jq_core::forward_storage!(impl[S: Storage] for Named<S>, via inner, independent = none);

fn partial(clock: &ManualClock) -> Partial {
    Partial(MemoryStorage::new().clock(clock.clock()))
}

/// What every form must answer as `Partial` does.
async fn answers_as_the_inner_storage<S: Storage>(storage: &S, clock: &ManualClock, what: &str) {
    assert_eq!(storage.capabilities().declared(), [Capability::Roles, Capability::Keys], "{what}");
    assert!(storage.capabilities().has(Capability::Keys) && Capability::Roles.of(storage), "{what}");
    let refused = storage.require_periodic().err();
    assert!(matches!(refused, Some(Error::Unsupported { capability: Capability::Periodic })), "{what}: {refused:?}");
    assert_eq!(storage.migrate().await.ok(), Some(MIGRATIONS), "{what}: migrate is the inner storage's");
    assert!(storage.subscribe().is_some(), "{what}: the inner storage's wake-up signal");
    clock.advance(Duration::from_secs(90));
    assert_eq!(storage.clock().now(), clock.now(), "{what}: the inner storage's clock");
    assert!(storage.require_roles().is_ok(), "{what}");
}

#[tokio::test]
async fn every_form_of_another_storage_answers_as_it() {
    let clock = ManualClock::starting_now();
    answers_as_the_inner_storage(&partial(&clock), &clock, "the storage itself").await;
    answers_as_the_inner_storage(&Arc::new(partial(&clock)), &clock, "an Arc").await;
    answers_as_the_inner_storage(&Named { inner: partial(&clock) }, &clock, "forward_storage!").await;
    let counting = Counting { inner: partial(&clock), calls: AtomicU64::new(0) };
    answers_as_the_inner_storage(&counting, &clock, "a Wrapper").await;
    // migrate went through `around`; the capability refused before it.
    assert_eq!(counting.calls.load(Ordering::SeqCst), 1);
    let wrapped_twice = Counting { inner: Arc::new(counting), calls: AtomicU64::new(0) };
    answers_as_the_inner_storage(&wrapped_twice, &clock, "a Wrapper of an Arc of a Wrapper").await;
}

#[tokio::test]
async fn a_wrapper_forwards_capability_calls_through_around() {
    let counting = Counting { inner: MemoryStorage::new(), calls: AtomicU64::new(0) };
    assert_eq!(counting.capabilities().declared(), Capability::ALL);
    assert!(counting.require_roles().expect("roles").leaders().await.expect("leaders").is_empty());
    assert_eq!(counting.calls.load(Ordering::SeqCst), 1, "the capability call ran through around");
}

#[test]
fn operations_are_listed_once_each() {
    let mut names: Vec<&str> = Operation::ALL.iter().map(|op| op.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Operation::ALL.len(), "each operation has its own name");
    assert_eq!(Operation::Enqueue.name(), "enqueue");
    assert_eq!(Operation::Enqueue.capability(), None);
    assert_eq!(Operation::SetKeyLimits.capability(), Some(Capability::Keys));
    for capability in Capability::ALL {
        assert!(Operation::ALL.iter().any(|op| op.capability() == Some(capability)), "{capability:?} has operations");
    }
}
