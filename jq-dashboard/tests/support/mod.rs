//! What the dashboard's tests share: a seeded store on each backend, and a
//! router to send requests to without a network.

#![allow(dead_code)] // each test file uses part of it
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use jq::storage::StorageExt as _;
use jq::storage::{ClaimRequest, Outcome, Storage};
use jq::{Backend, Client, Clock, JobId, NewJob, Payload, QueueName};
use tower::ServiceExt;

use crate::common::Namespace;

/// The payload of the dead job: markup that must stay text.
pub const HOSTILE: &str = "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">";

/// The jobs a seeded store holds.
pub struct Seeded {
    /// Queue "reports": dead after one attempt, payload [`HOSTILE`], error
    /// text with markup too.
    pub dead: JobId,
    /// Queue "mailers": pending.
    pub pending: JobId,
    /// Queue "mailers": completed.
    pub completed: JobId,
}

/// Stores two pending, one scheduled, one completed job in "mailers" and
/// one dead job in "reports".
pub async fn seed(client: &Client) -> Seeded {
    let job = |kind: &str, queue: &str, payload: serde_json::Value| {
        NewJob::builder(kind, Payload::of(&payload).unwrap()).queue(queue)
    };
    let dead = client
        .enqueue(
            job("render_report", "reports", serde_json::json!({ "html": HOSTILE })).max_attempts(1).build().unwrap(),
        )
        .await
        .unwrap();
    run_once(client, "reports", Outcome::Bury { error: "<b>boom</b>: template failed".to_owned() }).await;

    let completed = client
        .enqueue(job("send_email", "mailers", serde_json::json!({ "to": "a@example.com" })).build().unwrap())
        .await
        .unwrap();
    run_once(client, "mailers", Outcome::Ack).await;
    let pending = client
        .enqueue(job("send_email", "mailers", serde_json::json!({ "to": "b@example.com" })).build().unwrap())
        .await
        .unwrap();
    client
        .enqueue(job("send_email", "mailers", serde_json::json!({ "to": "c@example.com" })).build().unwrap())
        .await
        .unwrap();
    client
        .enqueue(job("send_digest", "mailers", serde_json::json!({})).delay(Duration::from_secs(3600)).build().unwrap())
        .await
        .unwrap();
    Seeded { dead, pending, completed }
}

/// Claims the one runnable job of `queue` as a worker would and finishes it.
pub async fn run_once(client: &Client, queue: &str, outcome: Outcome) {
    let request = ClaimRequest::new(vec![QueueName::new(queue).unwrap()], 1, Duration::from_secs(30), "test-worker");
    let claimed = client.storage().claim(&request).await.unwrap().jobs;
    assert_eq!(claimed.len(), 1, "one runnable job in {queue}");
    client.storage().settle_one(claimed[0].lease_ref().unwrap(), outcome).await.unwrap();
}

/// A fresh namespace on `backend`: "sqlite", "postgres" or "redis".
pub async fn namespace(backend: &str) -> Namespace {
    match backend {
        "sqlite" => Namespace::sqlite(),
        "postgres" => Namespace::postgres().await,
        "redis" => Namespace::redis(),
        other => panic!("no backend {other}"),
    }
}

/// A namespace on `backend` ("sqlite", "postgres", "redis"), its client, seeded.
pub async fn seeded(backend: &str) -> (Namespace, Client, Seeded) {
    let ns = namespace(backend).await;
    let client = ns.connect(Clock::system()).await;
    let seeded = seed(&client).await;
    (ns, client, seeded)
}

/// A response's status, headers and body text.
pub struct Reply {
    pub status: StatusCode,
    pub location: Option<String>,
    pub headers: axum::http::HeaderMap,
    pub body: String,
}

/// Sends one request to the router.
pub async fn send(app: &Router, request: Request<Body>) -> Reply {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let location = headers.get(header::LOCATION).map(|v| v.to_str().unwrap().to_owned());
    let body = String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    Reply { status, location, headers, body }
}

/// `GET path`.
pub async fn get(app: &Router, path: &str) -> Reply {
    send(app, Request::get(path).body(Body::empty()).unwrap()).await
}

/// `POST path` with a form body.
pub async fn post(app: &Router, path: &str, form: &str) -> Reply {
    let request = Request::post(path)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(form.to_owned()))
        .unwrap();
    send(app, request).await
}

/// The CSRF token the page's forms carry.
pub fn csrf(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a form with a CSRF token") + "name=\"csrf\" value=\"".len();
    page[at..].split('"').next().unwrap().to_owned()
}

/// The state of `id` in the store.
pub async fn state(client: &Client, id: JobId) -> jq::State {
    client.get(id).await.unwrap().state
}

/// The dashboard over `client`'s storage.
pub fn dashboard(client: &Client, options: jq_dashboard::Options) -> Router {
    let storage: Backend = client.storage().clone();
    jq_dashboard::router(Client::new(storage), options)
}

/// One more pending job in `queue`.
pub async fn seed_one_pending(client: &Client, queue: &str) -> JobId {
    let job = NewJob::builder("send_email", Payload::of(&serde_json::json!({})).unwrap()).queue(queue);
    client.enqueue(job.build().unwrap()).await.unwrap()
}

/// What [`seed_busy`] finished in the last hour.
pub struct Busy {
    /// Jobs completed.
    pub completed: u64,
    /// Jobs that died.
    pub dead: u64,
}

/// A store with history, on a manual clock that ends at the real now: 45
/// minutes of work finished minute by minute (some of it failing), a
/// backlog, a paused queue, a limited one, a dead job with a hostile
/// payload and a recurring periodic job.
pub async fn seed_busy(client: &Client, clock: &jq::ManualClock) -> Busy {
    let start = chrono::Utc::now() - chrono::TimeDelta::minutes(45);
    clock.set(start);
    let mut busy = Busy { completed: 0, dead: 0 };
    let queues = vec![QueueName::new("mailers").unwrap(), QueueName::new("billing").unwrap()];
    for minute in 0..45u64 {
        let n = 3 + (minute * 7) % 11;
        let mut jobs: Vec<NewJob> = (0..n)
            .map(|i| {
                NewJob::builder(
                    "send_email",
                    Payload::of(&serde_json::json!({ "to": format!("user{i}@example.com") })).unwrap(),
                )
                .queue("mailers")
                .max_attempts(1)
                .build()
                .unwrap()
            })
            .collect();
        if minute % 3 == 0 {
            let invoice =
                NewJob::builder("charge_invoice", Payload::of(&serde_json::json!({ "invoice": minute })).unwrap());
            jobs.push(invoice.queue("billing").max_attempts(1).build().unwrap());
        }
        client.enqueue_many(jobs).await.unwrap();
        clock.advance(Duration::from_secs(20));
        let request = ClaimRequest::new(queues.clone(), 100, Duration::from_secs(30), "worker-1");
        let claimed = client.storage().claim(&request).await.unwrap().jobs;
        let mut batch = Vec::with_capacity(claimed.len());
        for (i, job) in claimed.iter().enumerate() {
            let outcome = if i % 9 == 4 {
                busy.dead += 1;
                Outcome::Bury { error: "SMTP 554: message rejected".to_owned() }
            } else {
                busy.completed += 1;
                Outcome::Ack
            };
            batch.push(jq::storage::Settlement { lease: job.lease_ref().unwrap(), outcome });
        }
        for result in client.storage().settle(batch).await.unwrap() {
            result.unwrap();
        }
        clock.advance(Duration::from_secs(40));
    }
    clock.set(chrono::Utc::now());
    for i in 0..25 {
        seed_one_pending(client, if i % 5 == 0 { "billing" } else { "mailers" }).await;
    }
    let dead = NewJob::builder(
        "render_report",
        Payload::of(&serde_json::json!({ "html": HOSTILE, "month": "2026-10" })).unwrap(),
    );
    client.enqueue(dead.queue("reports").max_attempts(1).build().unwrap()).await.unwrap();
    run_once(client, "reports", Outcome::Bury { error: "<b>boom</b>: template failed".to_owned() }).await;
    client.pause("billing").await.unwrap();
    client
        .limit(
            "mailers",
            jq::QueueLimits { concurrency: Some(8), rate: Some(jq::Rate::new(100, Duration::from_secs(1))) },
        )
        .await
        .unwrap();
    let fire = jq::periodic::Fire {
        name: "nightly-report".to_owned(),
        queue: QueueName::new("reports").unwrap(),
        spec: "0 3 * * *".to_owned(),
        zone: "Europe/Berlin".to_owned(),
        expected: None,
        expected_trigger: None,
        cursor: clock.now(),
        jobs: Vec::new(),
        missed: 0,
        last_missed: None,
    };
    client.storage().require_periodic().expect("periodic").fire(&fire).await.unwrap();
    busy
}

/// A namespace on `backend` whose client runs on a manual clock, seeded by
/// [`seed_busy`].
pub async fn busy(backend: &str) -> (Namespace, Client, Busy) {
    let ns = namespace(backend).await;
    let clock = jq::ManualClock::starting_now();
    let client = ns.connect(clock.clock()).await;
    let busy = seed_busy(&client, &clock).await;
    (ns, client, busy)
}

/// The number in the element `id` of a page (`<strong id="...">N</strong>`).
pub fn figure(page: &str, id: &str) -> u64 {
    let at = page.find(&format!("id=\"{id}\">")).unwrap_or_else(|| panic!("no #{id} on the page")) + id.len() + 6;
    page[at..].split('<').next().unwrap().trim().parse().unwrap()
}
