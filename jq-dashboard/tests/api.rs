//! The HTTP API on every backend: enqueue (one, a batch, resent, unique),
//! get, wait, cancel, signal (a durable order approved over HTTP), stats; every bad input a 4xx naming the field with
//! nothing stored; the token rules; the OpenAPI document as checked in.

#![cfg(all(feature = "sqlite", feature = "postgres", feature = "redis"))]
#![allow(clippy::unwrap_used)] // tests may unwrap

#[path = "../../jq/tests/common/mod.rs"]
mod common;
mod support;

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use jq::storage::{Outcome, Storage};
use jq::{Backend, Client, Clock, State};
use jq_dashboard::Options;
use jq_dashboard::api::ApiOptions;
use serde_json::{Value, json};
use support::{Reply, namespace, run_once, send};

/// The API over `client`'s storage.
fn api(client: &Client, options: ApiOptions) -> Router {
    let storage: Backend = client.storage().clone();
    jq_dashboard::api::router(Client::new(storage), options)
}

async fn post_json(app: &Router, path: &str, body: &str) -> Reply {
    let request =
        Request::post(path).header("content-type", "application/json").body(Body::from(body.to_owned())).unwrap();
    send(app, request).await
}

async fn get(app: &Router, path: &str) -> Reply {
    send(app, Request::get(path).body(Body::empty()).unwrap()).await
}

fn json_of(reply: &Reply) -> Value {
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", reply.body))
}

/// Every job of the store.
async fn total(client: &Client) -> u64 {
    let stats = client.stats().await.unwrap();
    State::ALL.iter().map(|s| stats.total(*s)).sum()
}

/// Enqueue with every field, read it back, resend it, dedupe by unique key,
/// a batch resent with the same ids, wait, cancel, stats.
async fn enqueue_get_wait_cancel(backend: &str) {
    let ns = namespace(backend).await;
    let client = ns.connect(Clock::system()).await;
    let app = api(&client, ApiOptions::new(Options::new()));

    let id = uuid::Uuid::now_v7();
    let body = json!({
        "kind": "send_email", "payload": {"to": "a@example.com", "n": [1, 2.5]}, "queue": "mail",
        "priority": "high", "delay_ms": 3_600_000, "max_attempts": 3, "unique_key": "welcome-a", "key": "tenant <1>", "id": id,
    })
    .to_string();
    let stored = post_json(&app, "/api/v1/jobs", &body).await;
    assert_eq!(stored.status, 200, "{}", stored.body);
    assert_eq!(json_of(&stored)["id"], json!(id));
    assert_eq!(stored.headers["content-type"], "application/json");

    let read = get(&app, &format!("/api/v1/jobs/{id}")).await;
    assert_eq!(read.status, 200, "{}", read.body);
    let job = json_of(&read);
    assert_eq!(job["kind"], "send_email");
    assert_eq!(job["queue"], "mail");
    assert_eq!(job["payload"], json!({"to": "a@example.com", "n": [1, 2.5]}));
    assert_eq!(job["priority"], "high");
    assert_eq!(job["state"], "scheduled");
    assert_eq!(job["max_attempts"], 3);
    assert_eq!(job["unique_key"], "welcome-a");
    assert_eq!(job["key"], "tenant <1>");
    assert_eq!(job["lease"], Value::Null);

    // A resend (lost answer) stores nothing twice; another id with the same
    // unique key gets the live job's id.
    assert_eq!(json_of(&post_json(&app, "/api/v1/jobs", &body).await)["id"], json!(id));
    let same_key = json!({"kind": "send_email", "payload": {}, "queue": "mail", "unique_key": "welcome-a"});
    assert_eq!(json_of(&post_json(&app, "/api/v1/jobs", &same_key.to_string()).await)["id"], json!(id));
    assert_eq!(total(&client).await, 1);

    // Replace gives the waiting job of the key the new payload; debounce
    // too, and a period answers the job of its key.
    let replace = json!({"kind": "send_email", "payload": {"v": 2}, "queue": "mail", "unique_key": "welcome-a", "replace": true, "delay_ms": 3_600_000});
    assert_eq!(json_of(&post_json(&app, "/api/v1/jobs", &replace.to_string()).await)["id"], json!(id));
    assert_eq!(json_of(&get(&app, &format!("/api/v1/jobs/{id}")).await)["payload"], json!({"v": 2}));
    let debounce = json!({"kind": "send_email", "payload": {"v": 3}, "queue": "mail", "unique_key": "welcome-a", "debounce_ms": 60_000, "max_delay_ms": 600_000});
    assert_eq!(json_of(&post_json(&app, "/api/v1/jobs", &debounce.to_string()).await)["id"], json!(id));
    assert_eq!(json_of(&get(&app, &format!("/api/v1/jobs/{id}")).await)["payload"], json!({"v": 3}));
    let period = json!({"kind": "send_email", "payload": {}, "queue": "mail", "unique_key": "welcome-a", "unique_for_ms": 60_000});
    assert_eq!(json_of(&post_json(&app, "/api/v1/jobs", &period.to_string()).await)["id"], json!(id));
    assert_eq!(total(&client).await, 1);

    // A batch resent with the same ids stores each job once.
    let ids: Vec<uuid::Uuid> = (0..3).map(|_| uuid::Uuid::now_v7()).collect();
    let batch = json!({"jobs": ids.iter().map(|id| json!({"kind": "resize", "payload": {"w": 10}, "queue": "images", "id": id})).collect::<Vec<_>>()}).to_string();
    for _ in 0..2 {
        let reply = post_json(&app, "/api/v1/jobs/batch", &batch).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(json_of(&reply)["ids"], json!(ids));
    }
    assert_eq!(total(&client).await, 4);
    let stats = json_of(&get(&app, "/api/v1/stats").await);
    assert_eq!(stats["queues"]["images"]["pending"], 3, "{stats}");
    assert_eq!(stats["queues"]["mail"]["scheduled"], 1, "{stats}");

    // A wait times out on a pending job, and ends when a worker finishes it.
    let first = ids[0];
    let waited = json_of(&get(&app, &format!("/api/v1/jobs/{first}/wait?timeout_ms=100")).await);
    assert_eq!(waited["finished"], false);
    assert_eq!(waited["job"]["state"], "pending");
    let waiting = tokio::spawn({
        let app = app.clone();
        async move { get(&app, &format!("/api/v1/jobs/{first}/wait?timeout_ms=20000")).await }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    // Its handler's result comes back with it: every backend keeps results
    // (workflows).
    assert!(client.storage().capabilities().workflows.is_some(), "every built-in backend keeps results");
    let outcome = Outcome::AckWith { result: jq::Payload::from_json(r#"{"thumb": "small.png"}"#).unwrap() };
    run_once(&client, "images", outcome).await;
    let done = waiting.await.unwrap();
    assert_eq!(done.status, 200, "{}", done.body);
    let done = json_of(&done);
    assert_eq!(done["finished"], true);
    assert_eq!(done["job"]["state"], "completed");
    let result = json!({"thumb": "small.png"});
    assert_eq!(done["job"]["result"], result, "{done}");
    assert_eq!(json_of(&get(&app, &format!("/api/v1/jobs/{first}")).await)["result"], result);

    // Cancel: a pending job once, then 409; an unknown job 404.
    let cancelled = post_json(&app, &format!("/api/v1/jobs/{}/cancel", ids[1]), "").await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    assert_eq!(json_of(&cancelled)["state"], "cancelled");
    let again = post_json(&app, &format!("/api/v1/jobs/{}/cancel", ids[1]), "").await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert_eq!(json_of(&again)["code"], "conflict");
    let unknown = uuid::Uuid::now_v7();
    assert_eq!(post_json(&app, &format!("/api/v1/jobs/{unknown}/cancel"), "").await.status, 404);
    assert_eq!(get(&app, &format!("/api/v1/jobs/{unknown}")).await.status, 404);
    assert_eq!(get(&app, &format!("/api/v1/jobs/{unknown}/wait")).await.status, 404);
    let finished = json_of(&get(&app, &format!("/api/v1/jobs/{}/wait", ids[1])).await);
    assert_eq!(finished["finished"], true, "a finished job's wait returns at once");
    assert_eq!(client.get(jq::JobId(ids[1])).await.unwrap().state, State::Cancelled);

    // A running job: its cancel request is stored (202) and it runs on
    // until its pool hears of it.
    let running = post_json(&app, "/api/v1/jobs", r#"{"kind": "resize", "payload": {}, "queue": "slow"}"#).await;
    assert_eq!(running.status, 200, "{}", running.body);
    let running = json_of(&running)["id"].as_str().unwrap().to_owned();
    let request =
        jq::storage::ClaimRequest::new(vec!["slow".parse().unwrap()], 1, Duration::from_secs(30), "test-worker");
    assert_eq!(client.storage().claim(&request).await.unwrap().jobs.len(), 1);
    let requested = post_json(&app, &format!("/api/v1/jobs/{running}/cancel"), "").await;
    assert_eq!(requested.status, 202, "{}", requested.body);
    assert_eq!(json_of(&requested)["state"], "running");
    let job = client.get(jq::JobId(running.parse().unwrap())).await.unwrap();
    assert!(job.cancel_requested.is_some(), "the request is stored");
    ns.cleanup().await;
}

/// Each class of bad input is a 4xx whose JSON names the field, and stores
/// nothing, alone or in a batch whose other jobs are fine.
async fn bad_input_is_refused_naming_the_field(backend: &str) {
    let ns = namespace(backend).await;
    let client = ns.connect(Clock::system()).await;
    let app = api(&client, ApiOptions::new(Options::new()).max_body_bytes(3 * 1024 * 1024).max_batch(5));
    let big = "x".repeat(1024 * 1024 + 1);
    let cases: Vec<(String, u16, &str)> = vec![
        (r#"{"kind": "k", "payload": "#.into(), 400, "body"),
        ("not json".into(), 400, "body"),
        (String::new(), 400, "body"),
        (r#"{"kind": "k", "payload": {}} trailing"#.into(), 400, "body"),
        (r#"[1, 2]"#.into(), 400, "body"),
        (r#"{"payload": {}}"#.into(), 400, "kind"),
        (r#"{"kind": "k"}"#.into(), 400, "payload"),
        (r#"{"kind": 7, "payload": {}}"#.into(), 400, "kind"),
        (r#"{"kind": "k", "payload": {}, "priority": "urgent"}"#.into(), 400, "priority"),
        (r#"{"kind": "k", "payload": {}, "max_attempts": "3"}"#.into(), 400, "max_attempts"),
        (r#"{"kind": "k", "payload": {}, "max_attempts": 0}"#.into(), 400, "max_attempts"),
        (r#"{"kind": "k", "payload": {}, "max_attempts": 4294967296}"#.into(), 400, "max_attempts"),
        (r#"{"kind": "k", "payload": {}, "max_attempts": 2147483648}"#.into(), 400, "max_attempts"),
        (r#"{"kind": "k", "payload": {}, "delay_ms": -5}"#.into(), 400, "delay_ms"),
        (r#"{"kind": "k", "payload": {}, "delay_ms": 1e300}"#.into(), 400, "delay_ms"),
        (r#"{"kind": "k", "payload": {}, "delay_ms": 18446744073709551615}"#.into(), 400, "delay_ms"),
        (r#"{"kind": "k", "payload": {}, "delay_ms": 5, "run_at": "2030-01-01T00:00:00Z"}"#.into(), 400, "delay_ms"),
        (r#"{"kind": "k", "payload": {}, "run_at": "tomorrow"}"#.into(), 400, "run_at"),
        (r#"{"kind": "k", "payload": {}, "run_at": "1969-12-31T23:59:59Z"}"#.into(), 400, "run_at"),
        (r#"{"kind": "k", "payload": {}, "queue": "no spaces"}"#.into(), 400, "queue"),
        (r#"{"kind": "k", "payload": {}, "queue": ""}"#.into(), 400, "queue"),
        (format!(r#"{{"kind": "k", "payload": {{}}, "queue": "{}"}}"#, "q".repeat(129)), 400, "queue"),
        (r#"{"kind": "", "payload": {}}"#.into(), 400, "kind"),
        (r#"{"kind": "k\u0000", "payload": {}}"#.into(), 400, "kind"),
        (r#"{"kind": "k\n", "payload": {}}"#.into(), 400, "kind"),
        (r#"{"kind": "k", "payload": {"s": "a\u0000b"}}"#.into(), 400, "payload"),
        (r#"{"kind": "k", "payload": {}, "unique_key": "u\u0000"}"#.into(), 400, "unique_key"),
        (r#"{"kind": "k", "payload": {}, "debounce_ms": 5}"#.into(), 400, "unique_key"),
        (r#"{"kind": "k", "payload": {}, "unique_key": "u", "debounce_ms": 0}"#.into(), 400, "debounce_ms"),
        (r#"{"kind": "k", "payload": {}, "unique_key": "u", "max_delay_ms": 5}"#.into(), 400, "max_delay_ms"),
        (r#"{"kind": "k", "payload": {}, "unique_key": "u", "unique_for_ms": 0}"#.into(), 400, "unique_for_ms"),
        (
            r#"{"kind": "k", "payload": {}, "unique_key": "u", "debounce_ms": 5, "delay_ms": 5}"#.into(),
            400,
            "unique_key",
        ),
        (
            r#"{"kind": "k", "payload": {}, "unique_key": "u", "debounce_ms": 5, "replace": true}"#.into(),
            400,
            "unique_key",
        ),
        (r#"{"kind": "k", "payload": {}, "id": "not-a-uuid"}"#.into(), 400, "id"),
        (r#"{"kind": "k", "payload": {}, "id": 12}"#.into(), 400, "id"),
        (r#"{"kind": "k", "payload": {}, "delay": 5}"#.into(), 400, "delay"),
        (format!(r#"{{"kind": "k", "payload": "{big}"}}"#), 413, "payload"),
        (format!(r#"{{"kind": "k", "payload": "{}"}}"#, "y".repeat(3 * 1024 * 1024)), 413, "body"),
    ];
    for (body, status, field) in &cases {
        let reply = post_json(&app, "/api/v1/jobs", body).await;
        let shown = &body[..body.len().min(120)];
        assert_eq!(reply.status.as_u16(), *status, "{shown}: {}", reply.body);
        let error = json_of(&reply);
        assert_eq!(error["field"], *field, "{shown}: {error}");
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{error}");
        assert_eq!(reply.headers["content-type"], "application/json");
    }

    // A batch with one bad job stores none of them, and names the job.
    let batch = |bad: Value| {
        json!({"jobs": [{"kind": "k", "payload": 1}, {"kind": "k", "payload": 2}, bad, {"kind": "k", "payload": 4}]})
            .to_string()
    };
    for (bad, status, field) in [
        (json!({"kind": "k", "payload": 3, "queue": "bad queue"}), 400, "jobs[2].queue"),
        (json!({"kind": "k", "payload": 3, "id": "x"}), 400, "jobs[2].id"),
        (json!({"kind": "k"}), 400, "jobs[2].payload"),
        (json!({"kind": "k", "payload": big}), 413, "jobs[2].payload"),
    ] {
        let reply = post_json(&app, "/api/v1/jobs/batch", &batch(bad)).await;
        assert_eq!(reply.status.as_u16(), status, "{}", reply.body);
        assert_eq!(json_of(&reply)["field"], field, "{}", reply.body);
    }
    let six = json!({"jobs": (0..6).map(|i| json!({"kind": "k", "payload": i})).collect::<Vec<_>>()}).to_string();
    let too_many = post_json(&app, "/api/v1/jobs/batch", &six).await;
    assert_eq!((too_many.status.as_u16(), json_of(&too_many)["field"].clone()), (400, json!("jobs")));
    assert_eq!(json_of(&post_json(&app, "/api/v1/jobs/batch", "{}").await)["field"], "jobs");

    // Not JSON by its content type: 415.
    let form = Request::post("/api/v1/jobs")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(r#"{"kind": "k", "payload": {}}"#))
        .unwrap();
    let form = send(&app, form).await;
    assert_eq!(form.status, 415, "{}", form.body);
    let bare = send(&app, Request::post("/api/v1/jobs").body(Body::from(r#"{"kind":"k","payload":1}"#)).unwrap()).await;
    assert_eq!(bare.status, 415);

    // Bad ids and timeouts in the path and query.
    for path in ["/api/v1/jobs/not-an-id", "/api/v1/jobs/%FF%FE", "/api/v1/jobs/12345/wait"] {
        let reply = get(&app, path).await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        assert_eq!(json_of(&reply)["field"], "id", "{path}");
    }
    let id = uuid::Uuid::now_v7();
    for query in ["timeout_ms=-1", "timeout_ms=soon", "timeout_ms=1.5", "timeout_ms=3600001"] {
        let reply = get(&app, &format!("/api/v1/jobs/{id}/wait?{query}")).await;
        assert_eq!(reply.status, 400, "{query}: {}", reply.body);
        assert_eq!(json_of(&reply)["field"], "timeout_ms");
    }
    assert_eq!(post_json(&app, "/api/v1/jobs/nope/cancel", "").await.status, 400);
    let unknown = get(&app, "/api/v1/nothing").await;
    assert_eq!((unknown.status.as_u16(), json_of(&unknown)["code"].clone()), (404, json!("not_found")));
    let method = send(&app, Request::delete("/api/v1/stats").body(Body::empty()).unwrap()).await;
    assert_eq!(method.status, 405);
    assert_eq!(json_of(&method)["code"], "method_not_allowed");

    assert_eq!(total(&client).await, 0, "no bad input stored anything");
    ns.cleanup().await;
}

/// The dashboard's rules: a token when set (401), the host check (421),
/// read-only (403); a read-only token reads but cannot write (403); a page
/// of another site cannot write (403).
async fn tokens_hosts_and_sites(backend: &str) {
    let ns = namespace(backend).await;
    let client = ns.connect(Clock::system()).await;
    let job = r#"{"kind": "k", "payload": {}}"#;
    let call = |app: Router, method: &'static str, path: &'static str, headers: Vec<(&'static str, String)>| async move {
        let mut request = Request::builder().method(method).uri(path).header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let body = if method == "POST" { Body::from(job) } else { Body::empty() };
        send(&app, request.body(body).unwrap()).await.status.as_u16()
    };
    let bearer = |t: &str| vec![("authorization", format!("Bearer {t}"))];
    let locked = api(&client, ApiOptions::new(Options::new().token("full").unwrap()).read_token("read").unwrap());
    assert_eq!(call(locked.clone(), "GET", "/api/v1/stats", vec![]).await, 401);
    assert_eq!(call(locked.clone(), "POST", "/api/v1/jobs", vec![]).await, 401);
    assert_eq!(call(locked.clone(), "GET", "/api/v1/stats", bearer("wrong")).await, 401);
    assert_eq!(call(locked.clone(), "GET", "/api/v1/stats", bearer("read")).await, 200);
    assert_eq!(call(locked.clone(), "GET", "/api/v1/openapi.json", bearer("read")).await, 200);
    assert_eq!(call(locked.clone(), "POST", "/api/v1/jobs", bearer("read")).await, 403);
    assert_eq!(call(locked.clone(), "GET", "/api/v1/stats", bearer("full")).await, 200);
    assert_eq!(call(locked.clone(), "POST", "/api/v1/jobs", bearer("full")).await, 200);
    let mut elsewhere = bearer("full");
    elsewhere.push(("host", "attacker.example".to_owned()));
    assert_eq!(call(locked.clone(), "GET", "/api/v1/stats", elsewhere).await, 421);

    let read_only = api(&client, ApiOptions::new(Options::new().read_only(true)));
    assert_eq!(call(read_only.clone(), "POST", "/api/v1/jobs", vec![]).await, 403);
    assert_eq!(call(read_only, "GET", "/api/v1/stats", vec![]).await, 200);

    let open = api(&client, ApiOptions::new(Options::new()));
    let from = |origin: &str| vec![("host", "127.0.0.1:8080".to_owned()), ("origin", origin.to_owned())];
    assert_eq!(call(open.clone(), "POST", "/api/v1/jobs", from("https://attacker.example")).await, 403);
    assert_eq!(call(open.clone(), "POST", "/api/v1/jobs", vec![("sec-fetch-site", "cross-site".into())]).await, 403);
    assert_eq!(call(open.clone(), "POST", "/api/v1/jobs", from("http://127.0.0.1:8080")).await, 200);
    assert_eq!(total(&client).await, 2, "only the two allowed writes stored a job");
    let denied = get(&locked, "/api/v1/stats").await;
    assert_eq!(json_of(&denied)["code"], "unauthorized");
    assert!(denied.headers["www-authenticate"].to_str().unwrap().starts_with("Bearer"));
    ns.cleanup().await;
}

/// The order of the durable order flow: charge, wait for an approval,
/// then ship.
#[derive(serde::Serialize, serde::Deserialize)]
struct Order {
    sku: String,
}

impl jq::JobType for Order {
    const KIND: &'static str = "order";
    const QUEUE: &'static str = "orders";
}

/// An order flow over the HTTP API: an order enqueued by POST runs its
/// durable handler to its wait for "approved" and waits in the store; the
/// approval arrives by `POST /api/v1/jobs/{id}/signal` and the run
/// resumes (its charge step is not run again) and completes with the
/// signal's payload in its result. A signal to an unknown job is 404, a
/// bad name 400, a payload over the step result limit 413 (nothing
/// stored), and a signal to the finished job 409.
async fn signal_approves_a_durable_order(backend: &str) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    let ns = namespace(backend).await;
    let client = ns.connect(Clock::system()).await;
    let app = api(&client, ApiOptions::new(Options::new()));
    let charges = Arc::new(AtomicU32::new(0));
    let counted = charges.clone();
    let pool = client
        .worker_pool()
        .maintenance(false)
        .poll_interval(Duration::from_millis(10))
        .register_durable::<Order, _, _>(move |order: Order, ctx: jq::DurableContext| {
            let charges = counted.clone();
            async move {
                let charge: String = ctx
                    .step("charge", async {
                        charges.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, jq::HandlerError>(format!("ch_{}", order.sku))
                    })
                    .await?;
                let approved = match ctx.wait_for::<Value>("approved", Duration::from_secs(86_400)).await? {
                    jq::Waited::Signal(by) => by,
                    jq::Waited::TimedOut => return Err(jq::HandlerError::bury("not approved in a day")),
                };
                ctx.set_result(&json!({ "charge": charge, "approved": approved })).map_err(jq::HandlerError::bury)?;
                Ok(())
            }
        })
        .start()
        .unwrap();
    let enqueued = post_json(
        &app,
        "/api/v1/jobs",
        &json!({"kind": "order", "queue": "orders", "payload": {"sku": "a1"}}).to_string(),
    )
    .await;
    assert_eq!(enqueued.status, 200, "{}", enqueued.body);
    let id = json_of(&enqueued)["id"].as_str().unwrap().to_owned();
    let job_id: jq::JobId = id.parse().unwrap();
    for _ in 0..3_000 {
        if client.journal(job_id).await.unwrap().wait.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(client.get(job_id).await.unwrap().state, State::Scheduled, "the order waits in the store");

    let unknown = uuid::Uuid::now_v7();
    let body = json!({"name": "approved", "payload": {"by": "ops"}}).to_string();
    assert_eq!(post_json(&app, &format!("/api/v1/jobs/{unknown}/signal"), &body).await.status, 404);
    let bad = post_json(&app, &format!("/api/v1/jobs/{id}/signal"), &json!({"name": ""}).to_string()).await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let big = json!({"name": "approved", "payload": "x".repeat(jq::durable::MAX_STEP_RESULT_BYTES)}).to_string();
    assert_eq!(post_json(&app, &format!("/api/v1/jobs/{id}/signal"), &big).await.status, 413);
    assert!(client.journal(job_id).await.unwrap().signals.is_empty(), "nothing refused was stored");

    let sent = post_json(&app, &format!("/api/v1/jobs/{id}/signal"), &body).await;
    assert_eq!(sent.status, 202, "{}", sent.body);
    let done = get(&app, &format!("/api/v1/jobs/{id}/wait?timeout_ms=30000")).await;
    assert_eq!(json_of(&done)["finished"], true, "{}", done.body);
    assert_eq!(json_of(&done)["job"]["state"], "completed", "{}", done.body);
    pool.shutdown().await.unwrap();
    let result = client.result(job_id).await.unwrap().unwrap();
    let result: Value = serde_json::from_str(result.as_str()).unwrap();
    assert_eq!(result, json!({"charge": "ch_a1", "approved": {"by": "ops"}}));
    assert_eq!(charges.load(Ordering::SeqCst), 1, "the replay did not charge again");
    assert_eq!(post_json(&app, &format!("/api/v1/jobs/{id}/signal"), &body).await.status, 409);
    ns.cleanup().await;
}

macro_rules! on_every_backend {
    ($($test:ident),* $(,)?) => {
        mod sqlite { $( #[tokio::test] async fn $test() { super::$test("sqlite").await } )* }
        mod postgres { $( #[tokio::test] async fn $test() { jq_testkit::needs!(postgres); super::$test("postgres").await } )* }
        mod redis { $( #[tokio::test] async fn $test() { jq_testkit::needs!(redis); super::$test("redis").await } )* }
    };
}

on_every_backend!(
    enqueue_get_wait_cancel,
    bad_input_is_refused_naming_the_field,
    tokens_hosts_and_sites,
    signal_approves_a_durable_order,
);

/// docs/openapi.json is the document the code generates. Regenerate it with
/// `JQ_UPDATE_OPENAPI=1 cargo test -p jq-dashboard --all-features --test api openapi`.
#[test]
fn openapi_document_is_checked_in() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
    let generated = jq_dashboard::api::openapi_json();
    if std::env::var_os("JQ_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "docs/openapi.json differs from the generated document: regenerate it with \
         JQ_UPDATE_OPENAPI=1 cargo test -p jq-dashboard --all-features --test api openapi"
    );
    let document: Value = serde_json::from_str(&generated).unwrap();
    assert!(document["openapi"].as_str().unwrap().starts_with("3."));
    for path in [
        "/api/v1/jobs",
        "/api/v1/jobs/batch",
        "/api/v1/jobs/{id}",
        "/api/v1/jobs/{id}/wait",
        "/api/v1/jobs/{id}/cancel",
        "/api/v1/jobs/{id}/signal",
        "/api/v1/stats",
    ] {
        assert!(document["paths"].get(path).is_some(), "{path} is documented");
    }
}
