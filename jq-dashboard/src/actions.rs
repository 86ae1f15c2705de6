//! The POST actions. Each checks read-only and the CSRF token first, then
//! acts and redirects (303) to a page whose banner says what was done.

use std::sync::Arc;
use std::time::Duration;

use axum::Form;
use axum::extract::{Path, State as AxumState};
use axum::http::HeaderMap;
use axum::response::Redirect;
use jq::{QueueName, State, Storage};
use serde::Deserialize;

use crate::App;
use crate::error::{DashboardError, PageResult};
use crate::layout::Base;
use crate::pages::job::job_id;
use crate::pages::overview::urlencode;
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

fn allowed<S>(app: &App<S>, headers: &HeaderMap, csrf: &str) -> PageResult<()> {
    if app.options.read_only {
        return Err(DashboardError::ReadOnly);
    }
    security::check_post(&app.csrf, csrf, headers)
}

fn queue(name: &str) -> PageResult<QueueName> {
    QueueName::new(name).map_err(|e| DashboardError::BadRequest(e.to_string()))
}

/// `POST /jobs/{id}/retry`: a dead job runs again.
pub(crate) async fn retry_job<S: Storage>(
    AxumState(app): AxumState<Arc<App<S>>>,
    base: Base,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<Token>,
) -> PageResult<Redirect> {
    allowed(&app, &headers, &form.csrf)?;
    let id = job_id(&id)?;
    app.client.retry(id).await?;
    tracing::info!(job = %id, "dashboard: job retried");
    Ok(Redirect::to(&base.to(&format!("/jobs/{id}?done=retried"))))
}

/// `POST /jobs/{id}/cancel`: a job that has not started never will.
pub(crate) async fn cancel_job<S: Storage>(
    AxumState(app): AxumState<Arc<App<S>>>,
    base: Base,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<Token>,
) -> PageResult<Redirect> {
    allowed(&app, &headers, &form.csrf)?;
    let id = job_id(&id)?;
    app.client.cancel(id).await?;
    tracing::info!(job = %id, "dashboard: job cancelled");
    Ok(Redirect::to(&base.to(&format!("/jobs/{id}?done=cancelled"))))
}

/// `POST /queues/{queue}/pause`.
pub(crate) async fn pause<S: Storage>(
    AxumState(app): AxumState<Arc<App<S>>>,
    base: Base,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<Token>,
) -> PageResult<Redirect> {
    allowed(&app, &headers, &form.csrf)?;
    app.client.pause(queue(&name)?.as_str()).await?;
    tracing::info!(queue = %name, "dashboard: queue paused");
    Ok(Redirect::to(&base.to("/?done=paused")))
}

/// `POST /queues/{queue}/resume`.
pub(crate) async fn resume<S: Storage>(
    AxumState(app): AxumState<Arc<App<S>>>,
    base: Base,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<Token>,
) -> PageResult<Redirect> {
    allowed(&app, &headers, &form.csrf)?;
    app.client.resume(queue(&name)?.as_str()).await?;
    tracing::info!(queue = %name, "dashboard: queue resumed");
    Ok(Redirect::to(&base.to("/?done=resumed")))
}

/// `POST /queues/{queue}/retry-dead`: every dead job of the queue.
pub(crate) async fn retry_dead<S: Storage>(
    AxumState(app): AxumState<Arc<App<S>>>,
    base: Base,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<Token>,
) -> PageResult<Redirect> {
    allowed(&app, &headers, &form.csrf)?;
    let queue = queue(&name)?;
    let retried = app.client.retry_dead(Some(&queue)).await?;
    tracing::info!(queue = %queue, retried = retried.len(), "dashboard: dead jobs retried");
    let n = retried.len();
    Ok(Redirect::to(
        &base.to(&format!("/jobs?queue={}&state=pending&done=retried-dead&n={n}", urlencode(queue.as_str()))),
    ))
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

/// `POST /schedules/{name}/run`: one run of a recurring schedule, now.
pub(crate) async fn run_schedule<S: Storage>(
    AxumState(app): AxumState<Arc<App<S>>>,
    base: Base,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<Token>,
) -> PageResult<Redirect> {
    allowed(&app, &headers, &form.csrf)?;
    app.client.run_schedule(&name).await?;
    tracing::info!(schedule = %name, "dashboard: schedule run requested");
    Ok(Redirect::to(&base.to("/?done=run-requested")))
}
