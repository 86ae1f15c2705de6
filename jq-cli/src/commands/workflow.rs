//! `jqctl workflow show ID`, and the workflow lines of `jqctl get`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use jq::storage::{Storage, StorageExt};
use jq::workflow::{JobLinks, WorkflowId};
use jq::{JobId, Payload, State};
use serde::Serialize;

use crate::error::CliResult;
use crate::view::{self, JobView};

/// A job as `jqctl get --json` shows it on a store with workflows: the job,
/// then its place in its workflow and its result (absent when it has none).
#[derive(Debug, Serialize)]
pub struct JobWithLinks {
    /// The job.
    #[serde(flatten)]
    pub job: JobView,
    /// Its workflow, step, parents and children.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub links: Option<JobLinks>,
    /// The result stored with its ack.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// A durable job's journal (absent for a job without one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal: Option<crate::view::JournalView>,
}

fn json_of(p: &Payload) -> serde_json::Value {
    serde_json::from_str(p.as_str()).unwrap_or_else(|_| serde_json::Value::String(p.as_str().to_owned()))
}

/// `jqctl get ID`: the job, and on a store with workflows its links and
/// result, on one with durable jobs its journal (each entry with its
/// instant, and what the job sleeps until or waits for).
pub async fn get<S: Storage>(storage: &S, id: JobId, json: bool) -> CliResult {
    let job = storage.get(id).await?;
    let (links, result) = match storage.capabilities().workflows {
        Some(flows) => {
            let links = flows.links(id).await?;
            let result = flows.result(id).await?;
            (Some(links).filter(|l| l.workflow.is_some()), result)
        }
        None => (None, None),
    };
    let journal = match storage.capabilities().durable {
        Some(durable) => Some(durable.journal(id).await?).filter(|j| *j != jq::durable::Journal::default()),
        None => None,
    };
    if json {
        return view::emit_json(&JobWithLinks {
            job: JobView::from(&job),
            links,
            result: result.as_ref().map(json_of),
            journal: journal.as_ref().map(view::JournalView::from),
        });
    }
    let mut text = view::job_details(&job);
    if let Some(links) = &links {
        text.push_str(&links_text(links));
    }
    if let Some(journal) = &journal {
        text.push_str(&view::journal_text(journal, job.state, job.run_at));
    }
    if let Some(result) = &result {
        let pretty = serde_json::to_string_pretty(&json_of(result)).unwrap_or_else(|_| result.as_str().to_owned());
        let _ = writeln!(text, "result");
        for line in pretty.lines() {
            let _ = writeln!(text, "  {line}");
        }
    }
    view::emit(&text)
}

fn links_text(links: &JobLinks) -> String {
    let mut out = String::new();
    let ids = |v: &mut dyn Iterator<Item = JobId>| v.map(|id| id.to_string()).collect::<Vec<_>>().join(", ");
    if let Some(w) = links.workflow {
        let _ = writeln!(out, "{:<13}{w}", "workflow");
    }
    if let Some(step) = &links.step {
        let _ = writeln!(out, "{:<13}{step}", "step");
    }
    if !links.parents.is_empty() {
        let parents: Vec<String> = links.parents.iter().map(|p| format!("{} ({})", p.id, p.on_failure)).collect();
        let _ = writeln!(out, "{:<13}{}", "parents", parents.join(", "));
        let _ = writeln!(out, "{:<13}{}", "waiting for", links.unfinished_parents);
    }
    if !links.children.is_empty() {
        let _ = writeln!(out, "{:<13}{}", "children", ids(&mut links.children.iter().copied()));
    }
    if let Some(by) = links.cancelled_by {
        let _ = writeln!(out, "{:<13}{by} failed", "cancelled by");
    }
    out
}

/// A workflow as `jqctl workflow show --json` shows it.
#[derive(Debug, Serialize)]
pub struct WorkflowView {
    /// Its id.
    pub id: String,
    /// Every step terminal.
    pub finished: bool,
    /// Steps per state.
    pub counts: BTreeMap<State, u64>,
    /// The steps in order.
    pub steps: Vec<StepView>,
}

/// One step of [`WorkflowView`].
#[derive(Debug, Serialize)]
pub struct StepView {
    /// Its name.
    pub name: String,
    /// Its job.
    pub id: String,
    /// Its kind.
    pub kind: String,
    /// Its state.
    pub state: State,
    /// Its parents' step names (the edges).
    pub after: Vec<String>,
}

/// `jqctl workflow show ID`.
pub async fn show<S: Storage>(storage: &S, id: WorkflowId, json: bool) -> CliResult {
    let flows = storage.require_workflows()?;
    let info = flows.workflow(id).await?;
    let steps = flows.workflow_steps(id).await?;
    let names: BTreeMap<JobId, String> = steps.iter().map(|s| (s.id, s.name.clone())).collect();
    let view = WorkflowView {
        id: id.to_string(),
        finished: info.is_finished(),
        counts: State::ALL.into_iter().map(|s| (s, info.counts.get(s))).filter(|(_, n)| *n > 0).collect(),
        steps: steps
            .iter()
            .map(|s| StepView {
                name: s.name.clone(),
                id: s.id.to_string(),
                kind: s.kind.clone(),
                state: s.state,
                after: s.parents.iter().map(|p| names.get(p).cloned().unwrap_or_else(|| p.to_string())).collect(),
            })
            .collect(),
    };
    if json {
        return view::emit_json(&view);
    }
    let mut out = String::new();
    let counts: Vec<String> = view.counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let _ = writeln!(
        out,
        "workflow {} ({}): {}",
        view.id,
        if view.finished { "finished" } else { "not finished" },
        counts.join(", ")
    );
    let width = view.steps.iter().map(|s| s.name.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(out, "{:<width$}  {:<36}  {:<10}  {:<16}  AFTER", "STEP", "JOB", "STATE", "KIND");
    for s in &view.steps {
        let after = if s.after.is_empty() { "-".to_owned() } else { s.after.join(", ") };
        let _ = writeln!(out, "{:<width$}  {:<36}  {:<10}  {:<16}  {after}", s.name, s.id, s.state.as_str(), s.kind);
    }
    view::emit(&out)
}
