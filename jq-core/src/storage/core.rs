//! The traits every backend implements, written from the one list of
//! operations (`operations.rs`): the core ([`Storage`]: the job lifecycle,
//! its reads, a clock, and the [`Capabilities`] it declares) and the eight
//! capability traits; and the conveniences over them ([`StorageExt`]).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

#[cfg(doc)]
use super::cancel::{CancelAnswer, cancel_reason, check_progress};
use super::capability::unsupported;
#[cfg(doc)]
use super::capability::{Election, Leader};
#[cfg(doc)]
use super::keys::refuse_keys;
#[cfg(doc)]
use super::types::{Beat, ClaimRequest};
use super::types::{Outcome, Settlement, WorkSignal};
use crate::capability::Capability;
use crate::clock::Clock;
#[cfg(doc)]
use crate::control::{QueueInfo, QueueLimits};
use crate::error::{Error, Result};
use crate::id::JobId;
#[cfg(doc)]
use crate::id::LeaseToken;
use crate::job::{LeaseRef, NewJob};
#[cfg(doc)]
use crate::keys::KeyReport;
#[cfg(doc)]
use crate::periodic::{Fire, FireOutcome};
#[cfg(doc)]
use crate::read::Throughput;
use crate::state::State;
#[cfg(doc)]
use crate::workflow::WorkflowPlan;

/// Writes the traits from the list: `Storage` (its operations, then what
/// is not an operation: the wake-up signal, the heartbeat's own handle,
/// the clock, the capabilities), each capability trait, the
/// [`Capabilities`] set, and [`StorageExt`] (a `require_*` per capability,
/// then the one-job conveniences).
macro_rules! define_storage {
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
        $(#[$storage_doc])*
        #[async_trait]
        pub trait $storage: Send + Sync + 'static {
            $(
                $(#[$req_doc])*
                async fn $req(&self $(, $req_arg: $req_ty)*) -> $req_ret;
            )*
            $(
                $(#[$prov_doc])*
                async fn $prov(&self $(, $prov_arg: $prov_ty)*) -> $prov_ret $prov_body
            )*

            /// A signal that changes when work may have arrived (a same-process
            /// enqueue, a NOTIFY, a pub/sub message), or `None` when the backend has
            /// none; the pool then polls.
            fn subscribe(&self) -> Option<WorkSignal> {
                None
            }

            /// Another handle on the same store whose connections are its own,
            /// opened by the tokio runtime that first uses them; `None` (the
            /// default) when this storage's calls do not depend on the runtime that
            /// made it (in memory, or on threads of its own, like SQLite's).
            ///
            /// The worker pool heartbeats on a thread of its own, so that handlers
            /// that block the application's runtime threads cannot starve the
            /// leases. A tokio socket is driven by the runtime that opened it: if
            /// the heartbeat shared the application's connections, it would stall
            /// with them. A backend on tokio sockets returns a handle here, called
            /// once per pool on the heartbeat's thread, that shares this handle's
            /// settings and caches but opens its connections there.
            async fn independent(&self) -> Option<Self>
            where
                Self: Sized,
            {
                None
            }

            /// The clock this storage takes "now" from. The worker pool uses it too
            /// (retention cut-offs), so a storage on a [`ManualClock`](crate::ManualClock)
            /// moves the whole pool's time.
            fn clock(&self) -> Clock;

            /// The capabilities this storage declares, each its own
            /// implementation ([`Capabilities::NONE`], the default: the core
            /// only). A backend declares all of them here, in one place:
            /// `Capabilities { roles: Some(self), periodic: Some(self),
            /// ..Capabilities::NONE }` for one with roles and periodic jobs
            /// (`examples/custom-backend` in the repository has one).
            ///
            /// Callers reach an operation through it ([`StorageExt::require_roles`],
            /// ...), and the conformance suite runs the scenarios of what it
            /// declares. A backend without [`Capability::Keys`] refuses keyed
            /// jobs ([`refuse_keys`](super::refuse_keys)).
            fn capabilities(&self) -> Capabilities<'_> {
                Capabilities::NONE
            }
        }

        $(
            $(#[$cap_doc])*
            #[async_trait]
            pub trait $cap_trait: Send + Sync {
                $(
                    $(#[$op_doc])*
                    async fn $op(&self $(, $arg: $ty)*) -> $ret;
                )*
            }
        )*

        /// What a storage declares beside the core ([`Storage::capabilities`]):
        /// for each capability, the storage's own implementation of its
        /// trait, or `None`. Copy it freely: it is a handful of references.
        #[derive(Clone, Copy, Default)]
        pub struct Capabilities<'a> {
            $(
                #[doc = concat!(
                    "[`", stringify!($cap_trait), "`] ([`Capability::", stringify!($cap), "`]), when the storage has it."
                )]
                pub $field: Option<&'a dyn $cap_trait>,
            )*
        }

        impl Capabilities<'_> {
            /// No capability: a core-only storage.
            pub const NONE: Capabilities<'static> = Capabilities { $($field: None,)* };

            /// True when `capability` is declared.
            pub fn has(&self, capability: Capability) -> bool {
                match capability {
                    $(Capability::$cap => self.$field.is_some(),)*
                }
            }

            /// Every capability declared, in [`Capability::ALL`]'s order.
            pub fn declared(&self) -> Vec<Capability> {
                Capability::ALL.into_iter().filter(|c| self.has(*c)).collect()
            }
        }

        impl fmt::Debug for Capabilities<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_set().entries(self.declared()).finish()
            }
        }

        /// Conveniences over [`Storage`]: the capabilities as results, and
        /// one job at a time. Implemented for every storage; backends never
        /// implement it.
        #[async_trait]
        pub trait StorageExt: $storage {
            $(
                #[doc = concat!(
                    "[`Capabilities::", stringify!($field), "`] of [`Storage::capabilities`], or [`Error::Unsupported`]."
                )]
                fn $require(&self) -> Result<&dyn $cap_trait> {
                    self.capabilities().$field.ok_or_else(|| unsupported(Capability::$cap))
                }
            )*

            /// Enqueues one job and returns its id (the existing job's id when a
            /// unique key matched).
            async fn enqueue_one(&self, job: NewJob) -> Result<JobId> {
                let mut ids = self.enqueue(vec![job]).await?;
                ids.pop().ok_or_else(|| Error::Backend { backend: "storage", source: "enqueue returned no id".into() })
            }

            /// Applies one outcome; `Err(LeaseLost)` when the token is stale.
            async fn settle_one(&self, lease: LeaseRef, outcome: Outcome) -> Result<State> {
                let mut results = self.settle(vec![Settlement { lease, outcome }]).await?;
                results.pop().unwrap_or_else(|| {
                    Err(Error::Backend { backend: "storage", source: "settle returned no result".into() })
                })
            }

            /// Ack: Running -> Completed.
            async fn ack(&self, lease: LeaseRef) -> Result<()> {
                self.settle_one(lease, Outcome::Ack).await.map(drop)
            }

            /// Nack: records the error; Scheduled after `delay` with attempts left,
            /// else Dead.
            async fn nack(&self, lease: LeaseRef, error: impl Into<String> + Send, delay: Duration) -> Result<State> {
                self.settle_one(lease, Outcome::Nack { error: error.into(), delay }).await
            }

            /// Bury: records the error and goes to Dead now.
            async fn bury(&self, lease: LeaseRef, error: impl Into<String> + Send) -> Result<()> {
                self.settle_one(lease, Outcome::Bury { error: error.into() }).await.map(drop)
            }

            /// Release: Running -> Pending without counting the attempt.
            async fn release(&self, lease: LeaseRef) -> Result<()> {
                self.settle_one(lease, Outcome::Release { delay: Duration::ZERO }).await.map(drop)
            }
        }

        impl<S: $storage + ?Sized> StorageExt for S {}
    };
}

crate::__storage_operations!(define_storage {});

impl Capability {
    /// True when `storage` declares this capability
    /// ([`Capabilities::has`] of [`Storage::capabilities`]).
    pub fn of<S: Storage + ?Sized>(self, storage: &S) -> bool {
        storage.capabilities().has(self)
    }
}
