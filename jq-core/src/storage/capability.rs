//! Capabilities: optional groups of operations a backend declares beside
//! the core [`Storage`](super::Storage) (the job lifecycle and its reads);
//! here, what the roles capability's calls take and answer, and the
//! refusal of a capability a storage lacks ([`unsupported`]).
//!
//! A backend implements a capability's trait and declares it, with the
//! others, in one place: [`Storage::capabilities`](super::Storage::capabilities)
//! returns its [`Capabilities`](super::Capabilities). Callers reach an
//! operation through that set ([`StorageExt::require_roles`](super::StorageExt::require_roles),
//! ...), so a backend without the capability is refused with
//! [`Error::Unsupported`] naming it, at the call, or when a worker pool
//! that needs it starts; the conformance kit runs the scenarios of exactly
//! the capabilities a backend declares.
//!
//! | capability | trait | used by |
//! |---|---|---|
//! | [`Capability::Roles`] | [`RoleStorage`](super::RoleStorage) | one maintainer among many pools; `jqctl leaders` |
//! | [`Capability::Periodic`] | [`PeriodicStorage`](super::PeriodicStorage) | periodic jobs ([`WorkerPool::periodic`](crate::WorkerPool::periodic)) |
//! | [`Capability::Controls`] | [`ControlStorage`](super::ControlStorage) | pausing and limiting queues |
//! | [`Capability::Throughput`] | [`ThroughputStorage`](super::ThroughputStorage) | the dashboard's chart, `jqctl stats` |
//! | [`Capability::Cancellation`] | [`CancelStorage`](super::CancelStorage) | cancelling running jobs, progress |
//! | [`Capability::Workflows`] | [`WorkflowStorage`](super::WorkflowStorage) | results, dependencies, batches |
//! | [`Capability::Keys`] | [`KeyStorage`](super::KeyStorage) | per-key limits, fair turns between keys |
//! | [`Capability::Durable`] | [`DurableStorage`](super::DurableStorage) | durable jobs: steps, sleeps, signals |

use std::time::Duration;

pub use crate::capability::{Capability, DurableLimit};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::id::LeaseToken;

/// The role the maintaining pool holds ([`RoleStorage::elect`](super::RoleStorage::elect)): promote,
/// recover and retention run on the one pool per store that holds it.
pub const MAINTENANCE_ROLE: &str = "maintenance";

/// [`Error::Unsupported`] for `capability`.
pub fn unsupported(capability: Capability) -> Error {
    Error::Unsupported { capability }
}

/// A bid for a named role; see [`RoleStorage::elect`](super::RoleStorage::elect).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Election {
    /// The role: 1 to 128 bytes of `A-Z a-z 0-9 _ - . :` (like a queue
    /// name), e.g. `"maintenance"`.
    pub role: String,
    /// The candidate's token: made once per candidate (a pool) and kept
    /// for every renewal; it is what proves the role is still its own.
    pub token: LeaseToken,
    /// The candidate's name, shown to operators ([`RoleStorage::leaders`](super::RoleStorage::leaders)).
    pub holder: String,
    /// How long the role is held from now without a renewal; above zero.
    pub ttl: Duration,
}

impl Election {
    /// Checks the role name, the ttl and that the holder name has no NUL:
    /// [`Error::InvalidInput`] otherwise.
    pub fn check(&self) -> Result<()> {
        check_role(&self.role)?;
        crate::text::check_no_nul("holder", &self.holder)?;
        if self.ttl.is_zero() {
            return Err(Error::invalid("election ttl", "0 s: a role must be held for some time"));
        }
        Ok(())
    }
}

/// Checks a role name (the rules of a queue name, without a hash tag):
/// [`Error::InvalidInput`] when it is empty, longer than 128 bytes, or has
/// another character.
pub fn check_role(role: &str) -> Result<()> {
    if crate::job::is_plain_name(role) {
        Ok(())
    } else {
        Err(Error::invalid("role", format!("{role:?}: use 1 to 128 bytes of letters, digits and _ - . :")))
    }
}

/// Who holds a role, as [`RoleStorage::leaders`](super::RoleStorage::leaders) reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The role.
    pub role: String,
    /// The holder's name ([`Election::holder`]).
    pub holder: String,
    /// When the role is free unless renewed; a past instant means the
    /// holder stopped renewing and anyone may take it.
    pub expires_at: Timestamp,
}
