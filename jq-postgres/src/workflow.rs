//! Workflows on PostgreSQL: a workflow stored in one
//! statement (`sql/workflow_enqueue.sql`), results stored by the settle
//! statement itself (`sql/settle_results.sql`), and the release or
//! cancellation of children done inside the statement that finishes a
//! parent (settle, bury, recover, cancel) by one call of
//! `jq_flow_finished` over the batch's parents, and their revival by the
//! retry statement's call of `jq_flow_revived` (both in `src/functions/`).
//! Each workflow's steps are counted per state in `workflow_counts`, moved
//! in the statement that moves a step (every statement that
//! changes a step's state passes its steps to `jq_flow_moved`, which also
//! runs the two functions above), so `workflow` reads no step but the
//! workflow's Running ones among the leased jobs. Moves between Pending
//! and Running (a claim, a hand-back) are not passed: the summary counts
//! those two states together (`sql/workflow_counts.sql` says why). A batch
//! with no step calls nothing, and `jobs` has no trigger.

use chrono::{DateTime, Utc};
use jq_core::storage::{truncate_micros, workflow_not_found};
use jq_core::workflow::{
    JobLinks, OnFailure, ParentLink, ParentResult, StepInfo, WorkflowId, WorkflowInfo, WorkflowPlan,
};
use jq_core::{Error, JobId, Payload, Result, State, StateCounts};
use sqlx::Row;
use uuid::Uuid;

use crate::Inner;
use crate::enqueue::is_violation_of;
use crate::error::map_sqlx;
use crate::row::decode_state;

/// `flow` bit: the job has children (`jq_flow_moved` runs the rules of the
/// contract's "Workflows" for it). The workflow statement adds bit 2 (a
/// step, the statements' filter before `jq_flow_moved`) to every job.
const HAS_CHILDREN: i16 = 1;

/// Stores `plan` on the pool.
pub(crate) async fn enqueue_pool(inner: &Inner, plan: &WorkflowPlan) -> Result<Vec<JobId>> {
    let c = Cols::of(inner, plan)?;
    let rows = inner.db().fetch_all(c.statement(inner, plan)).await;
    finish(inner, plan, &c, rows.map(|r| r.into_iter().next()), true).await
}

/// Stores `plan` on `executor`, a caller's transaction that commits later.
pub(crate) async fn enqueue_in<'e, E: sqlx::PgExecutor<'e>>(
    inner: &Inner,
    executor: E,
    plan: &WorkflowPlan,
) -> Result<Vec<JobId>> {
    let c = Cols::of(inner, plan)?;
    let row = executor.fetch_one(c.statement(inner, plan)).await;
    finish(inner, plan, &c, row.map(Some), false).await
}

/// The statement's answer: the ids, the stored ones for a resend.
async fn finish(
    inner: &Inner,
    plan: &WorkflowPlan,
    c: &Cols,
    row: std::result::Result<Option<sqlx::postgres::PgRow>, sqlx::Error>,
    committed: bool,
) -> Result<Vec<JobId>> {
    let row = match row {
        Ok(Some(row)) => row,
        Ok(None) => return Err(Error::invalid("workflow", "the statement returned no row".to_owned())),
        Err(e) if is_violation_of(&e, "jobs_pkey") => {
            return Err(Error::invalid("workflow step", "a step's job id is stored already".to_owned()));
        }
        Err(e) => return Err(map_sqlx(e)),
    };
    let created: i64 = row.try_get(0).map_err(map_sqlx)?;
    if created == 0 {
        return stored_ids(inner, plan.id).await;
    }
    let roots = (0..c.ids.len()).filter(|&i| c.states[i] != State::Waiting.as_str());
    let keys: Vec<(&str, i16, DateTime<Utc>)> =
        roots.map(|i| (c.queues[i].as_str(), c.priorities[i], c.run_ats[i])).collect();
    if committed {
        inner.hints.arrived(keys.iter().copied());
    } else {
        inner.hints.pin(keys.iter().copied(), std::time::Instant::now() + crate::hints::UNCOMMITTED_PIN);
    }
    Ok(plan.ids())
}

impl Cols {
    /// The checked plan as columns.
    fn of(inner: &Inner, plan: &WorkflowPlan) -> Result<Cols> {
        plan.check(inner.max_payload_bytes)?;
        for step in &plan.steps {
            if let Some(key) = &step.job.key {
                jq_core::storage::check_key(key)?;
            }
        }
        let now = truncate_micros(inner.clock.now());
        let ids = plan.ids();
        let children = plan.children();
        let mut c = Cols { now, ..Cols::default() };
        for (i, step) in plan.steps.iter().enumerate() {
            let job = &step.job;
            let run_at = truncate_micros(job.run_at.unwrap_or(now));
            let state = if !step.parents.is_empty() {
                State::Waiting
            } else if run_at <= now {
                State::Pending
            } else {
                State::Scheduled
            };
            c.ids.push(job.id.0);
            c.queues.push(job.queue.as_str().to_owned());
            c.kinds.push(job.kind.clone());
            c.payloads.push(job.payload.as_str().to_owned());
            c.priorities.push(job.priority.as_i16());
            c.states.push(state.as_str());
            c.max_attempts.push(i32::try_from(job.max_attempts).unwrap_or(i32::MAX));
            c.run_ats.push(run_at);
            c.traces.push(job.trace.as_ref().map(|t| t.as_stored().to_owned()));
            c.flows.push(if children[i].is_empty() { 0 } else { HAS_CHILDREN });
            c.timeouts.push(job.timeout_ms());
            c.keys.push(job.key.clone());
            c.steps.push(step.name.clone());
            c.unfinished.push(i32::try_from(step.parents.len()).unwrap_or(i32::MAX));
            for &p in &step.parents {
                c.parents.push(ids[p].0);
                c.children.push(job.id.0);
                c.positions.push(i32::try_from(p).unwrap_or(i32::MAX));
                c.policies.push(step.on_failure.as_str());
            }
        }
        Ok(c)
    }

    fn statement<'q>(&'q self, inner: &'q Inner, plan: &WorkflowPlan) -> crate::pooler::PgQuery<'q> {
        inner
            .sql
            .workflow_enqueue
            .query()
            .bind(plan.id.0)
            .bind(self.now)
            .bind(&self.ids)
            .bind(&self.queues)
            .bind(&self.kinds)
            .bind(&self.payloads)
            .bind(&self.priorities)
            .bind(&self.states)
            .bind(&self.max_attempts)
            .bind(&self.run_ats)
            .bind(&self.traces)
            .bind(&self.flows)
            .bind(&self.steps)
            .bind(&self.unfinished)
            .bind(&self.parents)
            .bind(&self.children)
            .bind(&self.positions)
            .bind(&self.policies)
            .bind(&inner.channel)
            .bind(&self.timeouts)
            .bind(&self.keys)
    }
}

/// The columns of a workflow's statement.
#[derive(Default)]
struct Cols {
    now: DateTime<Utc>,
    ids: Vec<Uuid>,
    queues: Vec<String>,
    kinds: Vec<String>,
    payloads: Vec<String>,
    priorities: Vec<i16>,
    states: Vec<&'static str>,
    max_attempts: Vec<i32>,
    run_ats: Vec<DateTime<Utc>>,
    traces: Vec<Option<String>>,
    flows: Vec<i16>,
    /// Per-job timeouts in whole milliseconds (`NewJob::timeout_ms`).
    timeouts: Vec<Option<i64>>,
    /// The jobs' keys (capability keys).
    keys: Vec<Option<String>>,
    steps: Vec<String>,
    unfinished: Vec<i32>,
    parents: Vec<Uuid>,
    children: Vec<Uuid>,
    positions: Vec<i32>,
    policies: Vec<&'static str>,
}

async fn stored_ids(inner: &Inner, id: WorkflowId) -> Result<Vec<JobId>> {
    let rows = inner.db().fetch_all(inner.sql.workflow_ids.query().bind(id.0)).await.map_err(map_sqlx)?;
    rows.iter().map(|r| r.try_get::<Uuid, _>(0).map(JobId).map_err(map_sqlx)).collect()
}

/// Job `id`'s result.
pub(crate) async fn result(inner: &Inner, id: JobId) -> Result<Option<Payload>> {
    let row = inner.db().fetch_optional(inner.sql.workflow_result.query().bind(id.0)).await.map_err(map_sqlx)?;
    let row = row.ok_or(Error::NotFound { id })?;
    let text: Option<String> = row.try_get(0).map_err(map_sqlx)?;
    Ok(text.map(Payload::from_stored))
}

/// Job `id`'s place in its workflow.
pub(crate) async fn links(inner: &Inner, id: JobId) -> Result<JobLinks> {
    let row = inner.db().fetch_optional(inner.sql.workflow_links.query().bind(id.0)).await.map_err(map_sqlx)?;
    let row = row.ok_or(Error::NotFound { id })?;
    let workflow: Option<Uuid> = row.try_get(0).map_err(map_sqlx)?;
    let Some(workflow) = workflow else { return Ok(JobLinks::default()) };
    let step: String = row.try_get(1).map_err(map_sqlx)?;
    let unfinished: i32 = row.try_get(2).map_err(map_sqlx)?;
    let cancelled_by: Option<Uuid> = row.try_get(3).map_err(map_sqlx)?;
    let parents = inner.db().fetch_all(inner.sql.workflow_edges.query().bind(id.0)).await.map_err(map_sqlx)?;
    let parents = parents
        .iter()
        .map(|r| {
            let policy: String = r.try_get(1).map_err(map_sqlx)?;
            Ok(ParentLink {
                id: JobId(r.try_get(0).map_err(map_sqlx)?),
                on_failure: OnFailure::parse(&policy).unwrap_or_default(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let children = inner.db().fetch_all(inner.sql.workflow_children.query().bind(id.0)).await.map_err(map_sqlx)?;
    let children =
        children.iter().map(|r| r.try_get::<Uuid, _>(0).map(JobId).map_err(map_sqlx)).collect::<Result<Vec<_>>>()?;
    Ok(JobLinks {
        workflow: Some(WorkflowId(workflow)),
        step: Some(step),
        parents,
        children,
        unfinished_parents: u32::try_from(unfinished).unwrap_or(0),
        cancelled_by: cancelled_by.map(JobId),
    })
}

/// Job `id`'s parents with their results.
pub(crate) async fn parent_results(inner: &Inner, id: JobId) -> Result<Vec<ParentResult>> {
    let exists = inner.db().fetch_optional(inner.sql.workflow_result.query().bind(id.0)).await.map_err(map_sqlx)?;
    if exists.is_none() {
        return Err(Error::NotFound { id });
    }
    let rows = inner.db().fetch_all(inner.sql.workflow_parents.query().bind(id.0)).await.map_err(map_sqlx)?;
    rows.iter()
        .map(|r| {
            let parent = JobId(r.try_get(0).map_err(map_sqlx)?);
            let state: String = r.try_get(3).map_err(map_sqlx)?;
            let result: Option<String> = r.try_get(4).map_err(map_sqlx)?;
            Ok(ParentResult {
                id: parent,
                step: r.try_get(2).map_err(map_sqlx)?,
                state: decode_state(parent, &state)?,
                result: result.map(Payload::from_stored),
            })
        })
        .collect()
}

/// Workflow `id`'s counts per state, from its summary rows
/// and its Running steps among the leased jobs.
pub(crate) async fn workflow(inner: &Inner, id: WorkflowId) -> Result<WorkflowInfo> {
    let rows = inner.db().fetch_all(inner.sql.workflow_counts.query().bind(id.0)).await.map_err(map_sqlx)?;
    if rows.is_empty() {
        return Err(workflow_not_found(id));
    }
    let mut counts = StateCounts::default();
    for r in &rows {
        let state: Option<String> = r.try_get(0).map_err(map_sqlx)?;
        let n: i64 = r.try_get(1).map_err(map_sqlx)?;
        if let Some(state) = state {
            let state: State = state.parse()?;
            counts.add(state, u64::try_from(n).unwrap_or(0));
        }
    }
    Ok(WorkflowInfo { id, counts })
}

/// Workflow `id`'s steps.
pub(crate) async fn workflow_steps(inner: &Inner, id: WorkflowId) -> Result<Vec<StepInfo>> {
    workflow(inner, id).await?;
    let rows = inner.db().fetch_all(inner.sql.workflow_steps.query().bind(id.0)).await.map_err(map_sqlx)?;
    rows.iter()
        .map(|r| {
            let job = JobId(r.try_get(0).map_err(map_sqlx)?);
            let state: String = r.try_get(3).map_err(map_sqlx)?;
            let parents: Vec<Uuid> = r.try_get(4).map_err(map_sqlx)?;
            Ok(StepInfo {
                id: job,
                name: r.try_get(1).map_err(map_sqlx)?,
                kind: r.try_get(2).map_err(map_sqlx)?,
                state: decode_state(job, &state)?,
                parents: parents.into_iter().map(JobId).collect(),
            })
        })
        .collect()
}

/// The results of the items `round` of `batch`, in round order, when any
/// of them is an ack with a result (the settle statement then stores them:
/// `sql/settle_results.sql`); `None` otherwise, and the plain statement runs.
pub(crate) fn results_of(batch: &[jq_core::storage::Settlement], round: &[usize]) -> Option<Vec<Option<String>>> {
    let any = round.iter().any(|&i| matches!(batch[i].outcome, jq_core::storage::Outcome::AckWith { .. }));
    any.then(|| {
        round
            .iter()
            .map(|&i| match &batch[i].outcome {
                jq_core::storage::Outcome::AckWith { result } => Some(result.as_str().to_owned()),
                _ => None,
            })
            .collect()
    })
}
