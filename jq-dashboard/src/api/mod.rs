//! The HTTP JSON API: producers in any language enqueue jobs, read them,
//! wait for them, cancel them and read the queues' counts, under
//! `/api/v1/`. Its OpenAPI 3 document is generated from these handlers
//! ([`openapi`]) and served at `/api/v1/openapi.json`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = jq::connect("sqlite://jobs.db").await?;
//! let access = jq_dashboard::Options::new().token("s3cret")?;
//! let options = jq_dashboard::api::ApiOptions::new(access).read_token("r3ad")?;
//! let app = axum::Router::new().merge(jq_dashboard::api::router(client, options));
//! # let _ = app; Ok(()) }
//! ```
//!
//! Access follows the dashboard's rules ([`crate::Options`]: the token,
//! the host check, read-only), plus an optional read-only token
//! ([`ApiOptions::read_token`]) that reads but cannot enqueue or cancel.
//! Every bad input is a 4xx whose JSON body ([`ErrorBody`]) names the field
//! at fault, and stores nothing.

mod auth;
mod body;
mod error;
mod handlers;
mod model;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use jq::Client;
use jq::storage::Storage;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

pub use error::{ApiError, ErrorBody};
pub use model::{
    AttemptErrorView, EnqueueBatchRequest, EnqueueBatchResponse, EnqueueRequest, EnqueueResponse, JobView, LeaseView,
    Object, PriorityName, StateCountsView, StateName, StatsResponse, WaitResponse,
};

use crate::options::OptionsError;

/// Default body limit: a batch of 1,000 jobs of a few KiB each.
pub const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Default most jobs in one batch.
pub const DEFAULT_MAX_BATCH: usize = 10_000;
/// Default longest wait.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(30);

/// How the API is served: who may call it ([`crate::Options`]: token,
/// hosts, read-only), the read-only token, and the limits of a request.
#[derive(Clone, Debug, Default)]
pub struct ApiOptions {
    pub(crate) access: crate::Options,
    pub(crate) read_token: Option<Secret>,
    pub(crate) max_body_bytes: usize,
    pub(crate) max_batch: usize,
    pub(crate) max_wait: Duration,
}

/// A token that never reaches a log.
#[derive(Clone)]
pub(crate) struct Secret(String);

impl std::ops::Deref for Secret {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<set>")
    }
}

impl ApiOptions {
    /// The API under `access`'s rules (the same as the dashboard's: its
    /// token is the full token, its hosts are answered, read-only refuses
    /// writes), with the default limits.
    pub fn new(access: crate::Options) -> Self {
        ApiOptions {
            access,
            read_token: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_batch: DEFAULT_MAX_BATCH,
            max_wait: DEFAULT_MAX_WAIT,
        }
    }

    /// Also accepts `token` (as the full one, trimmed; empty refused) for
    /// the read endpoints only: get, wait, stats, the document. A write
    /// with it is refused with 403. With a read token and no full token,
    /// every request needs a token and no write is accepted.
    pub fn read_token(mut self, token: impl Into<String>) -> Result<Self, OptionsError> {
        let token = token.into();
        let token = token.trim();
        if token.is_empty() {
            return Err(OptionsError::EmptyToken);
        }
        self.read_token = Some(Secret(token.to_owned()));
        Ok(self)
    }

    /// The largest body accepted (413 above it); default 16 MiB.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// The most jobs in one batch (400 above it); default 10,000.
    pub fn max_batch(mut self, jobs: usize) -> Self {
        self.max_batch = jobs;
        self
    }

    /// The longest a wait holds a request (a longer timeout asked for is
    /// cut to it); default 30 s.
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    /// The access rules.
    pub fn access(&self) -> &crate::Options {
        &self.access
    }

    /// True when a read-only token is set.
    pub fn has_read_token(&self) -> bool {
        self.read_token.is_some()
    }
}

/// The API as a router, its routes under `/api/v1/`: merge it into your
/// app (or serve it alone).
pub fn router<S: Storage>(client: Client<S>, options: ApiOptions) -> Router {
    let limit = options.max_body_bytes;
    let api = Arc::new(handlers::Api { client, options: options.clone() });
    let routes = Router::new()
        .route("/api/v1/jobs", post(handlers::enqueue::<S>))
        .route("/api/v1/jobs/batch", post(handlers::enqueue_batch::<S>))
        .route("/api/v1/jobs/{id}", get(handlers::get_job::<S>))
        .route("/api/v1/jobs/{id}/wait", get(handlers::wait::<S>))
        .route("/api/v1/jobs/{id}/cancel", post(handlers::cancel::<S>))
        .route("/api/v1/jobs/{id}/signal", post(handlers::signal::<S>))
        .route("/api/v1/stats", get(handlers::stats::<S>))
        .route("/api/v1/openapi.json", get(handlers::document))
        .route("/api/v1", get(handlers::no_route))
        .route("/api/v1/{*rest}", get(handlers::no_route).post(handlers::no_route))
        .method_not_allowed_fallback(handlers::wrong_method)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(api);
    auth::layer(routes, &options)
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "jq HTTP API",
        description = "Enqueue, read, wait for and cancel jq jobs from any language. Every error is JSON (ErrorBody) naming the field at fault; a rejected request stores nothing.",
        license(name = "MIT OR Apache-2.0"),
        version = "1"
    ),
    paths(
        handlers::enqueue,
        handlers::enqueue_batch,
        handlers::get_job,
        handlers::wait,
        handlers::cancel,
        handlers::signal,
        handlers::stats,
        handlers::document,
    ),
    components(schemas(ErrorBody)),
    modifiers(&TokenSchemes),
)]
struct Document;

/// The two bearer tokens, as the document's security schemes.
struct TokenSchemes;

impl utoipa::Modify for TokenSchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = |description: &str| {
            SecurityScheme::Http(
                HttpBuilder::new().scheme(HttpAuthScheme::Bearer).description(Some(description.to_owned())).build(),
            )
        };
        components.add_security_scheme(
            "token",
            bearer("The full token (jqctl serve --token): every endpoint. Required when the server has one."),
        );
        components.add_security_scheme(
            "read_token",
            bearer("The read-only token (jqctl serve --read-token): the GET endpoints only."),
        );
    }
}

/// The API's OpenAPI 3 document, generated from its handlers and types.
pub fn openapi() -> utoipa::openapi::OpenApi {
    Document::openapi()
}

/// [`openapi`] as the pretty JSON checked into the repository's
/// `docs/openapi.json`, ending with a newline.
pub fn openapi_json() -> String {
    let mut text = openapi().to_pretty_json().unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    text.push('\n');
    text
}
