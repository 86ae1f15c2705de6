//! Workflows for [`IndexedStorage`]: the graph beside the rows (an edge
//! table indexed by parent, a node per step with its count of unfinished
//! parents, a results table), and the rules of the contract's "Workflows"
//! run inside the same "transaction" as the operation that finishes a
//! parent. In a SQL database these are three tables and a few statements
//! (or a trigger) in the finishing transaction; in a key-value store,
//! hashes in the workflow's hash slot touched by the finishing script.

use std::collections::{BTreeMap, BTreeSet};

use jq::storage::{WorkflowStorage, async_trait, workflow_not_found};
use jq::workflow::{JobLinks, OnFailure, ParentLink, ParentResult, StepInfo, WorkflowId, WorkflowInfo, WorkflowPlan};
use jq::{Error, JobId, Payload, Result, State, StateCounts, Timestamp};

use crate::IndexedStorage;
use crate::index::Tables;

/// The workflow tables.
#[derive(Debug, Default)]
pub(crate) struct Graph {
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
    /// Parents done with for this job: each edge is released once.
    released: BTreeSet<JobId>,
    cancelled_by: Option<JobId>,
}

impl Graph {
    /// True when `id` has children: the only jobs whose end moves others
    /// (the "flag on the job" that keeps plain acks as cheap as before).
    pub(crate) fn has_children(&self, id: JobId) -> bool {
        self.nodes.get(&id).is_some_and(|n| !n.children.is_empty())
    }

    pub(crate) fn set_result(&mut self, id: JobId, result: Payload) {
        self.results.insert(id, result);
    }

    pub(crate) fn purged(&mut self, id: JobId) {
        self.results.remove(&id);
        self.nodes.remove(&id);
    }
}

/// Job `id` just became terminal: release or cancel its children, down.
/// True when a job became claimable.
pub(crate) fn finished(t: &mut Tables, id: JobId, now: Timestamp) -> bool {
    let mut woke = false;
    let mut stack = vec![id];
    while let Some(parent) = stack.pop() {
        let Some(state) = t.rows.get(&parent).map(|j| j.state) else { continue };
        let children = t.graph.nodes.get(&parent).map(|n| n.children.clone()).unwrap_or_default();
        for child in children {
            let Some(node) = t.graph.nodes.get_mut(&child) else { continue };
            if node.released.contains(&parent) {
                continue;
            }
            let policy = node.parents.iter().find(|l| l.id == parent).map(|l| l.on_failure).unwrap_or_default();
            let child_state = t.rows.get(&child).map(|j| j.state);
            if state == State::Completed || policy == OnFailure::RunAnyway {
                node.released.insert(parent);
                let left = node.parents.len() - node.released.len();
                if left == 0 && child_state == Some(State::Waiting) {
                    t.update(child, |job| {
                        if job.run_at <= now {
                            job.run_at = now;
                            job.state = State::Pending;
                        } else {
                            job.state = State::Scheduled;
                        }
                    });
                    woke = true;
                }
            } else if child_state == Some(State::Waiting) {
                node.cancelled_by = Some(parent);
                t.update(child, |job| {
                    job.state = State::Cancelled;
                    job.finished_at = Some(now);
                });
                stack.push(child);
            }
        }
    }
    woke
}

/// The parent a cascade-cancelled job reports: its first parent in step
/// order that is Dead or Cancelled with an unreleased edge under cancel.
fn first_failed(t: &Tables, id: JobId) -> Option<JobId> {
    let node = t.graph.nodes.get(&id)?;
    let failed = |p: JobId| t.rows.get(&p).is_some_and(|j| matches!(j.state, State::Dead | State::Cancelled));
    node.parents
        .iter()
        .filter(|l| l.on_failure == OnFailure::Cancel && !node.released.contains(&l.id))
        .map(|l| l.id)
        .find(|p| failed(*p))
}

/// Job `id` was retried out of Dead: the children a failure cancelled come
/// back to Waiting, down, once none of their parents is failed any more.
pub(crate) fn retried(t: &mut Tables, id: JobId) {
    let mut stack = vec![id];
    while let Some(parent) = stack.pop() {
        let children = t.graph.nodes.get(&parent).map(|n| n.children.clone()).unwrap_or_default();
        for child in children {
            let Some(node) = t.graph.nodes.get(&child) else { continue };
            let cancelled = t.rows.get(&child).is_some_and(|j| j.state == State::Cancelled);
            if !cancelled || node.cancelled_by.is_none() || first_failed(t, child).is_some() {
                continue;
            }
            let Some(node) = t.graph.nodes.get_mut(&child) else { continue };
            node.cancelled_by = None;
            t.update(child, |job| {
                job.state = State::Waiting;
                job.finished_at = None;
            });
            stack.push(child);
        }
    }
}

#[async_trait]
impl WorkflowStorage for IndexedStorage {
    async fn enqueue_workflow(&self, plan: &WorkflowPlan) -> Result<Vec<JobId>> {
        plan.check(self.max_payload_bytes)?;
        jq::storage::refuse_keys(plan.steps.iter().map(|s| &s.job))?;
        let now = self.clock.now();
        {
            let mut t = self.begin();
            if let Some(ids) = t.graph.workflows.get(&plan.id) {
                return Ok(ids.clone());
            }
            if let Some(step) = plan.steps.iter().find(|s| t.rows.contains_key(&s.job.id)) {
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
                t.insert(job);
                let node = Node {
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
                };
                t.graph.nodes.insert(ids[i], node);
            }
            t.graph.workflows.insert(plan.id, ids);
        }
        self.wake();
        Ok(plan.ids())
    }

    async fn result(&self, id: JobId) -> Result<Option<Payload>> {
        let t = self.begin();
        if !t.rows.contains_key(&id) {
            return Err(Error::NotFound { id });
        }
        Ok(t.graph.results.get(&id).cloned())
    }

    async fn links(&self, id: JobId) -> Result<JobLinks> {
        let t = self.begin();
        if !t.rows.contains_key(&id) {
            return Err(Error::NotFound { id });
        }
        Ok(t.graph.nodes.get(&id).map_or_else(JobLinks::default, |node| JobLinks {
            workflow: Some(node.workflow),
            step: Some(node.step.clone()),
            parents: node.parents.clone(),
            // A purged child is gone from its parent's view; a purged
            // parent's edge stays.
            children: node.children.iter().copied().filter(|c| t.graph.nodes.contains_key(c)).collect(),
            unfinished_parents: (node.parents.len() - node.released.len()) as u32,
            cancelled_by: node
                .cancelled_by
                .filter(|_| t.rows.get(&id).is_some_and(|j| j.state == State::Cancelled))
                .and_then(|_| first_failed(&t, id)),
        }))
    }

    async fn parent_results(&self, id: JobId) -> Result<Vec<ParentResult>> {
        let t = self.begin();
        if !t.rows.contains_key(&id) {
            return Err(Error::NotFound { id });
        }
        let Some(node) = t.graph.nodes.get(&id) else { return Ok(Vec::new()) };
        Ok(node
            .parents
            .iter()
            .filter_map(|l| {
                let job = t.rows.get(&l.id)?;
                Some(ParentResult {
                    id: l.id,
                    step: t.graph.nodes.get(&l.id).map(|n| n.step.clone()).unwrap_or_default(),
                    state: job.state,
                    result: t.graph.results.get(&l.id).cloned(),
                })
            })
            .collect())
    }

    async fn workflow(&self, id: WorkflowId) -> Result<WorkflowInfo> {
        let t = self.begin();
        let ids = t.graph.workflows.get(&id).ok_or_else(|| workflow_not_found(id))?;
        let mut counts = StateCounts::default();
        for job in ids.iter().filter_map(|i| t.rows.get(i)) {
            counts.add(job.state, 1);
        }
        Ok(WorkflowInfo { id, counts })
    }

    async fn workflow_steps(&self, id: WorkflowId) -> Result<Vec<StepInfo>> {
        let t = self.begin();
        let ids = t.graph.workflows.get(&id).ok_or_else(|| workflow_not_found(id))?;
        Ok(ids
            .iter()
            .filter_map(|i| {
                let job = t.rows.get(i)?;
                let node = t.graph.nodes.get(i)?;
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
