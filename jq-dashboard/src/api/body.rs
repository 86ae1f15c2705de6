//! Reading a JSON body so that every mistake in it is a 4xx naming the
//! field, never axum's plain-text rejection.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::model::Object;

/// A JSON body of `T`: `Content-Type: application/json` (415 otherwise),
/// within the body limit (413), parsed with the path of the field at fault
/// in every error (400).
pub(crate) struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        if !is_json(request.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok())) {
            return Err(ApiError::not_json());
        }
        let bytes = Bytes::from_request(request, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::too_large("body", "the body is over this server's limit: send smaller batches")
            } else {
                ApiError::bad_json(Some("body".to_owned()), format!("the body could not be read: {rejection}"))
            }
        })?;
        parse(&bytes).map(JsonBody)
    }
}

/// `application/json`, or a `+json` type, with any parameters.
fn is_json(content_type: Option<&str>) -> bool {
    let Some(essence) = content_type.and_then(|t| t.split(';').next()) else { return false };
    let essence = essence.trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Parses `bytes` as one JSON `T`, naming the field of the first error.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: Object<T> = serde_path_to_error::deserialize(&mut de).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        if inner.is_syntax() || inner.is_eof() || inner.is_io() {
            return ApiError::bad_json(Some("body".to_owned()), format!("the body is not JSON: {inner}"));
        }
        let message = inner.to_string();
        // serde reports a missing field at its parent (an unknown one at
        // itself): name the field.
        let named = message.strip_prefix("missing field `").and_then(|rest| rest.split('`').next());
        let field = match (named, path.as_str()) {
            (Some(name), ".") => name.to_owned(),
            (Some(name), parent) => format!("{parent}.{name}"),
            (None, ".") => "body".to_owned(),
            (None, path) => path.to_owned(),
        };
        ApiError::bad_json(Some(field), message)
    })?;
    de.end()
        .map_err(|e| ApiError::bad_json(Some("body".to_owned()), format!("the body has more after its JSON: {e}")))?;
    Ok(value.0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::api::model::{EnqueueBatchRequest, EnqueueRequest};

    fn field_of<T: DeserializeOwned + std::fmt::Debug>(json: &str) -> String {
        parse::<T>(json.as_bytes()).unwrap_err().body().field.clone().unwrap()
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(field_of::<EnqueueRequest>(r#"{"payload": {}}"#), "kind");
        assert_eq!(field_of::<EnqueueRequest>(r#"{"kind": "k", "payload": 1, "delay": 5}"#), "delay");
        assert_eq!(field_of::<EnqueueRequest>(r#"{"kind": 5, "payload": 1}"#), "kind");
        assert_eq!(field_of::<EnqueueRequest>(r#"{"kind": "k", "payload": 1, "priority": "urgent"}"#), "priority");
        assert_eq!(field_of::<EnqueueRequest>(r#"{"kind": "k", "payload": 1, "id": "nope"}"#), "id");
        assert_eq!(field_of::<EnqueueRequest>(r#"{"kind": "k", "payload": 1, "max_attempts": -1}"#), "max_attempts");
        assert_eq!(field_of::<EnqueueRequest>(r#"{"kind": "k", "payload": [1,"#), "body");
        assert_eq!(field_of::<EnqueueRequest>(r#"{"kind": "k", "payload": 1} x"#), "body");
        assert_eq!(field_of::<EnqueueRequest>(r#"["k", 1]"#), "body");
        assert_eq!(field_of::<EnqueueBatchRequest>(r#"{"jobs": [["k", 1]]}"#), "jobs[0]");
        let batch = r#"{"jobs": [{"kind": "k", "payload": 1}, {"kind": "k", "payload": 1, "queue": 3}]}"#;
        assert_eq!(field_of::<EnqueueBatchRequest>(batch), "jobs[1].queue");
        assert_eq!(field_of::<EnqueueBatchRequest>(r#"{"jobs": [{"payload": 1}]}"#), "jobs[0].kind");
    }

    #[test]
    fn payloads_keep_their_text() {
        let job: EnqueueRequest = parse(br#"{"kind": "k", "payload": {"a": [1, 2.5, "x"]}}"#).unwrap();
        assert_eq!(job.payload.get(), r#"{"a": [1, 2.5, "x"]}"#);
    }

    #[test]
    fn json_content_types() {
        assert!(is_json(Some("application/json")));
        assert!(is_json(Some("Application/JSON; charset=utf-8")));
        assert!(is_json(Some("application/vnd.api+json")));
        assert!(!is_json(Some("text/plain")));
        assert!(!is_json(Some("application/x-www-form-urlencoded")));
        assert!(!is_json(None));
    }
}
