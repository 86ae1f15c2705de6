//! Workflows on Redis ([`WorkflowStorage`](jq_core::storage::WorkflowStorage)):
//! a workflow is stored by one script call (`lua/workflow_enqueue.lua`),
//! and the release or cancellation of a finished step's children runs in
//! the script that finished it (`finished` of `workflows()` in `lua/common/workflows.lua`). The
//! keys are documented in [`crate::schema`] ("Workflows").
//!
//! Every key a workflow's scripts touch is derived from its steps' queues:
//! on a single server a workflow may span any queues; on Redis Cluster its
//! queues must share one hash slot (a hash tag, `{tag}name`), else the plan
//! is refused with [`Error::BatchNotAtomic`] before anything is stored.

use std::collections::HashMap;

use jq_core::workflow::{
    JobLinks, OnFailure, ParentLink, ParentResult, StepInfo, WorkflowId, WorkflowInfo, WorkflowPlan,
};
use jq_core::{Error, JobId, Payload, QueueName, Result, State, StateCounts};
use uuid::Uuid;

use crate::schema::{id_hex, slot};
use crate::{Inner, error, scripts};

/// A workflow id as written in keys and values: 32 lowercase hex digits.
fn wid_hex(id: WorkflowId) -> String {
    id.0.simple().to_string()
}

/// `id` followed by `base` unless it is `relative_to` (the packed
/// references `workflows().refs` in `lua/common/workflows.lua` reads).
fn reference(id: JobId, base: &str, relative_to: &str) -> String {
    let hex = id_hex(id);
    if base == relative_to { hex } else { format!("{hex}{base}") }
}

/// The job ids of a packed reference list (each entry 32 hex digits and
/// an optional base, entries joined by NUL).
fn parse_refs(packed: &str) -> Result<Vec<JobId>> {
    if packed.is_empty() {
        return Ok(Vec::new());
    }
    packed.split('\0').map(|entry| parse_hex(entry.get(..32).unwrap_or(entry))).collect()
}

/// Ids written back to back, 32 hex digits each.
fn parse_concatenated(ids: &str) -> Result<Vec<JobId>> {
    (0..ids.len() / 32).map(|i| parse_hex(&ids[i * 32..i * 32 + 32])).collect()
}

fn parse_hex(hex: &str) -> Result<JobId> {
    Uuid::parse_str(hex).map(JobId).map_err(|_| error::unexpected(format!("a workflow script returned the id {hex:?}")))
}

fn parse_state(s: &str) -> Result<State> {
    s.parse::<State>().map_err(|_| error::unexpected(format!("a workflow script returned the state {s:?}")))
}

/// Values per step after the script's 4 leading arguments.
const PER_STEP: usize = 16;

pub(crate) async fn enqueue(s: &Inner, plan: &WorkflowPlan) -> Result<Vec<JobId>> {
    plan.check(s.config.max_payload_bytes)?;
    // The queues in first-seen order: the first step's holds the summary.
    let mut names: Vec<&str> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for step in &plan.steps {
        let q = step.job.queue.as_str();
        if !index.contains_key(q) {
            names.push(q);
            index.insert(q, names.len());
        }
    }
    let bases: Vec<String> = names.iter().map(|q| s.keys.base(q)).collect();
    if s.is_cluster() && bases.iter().any(|b| slot(b) != slot(&bases[0])) {
        let mut queues: Vec<String> = names.iter().map(|q| (*q).to_owned()).collect();
        queues.sort();
        return Err(Error::BatchNotAtomic {
            queues,
            reason: "a workflow's steps must share one Redis Cluster hash slot: give their queues one hash tag \
                     ({tag}name)"
                .to_owned(),
        });
    }
    let now = s.now_micros();
    let wid = wid_hex(plan.id);
    let wfbase = &bases[0];
    let base_of = |i: usize| &bases[index[plan.steps[i].job.queue.as_str()] - 1];
    let ids = plan.ids();
    let children = plan.children();
    let steps: Vec<String> = (0..plan.steps.len()).map(|i| reference(ids[i], base_of(i), wfbase)).collect();
    let mut cmd = scripts::call(&scripts::WORKFLOW_ENQUEUE, &bases);
    cmd.arg(now).arg(s.keys.channel()).arg(&wid).arg(steps.join("\0"));
    for (i, step) in plan.steps.iter().enumerate() {
        let job = &step.job;
        let base = base_of(i);
        let hex = id_hex(job.id);
        let run_at = job.run_at.map_or(now, |at| at.timestamp_micros());
        let state = if !step.parents.is_empty() {
            State::Waiting
        } else if run_at <= now {
            State::Pending
        } else {
            State::Scheduled
        };
        let member = if state == State::Pending { format!("{:020}{hex}", run_at.max(0)) } else { String::new() };
        let flag = if children[i].is_empty() { 'w' } else { 'c' };
        let flow = format!("{flag}{wid}{}", if base == wfbase { "" } else { wfbase.as_str() });
        let policy = match step.on_failure {
            OnFailure::Cancel => "c",
            OnFailure::RunAnyway => "r",
        };
        let node = format!("{}\0\0{i}\0{policy}\0{wid}\0{}", step.parents.len(), step.name);
        let parents: Vec<String> = step.parents.iter().map(|&p| reference(ids[p], base_of(p), base)).collect();
        let kids: Vec<String> = children[i].iter().map(|&c| reference(ids[c], base_of(c), base)).collect();
        cmd.arg(&hex)
            .arg(index[job.queue.as_str()])
            .arg(&job.kind)
            .arg(job.payload.as_str())
            .arg(job.priority.as_i16())
            .arg(run_at)
            .arg(job.max_attempts)
            .arg(&member)
            .arg(job.trace.as_ref().map_or("", |t| t.as_stored()))
            .arg(job.timeout.map_or(String::new(), |t| t.as_millis().to_string()))
            .arg(state.as_str())
            .arg(flow)
            .arg(node)
            .arg(parents.join("\0"))
            .arg(kids.join("\0"))
            .arg(job.key.as_deref().unwrap_or(""));
    }
    debug_assert_eq!(cmd.args_iter().count(), 3 + bases.len() + 4 + PER_STEP * plan.steps.len());
    let reply = crate::enqueue::registered_then(s, &names, cmd).await?;
    match reply.first().map(String::as_str) {
        Some("ok") => {
            jq_core::observe::EnqueueTally::of(&plan.steps.iter().map(|s| s.job.clone()).collect::<Vec<_>>()).record();
            Ok(ids)
        }
        Some("stored") => parse_refs(reply.get(1).map_or("", String::as_str)),
        Some("exists") => {
            let hex = reply.get(1).map_or("", String::as_str);
            let id = parse_hex(hex)?;
            let name = plan.steps.iter().find(|s| s.job.id == id).map_or("", |s| s.name.as_str());
            Err(Error::invalid("workflow step", format!("job {id} of step {name:?} is stored already")))
        }
        _ => Err(error::unexpected(format!("enqueue_workflow returned {reply:?}"))),
    }
}

/// Runs `lua/workflow_read.lua` with `op` on the queue at `base`.
async fn read(s: &Inner, base: String, op: &str, key: &str) -> Result<Vec<String>> {
    let mut cmd = scripts::call(&scripts::WORKFLOW_READ, &[base]);
    cmd.arg(op).arg(key);
    s.query(&cmd).await
}

/// The queue of job `id`, found as settlements find it.
async fn queue_of(s: &Inner, id: JobId) -> Result<QueueName> {
    s.locate(&[id]).await?.remove(&id).ok_or(Error::NotFound { id })
}

/// A job read: `NotFound` when the script did not find the job.
async fn read_job(s: &Inner, id: JobId, op: &str) -> Result<Vec<String>> {
    let queue = queue_of(s, id).await?;
    let reply = read(s, s.keys.base(queue.as_str()), op, &id_hex(id)).await?;
    match reply.first().map(String::as_str) {
        Some("ok") => Ok(reply.into_iter().skip(1).collect()),
        // purged between the lookup and the read
        Some("notfound") => Err(Error::NotFound { id }),
        _ => Err(error::unexpected(format!("{op} returned {reply:?}"))),
    }
}

pub(crate) async fn result(s: &Inner, id: JobId) -> Result<Option<Payload>> {
    let reply = read_job(s, id, "result").await?;
    Ok(reply.into_iter().next().filter(|r| !r.is_empty()).map(Payload::from_stored))
}

pub(crate) async fn links(s: &Inner, id: JobId) -> Result<JobLinks> {
    let reply = read_job(s, id, "links").await?;
    let [unfinished, cancelled_by, policy, workflow, step, parents, children] = match <[String; 7]>::try_from(reply) {
        Ok(fields) => fields,
        Err(reply) if reply.is_empty() => return Ok(JobLinks::default()),
        Err(reply) => return Err(error::unexpected(format!("links returned {reply:?}"))),
    };
    let on_failure = if policy == "r" { OnFailure::RunAnyway } else { OnFailure::Cancel };
    let workflow = Uuid::parse_str(&workflow)
        .map(WorkflowId)
        .map_err(|_| error::unexpected(format!("links returned the workflow {workflow:?}")))?;
    Ok(JobLinks {
        workflow: Some(workflow),
        step: Some(step),
        parents: parse_concatenated(&parents)?.into_iter().map(|id| ParentLink { id, on_failure }).collect(),
        children: parse_concatenated(&children)?,
        unfinished_parents: unfinished.parse().unwrap_or(0),
        cancelled_by: if cancelled_by.is_empty() { None } else { Some(parse_hex(&cancelled_by)?) },
    })
}

pub(crate) async fn parent_results(s: &Inner, id: JobId) -> Result<Vec<ParentResult>> {
    let reply = read_job(s, id, "parents").await?;
    reply
        .chunks(4)
        .map(|c| match c {
            [id, step, state, result] => Ok(ParentResult {
                id: parse_hex(id)?,
                step: step.clone(),
                state: parse_state(state)?,
                result: if result.is_empty() { None } else { Some(Payload::from_stored(result.clone())) },
            }),
            _ => Err(error::unexpected("parent_results returned a partial entry")),
        })
        .collect()
}

/// The base of the queue holding workflow `id`'s summary: a probe of every
/// registered queue, as lookups by job id are (schema.rs).
async fn summary_base(s: &Inner, id: WorkflowId) -> Result<String> {
    let queues = s.queues().await?;
    let wid = wid_hex(id);
    let bases: Vec<String> = queues.iter().map(|q| s.keys.base(q.as_str())).collect();
    let cmds = bases
        .iter()
        .map(|b| {
            let mut cmd = redis::cmd("EXISTS");
            cmd.arg(format!("{b}wf:{wid}"));
            cmd
        })
        .collect();
    let found: Vec<bool> = s.query_each(cmds).await?;
    bases.into_iter().zip(found).find(|(_, f)| *f).map(|(b, _)| b).ok_or(Error::WorkflowNotFound { id })
}

/// A workflow read: `WorkflowNotFound` when the script found no summary.
async fn read_workflow(s: &Inner, id: WorkflowId, op: &str) -> Result<Vec<String>> {
    let base = summary_base(s, id).await?;
    let reply = read(s, base, op, &wid_hex(id)).await?;
    match reply.first().map(String::as_str) {
        Some("ok") => Ok(reply.into_iter().skip(1).collect()),
        Some("notfound") => Err(Error::WorkflowNotFound { id }),
        _ => Err(error::unexpected(format!("{op} returned {reply:?}"))),
    }
}

pub(crate) async fn workflow(s: &Inner, id: WorkflowId) -> Result<WorkflowInfo> {
    let reply = read_workflow(s, id, "workflow").await?;
    let mut counts = StateCounts::default();
    for pair in reply.chunks(2) {
        if let [state, n] = pair {
            // a count below zero would be a bug; shown as none rather than wrapped
            counts.set(parse_state(state)?, u64::try_from(n.parse::<i64>().unwrap_or(0)).unwrap_or(0));
        }
    }
    Ok(WorkflowInfo { id, counts })
}

pub(crate) async fn workflow_steps(s: &Inner, id: WorkflowId) -> Result<Vec<StepInfo>> {
    let reply = read_workflow(s, id, "steps").await?;
    reply
        .chunks(5)
        .map(|c| match c {
            [job, name, kind, state, parents] => Ok(StepInfo {
                id: parse_hex(job)?,
                name: name.clone(),
                kind: kind.clone(),
                state: parse_state(state)?,
                parents: parse_concatenated(parents)?,
            }),
            _ => Err(error::unexpected("workflow_steps returned a partial entry")),
        })
        .collect()
}
