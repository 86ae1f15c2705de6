//! Who may call the API: the dashboard's host check and token rules, a
//! read-only token besides, and no request a page of another site made.

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::header::ORIGIN;
use axum::http::{HeaderMap, Method};
use axum::middleware::{self, Next};
use axum::response::IntoResponse;

use super::ApiOptions;
use super::error::ApiError;
use crate::security::{authorized, host_allowed, request_host};

/// What a request may do, by the token it shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// Everything (the full token, or no token configured).
    Full,
    /// Read endpoints only (the read-only token).
    Read,
}

/// Wraps the routes in the checks, in order: the host (421), the token
/// (401; 403 for a write with the read-only token), a read-only API (403),
/// and for a write, a browser's word that it came from this site (403).
pub(crate) fn layer(routes: Router, options: &ApiOptions) -> Router {
    let options = Arc::new(options.clone());
    routes.layer(middleware::from_fn(move |request: Request, next: Next| {
        let options = options.clone();
        async move {
            if let Some(host) = request_host(&request)
                && !host_allowed(&options.access.hosts, &host)
            {
                return ApiError::unknown_host(&host).into_response();
            }
            let access = match access(request.headers(), &options) {
                Some(access) => access,
                None => return ApiError::unauthorized().into_response(),
            };
            let read = matches!(*request.method(), Method::GET | Method::HEAD);
            if !read {
                if access == Access::Read {
                    return ApiError::forbidden("this token is read-only: it cannot enqueue or cancel").into_response();
                }
                if options.access.read_only {
                    return ApiError::forbidden("this API is read-only: enqueue and cancel are turned off")
                        .into_response();
                }
                if from_another_site(request.headers()) {
                    return ApiError::forbidden("a write from a page of another site is refused").into_response();
                }
            }
            next.run(request).await
        }
    }))
}

/// The access the request's token gives; `None` when a token is needed
/// and the request has no valid one.
fn access(headers: &HeaderMap, options: &ApiOptions) -> Option<Access> {
    let full = options.access.token.as_deref();
    let read = options.read_token.as_deref();
    if full.is_none() && read.is_none() {
        return Some(Access::Full);
    }
    if full.is_some_and(|t| authorized(headers, t)) {
        return Some(Access::Full);
    }
    if read.is_some_and(|t| authorized(headers, t)) {
        return Some(Access::Read);
    }
    None
}

/// True when a browser says a page of another site sent the request:
/// `Sec-Fetch-Site`, or an `Origin` whose host is not the one addressed.
/// *Without a token on loopback, this is what keeps any web page the user
/// visits from enqueueing or cancelling jobs through the user's browser.*
fn from_another_site(headers: &HeaderMap) -> bool {
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if matches!(site, Some("cross-site" | "same-site")) {
        return true;
    }
    let Some(origin) = headers.get(ORIGIN) else { return false };
    let Ok(origin) = origin.to_str() else { return true };
    // "null" (a sandboxed or file page) is no site of ours.
    let Some((_, authority)) = origin.split_once("://") else { return true };
    let host = headers.get(axum::http::header::HOST).and_then(|v| v.to_str().ok());
    !host.is_some_and(|host| host.eq_ignore_ascii_case(authority))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use axum::http::HeaderValue;
    use axum::http::header::{AUTHORIZATION, HOST};

    use super::*;

    #[test]
    fn full_and_read_tokens() {
        let options = ApiOptions::new(crate::Options::new().token("full").unwrap()).read_token("read").unwrap();
        let mut headers = HeaderMap::new();
        assert_eq!(access(&headers, &options), None);
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer full"));
        assert_eq!(access(&headers, &options), Some(Access::Full));
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer read"));
        assert_eq!(access(&headers, &options), Some(Access::Read));
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer other"));
        assert_eq!(access(&headers, &options), None);
        assert_eq!(access(&HeaderMap::new(), &ApiOptions::default()), Some(Access::Full));
    }

    #[test]
    fn other_sites_are_told_apart() {
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert!(!from_another_site(&headers), "no Origin: not a browser's cross-site request");
        headers.insert(ORIGIN, HeaderValue::from_static("http://127.0.0.1:8080"));
        assert!(!from_another_site(&headers));
        headers.insert(ORIGIN, HeaderValue::from_static("https://attacker.example"));
        assert!(from_another_site(&headers));
        headers.insert(ORIGIN, HeaderValue::from_static("null"));
        assert!(from_another_site(&headers));
        headers.remove(ORIGIN);
        headers.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(from_another_site(&headers));
    }
}
