//! The jq dashboard: the web pages an operator watches and acts on a jq
//! store with, for every backend.
//!
//! [`router`] returns an axum [`Router`] over a [`jq::Client`]: serve it
//! alone (`jqctl serve`) or nest it in your own app, behind your own auth:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = jq::connect("sqlite://jobs.db").await?;
//! let options = jq_dashboard::Options::new().allow_host("app.example.com")?;
//! let app = axum::Router::new().nest("/admin/jobs", jq_dashboard::router(client, options));
//! # let _ = app; Ok(()) }
//! ```
//!
//! Pages are rendered on the server (maud) with every asset compiled into
//! the binary: no CDN, no build step. Everything read from the store is
//! escaped. Actions (retry, cancel, retry all dead, purge, pause, resume,
//! run a periodic job now, send a durable job a signal) are POST forms carrying a per-process CSRF token,
//! ask for confirmation in the browser, and redirect to a page that says
//! what they did. [`Options::read_only`] hides and refuses them;
//! [`Options::token`] requires a token (HTTP basic auth password, or a
//! bearer token) on every request. Requests addressed to another host than
//! a loopback name are refused with 421 unless allowed
//! ([`Options::allow_host`]): a page from another site that rebinds its
//! name to 127.0.0.1 is not answered.

mod actions;
pub mod api;
mod assets;
mod chart;
mod error;
mod format;
mod layout;
mod options;
mod pages;
mod security;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use jq::Client;
use jq::storage::Storage;

pub use error::DashboardError;
pub use options::{Options, OptionsError};

/// What every handler shares.
struct App<S> {
    client: Client<S>,
    options: Options,
    /// The CSRF token every form carries; random per process, so a page
    /// from another origin, which cannot read ours, cannot know it.
    csrf: String,
}

/// The dashboard as a router: its pages under `/`, `/jobs`, `/jobs/{id}`,
/// actions as POST routes, assets under `/assets/`. Links are relative to
/// wherever it is nested.
pub fn router<S: Storage>(client: Client<S>, options: Options) -> Router {
    let app = Arc::new(App { client, options: options.clone(), csrf: security::new_csrf_token() });
    let routes = Router::new()
        .route("/", get(pages::overview::page::<S>))
        .route("/jobs", get(pages::jobs::page::<S>))
        .route("/jobs/{id}", get(pages::job::page::<S>))
        .route("/workflows/{id}", get(pages::workflow::page::<S>))
        // Its own route (a fixed segment wins over `{action}`): its form
        // carries a name and a payload besides the token.
        .route("/jobs/{id}/signal", post(actions::signal::<S>))
        .route("/jobs/{id}/{action}", post(actions::job_action::<S>))
        .route("/queues/{queue}/{action}", post(actions::queue_action::<S>))
        .route("/purge", post(actions::purge::<S>))
        .route("/periodic/{name}/trigger", post(actions::trigger::<S>))
        .route("/assets/{file}", get(assets::serve))
        .with_state(app);
    security::layer(routes, options)
}
