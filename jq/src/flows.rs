//! [`Client`]'s workflow calls: enqueue a [`Workflow`] or a [`Batch`],
//! read a job's result, wait for a job to finish, and look at a workflow.
//! They need a storage with [`Capability::Workflows`](jq_core::storage::Capability::Workflows);
//! others refuse them with [`Error::Unsupported`].

use std::time::{Duration, Instant};

use jq_core::storage::{Storage, StorageExt};
use jq_core::workflow::{Batch, JobLinks, StepInfo, Workflow, WorkflowId, WorkflowInfo, WorkflowPlan};
use jq_core::{Error, Job, JobId, Payload, Result};
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::Client;
use crate::enqueued::EnqueuedWorkflow;
use crate::tx::TransactionalWorkflows;

/// The first pause of [`Client::wait`]'s polling; it doubles up to
/// [`WAIT_POLL_MAX`].
const WAIT_POLL_MIN: Duration = Duration::from_millis(5);
/// The longest pause of [`Client::wait`]'s polling.
const WAIT_POLL_MAX: Duration = Duration::from_millis(250);

impl<S: Storage> Client<S> {
    /// Checks `workflow` (unknown step names and cycles are refused here,
    /// before anything is stored) and stores every step in one atomic call:
    /// steps without parents are claimable at once, the others wait
    /// ([`jq_core::State::Waiting`]) for their parents.
    pub async fn enqueue_workflow(&self, workflow: Workflow) -> Result<EnqueuedWorkflow> {
        self.enqueue_plan(workflow.plan()?).await
    }

    /// A batch: its members, and its callback once all of them are done.
    pub async fn enqueue_batch(&self, batch: Batch) -> Result<EnqueuedWorkflow> {
        self.enqueue_plan(batch.plan()?).await
    }

    /// Stores a checked plan ([`Workflow::plan`]).
    pub async fn enqueue_plan(&self, plan: WorkflowPlan) -> Result<EnqueuedWorkflow> {
        let span = tracing::debug_span!("jq.enqueue_workflow", steps = plan.steps.len());
        let ids = self.storage().require_workflows()?.enqueue_workflow(&plan).instrument(span).await?;
        Ok(EnqueuedWorkflow::of(plan, ids))
    }

    /// [`Client::enqueue_workflow`] inside your own database transaction
    /// `tx`, as [`Client::enqueue_tx`] enqueues a job: every step exists if
    /// and only if you commit it (a rollback leaves nothing of the
    /// workflow), and the workers are woken by the commit. The same call on
    /// both SQL backends, `client.enqueue_workflow_tx(&mut tx,
    /// workflow).await`; on SQLite the steps are written when the call
    /// returns and its future is already complete (`.into_inner()` in
    /// synchronous code). See [`TransactionalWorkflows`].
    pub fn enqueue_workflow_tx<X: TransactionalWorkflows<S>>(
        &self,
        tx: X,
        workflow: Workflow,
    ) -> X::Output<EnqueuedWorkflow> {
        tx.enqueue_workflow_in(self.storage(), workflow.plan())
    }

    /// [`Client::enqueue_batch`] inside your own database transaction, as
    /// [`Client::enqueue_workflow_tx`].
    pub fn enqueue_batch_tx<X: TransactionalWorkflows<S>>(&self, tx: X, batch: Batch) -> X::Output<EnqueuedWorkflow> {
        tx.enqueue_workflow_in(self.storage(), batch.plan())
    }

    /// The result job `id`'s handler set ([`jq_core::JobContext::set_result`]),
    /// stored with its ack; `None` when it has none (yet).
    pub async fn result(&self, id: JobId) -> Result<Option<Payload>> {
        self.storage().require_workflows()?.result(id).await
    }

    /// [`Client::result`] decoded into `T`; [`Error::InvalidPayload`] when
    /// it does not decode.
    pub async fn result_as<T: DeserializeOwned>(&self, id: JobId) -> Result<Option<T>> {
        match self.result(id).await? {
            None => Ok(None),
            Some(p) => p.decode().map(Some).map_err(|e| Error::InvalidPayload(e.to_string())),
        }
    }

    /// Waits until job `id` is terminal (Completed, Dead or Cancelled) and
    /// returns it; [`Error::WaitTimedOut`] after `timeout`. Polls `get`,
    /// from 5 ms up to every 250 ms, and looks again at once when the
    /// storage signals new work ([`Storage::subscribe`]: a released child,
    /// a job handed back), so a wait on a chain of jobs follows it closely.
    pub async fn wait(&self, id: JobId, timeout: Duration) -> Result<Job> {
        let deadline = Instant::now() + timeout;
        let mut signal = self.storage().subscribe();
        let mut pause = WAIT_POLL_MIN;
        loop {
            let job = self.storage().get(id).await?;
            if job.state.is_terminal() {
                return Ok(job);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::WaitTimedOut { id, state: job.state });
            }
            let nap = pause.min(left);
            match signal.as_mut() {
                Some(signal) => {
                    // Either wakes the loop: a changed signal or the pause.
                    let _ = tokio::time::timeout(nap, signal.changed()).await;
                }
                None => tokio::time::sleep(nap).await,
            }
            pause = (pause * 2).min(WAIT_POLL_MAX);
        }
    }

    /// Job `id`'s workflow, parents, children and why it was cancelled.
    pub async fn links(&self, id: JobId) -> Result<JobLinks> {
        self.storage().require_workflows()?.links(id).await
    }

    /// A workflow's counts per state and whether it is finished.
    pub async fn workflow(&self, id: WorkflowId) -> Result<WorkflowInfo> {
        self.storage().require_workflows()?.workflow(id).await
    }

    /// Every step of a workflow, in step order, with its state and parents.
    pub async fn workflow_steps(&self, id: WorkflowId) -> Result<Vec<StepInfo>> {
        self.storage().require_workflows()?.workflow_steps(id).await
    }
}
