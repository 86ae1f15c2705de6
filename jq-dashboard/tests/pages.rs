//! The dashboard's pages and actions over HTTP, on every backend: what an
//! operator sees, what each action does, and what is refused.

#![cfg(all(feature = "sqlite", feature = "postgres", feature = "redis"))]
#![allow(clippy::unwrap_used)] // tests may unwrap

#[path = "../../jq/tests/common/mod.rs"]
mod common;
mod support;

use axum::Router;
use jq::State;
use jq_dashboard::Options;
use support::{csrf, dashboard, get, post, seeded, state};

/// The overview lists every queue with its counts, the dead job is one click
/// away, and the hostile payload and error come back escaped.
async fn pages_show_the_store_escaped(backend: &str) {
    let (ns, client, jobs) = seeded(backend).await;
    let app = dashboard(&client, Options::new());

    let overview = get(&app, "/").await;
    assert_eq!(overview.status, 200, "{}", overview.body);
    assert!(overview.body.contains("data-queue=\"mailers\""), "{}", overview.body);
    assert!(overview.body.contains("data-queue=\"reports\""));
    assert!(overview.body.contains("/jobs?queue=reports&amp;state=dead"), "the dead count links to the dead jobs");
    assert!(overview.headers["content-security-policy"].to_str().unwrap().contains("script-src 'self'"));

    let dead_list = get(&app, "/jobs?queue=reports&state=dead").await;
    assert_eq!(dead_list.status, 200);
    assert!(dead_list.body.contains(&format!("data-job=\"{}\"", jobs.dead)));
    assert!(!dead_list.body.contains(&format!("data-job=\"{}\"", jobs.pending)), "the filter keeps other queues out");
    assert!(dead_list.body.contains("&lt;b&gt;boom&lt;/b&gt;"), "the last error, escaped");

    let detail = get(&app, &format!("/jobs/{}", jobs.dead)).await;
    assert_eq!(detail.status, 200);
    assert!(detail.body.contains("&lt;script&gt;window.__pwned = 1&lt;/script&gt;"), "{}", detail.body);
    assert!(!detail.body.contains("<script>window"), "no payload markup reaches the page as markup");
    assert!(!detail.body.contains("<b>boom"));
    assert!(detail.body.contains("test-worker") || detail.body.contains("Attempts that failed"));

    let missing = get(&app, "/jobs/0190a1b2-0000-7000-8000-000000000000").await;
    assert_eq!(missing.status, 404);
    assert_eq!(get(&app, "/jobs/not-an-id").await.status, 400);
    ns.cleanup().await;
}

/// Every action with the page's token does what it says and redirects to
/// a page that says so; without the token nothing changes.
async fn actions_act_and_forgeries_do_not(backend: &str) {
    let (ns, client, jobs) = seeded(backend).await;
    let app = dashboard(&client, Options::new());
    let token = csrf(&get(&app, "/").await.body);

    let forged = post(&app, &format!("/jobs/{}/retry", jobs.dead), "csrf=guess").await;
    assert_eq!(forged.status, 403);
    let no_token = post(&app, &format!("/jobs/{}/retry", jobs.dead), "").await;
    assert_eq!(no_token.status, 403);
    assert_eq!(state(&client, jobs.dead).await, State::Dead, "a forged POST changed nothing");

    let retried = post(&app, &format!("/jobs/{}/retry", jobs.dead), &format!("csrf={token}")).await;
    assert_eq!(retried.status, 303, "{}", retried.body);
    assert_eq!(retried.location.as_deref(), Some(format!("/jobs/{}?done=retried", jobs.dead).as_str()));
    assert_eq!(state(&client, jobs.dead).await, State::Pending);
    let shown = get(&app, retried.location.as_deref().unwrap()).await;
    assert!(shown.body.contains("Retried: the job is pending again"), "{}", shown.body);
    let again = post(&app, &format!("/jobs/{}/retry", jobs.dead), &format!("csrf={token}")).await;
    assert_eq!(again.status, 409, "a pending job cannot be retried: {}", again.body);

    let cancelled = post(&app, &format!("/jobs/{}/cancel", jobs.pending), &format!("csrf={token}")).await;
    assert_eq!(cancelled.status, 303);
    assert_eq!(state(&client, jobs.pending).await, State::Cancelled);

    assert_eq!(post(&app, "/queues/mailers/pause", &format!("csrf={token}")).await.status, 303);
    let paused = client.queues().await.unwrap();
    assert!(paused.iter().any(|q| q.queue.as_str() == "mailers" && q.paused()));
    assert!(get(&app, "/?done=paused").await.body.contains("Paused: no worker starts"));
    assert_eq!(post(&app, "/queues/mailers/resume", &format!("csrf={token}")).await.status, 303);
    assert!(client.queues().await.unwrap().iter().all(|q| !q.paused()));

    // Back to dead, then "retry all dead" for the queue.
    support::run_once(&client, "reports", jq::storage::Outcome::Bury { error: "again".into() }).await;
    let all = post(&app, "/queues/reports/retry-dead", &format!("csrf={token}")).await;
    assert_eq!(all.status, 303);
    assert!(all.location.unwrap().contains("done=retried-dead&n=1"));
    assert_eq!(state(&client, jobs.dead).await, State::Pending);

    let purged = post(&app, "/purge", &format!("csrf={token}&state=completed&older_than=0s")).await;
    assert_eq!(purged.status, 303, "{}", purged.body);
    assert_eq!(purged.location.as_deref(), Some("/?done=purged&n=1"));
    assert!(client.get(jobs.completed).await.is_err(), "the completed job is gone");
    let bad = post(&app, "/purge", &format!("csrf={token}&state=pending&older_than=1d")).await;
    assert_eq!(bad.status, 400, "only finished states are purged: {}", bad.body);
    let bad = post(&app, "/purge", &format!("csrf={token}&state=completed&older_than=soon")).await;
    assert_eq!(bad.status, 400);

    let unknown = post(&app, "/periodic/nightly/trigger", &format!("csrf={token}")).await;
    assert_eq!(unknown.status, 404, "no pool declared it: {}", unknown.body);
    ns.cleanup().await;
}

/// Read-only hides every form and refuses every POST, even one carrying a
/// valid token; a token-protected dashboard wants the token on every page.
async fn read_only_and_token(backend: &str) {
    let (ns, client, jobs) = seeded(backend).await;
    let writable = dashboard(&client, Options::new());
    let token = csrf(&get(&writable, "/").await.body);
    let app = dashboard(&client, Options::new().read_only(true));
    for path in ["/".to_owned(), format!("/jobs/{}", jobs.dead), "/jobs".to_owned()] {
        let page = get(&app, &path).await;
        assert_eq!(page.status, 200);
        assert!(!page.body.contains("method=\"post\""), "{path} shows an action: {}", page.body);
        assert!(page.body.contains("read-only"));
    }
    for path in [format!("/jobs/{}/retry", jobs.dead), "/queues/mailers/pause".to_owned(), "/purge".to_owned()] {
        let refused = post(&app, &path, &format!("csrf={token}&state=completed&older_than=0s")).await;
        assert_eq!(refused.status, 403, "{path}");
        assert!(refused.body.contains("read-only"));
    }
    assert_eq!(state(&client, jobs.dead).await, State::Dead);

    let locked = dashboard(&client, Options::new().token("s3cret").unwrap());
    let denied = get(&locked, "/").await;
    assert_eq!(denied.status, 401);
    assert!(denied.headers["www-authenticate"].to_str().unwrap().starts_with("Basic"));
    let bearer = support::send(
        &locked,
        axum::http::Request::get("/").header("authorization", "Bearer s3cret").body(axum::body::Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(bearer.status, 200);
    ns.cleanup().await;
}

/// Nested under a path of the user's app, every link and form starts with it.
async fn nested_links_keep_the_prefix(backend: &str) {
    let (ns, client, jobs) = seeded(backend).await;
    let app: Router = Router::new().nest("/admin/jobs", dashboard(&client, Options::new()));
    let overview = get(&app, "/admin/jobs").await;
    assert_eq!(overview.status, 200, "{}", overview.body);
    assert!(overview.body.contains("href=\"/admin/jobs/assets/dashboard.css\""));
    assert!(overview.body.contains("action=\"/admin/jobs/queues/mailers/pause\""));
    let token = csrf(&overview.body);
    let retried = post(&app, &format!("/admin/jobs/jobs/{}/retry", jobs.dead), &format!("csrf={token}")).await;
    assert_eq!(retried.location.as_deref(), Some(format!("/admin/jobs/jobs/{}?done=retried", jobs.dead).as_str()));
    assert_eq!(get(&app, "/admin/jobs/assets/dashboard.js").await.status, 200);
    ns.cleanup().await;
}

/// The last hour's throughput, as the overview charts and totals it,
/// equals the jobs finished minute by minute; limits and pauses show.
async fn overview_counts_the_last_hour(backend: &str) {
    let (ns, client, busy) = support::busy(backend).await;
    let app = dashboard(&client, Options::new());
    let overview = get(&app, "/").await;
    assert_eq!(overview.status, 200);
    assert_eq!(support::figure(&overview.body, "completed-hour"), busy.completed);
    assert_eq!(support::figure(&overview.body, "failed-hour"), busy.dead + 1, "the dead report counts too");
    assert!(overview.body.matches("<rect class=\"ok\"").count() >= 45, "a bar for each minute of work");
    assert!(overview.body.contains("≤ 8 running") && overview.body.contains("100 / 1s"), "mailers' limits");
    assert!(overview.body.contains("class=\"paused\""), "billing is paused");
    assert!(overview.body.contains("nightly-report") && overview.body.contains("0 3 * * *"));
    assert!(overview.body.contains("action=\"/queues/billing/resume\""));
    assert!(overview.body.contains("action=\"/periodic/nightly-report/trigger\""));
    let token = csrf(&overview.body);
    let run = post(&app, "/periodic/nightly-report/trigger", &format!("csrf={token}")).await;
    assert_eq!(run.status, 303, "{}", run.body);
    let periodic = client.periodic().await.unwrap();
    assert!(periodic[0].triggered_at.is_some(), "the trigger is stored for a declaring pool");
    let page2 = get(&app, "/jobs?queue=mailers&state=completed").await;
    assert!(page2.body.contains("id=\"next-page\""), "more than 50 completed mailers page");
    ns.cleanup().await;
}

/// `GET /` naming `host` in its Host header, with `authorization` if any.
async fn get_as(app: &Router, host: &str, authorization: Option<&str>) -> support::Reply {
    let mut request = axum::http::Request::get("/").header("host", host);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    support::send(app, request.body(axum::body::Body::empty()).unwrap()).await
}

/// A request naming another host than the dashboard's own is refused with
/// 421 before anything else, as a page that rebound its name to 127.0.0.1
/// sends it: it learns nothing and can post nothing. Loopback names are
/// answered by default; other names once allowed.
#[tokio::test]
async fn requests_naming_another_host_are_refused() {
    let (ns, client, _) = seeded("sqlite").await;
    let app = dashboard(&client, Options::new());
    for host in ["attacker.example", "attacker.example:8080", "localhost.attacker.example:8080"] {
        let refused = get_as(&app, host, None).await;
        assert_eq!(refused.status, 421, "{host}: {}", refused.body);
        assert!(!refused.body.contains("name=\"csrf\""), "no page, no CSRF token");
        assert!(refused.body.contains("--allowed-host"), "{}", refused.body);
    }
    let token = csrf(&get_as(&app, "127.0.0.1:8080", None).await.body);
    let forged = support::send(
        &app,
        axum::http::Request::post("/purge")
            .header("host", "attacker.example:8080")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(axum::body::Body::from(format!("csrf={token}&state=completed&older_than=0s")))
            .unwrap(),
    )
    .await;
    assert_eq!(forged.status, 421, "a rebound page cannot post even with the token");
    for host in ["localhost:8080", "127.0.0.1:8080", "[::1]:8080", "localhost"] {
        assert_eq!(get_as(&app, host, None).await.status, 200, "{host}");
    }

    let proxied = dashboard(&client, Options::new().allow_host("jobs.example.com").unwrap());
    assert_eq!(get_as(&proxied, "jobs.example.com", None).await.status, 200);
    assert_eq!(get_as(&proxied, "attacker.example", None).await.status, 421);
    let exact = dashboard(&client, Options::new().allowed_hosts(["127.0.0.1:8080"]).unwrap());
    assert_eq!(get_as(&exact, "127.0.0.1:8080", None).await.status, 200);
    assert_eq!(get_as(&exact, "127.0.0.1:9090", None).await.status, 421);
    let any = dashboard(&client, Options::new().allow_any_host());
    assert_eq!(get_as(&any, "attacker.example", None).await.status, 200);

    // With a token too, the host is checked first.
    let locked = dashboard(&client, Options::new().token("s3cret").unwrap());
    assert_eq!(get_as(&locked, "attacker.example", Some("Bearer s3cret")).await.status, 421);
    ns.cleanup().await;
}

/// An empty token is refused rather than letting anything in; whitespace
/// around a token (a secret file's newline) is trimmed, so the token typed
/// or sent without it matches.
#[tokio::test]
async fn empty_tokens_are_refused_and_whitespace_trimmed() {
    assert_eq!(Options::new().token("").err(), Some(jq_dashboard::OptionsError::EmptyToken));
    assert_eq!(Options::new().token("  \n").err(), Some(jq_dashboard::OptionsError::EmptyToken));
    let (ns, client, _) = seeded("sqlite").await;
    let app = dashboard(&client, Options::new().token("s3cret\n").unwrap());
    assert_eq!(get_as(&app, "localhost", None).await.status, 401);
    assert_eq!(get_as(&app, "localhost", Some("Bearer s3cret")).await.status, 200);
    let basic = format!("Basic {}", base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "ops:s3cret"));
    assert_eq!(get_as(&app, "localhost", Some(&basic)).await.status, 200);
    assert_eq!(get_as(&app, "localhost", Some("Bearer s3cre")).await.status, 401);
    assert_eq!(get_as(&app, "localhost", Some("Bearer ")).await.status, 401, "an empty bearer is no token");
    ns.cleanup().await;
}

/// The workflow page draws the graph as SVG, each step coloured by its
/// state and linked to its job, with the counts; a job's page shows its
/// workflow, parents, children and result.
async fn workflow_page_draws_the_graph(backend: &str) {
    use jq::storage::{ClaimRequest, Outcome, Settlement, Storage};
    use jq::workflow::{Step, Workflow};
    let (ns, client, _) = seeded(backend).await;
    let app = dashboard(&client, Options::new());
    let job = |kind: &str| jq::NewJob::builder(kind, jq::Payload::of(&()).unwrap()).queue("flow").build().unwrap();
    let stored = client
        .enqueue_workflow(
            Workflow::new()
                .step(Step::new("<fetch>", job("fetch")))
                .step(Step::new("scan", job("scan")).after(["<fetch>"]))
                .step(Step::new("store", job("store")).after(["<fetch>", "scan"])),
        )
        .await
        .unwrap();
    let (fetch, scan) = (stored.job("<fetch>").unwrap(), stored.job("scan").unwrap());
    let request =
        ClaimRequest::new(vec![jq::QueueName::new("flow").unwrap()], 10, std::time::Duration::from_secs(30), "w");
    let claimed = client.storage().claim(&request).await.unwrap().jobs;
    let lease = claimed[0].lease_ref().unwrap();
    let result = jq::Payload::from_json(r#"{"found":"<3>"}"#).unwrap();
    client.storage().settle(vec![Settlement { lease, outcome: Outcome::AckWith { result } }]).await.unwrap();

    let page = get(&app, &format!("/workflows/{}", stored.id)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("<svg"), "{}", page.body);
    assert!(page.body.contains(r#"data-state="completed""#) && page.body.contains(r#"data-state="pending""#));
    assert!(page.body.contains(r#"data-state="waiting""#));
    assert!(page.body.contains("&lt;fetch&gt;") && !page.body.contains("<fetch>"), "step names are escaped");
    assert!(page.body.contains(&format!("/jobs/{scan}")));
    assert_eq!(page.body.matches("class=\"edge\"").count(), 3, "one line per edge");

    let detail = get(&app, &format!("/jobs/{fetch}")).await;
    assert!(detail.body.contains(&format!("/workflows/{}", stored.id)), "{}", detail.body);
    assert!(detail.body.contains(&format!("/jobs/{scan}")), "children link to their pages");
    assert!(detail.body.contains("&lt;3&gt;"), "the result, escaped");
    let child = get(&app, &format!("/jobs/{scan}")).await;
    assert!(child.body.contains(&format!("/jobs/{fetch}")), "parents link to their pages");
    assert_eq!(get(&app, "/workflows/0190a1b2-0000-7000-8000-000000000000").await.status, 404);
    ns.cleanup().await;
}

/// A queue's jobs page shows its busiest keys with their counts and the
/// limits each follows (escaped), and a keyed job's page shows its key.
async fn keys_show_on_the_queues_page(backend: &str) {
    let (ns, client, _) = seeded(backend).await;
    let app = dashboard(&client, Options::new());
    let job =
        |key: &str| jq::NewJob::builder("hook", jq::Payload::of(&()).unwrap()).queue("hooks").key(key).build().unwrap();
    let mut ids = Vec::new();
    for key in ["<acme>", "<acme>", "<acme>", "bob"] {
        ids.push(client.enqueue(job(key)).await.unwrap());
    }
    client.set_key_limits("hooks", None, jq::QueueLimits { concurrency: Some(2), rate: None }).await.unwrap();
    client.set_key_limits("hooks", Some("bob"), jq::QueueLimits::none()).await.unwrap();

    let page = get(&app, "/jobs?queue=hooks").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Busiest keys"), "{}", page.body);
    assert!(page.body.contains("data-key=\"&lt;acme&gt;\""), "keys are escaped: {}", page.body);
    assert!(!page.body.contains("<acme>"));
    assert!(page.body.contains("≤ 2 running") && page.body.contains("no limit"), "{}", page.body);
    let acme = page.body.find("data-key=\"&lt;acme&gt;\"").unwrap();
    let bob = page.body.find("data-key=\"bob\"").unwrap();
    assert!(acme < bob, "the busiest key first");
    assert!(!get(&app, "/jobs").await.body.contains("Busiest keys"), "only for one chosen queue");

    let detail = get(&app, &format!("/jobs/{}", ids[0])).await;
    assert!(detail.body.contains("&lt;acme&gt;"), "{}", detail.body);
    ns.cleanup().await;
}

/// One job of the queue `durable-orders`, enqueued and claimed: its id and
/// lease, for a test to write its journal as a run would.
async fn claimed_order<S: jq::storage::Storage>(client: &jq::Client<S>) -> (jq::JobId, jq::storage::LeaseRef) {
    let job = jq::NewJob::builder("order", jq::Payload::of(&()).unwrap()).queue("durable-orders").build().unwrap();
    let id = client.enqueue(job).await.unwrap();
    let lease = client.storage().claim(&orders_claim()).await.unwrap().jobs[0].lease_ref().unwrap();
    (id, lease)
}

/// A claim of one job of `durable-orders`.
fn orders_claim() -> jq::storage::ClaimRequest {
    jq::storage::ClaimRequest::new(
        vec![jq::QueueName::new("durable-orders").unwrap()],
        1,
        std::time::Duration::from_secs(30),
        "test",
    )
}

/// A durable job's page shows its journal (each entry with its instant,
/// values escaped), the signal it waits for until when, and its signals not
/// taken yet; a plain job's page has no journal.
async fn job_page_shows_the_journal(backend: &str) {
    use jq::durable::{Record, Suspend, Suspended};
    use jq::storage::StorageExt;

    let (ns, client, jobs) = seeded(backend).await;
    let app = dashboard(&client, Options::new());
    let storage = client.storage();
    let (id, lease) = claimed_order(&client).await;
    let durable = storage.require_durable().unwrap();
    let result = jq::Payload::of(&"<b>ch_1</b>").unwrap();
    durable.checkpoint(lease, &Record::step(0, "charge", result)).await.unwrap();
    let until = jq::storage::add(client.clock().now(), std::time::Duration::from_secs(3_600));
    let wait = Suspend::Wait { index: 1, name: "approved".into(), until };
    assert_eq!(durable.suspend(lease, &wait).await.unwrap(), Suspended::Waiting);
    durable.signal(id, "other", &jq::Payload::of(&1).unwrap()).await.unwrap();

    let page = get(&app, &format!("/jobs/{id}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("id=\"journal\""), "{}", page.body);
    assert!(page.body.contains("step \"charge\"") || page.body.contains("step &quot;charge&quot;"), "{}", page.body);
    assert!(page.body.contains("&lt;b&gt;ch_1&lt;/b&gt;") && !page.body.contains("<b>ch_1"), "values escaped");
    assert!(page.body.contains("Waits for signal <code>approved</code>"), "{}", page.body);
    assert!(page.body.contains("Signals not taken yet: <code>other</code>"), "{}", page.body);
    let plain = get(&app, &format!("/jobs/{}", jobs.dead)).await;
    assert!(!plain.body.contains("id=\"journal\""), "a plain job has no journal");
    ns.cleanup().await;
}

/// `name=...&payload=...` of the signal form, `csrf` first when given.
fn signal_form(csrf: Option<&str>, name: &str, payload: &str) -> String {
    let encode =
        |text: &str| percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string();
    let token = csrf.map_or(String::new(), |t| format!("csrf={t}&"));
    format!("{token}name={}&payload={}", encode(name), encode(payload))
}

/// A waiting durable job's page has the signal form, its name the one
/// waited for; the form's POST wakes the job with the payload typed, and a
/// second run's wait takes it. Without the token, read-only, with a payload
/// that is not JSON or without a name nothing is sent; a finished job has
/// no form and refuses a signal with a page that says so, never a 500.
async fn signal_form_wakes_a_waiting_job(backend: &str) {
    use jq::durable::{Suspend, Suspended};
    use jq::storage::{Outcome, Storage, StorageExt};

    let (ns, client, jobs) = seeded(backend).await;
    let app = dashboard(&client, Options::new());
    let storage = client.storage();
    let durable = storage.require_durable().unwrap();
    let (id, lease) = claimed_order(&client).await;
    let until = jq::storage::add(client.clock().now(), std::time::Duration::from_secs(3_600));
    let wait = Suspend::Wait { index: 0, name: "approved".into(), until };
    assert_eq!(durable.suspend(lease, &wait).await.unwrap(), Suspended::Waiting);

    let page = get(&app, &format!("/jobs/{id}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("id=\"signal-form\""), "{}", page.body);
    assert!(page.body.contains(&format!("action=\"/jobs/{id}/signal\"")), "{}", page.body);
    assert!(page.body.contains("name=\"name\" value=\"approved\""), "the name waited for, filled in: {}", page.body);
    assert!(page.body.contains("data-confirm=\"Send this signal"), "it asks first");
    let token = csrf(&page.body);
    let to = format!("/jobs/{id}/signal");
    let approval = r#"{"by":"<ops>"}"#;

    let unsent = |reply: &support::Reply, status: u16, says: &str| {
        assert_eq!(reply.status, status, "{}", reply.body);
        assert!(reply.body.contains(says), "{says:?} not in {}", reply.body);
    };
    unsent(&post(&app, &to, &signal_form(None, "approved", approval)).await, 403, "CSRF token");
    unsent(&post(&app, &to, &signal_form(Some("guess"), "approved", approval)).await, 403, "CSRF token");
    let read_only = dashboard(&client, Options::new().read_only(true));
    let hidden = get(&read_only, &format!("/jobs/{id}")).await;
    assert!(hidden.body.contains("id=\"journal\"") && !hidden.body.contains("signal-form"), "{}", hidden.body);
    unsent(&post(&read_only, &to, &signal_form(Some(&token), "approved", approval)).await, 403, "read-only");
    unsent(&post(&app, &to, &signal_form(Some(&token), "approved", "{by: ops}")).await, 400, "payload is not JSON");
    unsent(&post(&app, &to, &signal_form(Some(&token), "  ", approval)).await, 400, "a signal needs a name");
    unsent(&post(&app, &to, &signal_form(Some(&token), "a\u{7}b", approval)).await, 400, "invalid signal name");
    let journal = client.journal(id).await.unwrap();
    assert!(journal.signals.is_empty() && journal.wait.is_some(), "nothing sent: {journal:?}");
    assert_eq!(state(&client, id).await, State::Scheduled);

    let sent = post(&app, &to, &signal_form(Some(&token), " approved ", approval)).await;
    assert_eq!(sent.status, 303, "{}", sent.body);
    assert_eq!(sent.location.as_deref(), Some(format!("/jobs/{id}?done=signalled").as_str()));
    assert_eq!(state(&client, id).await, State::Pending, "the waiting job wakes at once");
    let names: Vec<String> = client.journal(id).await.unwrap().signals.into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["approved"]);
    let shown = get(&app, sent.location.as_deref().unwrap()).await;
    assert!(shown.body.contains("Signal sent:"), "{}", shown.body);
    assert!(shown.body.contains("Signals not taken yet: <code>approved</code>"), "{}", shown.body);

    // The job's next run: its wait takes the payload as typed.
    let lease = storage.claim(&orders_claim()).await.unwrap().jobs[0].lease_ref().unwrap();
    let Suspended::Signal(payload) = durable.suspend(lease, &wait).await.unwrap() else { panic!("no signal taken") };
    assert_eq!(payload.decode::<serde_json::Value>().unwrap(), serde_json::json!({ "by": "<ops>" }));
    storage.settle_one(lease, Outcome::Ack).await.unwrap();

    let finished = get(&app, &format!("/jobs/{id}")).await;
    assert!(finished.body.contains("id=\"journal\"") && !finished.body.contains("signal-form"), "{}", finished.body);
    unsent(&post(&app, &to, &signal_form(Some(&token), "approved", "null")).await, 409, "cannot signal");
    let plain = format!("/jobs/{}/signal", jobs.completed);
    unsent(&post(&app, &plain, &signal_form(Some(&token), "approved", "")).await, 409, "cannot signal");
    let unknown = "/jobs/0190a1b2-0000-7000-8000-000000000000/signal";
    unsent(&post(&app, unknown, &signal_form(Some(&token), "approved", "")).await, 404, "not found");
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
    pages_show_the_store_escaped,
    actions_act_and_forgeries_do_not,
    read_only_and_token,
    nested_links_keep_the_prefix,
    overview_counts_the_last_hour,
    job_page_shows_the_journal,
    signal_form_wakes_a_waiting_job,
);

mod keyed {
    #[tokio::test]
    async fn sqlite() {
        super::keys_show_on_the_queues_page("sqlite").await
    }
    #[tokio::test]
    async fn postgres() {
        jq_testkit::needs!(postgres);
        super::keys_show_on_the_queues_page("postgres").await
    }
    #[tokio::test]
    async fn redis() {
        jq_testkit::needs!(redis);
        super::keys_show_on_the_queues_page("redis").await
    }
}

mod workflows {
    #[tokio::test]
    async fn sqlite() {
        super::workflow_page_draws_the_graph("sqlite").await
    }
    #[tokio::test]
    async fn postgres() {
        jq_testkit::needs!(postgres);
        super::workflow_page_draws_the_graph("postgres").await
    }
}
