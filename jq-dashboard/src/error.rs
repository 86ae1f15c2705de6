//! What a page or an action can fail with, and the page that says so.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::html;

/// A request the dashboard could not serve.
#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    /// The store refused or failed.
    #[error(transparent)]
    Storage(#[from] jq::Error),
    /// A malformed id, state or duration in the URL or form.
    #[error("{0}")]
    BadRequest(String),
    /// An action on a read-only dashboard.
    #[error("this dashboard is read-only: actions are turned off")]
    ReadOnly,
    /// A POST without this process's CSRF token, or from another site.
    #[error(
        "the form's CSRF token is missing or stale, or the request came from another site: reload the page and try again"
    )]
    Csrf,
    /// A request naming a host this dashboard does not answer to (421):
    /// see [`crate::Options::allow_host`].
    #[error(
        "this dashboard does not answer to host {0:?}: reach it under one of its own names, or allow this one \
         (jqctl serve --allowed-host, or Options::allow_host)"
    )]
    UnknownHost(String),
}

impl DashboardError {
    fn status(&self) -> StatusCode {
        match self {
            DashboardError::Storage(
                jq::Error::NotFound { .. } | jq::Error::PeriodicNotFound { .. } | jq::Error::WorkflowNotFound { .. },
            ) => StatusCode::NOT_FOUND,
            DashboardError::Storage(jq::Error::InvalidState { .. }) => StatusCode::CONFLICT,
            DashboardError::Storage(jq::Error::InvalidQueue { .. } | jq::Error::InvalidInput { .. })
            | DashboardError::BadRequest(_) => StatusCode::BAD_REQUEST,
            DashboardError::Storage(_) => StatusCode::SERVICE_UNAVAILABLE,
            DashboardError::ReadOnly | DashboardError::Csrf => StatusCode::FORBIDDEN,
            DashboardError::UnknownHost(_) => StatusCode::MISDIRECTED_REQUEST,
        }
    }
}

impl IntoResponse for DashboardError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            tracing::warn!(error = %self, "dashboard: the store failed");
        }
        // A bare page: the layout needs the base path, which an error
        // raised by an extractor does not have.
        let body = html! {
            (maud::DOCTYPE)
            html lang="en" {
                head { meta charset="utf-8"; title { "jq: " (status) } }
                body {
                    h1 { (status) }
                    p.error role="alert" { (self.to_string()) }
                    p { "Go back and reload the page." }
                }
            }
        };
        (status, body).into_response()
    }
}

/// The result of a page or action.
pub type PageResult<T> = Result<T, DashboardError>;
