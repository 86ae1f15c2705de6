//! Capabilities: optional groups of operations a backend declares beside
//! the core [`Storage`] (the job lifecycle and its reads).
//!
//! A backend implements a capability's trait and returns itself from the
//! matching accessor of [`Storage`] ([`Storage::as_roles`], ...). Callers
//! reach an operation through the accessor, so a backend without the
//! capability is refused with [`Error::Unsupported`] naming it, at the
//! call, or when a worker pool that needs it starts; the conformance kit
//! runs the scenarios of exactly the capabilities a backend declares.
//!
//! | capability | trait | used by |
//! |---|---|---|
//! | [`Capability::Roles`] | [`RoleStorage`] | one maintainer among many pools; `jqctl leaders` |
//! | [`Capability::Periodic`] | [`PeriodicStorage`] | periodic jobs ([`WorkerPool::periodic`](crate::WorkerPool::periodic)) |
//! | [`Capability::Controls`] | [`ControlStorage`] | pausing and limiting queues |
//! | [`Capability::Throughput`] | [`ThroughputStorage`] | the dashboard's chart, `jqctl stats` |
//! | [`Capability::Cancellation`] | [`CancelStorage`](super::CancelStorage) | cancelling running jobs, progress |
//! | [`Capability::Workflows`] | [`WorkflowStorage`](super::WorkflowStorage) | results, dependencies, batches |
//! | [`Capability::Keys`] | [`KeyStorage`](super::KeyStorage) | per-key limits, fair turns between keys |

use std::time::Duration;

use async_trait::async_trait;

pub use crate::capability::Capability;
use crate::clock::Timestamp;
use crate::control::{QueueInfo, QueueLimits};
use crate::error::{Error, Result};
use crate::id::LeaseToken;
use crate::job::QueueName;
use crate::periodic::{Fire, FireOutcome, PeriodicInfo};
use crate::read::Throughput;

/// The role the maintaining pool holds ([`RoleStorage::elect`]): promote,
/// recover and retention run on the one pool per store that holds it.
pub const MAINTENANCE_ROLE: &str = "maintenance";

/// Named roles: a lease per role that one holder at a time takes and
/// renews with its token, by the storage's clock ([`Capability::Roles`]).
/// The worker pool elects its maintainer with it; without it every pool
/// with maintenance on maintains (the operations are idempotent).
#[async_trait]
pub trait RoleStorage: Send + Sync {
    /// Takes or renews the lease of `election.role`: when the role is free,
    /// its lease expired (`expires_at <= now`), or it is held with
    /// `election.token` already, it becomes held with that token until
    /// `now + ttl` and the answer is `true`; when another token holds it
    /// unexpired, nothing changes and the answer is `false`.
    ///
    /// Atomic: of concurrent contenders for a free role exactly one wins.
    /// A holder whose lease expired and was taken over gets `false` on its
    /// next renewal. [`Error::InvalidInput`] for a bad role or a zero ttl.
    async fn elect(&self, election: &Election) -> Result<bool>;

    /// Frees `role` at once when it is held with `token`; does nothing
    /// otherwise (another holder, or nobody).
    async fn resign(&self, role: &str, token: LeaseToken) -> Result<()>;

    /// Every role with a holder (expired or not), by role name.
    async fn leaders(&self) -> Result<Vec<Leader>>;
}

/// Periodic jobs: a row per name holding its cursor, moved by a
/// compare-and-set that stores the tick's jobs in the same atomic step
/// ([`Capability::Periodic`]).
#[async_trait]
pub trait PeriodicStorage: Send + Sync {
    /// One step of a periodic job, atomically: when the stored row is the
    /// one `fire` expects (no row for `expected: None`; else the cursor
    /// equal to `expected` and the trigger equal to `expected_trigger`),
    /// the row becomes [`Fire::applied`] (cursor moved, counters added,
    /// trigger cleared, `declared_at` now) and the jobs are stored as
    /// [`Storage::enqueue`](super::Storage::enqueue) stores them, in the same step, and the answer
    /// is [`FireOutcome::Fired`] with their ids. Otherwise nothing changes
    /// and the answer is [`FireOutcome::Moved`].
    ///
    /// This is what makes a tick's job exactly one, whatever the number of
    /// pools: of concurrent steps from the same row, one wins; a step whose
    /// answer was lost and is sent again finds the cursor moved.
    /// [`Error::InvalidInput`] for a bad name or a job of another queue
    /// than `fire.queue`; [`Error::PayloadTooLarge`] as for enqueue
    /// (nothing stored either way).
    async fn fire(&self, fire: &Fire) -> Result<FireOutcome>;

    /// Every stored periodic job, by name.
    async fn periodic(&self) -> Result<Vec<PeriodicInfo>>;

    /// Triggers one job of periodic job `name` now: sets its trigger to now
    /// unless one is pending (triggers coalesce). The next pool that
    /// declares it stores the job (only code can build it), with the
    /// trigger's instant as its tick. [`Error::PeriodicNotFound`] when no
    /// such periodic job is stored.
    async fn trigger(&self, name: &str) -> Result<()>;
}

/// Queue controls: pauses and limits stored in the backend and honoured
/// inside every claim's atomic step ([`Capability::Controls`]).
#[async_trait]
pub trait ControlStorage: Send + Sync {
    /// Pauses (`true`) or resumes (`false`) `queue`, stored in the backend
    /// so that every claimer of every process honours it and it outlives
    /// restarts. While paused, claims take none of its jobs; enqueue still
    /// stores them and running jobs finish. Pausing a paused queue keeps its
    /// `paused_at`; resuming wakes the claimers ([`Storage::subscribe`](super::Storage::subscribe)).
    /// Works on a queue that holds no job yet.
    async fn set_paused(&self, queue: &QueueName, paused: bool) -> Result<()>;

    /// Replaces `queue`'s limits ([`QueueLimits`]; `QueueLimits::none()`
    /// lifts both), checked inside every claim's atomic step: at most
    /// `concurrency` of its jobs Running (counted from their leases, so a
    /// job whose lease expired keeps its slot until recover ends it), and
    /// at most `rate.limit` starts in any window `(t - period, t]` of the
    /// storage's clock, across every claimer. A job a limit holds back is
    /// not touched. [`Error::InvalidInput`] when [`QueueLimits::check`]
    /// fails.
    async fn set_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<()>;

    /// Every queue that holds a job or has a control, by name, with its
    /// pause, its limits, and which claimers met its control
    /// ([`QueueInfo::seen`]).
    async fn queues(&self) -> Result<Vec<QueueInfo>>;
}

/// Finished jobs per queue and minute, read from an index of finished jobs
/// ([`Capability::Throughput`]).
#[async_trait]
pub trait ThroughputStorage: Send + Sync {
    /// Jobs that reached Completed or Dead at or after the minute `since`
    /// falls in, counted per queue and per minute of their `finished_at`
    /// (UTC); one entry per (queue, minute) with any, ordered by queue then
    /// minute. Cancelled jobs are not counted; a job retried after dying
    /// counts where it finishes last; jobs already purged are gone. Reads
    /// the finished-jobs index: its cost grows with the jobs finished in
    /// the range, not with the store. [`Throughput::tally`] is the
    /// reference.
    async fn throughput(&self, since: Timestamp) -> Result<Vec<Throughput>>;
}

/// [`Error::Unsupported`] for `capability`.
pub fn unsupported(capability: Capability) -> Error {
    Error::Unsupported { capability }
}

/// A bid for a named role; see [`RoleStorage::elect`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Election {
    /// The role: 1 to 128 bytes of `A-Z a-z 0-9 _ - . :` (like a queue
    /// name), e.g. `"maintenance"`.
    pub role: String,
    /// The candidate's token: made once per candidate (a pool) and kept
    /// for every renewal; it is what proves the role is still its own.
    pub token: LeaseToken,
    /// The candidate's name, shown to operators ([`RoleStorage::leaders`]).
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

/// Who holds a role, as [`RoleStorage::leaders`] reports it.
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
