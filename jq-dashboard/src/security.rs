//! Who may use the dashboard and what a page may do in the browser: the
//! host check, the token check, the CSRF token of every form, and the
//! headers that keep pages from running anything but our own script.

use axum::Router;
use axum::extract::Request;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::error::DashboardError;
use crate::options::{HostName, Hosts, Options};

/// Scripts and styles only from our own `/assets/`, no inline script, no
/// framing, forms only to ourselves: a payload that slipped past escaping
/// still could not run.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A fresh random token for the forms of this process.
pub(crate) fn new_csrf_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Checks a POST: its form's token must be ours, and a browser that says
/// where the request came from must say it came from this site.
pub(crate) fn check_post(expected: &str, given: &str, headers: &HeaderMap) -> Result<(), DashboardError> {
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if matches!(site, Some("cross-site" | "same-site")) || !same(expected.as_bytes(), given.as_bytes()) {
        return Err(DashboardError::Csrf);
    }
    Ok(())
}

/// Compares without stopping at the first difference, so the time taken
/// says nothing about how much of a guess was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Wraps the routes in the host check, the token check (when a token is
/// set) and the security headers.
pub(crate) fn layer(routes: Router, options: Options) -> Router {
    let token = options.token.clone();
    let read_only = options.read_only;
    let hosts = std::sync::Arc::new(options.hosts.clone());
    routes.layer(middleware::from_fn(move |request: Request, next: Next| {
        let token = token.clone();
        let hosts = hosts.clone();
        async move {
            // First: a rebound page must learn nothing, not even whether a
            // token is asked for.
            if let Some(host) = request_host(&request)
                && !host_allowed(&hosts, &host)
            {
                return with_headers(DashboardError::UnknownHost(host).into_response());
            }
            if let Some(token) = token.as_deref()
                && !authorized(request.headers(), token)
            {
                let mut denied =
                    (StatusCode::UNAUTHORIZED, "a token is required: the password of basic auth, or a bearer token\n")
                        .into_response();
                denied.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"jq dashboard\""));
                return denied;
            }
            if request.method() == Method::POST {
                // Refused before the body is read: whatever a forged
                // request sends, a read-only dashboard answers 403.
                if read_only {
                    return with_headers(DashboardError::ReadOnly.into_response());
                }
                let form = request.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
                if !form.is_some_and(|t| t.starts_with("application/x-www-form-urlencoded")) {
                    return with_headers(DashboardError::Csrf.into_response());
                }
            }
            let mut response = next.run(request).await;
            harden(&mut response);
            response
        }
    }))
}

/// The host a request names: its `Host` header, or the authority of its
/// URI (HTTP/2). None when it names none: a browser always does, so such a
/// request cannot come from a rebound page.
pub(crate) fn request_host(request: &Request) -> Option<String> {
    match request.headers().get(HOST) {
        Some(value) => Some(String::from_utf8_lossy(value.as_bytes()).into_owned()),
        None => request.uri().authority().map(|a| a.as_str().to_owned()),
    }
}

/// True when `host` (a `Host` header: `name` or `name:port`) is one the
/// dashboard answers. Without a port the request names port 80.
pub(crate) fn host_allowed(hosts: &Hosts, host: &str) -> bool {
    let Hosts::Only(allowed) = hosts else { return true };
    let Ok(HostName { name, port }) = crate::options::parse_host(host) else { return false };
    let port = port.unwrap_or(80);
    allowed.iter().any(|a| a.name == name && a.port.is_none_or(|p| p == port))
}

/// True when the request carries the token, as a bearer token or as the
/// password of basic auth (each trimmed, as the configured token is).
pub(crate) fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()) else { return false };
    if let Some(bearer) = value.strip_prefix("Bearer ") {
        return same(bearer.trim().as_bytes(), token.as_bytes());
    }
    let Some(basic) = value.strip_prefix("Basic ") else { return false };
    let Ok(decoded) = STANDARD.decode(basic.trim()) else { return false };
    let Ok(pair) = String::from_utf8(decoded) else { return false };
    pair.split_once(':').is_some_and(|(_, password)| same(password.trim().as_bytes(), token.as_bytes()))
}

fn with_headers(mut response: Response) -> Response {
    harden(&mut response);
    response
}

fn harden(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert("content-security-policy", HeaderValue::from_static(CSP));
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    // Pages show live data and carry the CSRF token: never from a cache.
    if !headers.contains_key("cache-control") {
        headers.insert("cache-control", HeaderValue::from_static("no-store"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_and_bearer_tokens_are_accepted_and_others_refused() {
        let mut headers = HeaderMap::new();
        assert!(!authorized(&headers, "s3cret"));
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer s3cret"));
        assert!(authorized(&headers, "s3cret"));
        headers
            .insert(AUTHORIZATION, HeaderValue::from_str(&format!("Basic {}", STANDARD.encode("ops:s3cret"))).unwrap());
        assert!(authorized(&headers, "s3cret"));
        headers
            .insert(AUTHORIZATION, HeaderValue::from_str(&format!("Basic {}", STANDARD.encode("ops:wrong"))).unwrap());
        assert!(!authorized(&headers, "s3cret"));
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer s3cre"));
        assert!(!authorized(&headers, "s3cret"));
    }

    #[test]
    fn only_our_hosts_are_answered() {
        let default = Options::new().hosts;
        for ok in ["localhost", "LOCALHOST:8080", "127.0.0.1:9", "[::1]:8080", "[::1]"] {
            assert!(host_allowed(&default, ok), "{ok}");
        }
        for refused in ["attacker.example", "attacker.example:8080", "localhost.attacker.example", "127.0.0.2", ""] {
            assert!(!host_allowed(&default, refused), "{refused}");
        }
        let exact = Options::new().allowed_hosts(["127.0.0.1:8080", "jobs.example.com"]).unwrap().hosts;
        assert!(host_allowed(&exact, "127.0.0.1:8080"));
        assert!(!host_allowed(&exact, "127.0.0.1:8081") && !host_allowed(&exact, "127.0.0.1"), "the port is pinned");
        assert!(!host_allowed(&exact, "localhost:8080"), "only what is listed");
        assert!(host_allowed(&exact, "jobs.example.com") && host_allowed(&exact, "jobs.example.com:443"));
        assert!(host_allowed(&Options::new().allow_any_host().hosts, "attacker.example"));
    }

    #[test]
    fn a_trimmed_password_matches_a_trimmed_token() {
        let mut headers = HeaderMap::new();
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {}", STANDARD.encode("ops: s3cret "))).unwrap(),
        );
        assert!(authorized(&headers, "s3cret"));
    }

    #[test]
    fn a_post_needs_our_token_and_not_another_site() {
        let mut headers = HeaderMap::new();
        assert!(check_post("abc", "abc", &headers).is_ok());
        assert!(check_post("abc", "abd", &headers).is_err());
        assert!(check_post("abc", "", &headers).is_err());
        headers.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(check_post("abc", "abc", &headers).is_err());
        headers.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert!(check_post("abc", "abc", &headers).is_ok());
    }
}
