//! The web example, served for real on a loopback port, on SQLite and
//! PostgreSQL: after a mix of committed and rolled-back requests there is
//! exactly one job per committed order and none for the others, and every
//! job ran. A real SIGTERM drains it: nothing is left running, and what it
//! handed back runs after a restart.

#![allow(clippy::unwrap_used)] // tests may unwrap

#[path = "../examples/web.rs"]
#[allow(dead_code)] // its `main` is the example's, not the test's
mod web;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use jq::{Client, JobFilter, State};
use tokio::sync::oneshot;
use web::{Db, Item, NewOrder, Order, SendReceipt};

const PATIENCE: Duration = Duration::from_secs(20);

/// One HTTP/1.1 request on a fresh connection: the status and the body.
async fn request(addr: SocketAddr, method: &str, path: &str, body: Option<String>) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .unwrap();
    let res = sender.send_request(req).await.unwrap();
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn post_order(addr: SocketAddr, customer: &str, qty: i64) -> (u16, String) {
    let order = NewOrder { customer: customer.into(), items: vec![Item { sku: "book".into(), qty }] };
    request(addr, "POST", "/orders", Some(serde_json::to_string(&order).unwrap())).await
}

/// The example's server and workers on a loopback port; stopped by the
/// returned sender.
async fn start(client: &Client, db: &Db) -> (SocketAddr, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(web::serve(listener, client.clone(), db.clone(), async {
        stopped.await.ok();
    }));
    (addr, stop, tokio::spawn(async move { server.await.unwrap().unwrap() }))
}

/// Every job of the store, by the order it is for.
async fn jobs_by_order(client: &Client) -> Vec<(i64, State)> {
    let jobs = client.list(&JobFilter { limit: 1_000, ..Default::default() }).await.unwrap();
    let mut out = Vec::new();
    for job in jobs {
        assert_eq!(job.kind, "send_receipt");
        out.push((job.payload.decode::<SendReceipt>().unwrap().order, job.state));
    }
    out.sort();
    out
}

/// Ten orders, every third (0, 3, 6, 9) with an item the database refuses:
/// six commits, four rollbacks (each after its job was enqueued).
async fn jobs_match_committed_rows(client: Client) {
    let db = Db::open(&client).await.unwrap();
    let (addr, stop, server) = start(&client, &db).await;
    let mut created = BTreeSet::new();
    for i in 0..10 {
        let qty = if i % 3 == 0 { 0 } else { 1 };
        let (status, body) = post_order(addr, &format!("customer {i}"), qty).await;
        if qty == 0 {
            assert_eq!(status, 422, "{body}");
        } else {
            assert_eq!(status, 201, "{body}");
            let order: Order = serde_json::from_str(&body).unwrap();
            assert!(order.job.is_some());
            created.insert(order.id);
        }
    }
    // The workers in the same process send every receipt.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    for id in &created {
        loop {
            let (status, body) = request(addr, "GET", &format!("/orders/{id}"), None).await;
            assert_eq!(status, 200, "{body}");
            if serde_json::from_str::<Order>(&body).unwrap().receipt_sent {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "order {id}: no receipt within {PATIENCE:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    stop.send(()).unwrap();
    server.await.unwrap();

    let rows: Vec<i64> = db.order_ids().await.unwrap();
    assert_eq!(rows.len(), 6);
    assert_eq!(rows.iter().copied().collect::<BTreeSet<_>>(), created, "rows are the 201 answers");
    let jobs = jobs_by_order(&client).await;
    assert_eq!(jobs, rows.iter().map(|id| (*id, State::Completed)).collect::<Vec<_>>(), "one job per committed row");
}

fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("web.db").display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_jobs_match_committed_rows() {
    let dir = tempfile::tempdir().unwrap();
    jobs_match_committed_rows(jq::connect(&sqlite_url(&dir)).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_jobs_match_committed_rows() {
    let Some(base) = jq_testkit::services::postgres() else { return };
    let schema = format!("jq_web_{}", uuid::Uuid::new_v4().simple());
    let client = jq::connect(&format!("{base}?schema={schema}"))
        .await
        .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at {base}: {e}; run scripts/start-services.sh"));
    client.migrate().await.unwrap();
    jobs_match_committed_rows(client.clone()).await;
    let pg = client.storage().as_postgres().unwrap();
    let drop = format!("DROP SCHEMA \"{schema}\" CASCADE");
    jq::postgres::sqlx::raw_sql(jq::postgres::sqlx::AssertSqlSafe(drop)).execute(pg.pool()).await.unwrap();
}

/// A real SIGTERM to this process ends `serve` (the example's own signal
/// handling): it returns only after the pool has shut down, with no job
/// left Running; a job handed back at shutdown runs once served again.
/// The only test here that touches SIGTERM: the handler is installed before
/// the signal is sent, so the signal cannot end the test process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let client = jq::connect(&sqlite_url(&dir)).await.unwrap();
    let db = Db::open(&client).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(web::serve(listener, client.clone(), db.clone(), web::shutdown_signal().unwrap()));
    for i in 0..5 {
        assert_eq!(post_order(addr, &format!("customer {i}"), 1).await.0, 201);
    }
    nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGTERM).unwrap();
    tokio::time::timeout(PATIENCE, server).await.expect("serve did not return after SIGTERM").unwrap().unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "the port is closed");
    let states: Vec<State> = jobs_by_order(&client).await.into_iter().map(|(_, s)| s).collect();
    assert_eq!(states.len(), 5);
    assert!(states.iter().all(|s| matches!(s, State::Completed | State::Pending)), "none left running: {states:?}");

    // Served again, whatever was handed back runs.
    let (_addr, stop, server) = start(&client, &db).await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while jobs_by_order(&client).await.iter().any(|(_, s)| *s != State::Completed) {
        assert!(tokio::time::Instant::now() < deadline, "jobs handed back at shutdown did not run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.send(()).unwrap();
    server.await.unwrap();
    assert_eq!(db.order_ids().await.unwrap().len(), 5);
}
