//! `/`: every queue at a glance, the last hour's throughput, the recurring
//! periodic jobs, and the store-wide actions.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::extract::{Query, State as AxumState};
use jq::{QueueInfo, QueueName, State, StateCounts, Storage};
use maud::{Markup, html};

use crate::App;
use crate::chart;
use crate::error::PageResult;
use crate::format;
use crate::layout::{self, Base, Done, Nav};
use crate::pages::{rate, short, state_badge, urlencode};

/// One queue's row.
struct QueueRow<'a> {
    name: String,
    counts: StateCounts,
    control: Option<&'a QueueInfo>,
    oldest_pending: Option<jq::Timestamp>,
    completed_hour: u64,
    dead_hour: u64,
}

/// `GET /`.
pub(crate) async fn page<S: Storage>(
    AxumState(app): AxumState<Arc<App<S>>>,
    base: Base,
    Query(done): Query<Done>,
) -> PageResult<Markup> {
    let client = &app.client;
    let now = client.clock().now();
    let stats = client.stats().await?;
    let controls = client.queues().await?;
    let finished = client.throughput(chart::since(now)).await?;
    let periodic = client.periodic().await?;

    let mut per_queue: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for row in &finished {
        let entry = per_queue.entry(row.queue.as_str()).or_default();
        entry.0 += row.completed;
        entry.1 += row.dead;
    }
    let names: BTreeSet<String> =
        stats.queues.keys().cloned().chain(controls.iter().map(|c| c.queue.as_str().to_owned())).collect();
    let mut rows = Vec::with_capacity(names.len());
    for name in names {
        let counts = stats.queues.get(&name).copied().unwrap_or_default();
        let oldest_pending = if counts.get(State::Pending) > 0 {
            jq::observe::oldest_pending(client.storage(), &QueueName::new(name.as_str())?).await?
        } else {
            None
        };
        let (completed_hour, dead_hour) = per_queue.get(name.as_str()).copied().unwrap_or_default();
        let control = controls.iter().find(|c| c.queue.as_str() == name);
        rows.push(QueueRow { name, counts, control, oldest_pending, completed_hour, dead_hour });
    }
    let slots = chart::slots(now, finished.iter().map(|r| (r.minute, r.completed, r.dead)));
    let mut periodic_rows = Vec::with_capacity(periodic.len());
    for row in periodic {
        let last_state = match row.last_job {
            Some(id) => client.get(id).await.ok().map(|job| job.state),
            None => None,
        };
        periodic_rows.push((row, last_state));
    }

    let read_only = app.options.read_only;
    let csrf = app.csrf.as_str();
    let body = html! {
        section #live data-refresh=(app.options.refresh.as_secs()) {
            div.bar {
                h1 { "Overview" }
                span.muted { "as of " (format::instant(now)) }
                button #refresh-toggle type="button" { "Pause auto-refresh" }
            }
            h2 { "Queues" }
            @if rows.is_empty() {
                p.muted { "No job is stored yet." }
            } @else {
                table.queues {
                    thead { tr {
                        th { "Queue" }
                        @for state in State::ALL { th.num { (state) } }
                        th { "Oldest pending" }
                        th.num title="Finished in the last hour" { "Done / h" }
                        th.num title="Died in the last hour" { "Failed / h" }
                        th { "Controls" }
                        @if !read_only { th { "Actions" } }
                    } }
                    tbody {
                        @for row in &rows {
                            tr data-queue=(row.name) {
                                td { a href=(base.to(&format!("/jobs?queue={}", urlencode(&row.name)))) { (row.name) } }
                                @for state in State::ALL {
                                    td.num {
                                        @let n = row.counts.get(state);
                                        @if n > 0 {
                                            a href=(base.to(&format!("/jobs?queue={}&state={state}", urlencode(&row.name)))) { (n) }
                                        } @else { span.muted { "0" } }
                                    }
                                }
                                td {
                                    @match row.oldest_pending {
                                        Some(since) => { (format::age(now.signed_duration_since(since).to_std().unwrap_or_default())) }
                                        None => { span.muted { "-" } }
                                    }
                                }
                                td.num { (row.completed_hour) }
                                td.num { (row.dead_hour) }
                                td { (controls_cell(row.control)) }
                                @if !read_only {
                                    td.actions {
                                        @let q = urlencode(&row.name);
                                        @if row.control.is_some_and(QueueInfo::paused) {
                                            (layout::action(&base.to(&format!("/queues/{q}/resume")), csrf, "Resume",
                                                &format!("Resume queue {}?", row.name), "secondary"))
                                        } @else {
                                            (layout::action(&base.to(&format!("/queues/{q}/pause")), csrf, "Pause",
                                                &format!("Pause queue {}? Running jobs finish; no new job starts.", row.name), "secondary"))
                                        }
                                        @let dead = row.counts.get(State::Dead);
                                        @if dead > 0 {
                                            (layout::action(&base.to(&format!("/queues/{q}/retry-dead")), csrf, &format!("Retry {dead} dead"),
                                                &format!("Retry every dead job of queue {}?", row.name), "primary"))
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            h2 { "Throughput" }
            (chart::render(now, &slots))
            h2 { "Periodic jobs" }
            @if periodic_rows.is_empty() {
                p.muted { "No worker pool has declared a periodic job on this store." }
            } @else {
                table.periodic {
                    thead { tr {
                        th { "Name" } th { "Queue" } th { "Expression" } th { "Next tick" } th { "Last job" }
                        th.num { "Missed" } th { "Status" }
                        @if !read_only { th { "Actions" } }
                    } }
                    tbody {
                        @for (periodic, last_state) in &periodic_rows {
                            tr {
                                td { (periodic.name) }
                                td { (periodic.queue) }
                                td { code { (periodic.spec) } " " span.muted { (periodic.zone) } }
                                td { @match periodic.next_tick() {
                                    Some(t) => { span title=(format::instant(t)) { (format::relative(t, now)) } }
                                    None => { span.muted { "-" } }
                                } }
                                td { @match (periodic.last_job, last_state) {
                                    (Some(id), Some(state)) => { a href=(base.to(&format!("/jobs/{id}"))) { (short(&id.to_string())) } " " (state_badge(*state)) }
                                    (Some(_), None) => { span.muted { "purged" } }
                                    (None, _) => { span.muted { "none yet" } }
                                } }
                                td.num { (periodic.missed) }
                                td {
                                    @if periodic.is_orphaned(now) { span.warn { "orphaned" } } @else { "declared" }
                                    @if periodic.triggered_at.is_some() { ", triggered" }
                                }
                                @if !read_only {
                                    td.actions {
                                        (layout::action(&base.to(&format!("/periodic/{}/trigger", urlencode(&periodic.name))), csrf, "Trigger",
                                            &format!("Trigger {} now, once?", periodic.name), "primary"))
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if !read_only {
            h2 { "Purge finished jobs" }
            form.purge method="post" action=(base.to("/purge"))
                data-confirm="Delete these finished jobs for good? This cannot be undone." {
                input type="hidden" name="csrf" value=(csrf);
                label { "State " select name="state" {
                    option value="completed" { "completed" }
                    option value="dead" { "dead" }
                    option value="cancelled" { "cancelled" }
                } }
                label { " finished more than " input type="text" name="older_than" value="7d" size="6" required; " ago" }
                " "
                button.danger type="submit" { "Purge" }
                p.muted { "Durations like 90m, 12h, 7d. Every queue." }
            }
        }
    };
    Ok(layout::page(&base, "Overview", Nav::Overview, read_only, done.message(), body))
}

fn controls_cell(control: Option<&QueueInfo>) -> Markup {
    let Some(control) = control else { return html! { span.muted { "-" } } };
    html! {
        @if control.paused() { span.paused { "paused" } " " }
        @if let Some(n) = control.limits.concurrency { span.limit { "≤ " (n) " running" } " " }
        @if let Some(r) = &control.limits.rate { span.limit { (rate(r)) } }
        @if !control.paused() && control.limits.concurrency.is_none() && control.limits.rate.is_none() { span.muted { "-" } }
    }
}
