//! [`forward_storage!`](crate::forward_storage): a storage that is another
//! one (an `Arc`, an enum over backends) written once, as direct calls with
//! no extra boxing, so it costs nothing on the claim path. Its operations
//! come from the one list (`operations.rs`). A wrapper that changes what an
//! operation does is a [`Wrapper`](super::Wrapper) instead.

/// Implements [`Storage`](crate::storage::Storage) for a type by running
/// every core operation and the capability set on the storage that
/// `$via!` reaches: `$via!(self, s => expression using s)` must evaluate
/// the expression with `s` bound to a `&` of the inner storage (a macro, so
/// an enum can `match`). Calls name the trait, so an inherent method of the
/// inner type with the same name is never picked instead.
/// [`Storage::capabilities`](crate::storage::Storage::capabilities) hands
/// out the inner storage's own implementations, so capability calls cost no
/// extra hop either. Every core operation of the list is forwarded, so a
/// new one needs no change here. `independent` is forwarded too (the inner
/// storage's, converted with `Into`), unless the invocation ends with
/// `independent = none` (an unsized inner storage).
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
/// assert!(named.capabilities().roles.is_some(), "the inner storage's capabilities show through");
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
        $crate::__storage_operations!($crate::__forward_storage {
            [$(#[$attr])*] [$($generics)*] [$ty] $via [$is] [$independent]
        });
    };
}

/// `forward_storage!`'s implementation, written from the list of
/// operations: the core ones forwarded as static calls, then what is not
/// an operation. `#[deny(clippy::missing_trait_methods)]` keeps it whole:
/// a method of `Storage` it does not write (one with a default) fails
/// clippy instead of silently answering the default.
#[doc(hidden)]
#[macro_export]
macro_rules! __forward_storage {
    (
        { [$(#[$attr:meta])*] [$($generics:tt)*] [$ty:ty] $via:ident [$is:ident] [$independent:expr] }
        core {
            $(#[$storage_doc:meta])*
            $storage:ident
            required {
                $(
                    $(#[$req_doc:meta])*
                    $req_op:ident => async fn $req:ident(&self $(, $req_arg:ident: $req_ty:ty)*) -> $req_ret:ty;
                )*
            }
            provided {
                $(
                    $(#[$prov_doc:meta])*
                    $prov_op:ident => async fn $prov:ident(&self $(, $prov_arg:ident: $prov_ty:ty)*) -> $prov_ret:ty
                        $prov_body:block
                )*
            }
        }
        capabilities { $($capabilities:tt)* }
    ) => {
        #[$crate::storage::async_trait]
        $(#[$attr])*
        #[deny(clippy::missing_trait_methods)]
        impl<$($generics)*> $crate::storage::Storage for $ty {
            $(
                async fn $req(&self $(, $req_arg: $req_ty)*) -> $req_ret {
                    $via!(self, s => $crate::storage::Storage::$req(s $(, $req_arg)*).await)
                }
            )*
            $(
                async fn $prov(&self $(, $prov_arg: $prov_ty)*) -> $prov_ret {
                    $via!(self, s => $crate::storage::Storage::$prov(s $(, $prov_arg)*).await)
                }
            )*
            async fn independent(&self) -> ::std::option::Option<Self> {
                $via!(self, $is => $independent)
            }
            fn subscribe(&self) -> ::std::option::Option<$crate::storage::WorkSignal> {
                $via!(self, s => $crate::storage::Storage::subscribe(s))
            }
            fn clock(&self) -> $crate::Clock {
                $via!(self, s => $crate::storage::Storage::clock(s))
            }
            fn capabilities(&self) -> $crate::storage::Capabilities<'_> {
                $via!(self, s => $crate::storage::Storage::capabilities(s))
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
