//! The reference model of workflows ([`WorkflowStorage`]): the graph of a
//! [`MemoryStorage`]'s workflow jobs and the results of its acks, and the
//! rules of the contract's "Workflows" applied inside the same critical
//! sections as the core operations that move jobs.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use jq_core::storage::{WorkflowStorage, workflow_not_found};
use jq_core::workflow::{
    JobLinks, OnFailure, ParentLink, ParentResult, StepInfo, WorkflowId, WorkflowInfo, WorkflowPlan,
};
use jq_core::{Error, Job, JobId, Payload, Result, State, StateCounts, Timestamp};

use super::MemoryStorage;

/// Every workflow job's place in its graph, and every stored result.
#[derive(Debug, Default)]
pub(super) struct Graph {
    nodes: BTreeMap<JobId, Node>,
    /// Each workflow's job ids, in step order.
    workflows: BTreeMap<WorkflowId, Vec<JobId>>,
    results: BTreeMap<JobId, Payload>,
}

#[derive(Debug)]
struct Node {
    workflow: WorkflowId,
    step: String,
    parents: Vec<ParentLink>,
    children: Vec<JobId>,
    /// Parents whose edge to this job is done with (completed, or failed
    /// under run-anyway): each counts once, whatever happens to it later.
    released: BTreeSet<JobId>,
    cancelled_by: Option<JobId>,
}

impl Node {
    fn unfinished(&self) -> u32 {
        (self.parents.len() - self.released.len()) as u32
    }
}

fn failed(state: State) -> bool {
    matches!(state, State::Dead | State::Cancelled)
}

impl Graph {
    pub(super) fn clear(&mut self) {
        *self = Graph::default();
    }

    /// Stores `result` as the result of `id` (its ack's).
    pub(super) fn set_result(&mut self, id: JobId, result: Payload) {
        self.results.insert(id, result);
    }

    /// True when `id` has children: the only jobs whose end moves others.
    pub(super) fn has_children(&self, id: JobId) -> bool {
        self.nodes.get(&id).is_some_and(|n| !n.children.is_empty())
    }

    /// Job `id` just became terminal: each child whose edge it holds is
    /// released (parent Completed, or failed under run-anyway) or, when
    /// the parent failed and the child is Waiting under
    /// [`OnFailure::Cancel`], cancelled, and so on down. Returns true when
    /// a job became claimable.
    pub(super) fn finished(&mut self, jobs: &mut BTreeMap<JobId, Job>, id: JobId, now: Timestamp) -> bool {
        let mut woke = false;
        let mut stack = vec![id];
        while let Some(parent) = stack.pop() {
            let Some(state) = jobs.get(&parent).map(|j| j.state) else { continue };
            let children = match self.nodes.get(&parent) {
                Some(node) => node.children.clone(),
                None => continue,
            };
            for child in children {
                let Some(node) = self.nodes.get_mut(&child) else { continue };
                if node.released.contains(&parent) {
                    continue;
                }
                let policy = node.parents.iter().find(|l| l.id == parent).map(|l| l.on_failure).unwrap_or_default();
                let Some(job) = jobs.get_mut(&child) else { continue };
                if state == State::Completed || policy == OnFailure::RunAnyway {
                    node.released.insert(parent);
                    if node.unfinished() == 0 && job.state == State::Waiting {
                        // Due now: claimable from now, like a job handed
                        // back; a later run_at is kept (Scheduled).
                        if job.run_at <= now {
                            job.run_at = now;
                            job.state = State::Pending;
                        } else {
                            job.state = State::Scheduled;
                        }
                        woke = true;
                    }
                } else if job.state == State::Waiting {
                    job.state = State::Cancelled;
                    job.finished_at = Some(now);
                    node.cancelled_by = Some(parent);
                    stack.push(child);
                }
            }
        }
        woke
    }

    /// Job `id`, Dead until now, was retried: every child a failure
    /// cancelled comes back to Waiting, and so on down, once none of its
    /// parents is failed under [`OnFailure::Cancel`] any more.
    pub(super) fn retried(&mut self, jobs: &mut BTreeMap<JobId, Job>, id: JobId) {
        let mut stack = vec![id];
        while let Some(parent) = stack.pop() {
            let children = match self.nodes.get(&parent) {
                Some(node) => node.children.clone(),
                None => continue,
            };
            for child in children {
                let Some(job) = jobs.get(&child) else { continue };
                if job.state != State::Cancelled || self.nodes.get(&child).is_none_or(|n| n.cancelled_by.is_none()) {
                    continue;
                }
                if self.first_failed(jobs, child).is_some() {
                    continue;
                }
                let Some(node) = self.nodes.get_mut(&child) else { continue };
                node.cancelled_by = None;
                if let Some(job) = jobs.get_mut(&child) {
                    job.state = State::Waiting;
                    job.finished_at = None;
                }
                stack.push(child);
            }
        }
    }

    /// The parent a cascade-cancelled job reports: its first parent in
    /// step order that is Dead or Cancelled with an unreleased edge under
    /// [`OnFailure::Cancel`] (whatever order the failures came in).
    fn first_failed(&self, jobs: &BTreeMap<JobId, Job>, id: JobId) -> Option<JobId> {
        let node = self.nodes.get(&id)?;
        node.parents
            .iter()
            .filter(|l| l.on_failure == OnFailure::Cancel && !node.released.contains(&l.id))
            .find(|l| jobs.get(&l.id).is_some_and(|j| failed(j.state)))
            .map(|l| l.id)
    }

    /// Job `id` was purged: its result and place go with it.
    pub(super) fn purged(&mut self, id: JobId) {
        self.results.remove(&id);
        self.nodes.remove(&id);
    }
}

#[async_trait]
impl WorkflowStorage for MemoryStorage {
    async fn enqueue_workflow(&self, plan: &WorkflowPlan) -> Result<Vec<JobId>> {
        plan.check(self.max_payload_bytes)?;
        let now = self.clock.now();
        {
            let mut jobs = self.jobs();
            let mut graph = self.graph();
            if let Some(ids) = graph.workflows.get(&plan.id) {
                return Ok(ids.clone());
            }
            if let Some(step) = plan.steps.iter().find(|s| jobs.contains_key(&s.job.id)) {
                return Err(Error::invalid(
                    "workflow step",
                    format!("job {} of step {:?} is stored already", step.job.id, step.name),
                ));
            }
            let ids = plan.ids();
            let children = plan.children();
            for (i, step) in plan.steps.iter().enumerate() {
                let mut job = step.job.clone().stored_at(now);
                if !step.parents.is_empty() {
                    job.state = State::Waiting;
                }
                jobs.insert(job.id, job);
                graph.nodes.insert(
                    ids[i],
                    Node {
                        workflow: plan.id,
                        step: step.name.clone(),
                        parents: step
                            .parents
                            .iter()
                            .map(|p| ParentLink { id: ids[*p], on_failure: step.on_failure })
                            .collect(),
                        children: children[i].iter().map(|c| ids[*c]).collect(),
                        released: BTreeSet::new(),
                        cancelled_by: None,
                    },
                );
            }
            graph.workflows.insert(plan.id, ids);
        }
        self.bump();
        Ok(plan.ids())
    }

    async fn result(&self, id: JobId) -> Result<Option<Payload>> {
        let jobs = self.jobs();
        if !jobs.contains_key(&id) {
            return Err(Error::NotFound { id });
        }
        Ok(self.graph().results.get(&id).cloned())
    }

    async fn links(&self, id: JobId) -> Result<JobLinks> {
        let jobs = self.jobs();
        if !jobs.contains_key(&id) {
            return Err(Error::NotFound { id });
        }
        let graph = self.graph();
        Ok(match graph.nodes.get(&id) {
            None => JobLinks::default(),
            Some(node) => JobLinks {
                workflow: Some(node.workflow),
                step: Some(node.step.clone()),
                parents: node.parents.clone(),
                // A purged child is gone from its parent's view (its
                // node went with it); a purged parent's edge stays.
                children: node.children.iter().copied().filter(|c| graph.nodes.contains_key(c)).collect(),
                unfinished_parents: node.unfinished(),
                cancelled_by: node
                    .cancelled_by
                    .filter(|_| jobs.get(&id).is_some_and(|j| j.state == State::Cancelled))
                    .and_then(|_| graph.first_failed(&jobs, id)),
            },
        })
    }

    async fn parent_results(&self, id: JobId) -> Result<Vec<ParentResult>> {
        let jobs = self.jobs();
        if !jobs.contains_key(&id) {
            return Err(Error::NotFound { id });
        }
        let graph = self.graph();
        let Some(node) = graph.nodes.get(&id) else { return Ok(Vec::new()) };
        Ok(node
            .parents
            .iter()
            .filter_map(|l| {
                let job = jobs.get(&l.id)?;
                let step = graph.nodes.get(&l.id).map(|n| n.step.clone()).unwrap_or_default();
                Some(ParentResult { id: l.id, step, state: job.state, result: graph.results.get(&l.id).cloned() })
            })
            .collect())
    }

    async fn workflow(&self, id: WorkflowId) -> Result<WorkflowInfo> {
        let jobs = self.jobs();
        let graph = self.graph();
        let ids = graph.workflows.get(&id).ok_or_else(|| workflow_not_found(id))?;
        let mut counts = StateCounts::default();
        for job in ids.iter().filter_map(|i| jobs.get(i)) {
            counts.add(job.state, 1);
        }
        Ok(WorkflowInfo { id, counts })
    }

    async fn workflow_steps(&self, id: WorkflowId) -> Result<Vec<StepInfo>> {
        let jobs = self.jobs();
        let graph = self.graph();
        let ids = graph.workflows.get(&id).ok_or_else(|| workflow_not_found(id))?;
        Ok(ids
            .iter()
            .filter_map(|i| {
                let job = jobs.get(i)?;
                let node = graph.nodes.get(i)?;
                Some(StepInfo {
                    id: *i,
                    name: node.step.clone(),
                    kind: job.kind.clone(),
                    state: job.state,
                    parents: node.parents.iter().map(|l| l.id).collect(),
                })
            })
            .collect())
    }
}
