//! Workflows: jobs that run after other jobs ([`Workflow`], [`Batch`]),
//! checked into a [`WorkflowPlan`] before anything is stored, and what the
//! [`WorkflowStorage`](crate::storage::WorkflowStorage) capability reports
//! about them ([`JobLinks`], [`WorkflowInfo`], [`StepInfo`]).
//!
//! The rules every backend keeps are in the repository's
//! `docs/CONTRACT.md` ("Workflows"); the guide is `docs/workflows.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::id::JobId;
pub use crate::id::WorkflowId;
use crate::job::{NewJob, Payload};
use crate::read::StateCounts;
use crate::state::State;

/// Default cap on a handler's result, in bytes of JSON: 64 KiB. A result is
/// for what the next step needs (an id, a count, a small summary); store
/// bulk data elsewhere and return a reference to it.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 64 * 1024;

/// Most steps one workflow may have: 100,000. A bound, so one enqueue
/// stays one bounded write.
pub const MAX_STEPS: usize = 100_000;

/// What a dependent does when one of its parents ends Dead or Cancelled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    /// The dependent is cancelled (the default), and so, by the same rule,
    /// are its own dependents; [`JobLinks::cancelled_by`] names the parent.
    #[default]
    Cancel,
    /// The failed parent counts as finished: the dependent runs once its
    /// other parents are done.
    RunAnyway,
}

impl OnFailure {
    /// The name as stored: `cancel` or `run_anyway`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Cancel => "cancel",
            OnFailure::RunAnyway => "run_anyway",
        }
    }

    /// The policy stored as `s`, or `None`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "cancel" => Some(OnFailure::Cancel),
            "run_anyway" => Some(OnFailure::RunAnyway),
            _ => None,
        }
    }
}

impl fmt::Display for OnFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One named step of a [`Workflow`]: a job and the steps it runs after.
#[derive(Clone, Debug)]
#[must_use = "a step does nothing until added to a workflow"]
pub struct Step {
    name: String,
    job: NewJob,
    after: Vec<String>,
    on_failure: OnFailure,
}

impl Step {
    /// A step named `name` (unique in its workflow) that runs `job`.
    pub fn new(name: impl Into<String>, job: NewJob) -> Self {
        Step { name: name.into(), job, after: Vec::new(), on_failure: OnFailure::Cancel }
    }

    /// Runs after every step named in `parents` completed (fan-in).
    pub fn after<I, S>(mut self, parents: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.after.extend(parents.into_iter().map(Into::into));
        self
    }

    /// What to do when a parent ends Dead or Cancelled (default
    /// [`OnFailure::Cancel`]).
    pub fn on_failure(mut self, policy: OnFailure) -> Self {
        self.on_failure = policy;
        self
    }
}

/// Named steps with dependencies, enqueued in one atomic call
/// ([`WorkflowStorage::enqueue_workflow`](crate::storage::WorkflowStorage::enqueue_workflow)).
/// A step with no parent is claimable at once; the others wait
/// ([`State::Waiting`]) until their parents are done.
///
/// ```
/// use jq_core::workflow::{Step, Workflow};
/// use jq_core::{NewJob, Payload};
/// # fn job(kind: &str) -> NewJob { NewJob::builder(kind, Payload::of(&()).unwrap()).build().unwrap() }
/// let plan = Workflow::new()
///     .step(Step::new("fetch", job("fetch")))
///     .step(Step::new("resize", job("resize")).after(["fetch"]))
///     .step(Step::new("scan", job("scan")).after(["fetch"]))
///     .step(Step::new("publish", job("publish")).after(["resize", "scan"]))
///     .plan()
///     .unwrap();
/// assert_eq!(plan.steps.len(), 4);
/// ```
#[derive(Clone, Debug, Default)]
#[must_use = "a workflow does nothing until planned and enqueued"]
pub struct Workflow {
    id: Option<WorkflowId>,
    steps: Vec<Step>,
}

impl Workflow {
    /// An empty workflow with a fresh id.
    pub fn new() -> Self {
        Workflow::default()
    }

    /// Uses `id` instead of a fresh one (an idempotent resend of the same
    /// workflow stores nothing twice).
    pub fn id(mut self, id: WorkflowId) -> Self {
        self.id = Some(id);
        self
    }

    /// Adds a step.
    pub fn step(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }

    /// Checks the workflow and orders its steps so that parents come
    /// first; nothing is stored. [`Error::InvalidInput`] for no step, more
    /// than [`MAX_STEPS`], an empty or repeated step name, a name with a
    /// NUL, an unknown parent, a step after itself or twice after the same
    /// parent, a cycle (named), or a step with a unique key (a
    /// deduplicated step would leave its dependents pointing at another
    /// job's life).
    pub fn plan(self) -> Result<WorkflowPlan> {
        let id = self.id.unwrap_or_default();
        let steps = self.steps;
        if steps.is_empty() {
            return Err(Error::invalid("workflow", "it has no step".to_owned()));
        }
        if steps.len() > MAX_STEPS {
            return Err(Error::invalid("workflow", format!("{} steps, over the limit of {MAX_STEPS}", steps.len())));
        }
        let mut index: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, step) in steps.iter().enumerate() {
            if step.name.is_empty() || step.name.len() > crate::job::MAX_NAME_BYTES {
                return Err(Error::invalid("step name", format!("{:?}: use 1 to 128 bytes", step.name)));
            }
            crate::text::check_no_nul("step name", &step.name)?;
            if step.job.unique_key.is_some() {
                return Err(Error::invalid(
                    "workflow step",
                    format!("step {:?} has a unique key: steps of a workflow cannot be deduplicated", step.name),
                ));
            }
            if index.insert(&step.name, i).is_some() {
                return Err(Error::invalid("workflow", format!("two steps are named {:?}", step.name)));
            }
        }
        let mut parents: Vec<Vec<usize>> = Vec::with_capacity(steps.len());
        for step in &steps {
            let mut seen = BTreeSet::new();
            let mut these = Vec::with_capacity(step.after.len());
            for name in &step.after {
                let Some(&p) = index.get(name.as_str()) else {
                    return Err(Error::invalid(
                        "workflow",
                        format!("step {:?} runs after {name:?}, which is no step of this workflow", step.name),
                    ));
                };
                if name == &step.name {
                    return Err(Error::invalid("workflow", format!("step {:?} runs after itself", step.name)));
                }
                if !seen.insert(p) {
                    return Err(Error::invalid("workflow", format!("step {:?} names {name:?} twice", step.name)));
                }
                these.push(p);
            }
            parents.push(these);
        }
        let order = topological(&steps, &parents)?;
        let mut position = vec![0usize; steps.len()];
        for (pos, &i) in order.iter().enumerate() {
            position[i] = pos;
        }
        let mut slots: Vec<Option<Step>> = steps.into_iter().map(Some).collect();
        let mut planned = Vec::with_capacity(order.len());
        for &i in &order {
            let Some(step) = slots[i].take() else { continue };
            let mut ps: Vec<usize> = parents[i].iter().map(|p| position[*p]).collect();
            ps.sort_unstable();
            planned.push(PlannedStep { name: step.name, job: step.job, parents: ps, on_failure: step.on_failure });
        }
        Ok(WorkflowPlan { id, steps: planned })
    }
}

/// Kahn's algorithm, taking the lowest index first so the order is stable;
/// a cycle is refused with the names of the steps on it.
fn topological(steps: &[Step], parents: &[Vec<usize>]) -> Result<Vec<usize>> {
    let n = steps.len();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut remaining: Vec<usize> = vec![0; n];
    for (child, ps) in parents.iter().enumerate() {
        remaining[child] = ps.len();
        for &p in ps {
            children[p].push(child);
        }
    }
    let mut ready: BTreeSet<usize> = (0..n).filter(|i| remaining[*i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &c in &children[i] {
            remaining[c] -= 1;
            if remaining[c] == 0 {
                ready.insert(c);
            }
        }
    }
    if order.len() < n {
        let stuck: Vec<&str> = (0..n).filter(|i| remaining[*i] > 0).map(|i| steps[i].name.as_str()).collect();
        return Err(Error::invalid("workflow", format!("its steps form a cycle through {stuck:?}")));
    }
    Ok(order)
}

/// A batch: `members` that run independently and a `callback` that runs
/// once, after every member is done. Sugar for a [`Workflow`] whose steps
/// are `member-0`, `member-1`, ... and `callback` after all of them.
///
/// ```
/// use jq_core::workflow::Batch;
/// use jq_core::{NewJob, Payload};
/// # fn job(kind: &str) -> NewJob { NewJob::builder(kind, Payload::of(&()).unwrap()).build().unwrap() }
/// let plan = Batch::new((0..3).map(|_| job("member")), job("done")).plan().unwrap();
/// assert_eq!(plan.steps.last().unwrap().parents, vec![0, 1, 2]);
/// ```
#[derive(Clone, Debug)]
#[must_use = "a batch does nothing until planned and enqueued"]
pub struct Batch {
    members: Vec<NewJob>,
    callback: NewJob,
    on_failure: OnFailure,
    id: Option<WorkflowId>,
}

impl Batch {
    /// The callback step's name.
    pub const CALLBACK: &'static str = "callback";

    /// `members`, then `callback` once all of them completed.
    pub fn new(members: impl IntoIterator<Item = NewJob>, callback: NewJob) -> Self {
        Batch { members: members.into_iter().collect(), callback, on_failure: OnFailure::Cancel, id: None }
    }

    /// What the callback does when a member ends Dead or Cancelled
    /// (default [`OnFailure::Cancel`]; [`OnFailure::RunAnyway`] runs it
    /// once every member is terminal, whatever the outcome).
    pub fn on_failure(mut self, policy: OnFailure) -> Self {
        self.on_failure = policy;
        self
    }

    /// Uses `id` as the workflow's id.
    pub fn id(mut self, id: WorkflowId) -> Self {
        self.id = Some(id);
        self
    }

    /// The batch as a workflow.
    pub fn into_workflow(self) -> Workflow {
        let names: Vec<String> = (0..self.members.len()).map(|i| format!("member-{i}")).collect();
        let mut workflow = Workflow::new();
        if let Some(id) = self.id {
            workflow = workflow.id(id);
        }
        for (name, job) in names.iter().zip(self.members) {
            workflow = workflow.step(Step::new(name.clone(), job));
        }
        workflow.step(Step::new(Self::CALLBACK, self.callback).after(names).on_failure(self.on_failure))
    }

    /// [`Workflow::plan`] of [`Batch::into_workflow`].
    pub fn plan(self) -> Result<WorkflowPlan> {
        self.into_workflow().plan()
    }
}

/// A checked workflow: its steps with every parent before its children.
#[derive(Clone, Debug)]
pub struct WorkflowPlan {
    /// The workflow's id.
    pub id: WorkflowId,
    /// Parents first.
    pub steps: Vec<PlannedStep>,
}

/// One step of a [`WorkflowPlan`].
#[derive(Clone, Debug)]
pub struct PlannedStep {
    /// The step's name, unique in the workflow.
    pub name: String,
    /// The job.
    pub job: NewJob,
    /// Indexes of its parents in [`WorkflowPlan::steps`], all smaller than
    /// its own, ascending.
    pub parents: Vec<usize>,
    /// What it does when a parent fails.
    pub on_failure: OnFailure,
}

impl WorkflowPlan {
    /// The job ids, in step order.
    pub fn ids(&self) -> Vec<JobId> {
        self.steps.iter().map(|s| s.job.id).collect()
    }

    /// For each step, the indexes of its children.
    pub fn children(&self) -> Vec<Vec<usize>> {
        let mut children = vec![Vec::new(); self.steps.len()];
        for (i, step) in self.steps.iter().enumerate() {
            for &p in &step.parents {
                children[p].push(i);
            }
        }
        children
    }

    /// Checks every job against a backend's payload limit and the text
    /// rules ([`NewJob::check_payload`]), and that the parents point
    /// backwards (a plan can be built by hand): [`Error::InvalidInput`].
    /// Backends call it before storing anything.
    pub fn check(&self, max_payload_bytes: usize) -> Result<()> {
        let mut ids = BTreeSet::new();
        for (i, step) in self.steps.iter().enumerate() {
            step.job.check_payload(max_payload_bytes)?;
            crate::text::check_no_nul("step name", &step.name)?;
            if step.parents.iter().any(|p| *p >= i) {
                return Err(Error::invalid("workflow plan", format!("step {:?} has a parent after it", step.name)));
            }
            if step.job.unique_key.is_some() {
                return Err(Error::invalid("workflow step", format!("step {:?} has a unique key", step.name)));
            }
            if !ids.insert(step.job.id) {
                return Err(Error::invalid("workflow plan", format!("job {} is in two steps", step.job.id)));
            }
        }
        if self.steps.is_empty() {
            return Err(Error::invalid("workflow", "it has no step".to_owned()));
        }
        Ok(())
    }
}

/// A parent as its child sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// The parent job.
    pub id: JobId,
    /// The child's policy when this parent fails.
    pub on_failure: OnFailure,
}

/// Where a job stands in its workflow; every field empty for a job
/// enqueued on its own.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobLinks {
    /// Its workflow.
    pub workflow: Option<WorkflowId>,
    /// Its step name.
    pub step: Option<String>,
    /// Its parents, in step order.
    pub parents: Vec<ParentLink>,
    /// Its children, in step order.
    pub children: Vec<JobId>,
    /// Parents not yet done with (completed, or failed under
    /// [`OnFailure::RunAnyway`]); the job is Waiting while above zero.
    pub unfinished_parents: u32,
    /// The parent whose failure cancelled this job, when that is why it is
    /// Cancelled.
    pub cancelled_by: Option<JobId>,
}

/// A parent's result, as a child's handler reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParentResult {
    /// The parent job.
    pub id: JobId,
    /// Its step name.
    pub step: String,
    /// Its state.
    pub state: State,
    /// What its handler returned, if it completed with a result.
    pub result: Option<Payload>,
}

/// A workflow's counts per state ([`WorkflowStorage::workflow`](crate::storage::WorkflowStorage::workflow)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkflowInfo {
    /// The workflow.
    pub id: WorkflowId,
    /// Its jobs per state.
    pub counts: StateCounts,
}

impl WorkflowInfo {
    /// Every step is terminal (Completed, Dead or Cancelled).
    pub fn is_finished(&self) -> bool {
        State::ALL.iter().filter(|s| !s.is_terminal()).all(|s| self.counts.get(*s) == 0)
    }

    /// Every step completed.
    pub fn is_succeeded(&self) -> bool {
        self.counts.get(State::Completed) == self.counts.total()
    }
}

/// One step of a stored workflow, for operators' views.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepInfo {
    /// The step's job.
    pub id: JobId,
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: String,
    /// Its state.
    pub state: State,
    /// Its parents' job ids.
    pub parents: Vec<JobId>,
}

/// [`Error::ResultTooLarge`] when `result` is over `limit` bytes.
pub fn check_result(result: &Payload, limit: usize) -> Result<()> {
    if result.len() > limit {
        return Err(Error::ResultTooLarge { size: result.len(), limit });
    }
    Ok(())
}

/// The reason a cascade cancellation records, naming the parent.
pub fn cancelled_reason(parent: JobId, state: State) -> String {
    format!("cancelled: its parent {parent} is {state}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> NewJob {
        NewJob::builder("k", Payload::of(&()).expect("json")).build().expect("job")
    }

    #[test]
    fn plan_orders_parents_first_and_refuses_bad_graphs() {
        let plan = Workflow::new()
            .step(Step::new("c", job()).after(["b", "a"]))
            .step(Step::new("b", job()).after(["a"]))
            .step(Step::new("a", job()))
            .plan()
            .expect("valid");
        let names: Vec<&str> = plan.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(plan.steps[2].parents, vec![0, 1]);
        assert_eq!(plan.children(), vec![vec![1, 2], vec![2], vec![]]);

        let cycle = Workflow::new()
            .step(Step::new("a", job()).after(["c"]))
            .step(Step::new("b", job()).after(["a"]))
            .step(Step::new("c", job()).after(["b"]))
            .step(Step::new("free", job()))
            .plan()
            .expect_err("a cycle");
        assert!(matches!(&cycle, Error::InvalidInput { reason, .. } if reason.contains("cycle")), "{cycle}");
        let unknown = Workflow::new().step(Step::new("a", job()).after(["nope"])).plan().expect_err("unknown");
        assert!(unknown.to_string().contains("nope"), "{unknown}");
        let twice = Workflow::new().step(Step::new("a", job())).step(Step::new("a", job())).plan();
        assert!(matches!(twice, Err(Error::InvalidInput { .. })));
        assert!(matches!(Workflow::new().plan(), Err(Error::InvalidInput { .. })));
        let keyed = NewJob::builder("k", Payload::of(&()).expect("json")).unique_key("u").build().expect("job");
        assert!(matches!(Workflow::new().step(Step::new("a", keyed)).plan(), Err(Error::InvalidInput { .. })));
    }

    #[test]
    fn result_cap_is_a_typed_error() {
        let result = Payload::of(&"x".repeat(10)).expect("json");
        assert!(check_result(&result, 12).is_ok());
        assert!(matches!(check_result(&result, 11), Err(Error::ResultTooLarge { size: 12, limit: 11 })));
    }
}
