//! What a backend implements, and what the worker pool and the client call:
//! the core [`Storage`] trait (the job lifecycle and its reads), the
//! optional [capabilities](Capability) it declares ([`Capabilities`]),
//! [`StorageExt`] for one job at a time, [`Wrapper`] for wrappers, and
//! [`forward_storage!`](crate::forward_storage) for plain forwarding. Every
//! operation is listed once (`operations.rs`); the traits, [`Operation`],
//! [`Wrapper`] and `forward_storage!` are written from that list.
//!
//! # Contract
//!
//! `docs/CONTRACT.md` in the repository is the full text; `jq-testkit`
//! makes it executable. In short, for every backend:
//!
//! - "now" is the backend's [`Clock`](crate::Clock), never the server's, so a test can
//!   move time without sleeping.
//! - A job is *claimable* when it is Pending, or Scheduled with
//!   `run_at <= now`, and its queue was asked for.
//! - Every change to a claimed job presents the claim's [`LeaseToken`]. A
//!   token that is not the job's current one, or a job that is no longer
//!   Running, changes nothing and reports [`Error::LeaseLost`](crate::Error::LeaseLost).
//! - A lease is valid while `now < expires_at`. An expired lease still
//!   fences (an ack with it works) until [`Storage::recover`] or another
//!   claim takes the job: recovery is what ends a lease, not the clock.
//! - Nothing leaves the store except by [`Storage::purge`].
//! - A claim is idempotent under its [`ClaimRequest::token`]: a claim whose
//!   answer was lost is sent again with the same token and `resend` set,
//!   and gets the jobs the first attempt took instead of taking more.
//! - A claim hands over everything it took: once jobs are Running under
//!   its token, no later failure inside the same call drops them (a job it
//!   could not finish handling stays Running, is logged, and recover hands
//!   it on); it returns an error only when it claimed nothing.
//!
//! # Writing a backend
//!
//! Implement [`Storage`] (twelve operations and a clock), run
//! `jq_testkit::conformance!` against it, then add the capabilities you
//! want, one trait each, and declare them in [`Storage::capabilities`]
//! (`Capabilities { roles: Some(self), ..Capabilities::NONE }`).
//! `examples/custom-backend` in the repository has a core-only backend and
//! a complete one.

mod cancel;
mod capability;
mod core;
mod forward;
mod keys;
mod operations;
pub(crate) mod types;
mod workflow;
mod wrapper;

pub use self::core::{
    CancelStorage, Capabilities, ControlStorage, DurableStorage, KeyStorage, PeriodicStorage, RoleStorage, Storage,
    StorageExt, ThroughputStorage, WorkflowStorage,
};
pub use cancel::{
    CancelAnswer, MAX_CANCEL_REASON_BYTES, MAX_PROGRESS_BYTES, ProgressReport, cancel_reason, check_progress,
};
pub use capability::{Capability, DurableLimit, Election, Leader, MAINTENANCE_ROLE, check_role, unsupported};
pub use keys::refuse_keys;
pub use types::{
    Beat, ClaimAnswer, ClaimRequest, Limited, Outcome, Settled, Settlement, WorkSignal, check_purge_state, held_by,
};
pub use workflow::workflow_not_found;
pub use wrapper::{Operation, Wrapper};

pub use crate::clock::{add, from_micros, sub, truncate_micros};
pub use crate::control::{MAX_LIMIT, MAX_RATE_PERIOD, SEEN_TTL, allowance, seen_forgotten_at};
pub use crate::id::LeaseToken;
pub use crate::job::{Decision, Holder, LeaseRef, MAX_KEY_BYTES, MAX_NAME_BYTES, check_key, decide};
pub use crate::read::minute_of;
pub use crate::redact::{redact_url, take_query_param};
pub use crate::text::{NUL_REPLACEMENT, storable_message};
/// `#[async_trait]`, which [`Storage`] and the capability traits are
/// implemented with.
pub use async_trait::async_trait;
