//! [`forward_storage!`](crate::forward_storage): a storage that is another
//! one (an `Arc`, an enum over backends) written once, as direct calls with
//! no extra boxing, so it costs nothing on the claim path. A wrapper that
//! changes what an operation does is a [`Layer`](super::Layer) instead.

/// Implements [`Storage`](crate::storage::Storage) for a type by running
/// every core operation and capability accessor on the storage that
/// `$via!` reaches: `$via!(self, s => expression using s)` must evaluate
/// the expression with `s` bound to a `&` of the inner storage (a macro, so
/// an enum can `match`). Calls name the trait, so an inherent method of the
/// inner type with the same name is never picked instead. The capability accessors hand out the inner
/// storage's own implementation, so capability calls cost no extra hop
/// either. A new core operation is added here, once. `independent` is
/// forwarded too (the inner storage's, converted with `Into`), unless the
/// invocation ends with `independent = none` (an unsized inner storage).
///
/// ```
/// use jq_core::storage::Storage;
///
/// /// A named handle on any storage.
/// struct Named<S> { name: &'static str, inner: S }
///
/// macro_rules! inner { ($this:ident, $s:ident => $body:expr) => {{ let $s = &$this.inner; $body }}; }
/// // A named handle cannot be made from a bare storage, so the heartbeat's
/// // own handle (`Storage::independent`) is not forwarded.
/// jq_core::forward_storage!(impl[S: Storage] for Named<S>, via inner, independent = none);
///
/// let named = Named { name: "memory", inner: jq_testkit::MemoryStorage::new() };
/// assert!(named.as_roles().is_some(), "the inner storage's capabilities show through");
/// ```
#[macro_export]
macro_rules! forward_storage {
    ($(#[$attr:meta])* impl[$($generics:tt)*] for $ty:ty, via $via:ident) => {
        $crate::forward_storage!(
            $(#[$attr])* impl[$($generics)*] for $ty, via $via,
            independent = |s| $crate::storage::Storage::independent(s).await.map(::std::convert::Into::into)
        );
    };
    ($(#[$attr:meta])* impl[$($generics:tt)*] for $ty:ty, via $via:ident, independent = none) => {
        $crate::forward_storage!($(#[$attr])* impl[$($generics)*] for $ty, via $via, independent = |_s| None);
    };
    (
        $(#[$attr:meta])* impl[$($generics:tt)*] for $ty:ty, via $via:ident,
        independent = |$is:ident| $independent:expr
    ) => {
        #[$crate::storage::async_trait]
        $(#[$attr])*
        impl<$($generics)*> $crate::storage::Storage for $ty {
            async fn enqueue(&self, jobs: ::std::vec::Vec<$crate::NewJob>) -> $crate::Result<::std::vec::Vec<$crate::JobId>> {
                $via!(self, s => $crate::storage::Storage::enqueue(s, jobs).await)
            }
            async fn claim(&self, request: &$crate::storage::ClaimRequest) -> $crate::Result<::std::vec::Vec<$crate::Job>> {
                $via!(self, s => $crate::storage::Storage::claim(s, request).await)
            }
            async fn settle(
                &self,
                batch: ::std::vec::Vec<$crate::storage::Settlement>,
            ) -> $crate::Result<::std::vec::Vec<$crate::storage::Settled>> {
                $via!(self, s => $crate::storage::Storage::settle(s, batch).await)
            }
            async fn heartbeat(
                &self,
                leases: &[$crate::storage::LeaseRef],
                lease: ::std::time::Duration,
            ) -> $crate::Result<$crate::storage::Beat> {
                $via!(self, s => $crate::storage::Storage::heartbeat(s, leases, lease).await)
            }
            async fn promote(&self) -> $crate::Result<u64> {
                $via!(self, s => $crate::storage::Storage::promote(s).await)
            }
            async fn recover(&self) -> $crate::Result<u64> {
                $via!(self, s => $crate::storage::Storage::recover(s).await)
            }
            async fn get(&self, id: $crate::JobId) -> $crate::Result<$crate::Job> {
                $via!(self, s => $crate::storage::Storage::get(s, id).await)
            }
            async fn list(&self, filter: &$crate::JobFilter) -> $crate::Result<::std::vec::Vec<$crate::Job>> {
                $via!(self, s => $crate::storage::Storage::list(s, filter).await)
            }
            async fn stats(&self) -> $crate::Result<$crate::Stats> {
                $via!(self, s => $crate::storage::Storage::stats(s).await)
            }
            async fn retry(&self, id: $crate::JobId) -> $crate::Result<()> {
                $via!(self, s => $crate::storage::Storage::retry(s, id).await)
            }
            async fn cancel(&self, id: $crate::JobId) -> $crate::Result<()> {
                $via!(self, s => $crate::storage::Storage::cancel(s, id).await)
            }
            async fn purge(&self, state: $crate::State, older_than: $crate::Timestamp) -> $crate::Result<u64> {
                $via!(self, s => $crate::storage::Storage::purge(s, state, older_than).await)
            }
            async fn migrate(&self) -> $crate::Result<usize> {
                $via!(self, s => $crate::storage::Storage::migrate(s).await)
            }
            async fn independent(&self) -> ::std::option::Option<Self> {
                $via!(self, $is => $independent)
            }
            fn subscribe(&self) -> ::std::option::Option<$crate::storage::WorkSignal> {
                $via!(self, s => $crate::storage::Storage::subscribe(s))
            }
            fn clock(&self) -> $crate::Clock {
                $via!(self, s => $crate::storage::Storage::clock(s))
            }
            fn as_roles(&self) -> ::std::option::Option<&dyn $crate::storage::RoleStorage> {
                $via!(self, s => $crate::storage::Storage::as_roles(s))
            }
            fn as_periodic(&self) -> ::std::option::Option<&dyn $crate::storage::PeriodicStorage> {
                $via!(self, s => $crate::storage::Storage::as_periodic(s))
            }
            fn as_controls(&self) -> ::std::option::Option<&dyn $crate::storage::ControlStorage> {
                $via!(self, s => $crate::storage::Storage::as_controls(s))
            }
            fn as_throughput(&self) -> ::std::option::Option<&dyn $crate::storage::ThroughputStorage> {
                $via!(self, s => $crate::storage::Storage::as_throughput(s))
            }
            fn as_cancellation(&self) -> ::std::option::Option<&dyn $crate::storage::CancelStorage> {
                $via!(self, s => $crate::storage::Storage::as_cancellation(s))
            }
            fn as_workflows(&self) -> ::std::option::Option<&dyn $crate::storage::WorkflowStorage> {
                $via!(self, s => $crate::storage::Storage::as_workflows(s))
            }
            fn as_keys(&self) -> ::std::option::Option<&dyn $crate::storage::KeyStorage> {
                $via!(self, s => $crate::storage::Storage::as_keys(s))
            }
        }
    };
}

/// `$body` with `$s` the storage inside an `Arc`.
macro_rules! deref_arc {
    ($this:ident, $s:ident => $body:expr) => {{
        let $s = &**$this;
        $body
    }};
}

// `S` may be unsized (`Arc<dyn Storage>`), and an unsized storage cannot
// hand out another of itself: behind an `Arc` the heartbeat shares the
// storage's connections (wrap a backend itself to give it its own).
crate::forward_storage!(
    impl[S: crate::storage::Storage + ?Sized] for std::sync::Arc<S>,
    via deref_arc,
    independent = none
);
