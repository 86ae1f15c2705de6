//! `/jobs/{id}`: one job, whole: payload, every failed attempt, lease,
//! unique key, due time, a durable job's journal; retry or cancel it, or
//! send a durable job a signal.

use std::sync::Arc;

use axum::extract::{Path, Query, State as AxumState};
use jq::storage::Storage;
use jq::{Job, JobId, State};
use maud::{Markup, html};

use crate::App;
use crate::error::{DashboardError, PageResult};
use crate::format;
use crate::layout::{self, Base, Done, Nav};
use crate::pages::state_badge;

/// Parses the id in a job URL.
pub(crate) fn job_id(text: &str) -> PageResult<JobId> {
    text.parse().map_err(|e: jq::Error| DashboardError::BadRequest(e.to_string()))
}

/// `GET /jobs/{id}`.
pub(crate) async fn page<S: Storage>(
    AxumState(app): AxumState<Arc<App<S>>>,
    base: Base,
    Path(id): Path<String>,
    Query(done): Query<Done>,
) -> PageResult<Markup> {
    let job = app.client.get(job_id(&id)?).await?;
    let now = app.client.clock().now();
    // A store with workflows shows where the job stands in its own and
    // its result; the others have neither.
    let (links, result) = match app.client.storage().capabilities().workflows {
        Some(flows) => (Some(flows.links(job.id).await?), flows.result(job.id).await?),
        None => (None, None),
    };
    // A durable job's journal, on a store with durable jobs; nothing for
    // a job without one.
    let journal = match app.client.storage().capabilities().durable {
        Some(durable) => Some(durable.journal(job.id).await?).filter(|j| *j != jq::durable::Journal::default()),
        None => None,
    };
    let body = html! {
        h1 { "Job " code { (job.id) } " " (state_badge(job.state)) }
        @if !app.options.read_only { (actions(&base, &app.csrf, &job, app.client.storage().capabilities().cancellation.is_some())) }
        dl.fields {
            dt { "Queue" } dd { a href=(base.to(&format!("/jobs?queue={}", crate::pages::urlencode(job.queue.as_str())))) { (job.queue) } }
            dt { "Kind" } dd { (job.kind) }
            dt { "State" } dd #job-state { (job.state) }
            dt { "Priority" } dd { (job.priority) }
            dt { "Attempts" } dd { (job.attempts) " of " (job.max_attempts) }
            dt { "Due" } dd { (format::instant(job.run_at)) " (" (format::relative(job.run_at, now)) ")" }
            dt { "Enqueued" } dd { (format::instant(job.created_at)) }
            dt { "Finished" } dd { @match job.finished_at { Some(t) => { (format::instant(t)) } None => { span.muted { "-" } } } }
            dt { "Lease" } dd {
                @match &job.lease {
                    Some(lease) => { "held by " strong { (lease.worker) } ", expires " (format::instant(lease.expires_at))
                        " (" (format::relative(lease.expires_at, now)) ")" }
                    None => { span.muted { "none" } }
                }
            }
            dt { "Unique key" } dd { @match &job.unique_key { Some(k) => { code { (k) } } None => { span.muted { "none" } } } }
            @if let Some(key) = &job.key {
                dt { "Key" } dd { a href=(base.to(&format!("/jobs?queue={}", crate::pages::urlencode(job.queue.as_str())))) title="The queue's keys" { code { (key) } } }
            }
            dt { "Trace" } dd { @match &job.trace { Some(t) => { code { (t.traceparent()) } } None => { span.muted { "none" } } } }
            dt { "Timeout" } dd { @match job.timeout { Some(t) => { (format!("{t:?}")) } None => { span.muted { "the worker's" } } } }
            dt { "Progress" } dd #job-progress { @match &job.progress { Some(p) => { code { (p) } } None => { span.muted { "none reported" } } } }
            @if let Some(request) = &job.cancel_requested {
                dt { "Cancel requested" } dd #job-cancel-requested {
                    (format::instant(request.at)) " (" (format::relative(request.at, now)) ")"
                    @if !request.reason.is_empty() { ": " (request.reason) }
                }
            }
        }
        h2 { "Payload" }
        pre.payload #payload { (pretty(&job)) }
        (crate::pages::workflow::section(&base, links.as_ref(), result.as_ref()))
        @if let Some(journal) = &journal {
            (journal_section(journal, &job, now))
            @if !app.options.read_only && !job.state.is_terminal() { (signal_form(&base, &app.csrf, &job, journal)) }
        }
        h2 { "Attempts that failed" }
        @if job.errors.is_empty() {
            p.muted { "None." }
        } @else {
            table.errors {
                thead { tr { th.num { "Attempt" } th { "At" } th { "Error" } } }
                tbody {
                    @for e in &job.errors {
                        tr { td.num { (e.attempt) } td { (format::instant(e.at)) } td { pre.error { (e.message) } } }
                    }
                }
            }
        }
    };
    Ok(layout::page(&base, &format!("Job {}", job.id), Nav::Jobs, app.options.read_only, done.message(), body))
}

/// A durable job's journal: each entry with its instant, then what the job
/// waits for or sleeps until, and its signals not taken yet.
fn journal_section(journal: &jq::durable::Journal, job: &Job, now: jq::Timestamp) -> Markup {
    use jq::durable::EntryKind;
    let sleeping = journal.wait.is_none()
        && job.state == State::Scheduled
        && journal.entries.last().is_some_and(|e| e.kind == EntryKind::Sleep);
    html! {
        h2 { "Journal" }
        @if let Some(wait) = &journal.wait {
            p #journal-wait { "Waits for signal " code { (wait.name) } " until " (format::instant(wait.until))
                " (" (format::relative(wait.until, now)) ")" }
        }
        @if sleeping {
            p #journal-sleep { "Sleeps until " (format::instant(job.run_at)) " (" (format::relative(job.run_at, now)) ")" }
        }
        table.journal #journal {
            thead { tr { th.num { "#" } th { "At" } th { "Entry" } th { "Value" } } }
            tbody {
                @for e in &journal.entries {
                    tr {
                        td.num { (e.index) }
                        td { (format::instant(e.at)) }
                        td { (e.describe()) @if e.kind == EntryKind::Timeout { " (timed out)" } }
                        td {
                            @match (&e.value, e.until) {
                                (Some(v), _) => { code { (v.as_str()) } }
                                (None, Some(until)) => { "until " (format::instant(until)) }
                                (None, None) => { span.muted { "-" } }
                            }
                        }
                    }
                }
            }
        }
        @if !journal.signals.is_empty() {
            p #journal-signals { "Signals not taken yet: "
                @for (i, s) in journal.signals.iter().enumerate() {
                    @if i > 0 { ", " }
                    code { (s.name) } " (" (format::instant(s.sent_at)) ")"
                }
            }
        }
    }
}

/// The form that sends a durable job a signal (`POST /jobs/{id}/signal`),
/// its name filled in with the one the job waits for, if it waits. Shown
/// for a job with a journal: a store cannot tell a durable job that has
/// not run yet from a plain one.
fn signal_form(base: &Base, csrf: &str, job: &Job, journal: &jq::durable::Journal) -> Markup {
    let id = job.id;
    let waited = journal.wait.as_ref().map_or("", |w| w.name.as_str());
    html! {
        h2 { "Send a signal" }
        form.signal #signal-form method="post" action=(base.to(&format!("/jobs/{id}/signal")))
            data-confirm=(format!("Send this signal to job {id}? A wait for its name takes it, once.")) {
            input type="hidden" name="csrf" value=(csrf);
            label { "Name " input type="text" name="name" value=(waited) maxlength="128" required; }
            label { "Payload (JSON) " textarea name="payload" rows="3" cols="40" { "null" } }
            button.primary type="submit" { "Send signal" }
            p.muted { "Kept until the job's wait_for of this name takes it; a job waiting for it runs again at once." }
        }
    }
}

/// Retry for a dead job, cancel for one that has not started, or for a
/// running one not yet asked to stop when the storage can stop it.
fn actions(base: &Base, csrf: &str, job: &Job, stops_running: bool) -> Markup {
    let id = job.id;
    html! {
        div.actions {
            @if job.state == State::Dead {
                (layout::action(&base.to(&format!("/jobs/{id}/retry")), csrf, "Retry",
                    &format!("Retry job {id}? It becomes pending with one more attempt."), "primary"))
            }
            @if matches!(job.state, State::Waiting | State::Scheduled | State::Pending) {
                (layout::action(&base.to(&format!("/jobs/{id}/cancel")), csrf, "Cancel",
                    &format!("Cancel job {id}? It will not run, nor will the workflow steps that wait for it."), "danger"))
            }
            @if job.state == State::Running && stops_running && job.cancel_requested.is_none() {
                (layout::action(&base.to(&format!("/jobs/{id}/cancel")), csrf, "Cancel",
                    &format!("Cancel running job {id}? Its worker stops it; it will not be retried."), "danger"))
            }
        }
    }
}

/// The payload as indented JSON; as stored when it does not parse.
fn pretty(job: &Job) -> String {
    let text = job.payload.as_str();
    serde_json::from_str::<serde_json::Value>(text)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| text.to_owned())
}
