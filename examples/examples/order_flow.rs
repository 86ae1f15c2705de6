//! An order as a durable job, approved by a manager over the HTTP API.
//!
//! ```text
//! cargo run -p examples --example order_flow
//! ```
//!
//! Each order reserves its stock (step "reserve"), charges the customer
//! (step "charge"), then waits for a manager's `approved` signal: approved,
//! it ships (step "ship"); not approved within its window, it refunds the
//! charge and puts the stock back (step "refund"). While it waits the job
//! holds no worker slot; its steps never run twice, whichever worker runs
//! it again.
//!
//! The example runs a worker pool and the HTTP API (behind a bearer token)
//! on a loopback port, over SQLite in a fresh temporary directory, so it
//! runs anywhere. It enqueues two orders, sends the first one's approval as
//! a manager's tool would, `POST /api/v1/jobs/{id}/signal` over a real HTTP
//! connection, lets the second one's window pass, and prints what became of
//! each. It exits non-zero when either did not end as promised, in a few
//! seconds; `tests/order_flow.rs` runs this file's `run`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use jq::{Client, DurableContext, HandlerError, HandlerResult, JobId, JobType, State, Waited};
use serde::{Deserialize, Serialize};

/// What `main` and the test return on failure.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The API's token: a manager's tool sends it as a bearer token.
const TOKEN: &str = "order-flow-example";

/// How long `run` waits for anything (the server, a job to finish) before
/// it calls the run a failure.
const PATIENCE: Duration = Duration::from_secs(20);

/// An order: what it takes from stock, what it charges, and how long a
/// manager has to approve it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Order {
    /// The order's number.
    pub id: u64,
    /// How many items it takes from stock.
    pub qty: u32,
    /// What it charges, in cents.
    pub cents: u64,
    /// How long its wait for the approval lasts, in milliseconds.
    pub approval_window_ms: u64,
}

impl JobType for Order {
    const KIND: &'static str = "order";
    const QUEUE: &'static str = "orders";
}

/// The `approved` signal's payload: who approved.
#[derive(Debug, Serialize, Deserialize)]
pub struct Approval {
    /// The manager's name.
    pub by: String,
}

/// What became of an order: its job's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Approved in time: shipped.
    Shipped {
        /// The charge the order made.
        charge: String,
        /// Who approved it.
        approved_by: String,
    },
    /// No approval in its window: the charge refunded, the stock back.
    Refunded {
        /// The charge refunded.
        charge: String,
    },
}

/// The shop's books, which the steps change: the effects a durable job
/// must make once each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Books {
    /// Items in stock.
    pub stock: u32,
    /// Every charge made, by order number.
    pub charged: Vec<u64>,
    /// Every order shipped.
    pub shipped: Vec<u64>,
    /// Every order refunded.
    pub refunded: Vec<u64>,
}

/// The shop the handler works on, shared with `run` to read its books.
#[derive(Debug, Default)]
pub struct Shop(Mutex<Books>);

impl Shop {
    /// A shop with `stock` items.
    pub fn with_stock(stock: u32) -> Self {
        Shop(Mutex::new(Books { stock, ..Books::default() }))
    }

    /// The books as they are now.
    pub fn books(&self) -> Books {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Books> {
        // A panic elsewhere while holding it left the books whole: each
        // change below is one statement.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn reserve(&self, order: &Order) -> Result<String, HandlerError> {
        let mut books = self.lock();
        let Some(left) = books.stock.checked_sub(order.qty) else {
            // No retry brings stock back: the order fails for good.
            return Err(HandlerError::bury(format!(
                "order {}: {} wanted, {} in stock",
                order.id, order.qty, books.stock
            )));
        };
        books.stock = left;
        Ok(format!("res_{}", order.id))
    }

    fn charge(&self, order: &Order) -> String {
        self.lock().charged.push(order.id);
        format!("ch_{}_{}", order.id, order.cents)
    }

    fn ship(&self, order: &Order) {
        self.lock().shipped.push(order.id);
    }

    fn refund(&self, order: &Order) {
        let mut books = self.lock();
        books.refunded.push(order.id);
        books.stock += order.qty;
    }
}

/// The durable handler: reserve, charge, wait for the approval, then ship
/// or refund. Each step's body runs once; a later run of the job (after
/// the wait, a crash, a retry) gets its recorded result back.
async fn order_flow(shop: Arc<Shop>, order: Order, ctx: DurableContext) -> HandlerResult {
    // The bodies print: each runs once, while the run after the wait
    // gets their results back from the journal without a word.
    let reservation: String = ctx
        .step("reserve", async {
            let reservation = shop.reserve(&order)?;
            println!("  [order {}] reserved {} item(s): {reservation}", order.id, order.qty);
            Ok::<_, HandlerError>(reservation)
        })
        .await?;
    let charge: String = ctx
        .step("charge", async {
            let charge = shop.charge(&order);
            println!("  [order {}] charged {} cents: {charge}", order.id, order.cents);
            Ok::<_, HandlerError>(charge)
        })
        .await?;
    // The run ends here until the signal comes or the window passes.
    let window = Duration::from_millis(order.approval_window_ms);
    let outcome = match ctx.wait_for::<Approval>("approved", window).await? {
        Waited::Signal(approval) => {
            ctx.step("ship", async {
                shop.ship(&order);
                Ok::<_, HandlerError>(())
            })
            .await?;
            println!("  [order {}] approved by {}: shipped ({reservation})", order.id, approval.by);
            Outcome::Shipped { charge, approved_by: approval.by }
        }
        Waited::TimedOut => {
            ctx.step("refund", async {
                shop.refund(&order);
                Ok::<_, HandlerError>(())
            })
            .await?;
            println!("  [order {}] no approval within {window:?}: refunded {charge}, {reservation} released", order.id);
            Outcome::Refunded { charge }
        }
    };
    ctx.set_result(&outcome)?;
    Ok(())
}

/// What `run` saw: each order's outcome and journal, and the books after.
#[derive(Debug)]
pub struct Report {
    /// The approved order's outcome.
    pub approved: Outcome,
    /// The approved order's journal, entry by entry (`step "reserve"`, ...).
    pub approved_journal: Vec<String>,
    /// The order left without approval: its outcome.
    pub unapproved: Outcome,
    /// Its journal.
    pub unapproved_journal: Vec<String>,
    /// The books once both finished, the charges by order number.
    pub books: Books,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();

    let dir = tempfile::tempdir()?;
    let client = jq::connect(&format!("sqlite://{}", dir.path().join("orders.db").display())).await?;
    let report = run(&client).await?;
    println!("order 1: {:?}\n  journal: {}", report.approved, report.approved_journal.join(", "));
    println!("order 2: {:?}\n  journal: {}", report.unapproved, report.unapproved_journal.join(", "));
    println!("books: {:?}", report.books);
    Ok(())
}

/// Runs both orders on `client`'s store with a pool and the HTTP API of
/// this process; an error unless the first ships approved by the signal
/// sent over HTTP and the second refunds, with the books to match.
pub async fn run(client: &Client) -> Result<Report, BoxError> {
    let shop = Arc::new(Shop::with_stock(10));
    let handler_shop = shop.clone();
    let pool = client
        .worker_pool()
        .register_durable(move |order: Order, ctx| order_flow(handler_shop.clone(), order, ctx))
        .start()?;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let options = jq_dashboard::api::ApiOptions::new(jq_dashboard::Options::new().token(TOKEN)?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        axum::serve(listener, jq_dashboard::api::router(client.clone(), options))
            .with_graceful_shutdown(async {
                stopped.await.ok();
            })
            .into_future(),
    );

    let first = client.enqueue(Order { id: 1, qty: 2, cents: 1_250, approval_window_ms: 30_000 }).await?;
    let second = client.enqueue(Order { id: 2, qty: 3, cents: 4_200, approval_window_ms: 500 }).await?;
    println!("enqueued order 1 (job {first}) and order 2 (job {second})");

    // The manager approves once the order asks for it; a signal sent
    // earlier would be kept for the wait just the same.
    waiting_for_approval(client, first).await?;
    let body = serde_json::json!({ "name": "approved", "payload": { "by": "manager" } }).to_string();
    let (status, answer) = post(addr, &format!("/api/v1/jobs/{first}/signal"), body).await?;
    println!("POST /api/v1/jobs/{first}/signal: {status}");
    if status != 202 {
        return Err(format!("the signal was refused with {status}: {answer}").into());
    }

    let approved = finished(client, first).await?;
    let unapproved = finished(client, second).await?;
    stop.send(()).ok();
    server.await??;
    pool.shutdown().await?;

    // The orders finish in either order: the charges, by order number.
    let mut books = shop.books();
    books.charged.sort_unstable();
    let report = Report {
        approved: approved.0,
        approved_journal: approved.1,
        unapproved: unapproved.0,
        unapproved_journal: unapproved.1,
        books,
    };
    check(&report)?;
    Ok(report)
}

/// Waits until job `id` waits for its `approved` signal.
async fn waiting_for_approval(client: &Client, id: JobId) -> Result<(), BoxError> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if client.journal(id).await?.wait.is_some_and(|w| w.name == "approved") {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("job {id} did not wait for its approval within {PATIENCE:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for job `id` to finish; its outcome and journal once Completed,
/// an error naming its state and errors otherwise.
async fn finished(client: &Client, id: JobId) -> Result<(Outcome, Vec<String>), BoxError> {
    let job = client.wait(id, PATIENCE).await?;
    if job.state != State::Completed {
        let errors: Vec<&str> = job.errors.iter().map(|e| e.message.as_str()).collect();
        return Err(format!("job {id} ended {} ({errors:?})", job.state).into());
    }
    let outcome = client.result_as::<Outcome>(id).await?.ok_or_else(|| format!("job {id} completed without result"))?;
    let journal = client.journal(id).await?.entries.iter().map(|e| e.describe()).collect();
    Ok((outcome, journal))
}

/// One `POST` of a JSON body with the API's token, on a fresh HTTP/1.1
/// connection: the status and the body.
async fn post(addr: SocketAddr, path: &str, body: String) -> Result<(u16, String), BoxError> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    // Drives the connection until the exchange is over; its own error
    // surfaces as send_request's.
    tokio::spawn(connection);
    let request = hyper::Request::post(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Full::new(Bytes::from(body)))?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The promise: order 1 shipped, approved by the manager; order 2 refunded;
/// each step ran once; the stock holds what order 1 took, no more.
fn check(report: &Report) -> Result<(), BoxError> {
    let shipped = Outcome::Shipped { charge: "ch_1_1250".into(), approved_by: "manager".into() };
    let refunded = Outcome::Refunded { charge: "ch_2_4200".into() };
    let books = Books { stock: 8, charged: vec![1, 2], shipped: vec![1], refunded: vec![2] };
    if report.approved != shipped || report.unapproved != refunded || report.books != books {
        return Err(format!("expected {shipped:?}, {refunded:?} and {books:?}; got {report:?}").into());
    }
    Ok(())
}
