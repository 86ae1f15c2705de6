//! `/workflows/{id}`: one workflow, its graph drawn as SVG on the server
//! (steps coloured by state, edges from parents to children) and its steps
//! in a table; and the workflow section of a job's page.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, State as AxumState};
use jq::storage::Storage;
use jq::workflow::{JobLinks, StepInfo, WorkflowId};
use jq::{JobId, Payload, State};
use maud::{Markup, PreEscaped, html};

use crate::App;
use crate::error::{DashboardError, PageResult};
use crate::layout::{self, Base, Nav};
use crate::pages::state_badge;

const NODE_W: usize = 150;
const NODE_H: usize = 34;
const GAP_X: usize = 60;
const GAP_Y: usize = 18;

/// `GET /workflows/{id}`.
pub(crate) async fn page<S: Storage>(
    AxumState(app): AxumState<Arc<App<S>>>,
    base: Base,
    Path(id): Path<String>,
) -> PageResult<Markup> {
    let id: WorkflowId = id.parse().map_err(|e: jq::Error| DashboardError::BadRequest(e.to_string()))?;
    let info = app.client.workflow(id).await?;
    let steps = app.client.workflow_steps(id).await?;
    let names: BTreeMap<JobId, &str> = steps.iter().map(|s| (s.id, s.name.as_str())).collect();
    let body = html! {
        h1 { "Workflow " code { (id) } " "
            @if info.is_finished() { span.state.state-completed { "finished" } } @else { span.state.state-running { "running" } } }
        p #workflow-counts {
            @for state in State::ALL {
                @let n = info.counts.get(state);
                @if n > 0 { (state_badge(state)) " " (n) " " }
            }
        }
        div.graph #workflow-graph { (PreEscaped(svg(&base, &steps))) }
        h2 { "Steps" }
        table #workflow-steps {
            thead { tr { th { "Step" } th { "Job" } th { "Kind" } th { "State" } th { "After" } } }
            tbody {
                @for s in &steps {
                    tr {
                        td { (s.name) }
                        td { a href=(base.to(&format!("/jobs/{}", s.id))) { code { (s.id) } } }
                        td { (s.kind) }
                        td { (state_badge(s.state)) }
                        td { @for (i, p) in s.parents.iter().enumerate() {
                            @if i > 0 { ", " }
                            a href=(base.to(&format!("/jobs/{p}"))) { (names.get(p).copied().unwrap_or("?")) }
                        } }
                    }
                }
            }
        }
    };
    Ok(layout::page(&base, &format!("Workflow {id}"), Nav::Jobs, app.options.read_only, None, body))
}

/// The colour of a state in the graph.
fn fill(state: State) -> &'static str {
    match state {
        State::Waiting => "#9aa3af",
        State::Scheduled | State::Pending => "#b7791f",
        State::Running => "#3056d3",
        State::Completed => "#2f9e6b",
        State::Dead => "#d64545",
        State::Cancelled => "#6b7280",
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The graph: steps in columns by depth (the longest path from a root), in
/// step order within a column; an edge from each parent to its child. Each
/// step links to its job's page.
fn svg(base: &Base, steps: &[StepInfo]) -> String {
    let position: BTreeMap<JobId, usize> = steps.iter().enumerate().map(|(i, s)| (s.id, i)).collect();
    // Steps come parents first, so one pass gives every depth.
    let mut depth = vec![0usize; steps.len()];
    for (i, s) in steps.iter().enumerate() {
        depth[i] = s.parents.iter().filter_map(|p| position.get(p)).map(|p| depth[*p] + 1).max().unwrap_or(0);
    }
    let mut row = vec![0usize; steps.len()];
    let mut per_column: BTreeMap<usize, usize> = BTreeMap::new();
    for (i, d) in depth.iter().enumerate() {
        let n = per_column.entry(*d).or_default();
        row[i] = *n;
        *n += 1;
    }
    let columns = per_column.len().max(1);
    let rows = per_column.values().copied().max().unwrap_or(1);
    let width = columns * (NODE_W + GAP_X) + GAP_X;
    let height = rows * (NODE_H + GAP_Y) + GAP_Y;
    let at = |i: usize| (GAP_X / 2 + depth[i] * (NODE_W + GAP_X), GAP_Y + row[i] * (NODE_H + GAP_Y));
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="workflow graph">"#
    );
    for (i, s) in steps.iter().enumerate() {
        let (cx, cy) = at(i);
        for p in s.parents.iter().filter_map(|p| position.get(p)) {
            let (px, py) = at(*p);
            let _ = write!(
                out,
                r##"<line class="edge" x1="{}" y1="{}" x2="{cx}" y2="{}" stroke="#9aa3af" stroke-width="1.5"/>"##,
                px + NODE_W,
                py + NODE_H / 2,
                cy + NODE_H / 2
            );
        }
    }
    for (i, s) in steps.iter().enumerate() {
        let (x, y) = at(i);
        let href = escape(&base.to(&format!("/jobs/{}", s.id)));
        let _ = write!(
            out,
            r##"<a href="{href}"><g class="step" data-state="{state}"><rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="4" fill="{color}"/><text x="{}" y="{}" fill="#ffffff" font-size="12" text-anchor="middle">{name}</text><title>{name}: {state}</title></g></a>"##,
            x + NODE_W / 2,
            y + NODE_H / 2 + 4,
            state = s.state,
            color = fill(s.state),
            name = escape(&s.name),
        );
    }
    out.push_str("</svg>");
    out
}

/// The workflow and result section of a job's page: its workflow, step,
/// parents, children and why it was cancelled, then its result.
pub(crate) fn section(base: &Base, links: Option<&JobLinks>, result: Option<&Payload>) -> Markup {
    let job_link = |id: &JobId| html! { a href=(base.to(&format!("/jobs/{id}"))) { code { (id) } } };
    html! {
        @if let Some(links) = links.filter(|l| l.workflow.is_some()) {
            h2 { "Workflow" }
            dl.fields #job-links {
                @if let Some(w) = links.workflow {
                    dt { "Workflow" } dd { a href=(base.to(&format!("/workflows/{w}"))) { code { (w) } } }
                }
                @if let Some(step) = &links.step { dt { "Step" } dd { (step) } }
                dt { "Parents" } dd #job-parents {
                    @if links.parents.is_empty() { span.muted { "none" } }
                    @for p in &links.parents { (job_link(&p.id)) " (" (p.on_failure) ") " }
                }
                dt { "Waiting for" } dd { (links.unfinished_parents) }
                dt { "Children" } dd #job-children {
                    @if links.children.is_empty() { span.muted { "none" } }
                    @for c in &links.children { (job_link(c)) " " }
                }
                @if let Some(by) = &links.cancelled_by { dt { "Cancelled by" } dd { (job_link(by)) } }
            }
        }
        @if let Some(result) = result {
            h2 { "Result" }
            pre.payload #job-result {
                (serde_json::from_str::<serde_json::Value>(result.as_str())
                    .ok()
                    .and_then(|v| serde_json::to_string_pretty(&v).ok())
                    .unwrap_or_else(|| result.as_str().to_owned()))
            }
        }
    }
}
