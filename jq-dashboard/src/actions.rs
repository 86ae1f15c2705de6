//! The POST actions. Each checks read-only and the CSRF token first, then
//! acts and redirects (303) to a page whose banner says what was done.

use std::sync::Arc;
use std::time::Duration;

use axum::Form;
use axum::extract::{Path, State as AxumState};
use axum::http::HeaderMap;
use axum::response::Redirect;
use jq::storage::{Storage, StorageExt as _};
use jq::{QueueName, State};
use serde::Deserialize;

use crate::App;
use crate::error::{DashboardError, PageResult};
use crate::layout::Base;
use crate::pages::job::job_id;
use crate::pages::urlencode;
use crate::security;

/// The fields every action form sends.
#[derive(Debug, Deserialize)]
pub(crate) struct Token {
    #[serde(default)]
    csrf: String,
}

/// The purge form.
#[derive(Debug, Deserialize)]
pub(crate) struct PurgeForm {
    #[serde(default)]
    csrf: String,
    state: String,
    older_than: String,
}

/// The signal form of a durable job's page.
#[derive(Debug, Deserialize)]
pub(crate) struct SignalForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
    /// JSON text; empty is `null`, as the API's absent payload is.
    #[serde(default)]
    payload: String,
}

fn allowed<S>(app: &App<S>, headers: &HeaderMap, csrf: &str) -> PageResult<()> {
    if app.options.read_only {
        return Err(DashboardError::ReadOnly);
    }
    security::check_post(&app.csrf, csrf, headers)
}

/// `POST /jobs/{id}/retry` (a dead job runs again) and
/// `POST /jobs/{id}/cancel` (a job that has not started never will).
pub(crate) async fn job_action<S: Storage>(
    AxumState(app): AxumState<Arc<App<S>>>,
    base: Base,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    Form(form): Form<Token>,
) -> PageResult<Redirect> {
    allowed(&app, &headers, &form.csrf)?;
    let id = job_id(&id)?;
    let done = match action.as_str() {
        "retry" => app.client.retry(id).await.map(|()| "retried")?,
        "cancel" => match app.client.cancel_because(id, "from the dashboard").await? {
            jq::CancelAnswer::Cancelled => "cancelled",
            jq::CancelAnswer::Requested => "cancel_requested",
            jq::CancelAnswer::Finished(_) => "cancel_too_late",
        },
        other => return Err(DashboardError::BadRequest(format!("no job action {other:?}"))),
    };
    tracing::info!(job = %id, done, "dashboard: job action");
    Ok(Redirect::to(&base.to(&format!("/jobs/{id}?done={done}"))))
}

/// `POST /jobs/{id}/signal`: sends a durable job the signal its form names,
/// with its JSON payload (`Client::signal`). A payload that is not JSON, a
/// name the store refuses, an unknown or finished job are each answered
/// with a page that says so (400, 404, 409); nothing is stored then.
pub(crate) async fn signal<S: Storage>(
    AxumState(app): AxumState<Arc<App<S>>>,
    base: Base,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<SignalForm>,
) -> PageResult<Redirect> {
    allowed(&app, &headers, &form.csrf)?;
    let id = job_id(&id)?;
    // Whitespace around a typed name is a slip, never part of the name a
    // handler's `wait_for` gives.
    let name = form.name.trim();
    if name.is_empty() {
        return Err(DashboardError::BadRequest(
            "a signal needs a name: the one the job's wait_for waits for (e.g. approved)".to_owned(),
        ));
    }
    let text = match form.payload.trim() {
        "" => "null",
        text => text,
    };
    let payload = jq::Payload::from_json(text).map_err(|e| {
        DashboardError::BadRequest(format!(
            "the signal's payload is not JSON ({e}): write null, true, 42, \"text\" in quotes, [...] or {{...}}"
        ))
    })?;
    let sent = match app.client.storage().require_durable() {
        Ok(durable) => durable.signal(id, name, &payload).await,
        Err(e) => Err(e),
    };
    sent.map_err(|e| match e {
        // The store's own words name a step; on this form it is the signal.
        jq::Error::InvalidInput { what: "step name", reason } => {
            DashboardError::BadRequest(format!("invalid signal name: {reason}"))
        }
        e @ (jq::Error::DurableLimit { .. } | jq::Error::Unsupported { .. }) => {
            DashboardError::BadRequest(format!("the signal was not sent: {e}"))
        }
        // Unknown (404) and finished (409) jobs keep their typed page.
        e => DashboardError::Storage(e),
    })?;
    tracing::info!(job = %id, signal = name, "dashboard: signal sent");
    Ok(Redirect::to(&base.to(&format!("/jobs/{id}?done=signalled"))))
}

/// `POST /queues/{queue}/pause`, `.../resume`, and `.../retry-dead` (every
/// dead job of the queue).
pub(crate) async fn queue_action<S: Storage>(
    AxumState(app): AxumState<Arc<App<S>>>,
    base: Base,
    headers: HeaderMap,
    Path((name, action)): Path<(String, String)>,
    Form(form): Form<Token>,
) -> PageResult<Redirect> {
    allowed(&app, &headers, &form.csrf)?;
    let queue = QueueName::new(name).map_err(|e| DashboardError::BadRequest(e.to_string()))?;
    let to = match action.as_str() {
        "pause" => app.client.pause(queue.as_str()).await.map(|()| "/?done=paused".to_owned())?,
        "resume" => app.client.resume(queue.as_str()).await.map(|()| "/?done=resumed".to_owned())?,
        "retry-dead" => {
            let n = app.client.retry_dead(Some(&queue)).await?.len();
            format!("/jobs?queue={}&state=pending&done=retried-dead&n={n}", urlencode(queue.as_str()))
        }
        other => return Err(DashboardError::BadRequest(format!("no queue action {other:?}"))),
    };
    tracing::info!(%queue, action, "dashboard: queue action");
    Ok(Redirect::to(&base.to(&to)))
}

/// `POST /purge`: deletes finished jobs of one state older than a duration.
pub(crate) async fn purge<S: Storage>(
    AxumState(app): AxumState<Arc<App<S>>>,
    base: Base,
    headers: HeaderMap,
    Form(form): Form<PurgeForm>,
) -> PageResult<Redirect> {
    allowed(&app, &headers, &form.csrf)?;
    let state: State = form.state.parse().map_err(|e: jq::Error| DashboardError::BadRequest(e.to_string()))?;
    let older_than: Duration = humantime::parse_duration(form.older_than.trim()).map_err(|e| {
        DashboardError::BadRequest(format!("older than {:?}: {e} (write e.g. 90m, 12h, 7d)", form.older_than))
    })?;
    let cutoff = chrono::TimeDelta::from_std(older_than)
        .ok()
        .and_then(|d| app.client.clock().now().checked_sub_signed(d))
        .ok_or_else(|| DashboardError::BadRequest(format!("older than {:?}: too long", form.older_than)))?;
    let purged = app.client.purge(state, cutoff).await?;
    tracing::info!(%state, purged, "dashboard: finished jobs purged");
    Ok(Redirect::to(&base.to(&format!("/?done=purged&n={purged}"))))
}

/// `POST /periodic/{name}/trigger`: one job of a periodic job, now.
pub(crate) async fn trigger<S: Storage>(
    AxumState(app): AxumState<Arc<App<S>>>,
    base: Base,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<Token>,
) -> PageResult<Redirect> {
    allowed(&app, &headers, &form.csrf)?;
    app.client.trigger(&name).await?;
    tracing::info!(periodic = %name, "dashboard: periodic job triggered");
    Ok(Redirect::to(&base.to("/?done=triggered")))
}
