//! [`EnqueuedWorkflow`]: what storing a workflow answers, whether the
//! [`Client`](crate::Client) stored it on its own or in the caller's
//! transaction ([`TransactionalWorkflows`](crate::TransactionalWorkflows)).
//! A value of its own, so that the transactions and the client's workflow
//! calls both name it without naming each other.

use jq_core::JobId;
use jq_core::workflow::{Batch, WorkflowId, WorkflowPlan};

/// What [`Client::enqueue_workflow`](crate::Client::enqueue_workflow) stored: the workflow's id and each
/// step's job id, in step order (parents first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnqueuedWorkflow {
    /// The workflow.
    pub id: WorkflowId,
    /// Each step's name and job id, parents first.
    pub steps: Vec<(String, JobId)>,
}

impl EnqueuedWorkflow {
    /// The job id of step `name`.
    pub fn job(&self, name: &str) -> Option<JobId> {
        self.steps.iter().find(|(n, _)| n == name).map(|(_, id)| *id)
    }

    /// A batch's callback job ([`Batch::CALLBACK`]).
    pub fn callback(&self) -> Option<JobId> {
        self.job(Batch::CALLBACK)
    }

    /// The stored `plan`, with the ids the store returned in step order.
    pub(crate) fn of(plan: WorkflowPlan, ids: Vec<JobId>) -> Self {
        let steps = plan.steps.into_iter().map(|s| s.name).zip(ids).collect();
        EnqueuedWorkflow { id: plan.id, steps }
    }
}
