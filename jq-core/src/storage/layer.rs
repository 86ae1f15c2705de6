//! [`Layer`]: a storage wrapped around another, written by overriding only
//! the operations it changes; every other one forwards to the inner
//! storage. The forwarding is written here, once: a new operation reaches
//! every layer without a change to any of them.

use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;

use super::Storage;
use super::cancel::{CancelAnswer, CancelStorage, ProgressReport};
use super::capability::{
    Capability, ControlStorage, Election, Leader, PeriodicStorage, RoleStorage, ThroughputStorage, unsupported,
};
use super::keys::KeyStorage;
use super::types::{Beat, ClaimRequest, Settled, Settlement, WorkSignal};
use super::workflow::WorkflowStorage;
use crate::clock::{Clock, Timestamp};
use crate::control::{QueueInfo, QueueLimits};
use crate::error::Result;
use crate::id::{JobId, LeaseToken};
use crate::job::{Job, LeaseRef, NewJob, QueueName};
use crate::keys::KeyReport;
use crate::periodic::{Fire, FireOutcome, PeriodicInfo};
use crate::read::{JobFilter, Stats, Throughput};
use crate::state::State;
use crate::workflow::{JobLinks, ParentResult, StepInfo, WorkflowId, WorkflowInfo, WorkflowPlan};

/// Every storage operation, core and capabilities: what [`Layer::around`]
/// is told it wraps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// [`Storage::enqueue`].
    Enqueue,
    /// [`Storage::claim`].
    Claim,
    /// [`Storage::settle`].
    Settle,
    /// [`Storage::heartbeat`].
    Heartbeat,
    /// [`Storage::promote`].
    Promote,
    /// [`Storage::recover`].
    Recover,
    /// [`Storage::get`].
    Get,
    /// [`Storage::list`].
    List,
    /// [`Storage::stats`].
    Stats,
    /// [`Storage::retry`].
    Retry,
    /// [`Storage::cancel`].
    Cancel,
    /// [`Storage::purge`].
    Purge,
    /// [`Storage::migrate`].
    Migrate,
    /// [`RoleStorage::elect`].
    Elect,
    /// [`RoleStorage::resign`].
    Resign,
    /// [`RoleStorage::leaders`].
    Leaders,
    /// [`PeriodicStorage::fire`].
    Fire,
    /// [`PeriodicStorage::periodic`].
    Periodic,
    /// [`PeriodicStorage::trigger`].
    Trigger,
    /// [`ControlStorage::set_paused`].
    SetPaused,
    /// [`ControlStorage::set_limits`].
    SetLimits,
    /// [`ControlStorage::queues`].
    Queues,
    /// [`ThroughputStorage::throughput`].
    Throughput,
    /// [`CancelStorage::request_cancel`].
    RequestCancel,
    /// [`CancelStorage::progress`].
    Progress,
    /// [`WorkflowStorage::enqueue_workflow`].
    EnqueueWorkflow,
    /// [`WorkflowStorage::result`].
    Result,
    /// [`WorkflowStorage::links`].
    Links,
    /// [`WorkflowStorage::parent_results`].
    ParentResults,
    /// [`WorkflowStorage::workflow`].
    Workflow,
    /// [`WorkflowStorage::workflow_steps`].
    WorkflowSteps,
    /// [`KeyStorage::set_key_limits`].
    SetKeyLimits,
    /// [`KeyStorage::clear_key_limits`].
    ClearKeyLimits,
    /// [`KeyStorage::keys`].
    Keys,
}

impl Operation {
    /// Every operation.
    pub const ALL: [Operation; 34] = [
        Operation::Enqueue,
        Operation::Claim,
        Operation::Settle,
        Operation::Heartbeat,
        Operation::Promote,
        Operation::Recover,
        Operation::Get,
        Operation::List,
        Operation::Stats,
        Operation::Retry,
        Operation::Cancel,
        Operation::Purge,
        Operation::Migrate,
        Operation::Elect,
        Operation::Resign,
        Operation::Leaders,
        Operation::Fire,
        Operation::Periodic,
        Operation::Trigger,
        Operation::SetPaused,
        Operation::SetLimits,
        Operation::Queues,
        Operation::Throughput,
        Operation::RequestCancel,
        Operation::Progress,
        Operation::EnqueueWorkflow,
        Operation::Result,
        Operation::Links,
        Operation::ParentResults,
        Operation::Workflow,
        Operation::WorkflowSteps,
        Operation::SetKeyLimits,
        Operation::ClearKeyLimits,
        Operation::Keys,
    ];

    /// The capability it belongs to; `None` for the core.
    pub fn capability(self) -> Option<Capability> {
        match self {
            Operation::Elect | Operation::Resign | Operation::Leaders => Some(Capability::Roles),
            Operation::Fire | Operation::Periodic | Operation::Trigger => Some(Capability::Periodic),
            Operation::SetPaused | Operation::SetLimits | Operation::Queues => Some(Capability::Controls),
            Operation::Throughput => Some(Capability::Throughput),
            Operation::RequestCancel | Operation::Progress => Some(Capability::Cancellation),
            Operation::EnqueueWorkflow
            | Operation::Result
            | Operation::Links
            | Operation::ParentResults
            | Operation::Workflow
            | Operation::WorkflowSteps => Some(Capability::Workflows),
            Operation::SetKeyLimits | Operation::ClearKeyLimits | Operation::Keys => Some(Capability::Keys),
            _ => None,
        }
    }
}

/// A storage around an inner one (fault injection, a barrier, metrics of
/// your own): implement [`Layer::inner`] and override the operations you
/// change; the others forward. Every `Layer` is a [`Storage`] and
/// implements each capability trait, declaring exactly the capabilities
/// of its inner storage. [`Layer::around`] wraps every operation at once.
///
/// ```
/// use jq_core::storage::{Layer, Operation};
/// use jq_core::Result;
/// use futures::future::BoxFuture;
///
/// /// Counts the claims of any storage.
/// struct Counting<S> { inner: S, claims: std::sync::atomic::AtomicU64 }
///
/// #[jq_core::storage::async_trait]
/// impl<S: jq_core::storage::Storage> Layer for Counting<S> {
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
#[async_trait]
pub trait Layer: Send + Sync + 'static {
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

    /// [`Storage::enqueue`].
    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        self.around(Operation::Enqueue, self.inner().enqueue(jobs)).await
    }
    /// [`Storage::claim`].
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Job>> {
        self.around(Operation::Claim, self.inner().claim(request)).await
    }
    /// [`Storage::settle`].
    async fn settle(&self, batch: Vec<Settlement>) -> Result<Vec<Settled>> {
        self.around(Operation::Settle, self.inner().settle(batch)).await
    }
    /// [`Storage::heartbeat`].
    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<Beat> {
        self.around(Operation::Heartbeat, self.inner().heartbeat(leases, lease)).await
    }
    /// [`Storage::promote`].
    async fn promote(&self) -> Result<u64> {
        self.around(Operation::Promote, self.inner().promote()).await
    }
    /// [`Storage::recover`].
    async fn recover(&self) -> Result<u64> {
        self.around(Operation::Recover, self.inner().recover()).await
    }
    /// [`Storage::get`].
    async fn get(&self, id: JobId) -> Result<Job> {
        self.around(Operation::Get, self.inner().get(id)).await
    }
    /// [`Storage::list`].
    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        self.around(Operation::List, self.inner().list(filter)).await
    }
    /// [`Storage::stats`].
    async fn stats(&self) -> Result<Stats> {
        self.around(Operation::Stats, self.inner().stats()).await
    }
    /// [`Storage::retry`].
    async fn retry(&self, id: JobId) -> Result<()> {
        self.around(Operation::Retry, self.inner().retry(id)).await
    }
    /// [`Storage::cancel`].
    async fn cancel(&self, id: JobId) -> Result<()> {
        self.around(Operation::Cancel, self.inner().cancel(id)).await
    }
    /// [`Storage::purge`].
    async fn purge(&self, state: State, older_than: Timestamp) -> Result<u64> {
        self.around(Operation::Purge, self.inner().purge(state, older_than)).await
    }
    /// [`Storage::migrate`].
    async fn migrate(&self) -> Result<usize> {
        self.around(Operation::Migrate, self.inner().migrate()).await
    }
    /// [`Storage::subscribe`].
    fn subscribe(&self) -> Option<WorkSignal> {
        self.inner().subscribe()
    }
    /// [`Storage::clock`].
    fn clock(&self) -> Clock {
        self.inner().clock()
    }

    /// [`RoleStorage::elect`].
    async fn elect(&self, election: &Election) -> Result<bool> {
        let roles = self.inner().as_roles().ok_or_else(|| unsupported(Capability::Roles))?;
        self.around(Operation::Elect, roles.elect(election)).await
    }
    /// [`RoleStorage::resign`].
    async fn resign(&self, role: &str, token: LeaseToken) -> Result<()> {
        let roles = self.inner().as_roles().ok_or_else(|| unsupported(Capability::Roles))?;
        self.around(Operation::Resign, roles.resign(role, token)).await
    }
    /// [`RoleStorage::leaders`].
    async fn leaders(&self) -> Result<Vec<Leader>> {
        let roles = self.inner().as_roles().ok_or_else(|| unsupported(Capability::Roles))?;
        self.around(Operation::Leaders, roles.leaders()).await
    }

    /// [`PeriodicStorage::fire`].
    async fn fire(&self, fire: &Fire) -> Result<FireOutcome> {
        let periodic = self.inner().as_periodic().ok_or_else(|| unsupported(Capability::Periodic))?;
        self.around(Operation::Fire, periodic.fire(fire)).await
    }
    /// [`PeriodicStorage::periodic`].
    async fn periodic(&self) -> Result<Vec<PeriodicInfo>> {
        let periodic = self.inner().as_periodic().ok_or_else(|| unsupported(Capability::Periodic))?;
        self.around(Operation::Periodic, periodic.periodic()).await
    }
    /// [`PeriodicStorage::trigger`].
    async fn trigger(&self, name: &str) -> Result<()> {
        let periodic = self.inner().as_periodic().ok_or_else(|| unsupported(Capability::Periodic))?;
        self.around(Operation::Trigger, periodic.trigger(name)).await
    }

    /// [`ControlStorage::set_paused`].
    async fn set_paused(&self, queue: &QueueName, paused: bool) -> Result<()> {
        let controls = self.inner().as_controls().ok_or_else(|| unsupported(Capability::Controls))?;
        self.around(Operation::SetPaused, controls.set_paused(queue, paused)).await
    }
    /// [`ControlStorage::set_limits`].
    async fn set_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<()> {
        let controls = self.inner().as_controls().ok_or_else(|| unsupported(Capability::Controls))?;
        self.around(Operation::SetLimits, controls.set_limits(queue, limits)).await
    }
    /// [`ControlStorage::queues`].
    async fn queues(&self) -> Result<Vec<QueueInfo>> {
        let controls = self.inner().as_controls().ok_or_else(|| unsupported(Capability::Controls))?;
        self.around(Operation::Queues, controls.queues()).await
    }

    /// [`ThroughputStorage::throughput`].
    async fn throughput(&self, since: Timestamp) -> Result<Vec<Throughput>> {
        let reads = self.inner().as_throughput().ok_or_else(|| unsupported(Capability::Throughput))?;
        self.around(Operation::Throughput, reads.throughput(since)).await
    }

    /// [`CancelStorage::request_cancel`].
    async fn request_cancel(&self, id: JobId, reason: &str) -> Result<CancelAnswer> {
        let cancels = self.inner().as_cancellation().ok_or_else(|| unsupported(Capability::Cancellation))?;
        self.around(Operation::RequestCancel, cancels.request_cancel(id, reason)).await
    }
    /// [`CancelStorage::progress`].
    async fn progress(&self, reports: &[ProgressReport]) -> Result<Vec<JobId>> {
        let cancels = self.inner().as_cancellation().ok_or_else(|| unsupported(Capability::Cancellation))?;
        self.around(Operation::Progress, cancels.progress(reports)).await
    }
    /// [`WorkflowStorage::enqueue_workflow`].
    async fn enqueue_workflow(&self, plan: &WorkflowPlan) -> Result<Vec<JobId>> {
        let w = self.inner().as_workflows().ok_or_else(|| unsupported(Capability::Workflows))?;
        self.around(Operation::EnqueueWorkflow, w.enqueue_workflow(plan)).await
    }
    /// [`WorkflowStorage::result`].
    async fn result(&self, id: JobId) -> Result<Option<crate::job::Payload>> {
        let w = self.inner().as_workflows().ok_or_else(|| unsupported(Capability::Workflows))?;
        self.around(Operation::Result, w.result(id)).await
    }
    /// [`WorkflowStorage::links`].
    async fn links(&self, id: JobId) -> Result<JobLinks> {
        let w = self.inner().as_workflows().ok_or_else(|| unsupported(Capability::Workflows))?;
        self.around(Operation::Links, w.links(id)).await
    }
    /// [`WorkflowStorage::parent_results`].
    async fn parent_results(&self, id: JobId) -> Result<Vec<ParentResult>> {
        let w = self.inner().as_workflows().ok_or_else(|| unsupported(Capability::Workflows))?;
        self.around(Operation::ParentResults, w.parent_results(id)).await
    }
    /// [`WorkflowStorage::workflow`].
    async fn workflow(&self, id: WorkflowId) -> Result<WorkflowInfo> {
        let w = self.inner().as_workflows().ok_or_else(|| unsupported(Capability::Workflows))?;
        self.around(Operation::Workflow, w.workflow(id)).await
    }
    /// [`WorkflowStorage::workflow_steps`].
    async fn workflow_steps(&self, id: WorkflowId) -> Result<Vec<StepInfo>> {
        let w = self.inner().as_workflows().ok_or_else(|| unsupported(Capability::Workflows))?;
        self.around(Operation::WorkflowSteps, w.workflow_steps(id)).await
    }

    /// [`KeyStorage::set_key_limits`].
    async fn set_key_limits(&self, queue: &QueueName, key: Option<&str>, limits: &QueueLimits) -> Result<()> {
        let keys = self.inner().as_keys().ok_or_else(|| unsupported(Capability::Keys))?;
        self.around(Operation::SetKeyLimits, keys.set_key_limits(queue, key, limits)).await
    }
    /// [`KeyStorage::clear_key_limits`].
    async fn clear_key_limits(&self, queue: &QueueName, key: &str) -> Result<()> {
        let keys = self.inner().as_keys().ok_or_else(|| unsupported(Capability::Keys))?;
        self.around(Operation::ClearKeyLimits, keys.clear_key_limits(queue, key)).await
    }
    /// [`KeyStorage::keys`].
    async fn keys(&self, queue: &QueueName, top: usize) -> Result<KeyReport> {
        let keys = self.inner().as_keys().ok_or_else(|| unsupported(Capability::Keys))?;
        self.around(Operation::Keys, keys.keys(queue, top)).await
    }
}

#[async_trait]
impl<L: Layer> Storage for L {
    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        Layer::enqueue(self, jobs).await
    }
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Job>> {
        Layer::claim(self, request).await
    }
    async fn settle(&self, batch: Vec<Settlement>) -> Result<Vec<Settled>> {
        Layer::settle(self, batch).await
    }
    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<Beat> {
        Layer::heartbeat(self, leases, lease).await
    }
    async fn promote(&self) -> Result<u64> {
        Layer::promote(self).await
    }
    async fn recover(&self) -> Result<u64> {
        Layer::recover(self).await
    }
    async fn get(&self, id: JobId) -> Result<Job> {
        Layer::get(self, id).await
    }
    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        Layer::list(self, filter).await
    }
    async fn stats(&self) -> Result<Stats> {
        Layer::stats(self).await
    }
    async fn retry(&self, id: JobId) -> Result<()> {
        Layer::retry(self, id).await
    }
    async fn cancel(&self, id: JobId) -> Result<()> {
        Layer::cancel(self, id).await
    }
    async fn purge(&self, state: State, older_than: Timestamp) -> Result<u64> {
        Layer::purge(self, state, older_than).await
    }
    async fn migrate(&self) -> Result<usize> {
        Layer::migrate(self).await
    }
    fn subscribe(&self) -> Option<WorkSignal> {
        Layer::subscribe(self)
    }
    fn clock(&self) -> Clock {
        Layer::clock(self)
    }
    fn as_roles(&self) -> Option<&dyn RoleStorage> {
        self.inner().as_roles().map(|_| self as &dyn RoleStorage)
    }
    fn as_periodic(&self) -> Option<&dyn PeriodicStorage> {
        self.inner().as_periodic().map(|_| self as &dyn PeriodicStorage)
    }
    fn as_controls(&self) -> Option<&dyn ControlStorage> {
        self.inner().as_controls().map(|_| self as &dyn ControlStorage)
    }
    fn as_throughput(&self) -> Option<&dyn ThroughputStorage> {
        self.inner().as_throughput().map(|_| self as &dyn ThroughputStorage)
    }
    fn as_cancellation(&self) -> Option<&dyn CancelStorage> {
        self.inner().as_cancellation().map(|_| self as &dyn CancelStorage)
    }
    fn as_workflows(&self) -> Option<&dyn WorkflowStorage> {
        self.inner().as_workflows().map(|_| self as &dyn WorkflowStorage)
    }
    fn as_keys(&self) -> Option<&dyn KeyStorage> {
        self.inner().as_keys().map(|_| self as &dyn KeyStorage)
    }
}

#[async_trait]
impl<L: Layer> RoleStorage for L {
    async fn elect(&self, election: &Election) -> Result<bool> {
        Layer::elect(self, election).await
    }
    async fn resign(&self, role: &str, token: LeaseToken) -> Result<()> {
        Layer::resign(self, role, token).await
    }
    async fn leaders(&self) -> Result<Vec<Leader>> {
        Layer::leaders(self).await
    }
}

#[async_trait]
impl<L: Layer> PeriodicStorage for L {
    async fn fire(&self, fire: &Fire) -> Result<FireOutcome> {
        Layer::fire(self, fire).await
    }
    async fn periodic(&self) -> Result<Vec<PeriodicInfo>> {
        Layer::periodic(self).await
    }
    async fn trigger(&self, name: &str) -> Result<()> {
        Layer::trigger(self, name).await
    }
}

#[async_trait]
impl<L: Layer> ControlStorage for L {
    async fn set_paused(&self, queue: &QueueName, paused: bool) -> Result<()> {
        Layer::set_paused(self, queue, paused).await
    }
    async fn set_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<()> {
        Layer::set_limits(self, queue, limits).await
    }
    async fn queues(&self) -> Result<Vec<QueueInfo>> {
        Layer::queues(self).await
    }
}

#[async_trait]
impl<L: Layer> ThroughputStorage for L {
    async fn throughput(&self, since: Timestamp) -> Result<Vec<Throughput>> {
        Layer::throughput(self, since).await
    }
}

#[async_trait]
impl<L: Layer> CancelStorage for L {
    async fn request_cancel(&self, id: JobId, reason: &str) -> Result<CancelAnswer> {
        Layer::request_cancel(self, id, reason).await
    }
    async fn progress(&self, reports: &[ProgressReport]) -> Result<Vec<JobId>> {
        Layer::progress(self, reports).await
    }
}

#[async_trait]
impl<L: Layer> WorkflowStorage for L {
    async fn enqueue_workflow(&self, plan: &WorkflowPlan) -> Result<Vec<JobId>> {
        Layer::enqueue_workflow(self, plan).await
    }
    async fn result(&self, id: JobId) -> Result<Option<crate::job::Payload>> {
        Layer::result(self, id).await
    }
    async fn links(&self, id: JobId) -> Result<JobLinks> {
        Layer::links(self, id).await
    }
    async fn parent_results(&self, id: JobId) -> Result<Vec<ParentResult>> {
        Layer::parent_results(self, id).await
    }
    async fn workflow(&self, id: WorkflowId) -> Result<WorkflowInfo> {
        Layer::workflow(self, id).await
    }
    async fn workflow_steps(&self, id: WorkflowId) -> Result<Vec<StepInfo>> {
        Layer::workflow_steps(self, id).await
    }
}

#[async_trait]
impl<L: Layer> KeyStorage for L {
    async fn set_key_limits(&self, queue: &QueueName, key: Option<&str>, limits: &QueueLimits) -> Result<()> {
        Layer::set_key_limits(self, queue, key, limits).await
    }
    async fn clear_key_limits(&self, queue: &QueueName, key: &str) -> Result<()> {
        Layer::clear_key_limits(self, queue, key).await
    }
    async fn keys(&self, queue: &QueueName, top: usize) -> Result<KeyReport> {
        Layer::keys(self, queue, top).await
    }
}
