//! [`Capability`]: the names of the optional groups of storage operations.
//! A leaf, so the error type can name one; what each holds is in
//! [`crate::storage`].

use std::fmt;

/// An optional group of storage operations a backend declares beside the
/// core; see [`crate::storage`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Capability {
    /// Named roles held under a lease ([`RoleStorage`](crate::storage::RoleStorage)).
    Roles,
    /// Periodic jobs' cursors and triggers ([`PeriodicStorage`](crate::storage::PeriodicStorage)).
    Periodic,
    /// Stored pauses and limits of queues ([`ControlStorage`](crate::storage::ControlStorage)).
    Controls,
    /// Finished jobs per queue and minute ([`ThroughputStorage`](crate::storage::ThroughputStorage)).
    Throughput,
    /// Cancelling running jobs, and their progress ([`CancelStorage`](crate::storage::CancelStorage)).
    Cancellation,
    /// Results and dependencies ([`WorkflowStorage`](crate::storage::WorkflowStorage)).
    Workflows,
    /// Keyed jobs: per-key limits and the fair rotation between keys
    /// ([`KeyStorage`](crate::storage::KeyStorage)).
    Keys,
    /// Durable jobs: a journal of steps, durable sleeps and signals
    /// ([`DurableStorage`](crate::storage::DurableStorage)).
    Durable,
}

/// A limit of durable jobs, the same on every backend and every path
/// (the contract's "Durable jobs"); named by
/// [`Error::DurableLimit`](crate::Error::DurableLimit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DurableLimit {
    /// The bytes of one step's result or one signal's payload (JSON text).
    StepResultBytes,
    /// The entries of one job's journal.
    Steps,
    /// The bytes of one job's journal: its entries' names and values.
    JournalBytes,
    /// The signals one job holds that no wait has taken yet.
    Signals,
}

impl DurableLimit {
    /// The limit's name, as errors and docs give it.
    pub fn name(self) -> &'static str {
        match self {
            DurableLimit::StepResultBytes => "step result bytes",
            DurableLimit::Steps => "steps per job",
            DurableLimit::JournalBytes => "journal bytes",
            DurableLimit::Signals => "signals not taken",
        }
    }
}

impl fmt::Display for DurableLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Capability {
    /// Every capability.
    pub const ALL: [Capability; 8] = [
        Capability::Roles,
        Capability::Periodic,
        Capability::Controls,
        Capability::Throughput,
        Capability::Cancellation,
        Capability::Workflows,
        Capability::Keys,
        Capability::Durable,
    ];

    /// What it is for, for people ("named roles", ...).
    pub fn describe(self) -> &'static str {
        match self {
            Capability::Roles => "named roles (one maintainer among many pools)",
            Capability::Periodic => "periodic jobs",
            Capability::Controls => "queue pauses and limits",
            Capability::Throughput => "throughput per minute",
            Capability::Cancellation => "cancelling running jobs and their progress",
            Capability::Workflows => "workflows (results and dependencies)",
            Capability::Keys => "keyed jobs (per-key limits and fair turns between keys)",
            Capability::Durable => "durable jobs (steps, durable sleeps and signals)",
        }
    }

    /// The trait a backend implements for it.
    pub fn trait_name(self) -> &'static str {
        match self {
            Capability::Roles => "RoleStorage",
            Capability::Periodic => "PeriodicStorage",
            Capability::Controls => "ControlStorage",
            Capability::Throughput => "ThroughputStorage",
            Capability::Cancellation => "CancelStorage",
            Capability::Workflows => "WorkflowStorage",
            Capability::Keys => "KeyStorage",
            Capability::Durable => "DurableStorage",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}
