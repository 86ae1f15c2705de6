//! The HTTP API's `Idempotency-Key` on every backend: a repeat gets the
//! first answer and stores nothing, another body under the key is refused
//! (422) naming the jobs it made, a malformed key or a refused body stores
//! and remembers nothing, concurrent repeats store one job, a key lasts as
//! long as its first job, and a client retrying through a connection
//! dropper stores each logical job once.

#![cfg(all(feature = "sqlite", feature = "postgres", feature = "redis"))]
#![allow(clippy::unwrap_used)] // tests may unwrap

#[path = "../../jq/tests/common/mod.rs"]
mod common;
mod support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::Request as AxumRequest;
use axum::http::{Request, StatusCode};
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use jq::storage::{Outcome, Storage};
use jq::{Backend, Client, Clock, JobId, State};
use jq_dashboard::Options;
use jq_dashboard::api::ApiOptions;
use jq_testkit::proxy::Proxy;
use serde_json::{Value, json};
use support::{Reply, namespace, run_once, send};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The API over `client`'s storage.
fn api(client: &Client) -> Router {
    let storage: Backend = client.storage().clone();
    jq_dashboard::api::router(Client::new(storage), ApiOptions::new(Options::new()))
}

/// `POST path` with `body`, and an `Idempotency-Key` header of `key` (the
/// raw header value) when given.
async fn post(app: &Router, path: &str, key: Option<&str>, body: &Value) -> Reply {
    let mut request = Request::post(path).header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    send(app, request.body(Body::from(body.to_string())).unwrap()).await
}

fn json_of(reply: &Reply) -> Value {
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", reply.body))
}

/// Every job of the store.
async fn total(client: &Client) -> u64 {
    let stats = client.stats().await.unwrap();
    State::ALL.iter().map(|s| stats.total(*s)).sum()
}

fn ids(reply: &Reply) -> Vec<Value> {
    json_of(reply)["ids"].as_array().unwrap().clone()
}

/// Asserts a 4xx naming `field`, with `code`.
fn refused(reply: &Reply, status: StatusCode, code: &str, field: &str) {
    assert_eq!(reply.status, status, "{}", reply.body);
    let body = json_of(reply);
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["field"], field, "{body}");
}

/// One job and a batch under keys: the repeat's answer, another body's
/// refusal, the batch's length, timing left out of the comparison.
async fn repeats_get_the_first_answer(backend: &str) {
    let ns = namespace(backend).await;
    let client = ns.connect(Clock::system()).await;
    let app = api(&client);
    let key = Some(r#""order-1042""#);
    let body =
        json!({"kind": "ship", "payload": {"order": 1042}, "queue": "orders", "priority": "high", "key": "shop-7"});

    let first = post(&app, "/api/v1/jobs", key, &body).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let id = json_of(&first)["id"].clone();
    let stored = client.get(id.as_str().unwrap().parse::<JobId>().unwrap()).await.unwrap();
    assert_eq!((stored.kind.as_str(), stored.payload.as_str()), ("ship", r#"{"order":1042}"#));
    assert_eq!(stored.id.0.get_version_num(), 8, "the id is derived from the key");

    let again = post(&app, "/api/v1/jobs", key, &body).await;
    assert_eq!((again.status, json_of(&again)["id"].clone()), (StatusCode::OK, id.clone()), "the first answer");
    // A repeat's delay counts from its own arrival: not compared.
    let mut later = body.clone();
    later["delay_ms"] = json!(60_000);
    assert_eq!(json_of(&post(&app, "/api/v1/jobs", key, &later).await)["id"], id);
    assert_eq!(total(&client).await, 1, "repeats stored nothing");

    for (field, value) in [
        ("payload", json!({"order": 1043})),
        ("queue", json!("returns")),
        ("kind", json!("refund")),
        ("priority", json!("low")),
        ("max_attempts", json!(2)),
        ("key", json!("shop-8")),
    ] {
        let mut other = body.clone();
        other[field] = value;
        let reply = post(&app, "/api/v1/jobs", key, &other).await;
        refused(&reply, StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused", "idempotency-key");
        let error = json_of(&reply);
        assert_eq!(error["job_ids"], json!([id]), "the collision names the job the key made");
        assert!(error["message"].as_str().unwrap().contains(field), "{field}: {error}");
        assert!(error["message"].as_str().unwrap().contains("order-1042"), "{error}");
    }
    assert_eq!(total(&client).await, 1, "a reused key stored nothing");

    // The same key on the batch route is another request.
    let batch = json!({"jobs": [body, {"kind": "ship", "payload": {"order": 1044}}]});
    let made = post(&app, "/api/v1/jobs/batch", key, &batch).await;
    assert_eq!(made.status, StatusCode::OK, "{}", made.body);
    let made_ids = ids(&made);
    assert_eq!(made_ids.len(), 2);
    assert!(!made_ids.contains(&id));
    assert_eq!(ids(&post(&app, "/api/v1/jobs/batch", key, &batch).await), made_ids, "the first answer");
    let shorter = json!({"jobs": [batch["jobs"][0]]});
    let reply = post(&app, "/api/v1/jobs/batch", key, &shorter).await;
    refused(&reply, StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused", "idempotency-key");
    let longer = json!({"jobs": [batch["jobs"][0], batch["jobs"][1], {"kind": "ship", "payload": 1}]});
    let reply = post(&app, "/api/v1/jobs/batch", key, &longer).await;
    refused(&reply, StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused", "idempotency-key");
    assert_eq!(json_of(&reply)["job_ids"], json!(made_ids));
    assert_eq!(total(&client).await, 3);
    ns.cleanup().await;
}

/// A malformed key, a body refused, or a body with its own id or unique
/// key: 400, nothing stored, the key left unused.
async fn refusals_store_and_remember_nothing(backend: &str) {
    let ns = namespace(backend).await;
    let client = ns.connect(Clock::system()).await;
    let app = api(&client);
    let body = json!({"kind": "k", "payload": 1});
    let long = format!("\"{}\"", "k".repeat(jq_dashboard::api::MAX_KEY_BYTES + 1));
    for bad in ["plain", "\"open", "\"\"", "\"a\";p=1", "\"a\\x\"", long.as_str()] {
        let reply = post(&app, "/api/v1/jobs", Some(bad), &body).await;
        refused(&reply, StatusCode::BAD_REQUEST, "invalid_input", "idempotency-key");
        let reply = post(&app, "/api/v1/jobs/batch", Some(bad), &json!({"jobs": [body]})).await;
        refused(&reply, StatusCode::BAD_REQUEST, "invalid_input", "idempotency-key");
    }
    let twice = Request::post("/api/v1/jobs")
        .header("content-type", "application/json")
        .header("idempotency-key", "\"a\"")
        .header("idempotency-key", "\"b\"")
        .body(Body::from(body.to_string()))
        .unwrap();
    refused(&send(&app, twice).await, StatusCode::BAD_REQUEST, "invalid_input", "idempotency-key");

    let key = Some(r#""hook-evt_1""#);
    let reply = post(&app, "/api/v1/jobs", key, &json!({"kind": "k", "payload": 1, "queue": "a b"})).await;
    refused(&reply, StatusCode::BAD_REQUEST, "invalid_input", "queue");
    let reply = post(&app, "/api/v1/jobs", key, &json!({"kind": "k", "payload": 1, "id": uuid::Uuid::now_v7()})).await;
    refused(&reply, StatusCode::BAD_REQUEST, "invalid_input", "id");
    let reply = post(&app, "/api/v1/jobs", key, &json!({"kind": "k", "payload": 1, "unique_key": "u"})).await;
    refused(&reply, StatusCode::BAD_REQUEST, "invalid_input", "unique_key");
    let batch = json!({"jobs": [body, {"kind": "k", "payload": 2, "unique_key": "u"}]});
    let reply = post(&app, "/api/v1/jobs/batch", key, &batch).await;
    refused(&reply, StatusCode::BAD_REQUEST, "invalid_input", "jobs[1].unique_key");
    assert_eq!(total(&client).await, 0, "nothing stored");

    // The key was never used: another body under it is a first request.
    let reply = post(&app, "/api/v1/jobs", key, &json!({"kind": "k", "payload": 3})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(total(&client).await, 1);
    // Without the header nothing changed: the same body twice is two jobs.
    post(&app, "/api/v1/jobs", None, &body).await;
    post(&app, "/api/v1/jobs", None, &body).await;
    assert_eq!(total(&client).await, 3);
    ns.cleanup().await;
}

/// 8 concurrent repeats store one job and all get its id; 8 concurrent
/// bodies under one key store one, which alone gets 200.
async fn concurrent_repeats_store_one_job(backend: &str) {
    let ns = namespace(backend).await;
    let client = ns.connect(Clock::system()).await;
    let app = api(&client);
    let same = (0..8).map(|_| {
        let app = app.clone();
        tokio::spawn(async move {
            let body = json!({"jobs": [{"kind": "k", "payload": 1}, {"kind": "k", "payload": 2}]});
            let reply = post(&app, "/api/v1/jobs/batch", Some(r#""same""#), &body).await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
            ids(&reply)
        })
    });
    let answers: HashSet<Vec<Value>> = futures_all(same).await.into_iter().collect();
    assert_eq!(answers.len(), 1, "every repeat got the same ids: {answers:?}");
    assert_eq!(total(&client).await, 2, "one batch stored");

    let bodies = (0..8).map(|i| {
        let app = app.clone();
        tokio::spawn(async move {
            post(&app, "/api/v1/jobs", Some(r#""contested""#), &json!({"kind": "k", "payload": i})).await.status
        })
    });
    let statuses = futures_all(bodies).await;
    let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let reused = statuses.iter().filter(|s| **s == StatusCode::UNPROCESSABLE_ENTITY).count();
    assert_eq!((ok, reused), (1, 7), "{statuses:?}");
    assert_eq!(total(&client).await, 3);
    ns.cleanup().await;
}

/// The answers of `tasks`, in order.
async fn futures_all<T>(tasks: impl Iterator<Item = tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for task in tasks.collect::<Vec<_>>() {
        out.push(task.await.unwrap());
    }
    out
}

/// A key is kept as long as its first job is stored: once retention
/// purged it, the key is free and the same request stores the job anew.
async fn a_key_lasts_as_long_as_its_job(backend: &str) {
    let ns = namespace(backend).await;
    let client = ns.connect(Clock::system()).await;
    let app = api(&client);
    let key = Some(r#""nightly-2026-12-03""#);
    let body = json!({"kind": "k", "payload": 1, "queue": "q"});
    let id = json_of(&post(&app, "/api/v1/jobs", key, &body).await)["id"].clone();
    run_once(&client, "q", Outcome::Ack).await;
    assert_eq!(json_of(&post(&app, "/api/v1/jobs", key, &body).await)["id"], id, "a finished job still holds its key");
    assert_eq!(total(&client).await, 1);
    let later = client.clock().now() + chrono::Duration::seconds(1);
    assert_eq!(client.storage().purge(State::Completed, later).await.unwrap(), 1);
    let reply = post(&app, "/api/v1/jobs", key, &body).await;
    assert_eq!((reply.status, json_of(&reply)["id"].clone()), (StatusCode::OK, id), "stored anew");
    assert_eq!(
        client.get(json_of(&reply)["id"].as_str().unwrap().parse().unwrap()).await.unwrap().state,
        State::Pending
    );
    ns.cleanup().await;
}

/// How many answers of each key the dropper has thrown away.
type Dropped = Arc<Mutex<HashMap<String, u32>>>;

/// A producer retrying every request until it reads an answer, through a
/// proxy that resets the connection after the server has handled the
/// request, twice per key (and before the handler, once, for odd keys):
/// each logical job is stored once.
async fn retries_through_a_dropper_store_each_job_once(backend: &str) {
    let ns = namespace(backend).await;
    let client = ns.connect(Clock::system()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = Arc::new(Proxy::start(listener.local_addr().unwrap()).await.unwrap());
    let dropped: Dropped = Arc::default();
    let dropper = {
        let (proxy, dropped) = (proxy.clone(), dropped.clone());
        middleware::from_fn(move |request: AxumRequest, next: Next| {
            let (proxy, dropped) = (proxy.clone(), dropped.clone());
            async move {
                let key = request.headers().get("idempotency-key").map(|v| v.to_str().unwrap().to_owned());
                let seen = key.map_or(u32::MAX, |key| {
                    let mut dropped = dropped.lock().unwrap();
                    let n = dropped.entry(key.clone()).or_default();
                    *n += 1;
                    // Odd keys lose their first request before the handler.
                    *n - u32::from(key.trim_matches('"').ends_with(['1', '3', '5', '7', '9']))
                });
                if seen == 0 {
                    // Lost on the way in: nothing handled, nothing stored.
                    proxy.reset();
                    return StatusCode::BAD_GATEWAY.into_response();
                }
                let response = next.run(request).await;
                if seen <= 2 {
                    // The job is stored; its answer never arrives.
                    proxy.reset();
                }
                response
            }
        })
    };
    let app = api(&client).layer(dropper);
    let server = tokio::spawn(axum::serve(listener, app).into_future());

    let mut answered = HashSet::new();
    for n in 0..12 {
        let key = format!("\"webhook-{n}\"");
        let (path, body) = if n % 4 == 3 {
            (
                "/api/v1/jobs/batch",
                json!({"jobs": [{"kind": "k", "payload": [n, 0]}, {"kind": "k", "payload": [n, 1]}]}),
            )
        } else {
            ("/api/v1/jobs", json!({"kind": "k", "payload": [n]}))
        };
        let (status, reply, attempts) = retry(proxy.addr(), path, &key, &body.to_string()).await;
        assert_eq!(status, 200, "{reply}");
        let lost = u32::from(n % 2 == 1);
        assert_eq!(attempts, 3 + lost, "a request lost (odd keys), two answers dropped, the next read");
        let reply: Value = serde_json::from_str(&reply).unwrap();
        match reply.get("id") {
            Some(id) => assert!(answered.insert(id.clone())),
            None => reply["ids"].as_array().unwrap().iter().for_each(|id| assert!(answered.insert(id.clone()))),
        }
    }
    server.abort();
    assert_eq!(answered.len(), 15, "9 jobs and 3 batches of 2");
    assert_eq!(total(&client).await, 15, "each logical job stored once");
    for id in &answered {
        client.get(id.as_str().unwrap().parse().unwrap()).await.unwrap();
    }
    ns.cleanup().await;
}

/// Sends `POST path` with the key until a whole answer is read; the
/// status, body and number of attempts.
async fn retry(addr: std::net::SocketAddr, path: &str, key: &str, body: &str) -> (u16, String, u32) {
    for attempt in 1..=10 {
        let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else { continue };
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nIdempotency-Key: {key}\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        if stream.write_all(request.as_bytes()).await.is_err() {
            continue;
        }
        let mut answer = Vec::new();
        if stream.read_to_end(&mut answer).await.is_err() {
            continue;
        }
        let text = String::from_utf8_lossy(&answer).into_owned();
        let Some((head, rest)) = text.split_once("\r\n\r\n") else { continue };
        let Some(status) = head.split(' ').nth(1).and_then(|s| s.parse().ok()) else { continue };
        return (status, rest.to_owned(), attempt);
    }
    panic!("no answer in 10 attempts");
}

macro_rules! on_every_backend {
    ($($test:ident),* $(,)?) => {
        mod sqlite { $( #[tokio::test] async fn $test() { super::$test("sqlite").await } )* }
        mod postgres { $( #[tokio::test] async fn $test() { jq_testkit::needs!(postgres); super::$test("postgres").await } )* }
        mod redis { $( #[tokio::test] async fn $test() { jq_testkit::needs!(redis); super::$test("redis").await } )* }
    };
}

on_every_backend!(
    repeats_get_the_first_answer,
    refusals_store_and_remember_nothing,
    concurrent_repeats_store_one_job,
    a_key_lasts_as_long_as_its_job,
    retries_through_a_dropper_store_each_job_once,
);

/// The OpenAPI document states the header on both enqueue routes, its
/// syntax, and the 422.
#[test]
fn the_document_states_the_header() {
    let document: Value = serde_json::from_str(&jq_dashboard::api::openapi_json()).unwrap();
    for path in ["/api/v1/jobs", "/api/v1/jobs/batch"] {
        let post = &document["paths"][path]["post"];
        let params = post["parameters"].as_array().unwrap();
        let header = params.iter().find(|p| p["name"] == "Idempotency-Key").expect("the header is documented");
        assert_eq!(header["in"], "header");
        assert_ne!(header["required"], true, "the header is optional");
        assert!(header["schema"]["pattern"].as_str().unwrap().contains("{1,255}"), "{header}");
        assert!(header["description"].as_str().unwrap().contains("as long as the first job it made"), "{header}");
        assert!(post["responses"].get("422").is_some(), "{path} documents the 422");
    }
}
