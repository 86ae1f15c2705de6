//! The dashboard in a real browser: Debian's headless Chromium driven
//! through chromedriver (WebDriver). Installed by scripts/start-services.sh;
//! without them these tests skip, saying so once, or fail under
//! `JQ_REQUIRE_SERVICES=1` (`jq_testkit::services::chromium`).
//!
//! With `JQ_DASHBOARD_SCREENSHOTS=DIR` the SQLite run saves a screenshot of
//! each page there (how docs/dashboard-*.png were made).

#![cfg(all(feature = "sqlite", feature = "postgres", feature = "redis"))]
#![allow(clippy::unwrap_used)] // tests may unwrap

#[path = "../../jq/tests/common/mod.rs"]
mod common;
mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client as Browser, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use jq::{NewJob, Payload, State};
use jq_dashboard::Options;
use support::{HOSTILE, dashboard, seeded, state};
use tokio::process::{Child, Command};

/// A chromedriver process and a headless Chromium session on it.
struct Driver {
    browser: Browser,
    _chromedriver: Child,
}

impl Driver {
    /// Called after `needs!(chromium)`: the programs are there.
    async fn start() -> Driver {
        let programs = jq_testkit::services::chromium().expect("the test checked needs!(chromium)");
        let port = free_port();
        let chromedriver = Command::new(&programs.driver)
            .arg(format!("--port={port}"))
            // Its own process group, so that a failed test's browser goes
            // with it (see Drop).
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} ({e})", programs.driver.display()));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            serde_json::json!({
                "binary": programs.browser,
                // Root in a container has no sandbox; /dev/shm is small there.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let mut last = None;
        for _ in 0..100 {
            match ClientBuilder::new(HttpConnector::new()).capabilities(capabilities.clone()).connect(&url).await {
                Ok(browser) => return Driver { browser, _chromedriver: chromedriver },
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromedriver on {url} gave no browser session: {last:?}");
    }

    async fn close(self) {
        self.browser.clone().close().await.unwrap();
    }
}

impl Drop for Driver {
    /// chromedriver leaves its browsers behind when it is killed: a test
    /// that panics would leave a Chromium running. Kill the whole group.
    fn drop(&mut self) {
        if let Some(pid) = self._chromedriver.id().and_then(|id| i32::try_from(id).ok()) {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Serves `app` on a loopback port of this runtime.
async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    address
}

/// Where screenshots go, when asked for.
fn screenshots() -> Option<PathBuf> {
    std::env::var_os("JQ_DASHBOARD_SCREENSHOTS").map(PathBuf::from)
}

async fn shoot(browser: &Browser, name: &str) {
    if let Some(dir) = screenshots() {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("dashboard-{name}.png")), browser.screenshot().await.unwrap()).unwrap();
    }
}

/// Load the overview, follow the dead count to the dead job, see its
/// hostile payload as inert text, retry it (confirming) and see it pending;
/// then a read-only dashboard refuses a forged POST, and a POST from
/// another origin without the token is refused by the writable one.
async fn operator_retries_a_dead_job(backend: &str) {
    let (ns, client, jobs) = seeded(backend).await;
    let writable = serve(dashboard(&client, Options::new())).await;
    let read_only = serve(dashboard(&client, Options::new().read_only(true))).await;
    let driver = Driver::start().await;
    let b = &driver.browser;

    b.goto(&format!("http://{writable}/")).await.unwrap();
    let row = b.find(Locator::Css("tr[data-queue=reports]")).await.unwrap();
    assert!(row.text().await.unwrap().contains("reports"));
    row.find(Locator::Css("a[href*='state=dead']")).await.unwrap().click().await.unwrap();
    let link = b.wait().for_element(Locator::Css(&format!("tr[data-job='{}'] a", jobs.dead))).await.unwrap();
    link.click().await.unwrap();

    let payload = b.wait().for_element(Locator::Id("payload")).await.unwrap();
    let shown = payload.text().await.unwrap();
    assert!(shown.contains("<script>window.__pwned = 1</script>"), "the payload is shown as text: {shown}");
    assert!(HOSTILE.contains("onerror"));
    let pwned = b.execute("return window.__pwned === undefined", vec![]).await.unwrap();
    assert_eq!(pwned, serde_json::Value::Bool(true), "no script from the payload ran");
    assert_eq!(b.find(Locator::Id("job-state")).await.unwrap().text().await.unwrap(), "dead");

    b.find(Locator::Css("form[action$='/retry'] button")).await.unwrap().click().await.unwrap();
    let question = b.get_alert_text().await.unwrap();
    assert!(question.starts_with("Retry job"), "{question}");
    b.accept_alert().await.unwrap();
    b.wait().for_element(Locator::Css(".notice")).await.unwrap();
    assert_eq!(b.find(Locator::Id("job-state")).await.unwrap().text().await.unwrap(), "pending");
    assert!(b.find(Locator::Css(".notice")).await.unwrap().text().await.unwrap().starts_with("Retried"));
    assert_eq!(state(&client, jobs.dead).await, State::Pending);

    // Read-only: no form at all, and a POST made by hand is refused.
    b.goto(&format!("http://{read_only}/jobs/{}", jobs.pending)).await.unwrap();
    assert!(b.find_all(Locator::Css("form[method=post]")).await.unwrap().is_empty());
    let status = b
        .execute_async(
            "const done = arguments[arguments.length - 1];
             fetch(arguments[0], { method: 'POST', headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: 'csrf=x' })
               .then(r => done(r.status), e => done(String(e)));",
            vec![serde_json::json!(format!("/jobs/{}/cancel", jobs.pending))],
        )
        .await
        .unwrap();
    assert_eq!(status, serde_json::json!(403));

    // From a page of no origin of ours (an attacker's), a form aimed at the
    // writable dashboard: the browser sends it, the dashboard refuses it.
    b.goto("about:blank").await.unwrap();
    b.execute(
        "const f = document.createElement('form'); f.method = 'POST'; f.action = arguments[0];
         const i = document.createElement('input'); i.name = 'csrf'; i.value = 'guess'; f.appendChild(i);
         document.body.appendChild(f); f.submit();",
        vec![serde_json::json!(format!("http://{writable}/jobs/{}/cancel", jobs.pending))],
    )
    .await
    .unwrap();
    b.wait().for_element(Locator::Css("p.error[role=alert]")).await.unwrap();
    assert_eq!(state(&client, jobs.pending).await, State::Pending, "the forged POST changed nothing");

    driver.close().await;
    ns.cleanup().await;
}

/// A worker pool runs a job that reports progress and waits; the operator
/// opens its page, sees the progress, presses Cancel (confirming), is told
/// the worker stops it, and the job ends Cancelled, not retried.
async fn operator_cancels_a_running_job(backend: &str) {
    let (ns, client, _) = seeded(backend).await;
    let id = client
        .enqueue(NewJob::builder("export", Payload::of(&serde_json::json!({"rows": 9})).unwrap()).queue("exports"))
        .await
        .unwrap();
    let pool = client
        .worker_pool()
        .queues(["exports"])
        .maintenance(false)
        .register_raw("export", |_job: jq::Job, ctx: jq::JobContext| async move {
            ctx.progress(&serde_json::json!({"percent": 40, "message": "step 2 of 5"}))?;
            ctx.cancellation().cancelled().await;
            Err(jq::HandlerError::nack("stopped"))
        })
        .start()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while client.get(id).await.unwrap().progress.is_none() {
        assert!(std::time::Instant::now() < deadline, "the running job's progress was never stored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let writable = serve(dashboard(&client, Options::new())).await;
    let driver = Driver::start().await;
    let b = &driver.browser;

    b.goto(&format!("http://{writable}/jobs/{id}")).await.unwrap();
    assert_eq!(b.find(Locator::Id("job-state")).await.unwrap().text().await.unwrap(), "running");
    let progress = b.find(Locator::Id("job-progress")).await.unwrap().text().await.unwrap();
    assert!(progress.contains("step 2 of 5"), "the progress is shown: {progress}");
    b.find(Locator::Css("form[action$='/cancel'] button")).await.unwrap().click().await.unwrap();
    let question = b.get_alert_text().await.unwrap();
    assert!(question.starts_with("Cancel running job"), "{question}");
    b.accept_alert().await.unwrap();
    let notice = b.wait().for_element(Locator::Css(".notice")).await.unwrap().text().await.unwrap();
    assert!(notice.starts_with("Cancel requested"), "{notice}");

    while state(&client, id).await != State::Cancelled {
        assert!(std::time::Instant::now() < deadline + Duration::from_secs(30), "the job was never cancelled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.goto(&format!("http://{writable}/jobs/{id}")).await.unwrap();
    assert_eq!(b.find(Locator::Id("job-state")).await.unwrap().text().await.unwrap(), "cancelled");
    assert!(b.find(Locator::Id("job-cancel-requested")).await.unwrap().text().await.unwrap().contains("dashboard"));
    assert!(b.find_all(Locator::Css("form[action$='/cancel']")).await.unwrap().is_empty(), "nothing left to cancel");
    let job = client.get(id).await.unwrap();
    assert_eq!((job.attempts, job.errors.len()), (1, 0), "not retried, no failure recorded");

    pool.shutdown().await.unwrap();
    driver.close().await;
    ns.cleanup().await;
}

/// The overview refreshes itself and the pause control stops it.
async fn overview_refreshes_until_paused(backend: &str) {
    let (ns, client, _) = seeded(backend).await;
    let app = serve(dashboard(&client, Options::new().refresh_every(Duration::from_secs(1)))).await;
    let driver = Driver::start().await;
    let b = &driver.browser;
    b.goto(&format!("http://{app}/")).await.unwrap();
    // Columns: the queue, then one per state in State::ALL order (waiting,
    // scheduled, pending, ...): the pending count is the fourth cell.
    let count = |b: &Browser| {
        let b = b.clone();
        async move {
            let cell = b.find(Locator::Css("tr[data-queue=mailers] td:nth-child(4)")).await.unwrap();
            cell.text().await.unwrap()
        }
    };
    assert_eq!(count(b).await, "2", "two pending mailers");
    support::seed_one_pending(&client, "mailers").await;
    b.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath("//tr[@data-queue='mailers']/td[4][normalize-space()='3']"))
        .await
        .unwrap();

    toggle_refresh(b).await;
    assert_eq!(b.find(Locator::Id("refresh-toggle")).await.unwrap().text().await.unwrap(), "Resume auto-refresh");
    support::seed_one_pending(&client, "mailers").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(count(b).await, "3", "paused: the page kept its figures");
    toggle_refresh(b).await;
    b.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath("//tr[@data-queue='mailers']/td[4][normalize-space()='4']"))
        .await
        .unwrap();
    driver.close().await;
    ns.cleanup().await;
}

/// A store with an hour of history as a browser shows it: the chart has a
/// bar per busy minute and its totals, the pages render whole (and are what
/// docs/dashboard-*.png show).
#[tokio::test]
async fn a_busy_store_in_the_browser() {
    jq_testkit::needs!(chromium);
    let (ns, client, busy) = support::busy("sqlite").await;
    let app = serve(dashboard(&client, Options::new())).await;
    let driver = Driver::start().await;
    let b = &driver.browser;
    b.goto(&format!("http://{app}/")).await.unwrap();
    let completed = b.find(Locator::Id("completed-hour")).await.unwrap().text().await.unwrap();
    assert_eq!(completed, busy.completed.to_string());
    assert!(b.find_all(Locator::Css("figure.chart rect.ok")).await.unwrap().len() >= 45);
    shoot(b, "overview").await;
    b.goto(&format!("http://{app}/jobs?queue=mailers")).await.unwrap();
    assert_eq!(b.find_all(Locator::Css("tr[data-job]")).await.unwrap().len(), 50, "a page of 50");
    shoot(b, "jobs").await;
    b.goto(&format!("http://{app}/jobs?queue=reports&state=dead")).await.unwrap();
    b.find(Locator::Css("tr[data-job] a")).await.unwrap().click().await.unwrap();
    b.wait().for_element(Locator::Id("payload")).await.unwrap();
    shoot(b, "job").await;
    driver.close().await;
    ns.cleanup().await;
}

/// A fan-out and its callback part done: `fetch` completed with a result,
/// `resize` completed with a result after it, `scan` running, `notify`
/// waiting for both. The workflow page draws the graph (each step a node
/// coloured by its state, an edge per parent) and its counts; a click on a
/// node opens the step's job page, with its parents, children and result.
async fn operator_follows_a_workflow(backend: &str) {
    use jq::storage::{ClaimRequest, Outcome, Settlement, Storage};
    use jq::workflow::{Step, Workflow};

    let (ns, client, _) = seeded(backend).await;
    let job = |kind: &str| NewJob::builder(kind, Payload::of(&serde_json::json!({})).unwrap()).queue("media");
    let stored = client
        .enqueue_workflow(
            Workflow::new()
                .step(Step::new("fetch", job("fetch").build().unwrap()))
                .step(Step::new("resize", job("resize").build().unwrap()).after(["fetch"]))
                .step(Step::new("scan", job("scan").build().unwrap()).after(["fetch"]))
                .step(Step::new("notify", job("notify").build().unwrap()).after(["resize", "scan"])),
        )
        .await
        .unwrap();
    let id = |name: &str| stored.job(name).unwrap();
    let storage = client.storage();
    let request = ClaimRequest::new(vec![jq::QueueName::new("media").unwrap()], 10, Duration::from_secs(300), "w");
    let ack = |job: &jq::Job, value: serde_json::Value| Settlement {
        lease: job.lease_ref().unwrap(),
        outcome: Outcome::AckWith { result: Payload::of(&value).unwrap() },
    };
    let fetch = storage.claim(&request).await.unwrap().jobs;
    assert_eq!(fetch.iter().map(|j| j.id).collect::<Vec<_>>(), vec![id("fetch")]);
    storage.settle(vec![ack(&fetch[0], serde_json::json!({"bytes": 5120}))]).await.unwrap();
    let running = storage.claim(&request).await.unwrap().jobs;
    assert_eq!(running.len(), 2, "resize and scan");
    let resize = running.iter().find(|j| j.id == id("resize")).unwrap();
    storage.settle(vec![ack(resize, serde_json::json!({"thumbnail": "cat-small.png"}))]).await.unwrap();

    let app = serve(dashboard(&client, Options::new())).await;
    let driver = Driver::start().await;
    let b = &driver.browser;
    b.goto(&format!("http://{app}/workflows/{}", stored.id)).await.unwrap();
    let graph = b.wait().for_element(Locator::Css("#workflow-graph svg")).await.unwrap();
    let nodes = graph.find_all(Locator::Css("g.step")).await.unwrap();
    assert_eq!(nodes.len(), 4, "a node per step");
    let mut drawn = Vec::new();
    for node in &nodes {
        let name = node.find(Locator::Css("text")).await.unwrap().text().await.unwrap();
        let state = node.attr("data-state").await.unwrap().unwrap();
        let fill = node.find(Locator::Css("rect")).await.unwrap().attr("fill").await.unwrap().unwrap();
        drawn.push((name, state, fill));
    }
    drawn.sort();
    let expected = [
        ("fetch", "completed", "#2f9e6b"),
        ("notify", "waiting", "#9aa3af"),
        ("resize", "completed", "#2f9e6b"),
        ("scan", "running", "#3056d3"),
    ];
    let expected: Vec<(String, String, String)> =
        expected.iter().map(|(n, s, f)| (n.to_string(), s.to_string(), f.to_string())).collect();
    assert_eq!(drawn, expected, "each step drawn with its name, state and the state's colour");
    assert_eq!(graph.find_all(Locator::Css("line.edge")).await.unwrap().len(), 4, "an edge per parent");
    let counts = b.find(Locator::Id("workflow-counts")).await.unwrap().text().await.unwrap();
    for shown in ["waiting 1", "running 1", "completed 2"] {
        assert!(counts.contains(shown), "the counts show {shown}: {counts}");
    }
    // A rendered node is clickable: the browser follows the SVG link.
    let node = b
        .find(Locator::XPath(
            "//*[local-name()='g'][@class='step'][.//*[local-name()='text'][normalize-space()='resize']]",
        ))
        .await
        .unwrap();
    node.click().await.unwrap();
    let state_shown = b.wait().for_element(Locator::Id("job-state")).await.unwrap().text().await.unwrap();
    assert_eq!(state_shown, "completed");
    assert!(b.current_url().await.unwrap().path().ends_with(&format!("/jobs/{}", id("resize"))));
    let parents = b.find(Locator::Id("job-parents")).await.unwrap().text().await.unwrap();
    assert!(parents.contains(&id("fetch").to_string()), "the parent is named: {parents}");
    let children = b.find(Locator::Id("job-children")).await.unwrap().text().await.unwrap();
    assert!(children.contains(&id("notify").to_string()), "the child is named: {children}");
    let result = b.find(Locator::Id("job-result")).await.unwrap().text().await.unwrap();
    assert!(result.contains("cat-small.png"), "the result is shown: {result}");
    // And back to the workflow from the job page.
    b.find(Locator::Css(&format!("#job-links a[href$='/workflows/{}']", stored.id)))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait().for_element(Locator::Css("#workflow-graph svg")).await.unwrap();
    shoot(b, "workflow").await;

    driver.close().await;
    ns.cleanup().await;
}

/// Clicks the refresh toggle; a refresh may replace the button between
/// finding and clicking it, so a stale one is found again.
async fn toggle_refresh(b: &Browser) {
    for _ in 0..5 {
        let button = b.find(Locator::Id("refresh-toggle")).await.unwrap();
        match button.click().await {
            Ok(()) => return,
            Err(e) if e.to_string().contains("stale") => continue,
            Err(e) => panic!("click the refresh toggle: {e}"),
        }
    }
    panic!("the refresh toggle kept going stale");
}

macro_rules! on_every_backend {
    ($($test:ident),* $(,)?) => {
        mod sqlite { $( #[tokio::test] async fn $test() { jq_testkit::needs!(chromium); super::$test("sqlite").await } )* }
        mod postgres {
            $( #[tokio::test] async fn $test() { jq_testkit::needs!(chromium, postgres); super::$test("postgres").await } )*
        }
        mod redis { $( #[tokio::test] async fn $test() { jq_testkit::needs!(chromium, redis); super::$test("redis").await } )* }
    };
}

on_every_backend!(operator_retries_a_dead_job, overview_refreshes_until_paused, operator_cancels_a_running_job);

/// On the backends that keep workflows.
mod workflows {
    #[tokio::test]
    async fn sqlite_operator_follows_a_workflow() {
        jq_testkit::needs!(chromium);
        super::operator_follows_a_workflow("sqlite").await
    }

    #[tokio::test]
    async fn postgres_operator_follows_a_workflow() {
        jq_testkit::needs!(chromium, postgres);
        super::operator_follows_a_workflow("postgres").await
    }
}
