//! `/jobs`: jobs filtered by queue, state and kind, a page at a time.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::{Query, State as AxumState};
use jq::storage::Storage;
use jq::{JobFilter, JobId, QueueName, State};
use maud::{Markup, html};
use serde::Deserialize;

use crate::App;
use crate::error::{DashboardError, PageResult};
use crate::format;
use crate::layout::{self, Base, Done, Nav};
use crate::pages::{field, short, state_badge, urlencode};

/// Jobs per page.
const PAGE: usize = 50;

/// The filters, as the form and the links send them.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Filters {
    queue: Option<String>,
    state: Option<String>,
    kind: Option<String>,
    after: Option<String>,
}

impl Filters {
    fn to_filter(&self) -> PageResult<JobFilter> {
        let bad = |e: jq::Error| DashboardError::BadRequest(e.to_string());
        Ok(JobFilter {
            queue: field(&self.queue).map(QueueName::new).transpose().map_err(bad)?,
            state: field(&self.state).map(str::parse::<State>).transpose().map_err(bad)?,
            kind: field(&self.kind).map(str::to_owned),
            after: field(&self.after).map(str::parse::<JobId>).transpose().map_err(bad)?,
            limit: PAGE,
        })
    }

    /// The query string of these filters on the page after `after`.
    fn query(&self, after: Option<JobId>) -> String {
        let mut parts = Vec::new();
        for (name, value) in [("queue", &self.queue), ("state", &self.state), ("kind", &self.kind)] {
            if let Some(v) = field(value) {
                parts.push(format!("{name}={}", urlencode(v)));
            }
        }
        if let Some(after) = after {
            parts.push(format!("after={after}"));
        }
        parts.join("&")
    }
}

/// `GET /jobs`.
pub(crate) async fn page<S: Storage>(
    AxumState(app): AxumState<Arc<App<S>>>,
    base: Base,
    Query(filters): Query<Filters>,
    Query(done): Query<Done>,
) -> PageResult<Markup> {
    let filter = filters.to_filter()?;
    let jobs = app.client.list(&filter).await?;
    let queues: BTreeSet<String> = app.client.stats().await?.queues.into_keys().collect();
    let now = app.client.clock().now();
    let next = if jobs.len() == PAGE { jobs.last().map(|j| j.id) } else { None };
    let chosen_queue = field(&filters.queue);
    let chosen_state = field(&filters.state);
    let body = html! {
        h1 { "Jobs" }
        form.filters method="get" action=(base.to("/jobs")) {
            label { "Queue " select name="queue" {
                option value="" { "any" }
                @for q in &queues { option value=(q) selected[chosen_queue == Some(q.as_str())] { (q) } }
            } }
            label { " State " select name="state" {
                option value="" { "any" }
                @for s in State::ALL { option value=(s) selected[chosen_state == Some(s.as_str())] { (s) } }
            } }
            label { " Kind " input type="text" name="kind" value=(field(&filters.kind).unwrap_or_default()) size="16"; }
            " "
            button type="submit" { "Filter" }
        }
        @if jobs.is_empty() {
            p.muted #no-jobs { "No job matches." }
        } @else {
            table.jobs {
                thead { tr {
                    th { "Job" } th { "Queue" } th { "Kind" } th { "State" } th.num { "Attempts" }
                    th { "Due" } th { "Enqueued" } th { "Last error" }
                } }
                tbody {
                    @for job in &jobs {
                        tr data-job=(job.id) {
                            td { a href=(base.to(&format!("/jobs/{}", job.id))) title=(job.id) { code { (short(&job.id.to_string())) } } }
                            td { (job.queue) }
                            td { (job.kind) }
                            td { (state_badge(job.state)) }
                            td.num { (job.attempts) " / " (job.max_attempts) }
                            td { span title=(format::instant(job.run_at)) { (format::relative(job.run_at, now)) } }
                            td { span title=(format::instant(job.created_at)) { (format::relative(job.created_at, now)) } }
                            td.error { @if let Some(e) = job.errors.last() { (truncate(&e.message, 80)) } }
                        }
                    }
                }
            }
        }
        p.paging {
            @if field(&filters.after).is_some() { a href=(base.to(&format!("/jobs?{}", filters.query(None)))) { "First page" } " " }
            @if let Some(last) = next { a #next-page href=(base.to(&format!("/jobs?{}", filters.query(Some(last))))) { "Next page" } }
        }
    };
    Ok(layout::page(&base, "Jobs", Nav::Jobs, app.options.read_only, done.message(), body))
}

/// At most `max` characters, with an ellipsis when cut.
fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
