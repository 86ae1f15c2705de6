//! [`Wrapper`]: a storage wrapped around another, written by overriding
//! only the operations it changes; every other one forwards to the inner
//! storage. Written from the one list of operations (`operations.rs`), with
//! [`Operation`], the name of each: a new operation reaches every wrapper
//! without a change to any of them.

use futures::future::BoxFuture;

use super::capability::unsupported;
use super::core::{Capabilities, Storage};
use super::types::WorkSignal;
use crate::capability::Capability;
use crate::clock::Clock;
use crate::error::Result;

/// Writes, from the list: [`Operation`] (a variant per operation, `ALL`,
/// its capability and name), the [`Wrapper`] trait (a default per
/// operation that runs the inner storage's through [`Wrapper::around`]),
/// and the blanket implementations of `Storage` and of every capability
/// trait for every `Wrapper`.
macro_rules! define_wrapper {
    (
        {}
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
        capabilities {
            $(
                $(#[$cap_doc:meta])*
                $cap:ident: $cap_trait:ident, $field:ident, $require:ident {
                    $(
                        $(#[$op_doc:meta])*
                        $op_variant:ident => async fn $op:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;
                    )*
                }
            )*
        }
    ) => {
        /// Every storage operation, core and capabilities: what
        /// [`Wrapper::around`] is told it wraps, and what `jq-testkit`'s
        /// `FaultyStorage` counts and fails.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Operation {
            $(
                #[doc = concat!("[`Storage::", stringify!($req), "`].")]
                $req_op,
            )*
            $(
                #[doc = concat!("[`Storage::", stringify!($prov), "`].")]
                $prov_op,
            )*
            $($(
                #[doc = concat!("[`", stringify!($cap_trait), "::", stringify!($op), "`](super::", stringify!($cap_trait), "::", stringify!($op), ").")]
                $op_variant,
            )*)*
        }

        impl Operation {
            /// Every operation: the core's, then each capability's.
            pub const ALL: [Operation; [$(stringify!($req_op),)* $(stringify!($prov_op),)* $($(stringify!($op_variant),)*)*].len()] = [
                $(Operation::$req_op,)*
                $(Operation::$prov_op,)*
                $($(Operation::$op_variant,)*)*
            ];

            /// The capability it belongs to; `None` for the core.
            pub fn capability(self) -> Option<Capability> {
                match self {
                    $(Operation::$req_op => None,)*
                    $(Operation::$prov_op => None,)*
                    $($(Operation::$op_variant => Some(Capability::$cap),)*)*
                }
            }

            /// The method's name (`"enqueue"`, `"elect"`, ...).
            pub fn name(self) -> &'static str {
                match self {
                    $(Operation::$req_op => stringify!($req),)*
                    $(Operation::$prov_op => stringify!($prov),)*
                    $($(Operation::$op_variant => stringify!($op),)*)*
                }
            }
        }

        /// A storage around an inner one (fault injection, a barrier, metrics
        /// of your own): implement [`Wrapper::inner`] and override the
        /// operations you change; the others forward. Every `Wrapper` is a
        /// [`Storage`] and implements each capability trait, declaring
        /// exactly the capabilities of its inner storage (a capability call
        /// the inner storage lacks is [`Error::Unsupported`](crate::Error::Unsupported)).
        /// [`Wrapper::around`] wraps every operation at once.
        ///
        /// A type that changes nothing (an `Arc`, an enum over backends) is
        /// written with [`forward_storage!`](crate::forward_storage)
        /// instead: static calls, no boxed future per call.
        ///
        /// ```
        /// use jq_core::storage::{Operation, Wrapper};
        /// use jq_core::Result;
        /// use futures::future::BoxFuture;
        ///
        /// /// Counts the claims of any storage.
        /// struct Counting<S> { inner: S, claims: std::sync::atomic::AtomicU64 }
        ///
        /// #[jq_core::storage::async_trait]
        /// impl<S: jq_core::storage::Storage> Wrapper for Counting<S> {
        ///     type Inner = S;
        ///     fn inner(&self) -> &S { &self.inner }
        ///     async fn around<T: Send>(&self, op: Operation, call: BoxFuture<'_, Result<T>>) -> Result<T> {
        ///         if op == Operation::Claim {
        ///             self.claims.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ///         }
        ///         call.await
        ///     }
        /// }
        /// ```
        #[async_trait::async_trait]
        pub trait Wrapper: Send + Sync + 'static {
            /// The storage underneath.
            type Inner: Storage;

            /// The storage underneath.
            fn inner(&self) -> &Self::Inner;

            /// Runs every operation that is not overridden: `call` is the inner
            /// storage's, not yet started. The default just awaits it.
            async fn around<T: Send>(&self, op: Operation, call: BoxFuture<'_, Result<T>>) -> Result<T> {
                let _ = op;
                call.await
            }

            $(
                #[doc = concat!("[`Storage::", stringify!($req), "`].")]
                async fn $req(&self $(, $req_arg: $req_ty)*) -> $req_ret {
                    self.around(Operation::$req_op, Storage::$req(self.inner() $(, $req_arg)*)).await
                }
            )*
            $(
                #[doc = concat!("[`Storage::", stringify!($prov), "`].")]
                async fn $prov(&self $(, $prov_arg: $prov_ty)*) -> $prov_ret {
                    self.around(Operation::$prov_op, Storage::$prov(self.inner() $(, $prov_arg)*)).await
                }
            )*

            /// [`Storage::subscribe`]: the inner storage's signal.
            fn subscribe(&self) -> Option<WorkSignal> {
                self.inner().subscribe()
            }

            /// [`Storage::clock`]: the inner storage's clock.
            fn clock(&self) -> Clock {
                self.inner().clock()
            }

            $($(
                #[doc = concat!("[`", stringify!($cap_trait), "::", stringify!($op), "`](super::", stringify!($cap_trait), "::", stringify!($op), ").")]
                async fn $op(&self $(, $arg: $ty)*) -> $ret {
                    let inner = self.inner().capabilities().$field.ok_or_else(|| unsupported(Capability::$cap))?;
                    self.around(Operation::$op_variant, inner.$op($($arg),*)).await
                }
            )*)*
        }

        #[async_trait::async_trait]
        #[deny(clippy::missing_trait_methods)]
        impl<W: Wrapper> Storage for W {
            $(
                async fn $req(&self $(, $req_arg: $req_ty)*) -> $req_ret {
                    Wrapper::$req(self $(, $req_arg)*).await
                }
            )*
            $(
                async fn $prov(&self $(, $prov_arg: $prov_ty)*) -> $prov_ret {
                    Wrapper::$prov(self $(, $prov_arg)*).await
                }
            )*
            fn subscribe(&self) -> Option<WorkSignal> {
                Wrapper::subscribe(self)
            }
            // A wrapper cannot make another of itself from the inner
            // storage's handle: its heartbeat shares the wrapper's
            // connections (wrap a backend's own handle to give it its own).
            async fn independent(&self) -> Option<Self> {
                None
            }
            fn clock(&self) -> Clock {
                Wrapper::clock(self)
            }
            fn capabilities(&self) -> Capabilities<'_> {
                let inner = self.inner().capabilities();
                Capabilities { $($field: inner.$field.map(|_| self as &dyn super::$cap_trait),)* }
            }
        }

        $(
            #[async_trait::async_trait]
            #[deny(clippy::missing_trait_methods)]
            impl<W: Wrapper> super::$cap_trait for W {
                $(
                    async fn $op(&self $(, $arg: $ty)*) -> $ret {
                        Wrapper::$op(self $(, $arg)*).await
                    }
                )*
            }
        )*
    };
}

crate::__storage_operations!(define_wrapper {});
