//! What an API call fails with, as JSON naming the field at fault.

use axum::Json;
use axum::http::StatusCode;
use axum::http::header::{HeaderValue, WWW_AUTHENTICATE};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every error answer: a code to match on, a sentence for a
/// person, and the request field at fault when one is.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What kind of error: `invalid_input`, `invalid_json`, `payload_too_large`,
    /// `unsupported_media_type`, `not_found`, `conflict`, `idempotency_key_reused`, `unauthorized`,
    /// `forbidden`, `unknown_host`, `unavailable`, `internal`.
    pub code: &'static str,
    /// What was wrong, and what would be accepted.
    pub message: String,
    /// The request field at fault, as a path into the JSON body
    /// (`jobs[2].queue`), a path parameter (`id`), a query parameter
    /// (`timeout_ms`), a header (`idempotency-key`), or `body` for the body
    /// as a whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// With `idempotency_key_reused`: the jobs already stored under the
    /// key, in the order of the request that made them (those found).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_ids: Option<Vec<uuid::Uuid>>,
}

/// An API call that could not be served: its status and its JSON body.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, field: Option<String>, message: impl Into<String>) -> Self {
        ApiError { status, body: ErrorBody { code, message: message.into(), field, job_ids: None } }
    }

    /// 422: the idempotency key `key` already made other jobs than this
    /// request's (`why`); `existing` are those found.
    pub(crate) fn key_reused(key: &str, why: &str, existing: Vec<jq::JobId>) -> Self {
        let mut error = Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_reused",
            Some("idempotency-key".to_owned()),
            format!(
                "the Idempotency-Key {key:?} was used for another request ({why}): nothing was stored; a repeat \
                 must send the same body, and a new request a new key"
            ),
        );
        error.body.job_ids = Some(existing.into_iter().map(|id| id.0).collect());
        error
    }

    /// 400: `field` is invalid.
    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_input", Some(field.into()), message)
    }

    /// 400: the body is not the JSON expected; `field` when the parser
    /// could tell which.
    pub(crate) fn bad_json(field: Option<String>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_json", field, message)
    }

    /// 413: the body or a payload is too large.
    pub(crate) fn too_large(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", Some(field.into()), message)
    }

    /// 415: a body that is not `application/json`.
    pub(crate) fn not_json() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            Some("body".to_owned()),
            "send the body as JSON with the header Content-Type: application/json",
        )
    }

    /// 401: no token, or a wrong one.
    pub(crate) fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            None,
            "a token is required: send Authorization: Bearer TOKEN",
        )
    }

    /// 403: the request may not do this.
    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", None, message)
    }

    /// 421: a request naming a host this API does not answer to.
    pub(crate) fn unknown_host(host: &str) -> Self {
        Self::new(
            StatusCode::MISDIRECTED_REQUEST,
            "unknown_host",
            None,
            format!(
                "this server does not answer to host {host:?}: reach it under one of its own names, or allow this \
                 one (jqctl serve --allowed-host, or Options::allow_host)"
            ),
        )
    }

    /// 404 for a path or method the API does not have.
    pub(crate) fn no_route() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", None, "no such API endpoint: see /api/v1/openapi.json")
    }

    /// 405 for a method a path does not take.
    pub(crate) fn wrong_method() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            None,
            "this endpoint does not take this method: see /api/v1/openapi.json",
        )
    }

    /// 409: the job had already finished in `state`, so nothing changed.
    pub(crate) fn finished(state: jq::State) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", None, format!("the job had already finished: it is {state}"))
    }

    /// The store's error, `prefix` naming where in the body the job it is
    /// about sits (`jobs[3].` in a batch, empty for one job).
    pub(crate) fn from_core(error: jq::Error, prefix: &str) -> Self {
        let field = |name: &str| Some(format!("{prefix}{name}"));
        match &error {
            jq::Error::InvalidQueue { .. } => {
                Self::new(StatusCode::BAD_REQUEST, "invalid_input", field("queue"), error.to_string())
            }
            jq::Error::InvalidInput { what, .. } => {
                let name = match *what {
                    "unique key" | "unique rule" => "unique_key",
                    "debounce window" => "debounce_ms",
                    "debounce max delay" => "max_delay_ms",
                    "unique period" => "unique_for_ms",
                    "max attempts" => "max_attempts",
                    "job id" => "id",
                    other => other,
                };
                Self::new(StatusCode::BAD_REQUEST, "invalid_input", field(name), error.to_string())
            }
            jq::Error::InvalidPayload(_) => {
                Self::new(StatusCode::BAD_REQUEST, "invalid_input", field("payload"), error.to_string())
            }
            jq::Error::PayloadTooLarge { .. } => {
                Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", field("payload"), error.to_string())
            }
            jq::Error::BatchNotAtomic { .. } => {
                Self::new(StatusCode::BAD_REQUEST, "invalid_input", Some("jobs".to_owned()), error.to_string())
            }
            jq::Error::NotFound { .. } => Self::new(StatusCode::NOT_FOUND, "not_found", None, error.to_string()),
            // A full signal list is the job's state, not the request's
            // size: the same signal fits once the job's waits take some.
            jq::Error::DurableLimit { limit: jq::storage::DurableLimit::Signals, .. } => {
                Self::new(StatusCode::TOO_MANY_REQUESTS, "too_many_signals", None, error.to_string())
            }
            jq::Error::DurableLimit { .. } => {
                Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", field("payload"), error.to_string())
            }
            jq::Error::Unsupported { .. } => Self::new(StatusCode::BAD_REQUEST, "unsupported", None, error.to_string()),
            jq::Error::InvalidState { .. } => Self::new(StatusCode::CONFLICT, "conflict", None, error.to_string()),
            jq::Error::Unavailable { .. } => {
                tracing::warn!(%error, "api: the store is unavailable");
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", None, error.to_string())
            }
            _ => {
                tracing::error!(%error, "api: the store failed");
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", None, error.to_string())
            }
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The body sent.
    pub fn body(&self) -> &ErrorBody {
        &self.body
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let unauthorized = self.status == StatusCode::UNAUTHORIZED;
        let mut response = (self.status, Json(self.body)).into_response();
        if unauthorized {
            response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"jq api\""));
        }
        response
    }
}

/// The result of an API handler.
pub(crate) type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;
    use jq::storage::DurableLimit;

    fn status_of(limit: DurableLimit) -> StatusCode {
        ApiError::from_core(jq::Error::DurableLimit { limit, size: 2, max: 1 }, "").status
    }

    #[test]
    fn a_full_signal_list_is_429_and_a_large_payload_413() {
        assert_eq!(status_of(DurableLimit::Signals), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(status_of(DurableLimit::StepResultBytes), StatusCode::PAYLOAD_TOO_LARGE);
    }
}
