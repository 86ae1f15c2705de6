//! [`WorkflowStorage`]: results of completed jobs and jobs that wait for
//! other jobs ([`Capability::Workflows`](super::Capability::Workflows)).

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::id::JobId;
use crate::job::Payload;
use crate::workflow::{JobLinks, ParentResult, StepInfo, WorkflowId, WorkflowInfo, WorkflowPlan};

/// Results and dependencies ([`Capability::Workflows`](super::Capability::Workflows)).
/// A backend that declares it also applies, inside its core operations,
/// the rules of the repository's `docs/CONTRACT.md` ("Workflows"): an
/// [`Outcome::AckWith`](super::Outcome::AckWith) stores the result with the
/// ack; the step that makes a job Completed releases its children, and the
/// step that makes it Dead or Cancelled cancels (or releases) them, in
/// the same atomic step; [`Storage::retry`](super::Storage::retry) of a dead
/// parent brings back the dependents its failure cancelled.
#[async_trait]
pub trait WorkflowStorage: Send + Sync {
    /// Stores every step of `plan` or none, in one atomic step: a step
    /// without parents as [`Storage::enqueue`](super::Storage::enqueue)
    /// stores a job (Pending or Scheduled), every other one Waiting with its
    /// count of unfinished parents. A plan whose workflow id is stored
    /// already stores nothing and returns the stored ids (a resend after a
    /// lost answer). [`Error::InvalidInput`] when [`WorkflowPlan::check`]
    /// fails or a step's job id is stored already outside this workflow;
    /// [`Error::PayloadTooLarge`]; [`Error::BatchNotAtomic`] where the
    /// backend cannot store the steps in one step (nothing stored).
    /// Returns the ids in step order.
    async fn enqueue_workflow(&self, plan: &WorkflowPlan) -> Result<Vec<JobId>>;

    /// The result stored with the job's ack, `None` when it has none (not
    /// completed, or completed without one); [`Error::NotFound`].
    async fn result(&self, id: JobId) -> Result<Option<Payload>>;

    /// The job's workflow, parents and children; empty for a job enqueued
    /// on its own. [`Error::NotFound`].
    async fn links(&self, id: JobId) -> Result<JobLinks>;

    /// Each parent's step, state and result, in step order (what a
    /// handler's [`JobContext::parent_results`](crate::JobContext::parent_results)
    /// reads). [`Error::NotFound`] for an unknown job.
    async fn parent_results(&self, id: JobId) -> Result<Vec<ParentResult>>;

    /// The workflow's counts per state, equal at every instant to the
    /// states [`workflow_steps`](Self::workflow_steps) reads: from a
    /// summary kept in the same atomic steps as its jobs' changes where the
    /// backend keeps one (Redis), else counted over the workflow's own
    /// steps through an index (never a scan of the store);
    /// [`Error::WorkflowNotFound`].
    async fn workflow(&self, id: WorkflowId) -> Result<WorkflowInfo>;

    /// Every step of the workflow, in step order, for operators' views (reads
    /// every job of the workflow). [`Error::WorkflowNotFound`].
    async fn workflow_steps(&self, id: WorkflowId) -> Result<Vec<StepInfo>>;
}

/// [`Error::WorkflowNotFound`] for `id`.
pub fn workflow_not_found(id: WorkflowId) -> Error {
    Error::WorkflowNotFound { id }
}
