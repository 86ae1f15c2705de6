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
use crate::pages::{field, rate, short, state_badge, urlencode};

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
    // One queue chosen on a store with keyed jobs: its busiest keys.
    let keys = match (chosen_queue, app.client.storage().capabilities().keys) {
        (Some(queue), Some(keyed)) => Some(keyed.keys(&QueueName::new(queue)?, BUSIEST_KEYS).await?),
        _ => None,
    }
    .filter(|k| !k.busiest.is_empty() || !k.default.is_none() || !k.overrides.is_empty());
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
        @if let Some(keys) = &keys {
            section #keys {
                h2 { "Busiest keys" }
                p.muted {
                    "Every key: "
                    (limits_text(&keys.default))
                    @for o in &keys.overrides { "; " code { (o.key) } ": " (limits_text(&o.limits)) }
                }
                @if !keys.busiest.is_empty() {
                    table.keys {
                        thead { tr { th { "Key" } th.num { "Running" } th.num { "Pending" } th { "Limits" } } }
                        tbody {
                            @for k in &keys.busiest {
                                tr data-key=(k.key) {
                                    td { code { (k.key) } }
                                    td.num { (k.running) }
                                    td.num { (k.pending) }
                                    td { (limits_text(&k.limits)) }
                                }
                            }
                        }
                    }
                }
            }
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

/// How many keys the jobs page shows for a chosen queue.
const BUSIEST_KEYS: usize = 10;

/// A key's limits for people: "≤ 2 running, 100/1s" or "no limit".
fn limits_text(limits: &jq::QueueLimits) -> String {
    let mut parts = Vec::new();
    if let Some(n) = limits.concurrency {
        parts.push(format!("≤ {n} running"));
    }
    if let Some(r) = &limits.rate {
        parts.push(rate(r));
    }
    if parts.is_empty() { "no limit".to_owned() } else { parts.join(", ") }
}

/// At most `max` characters, with an ellipsis when cut.
fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
