//! A web service on axum that enqueues jobs in the same transaction as its
//! own rows, runs the workers in the same process, and drains gracefully on
//! SIGTERM (or ctrl-c).
//!
//! ```text
//! cargo run -p examples --example web -- sqlite://jq-web.db
//! cargo run -p examples --example web -- 'postgres://postgres@127.0.0.1:5432/postgres?schema=jq_web'
//!
//! curl -i localhost:3000/orders -H 'content-type: application/json' \
//!      -d '{"customer": "ada", "items": [{"sku": "book", "qty": 2}]}'      # 201: the order and its job
//! curl -i localhost:3000/orders -H 'content-type: application/json' \
//!      -d '{"customer": "bob", "items": [{"sku": "pen", "qty": 0}]}'       # 422: rolled back, no job
//! curl -i localhost:3000/orders/1                                         # receipt_sent: true once the job ran
//! ```
//!
//! `POST /orders` inserts the order, enqueues its `SendReceipt` job with
//! `client.enqueue_tx` (the same call on both backends), then inserts the
//! items, in one transaction. An item the database refuses (`qty` must be
//! positive) rolls the whole transaction back: the order, its items and the
//! job already enqueued. The workers are woken by the commit, never by a
//! rollback.
//!
//! On PostgreSQL the example's tables sit in the schema the URL names, next
//! to jq's, so one URL names everything (an application would keep its
//! own); on SQLite they sit in the same file. A second argument sets the
//! address (default `127.0.0.1:3000`). `tests/web.rs` runs this file's
//! `serve` on both backends.

use std::future::Future;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use jq::postgres::sqlx;
use jq::sqlite::rusqlite;
use jq::{Backend, Client, HandlerError, HandlerResult, JobContext, JobId, JobType};
use serde::{Deserialize, Serialize};

/// What `main`, `serve` and the test return on failure.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The job: send the receipt of an order.
#[derive(Serialize, Deserialize, Debug)]
pub struct SendReceipt {
    /// The order's id.
    pub order: i64,
}

impl JobType for SendReceipt {
    const KIND: &'static str = "send_receipt";
    const QUEUE: &'static str = "receipts";
}

/// The body of `POST /orders`.
#[derive(Serialize, Deserialize)]
pub struct NewOrder {
    /// Who ordered.
    pub customer: String,
    /// What.
    pub items: Vec<Item>,
}

/// One line of an order.
#[derive(Serialize, Deserialize)]
pub struct Item {
    /// The product.
    pub sku: String,
    /// How many; the database refuses 0 or less.
    pub qty: i64,
}

/// The answer of `POST /orders` and `GET /orders/{id}`.
#[derive(Serialize, Deserialize, Debug)]
pub struct Order {
    /// Its id.
    pub id: i64,
    /// Who ordered.
    pub customer: String,
    /// Set by the job once the receipt went out.
    pub receipt_sent: bool,
    /// The receipt job (`POST` only).
    pub job: Option<JobId>,
}

/// The application's own database: the job store's SQLite file (through a
/// connection of its own) or PostgreSQL pool (jq's, shared).
#[derive(Clone)]
pub enum Db {
    /// One rusqlite connection, used from `spawn_blocking`.
    Sqlite(Arc<Mutex<rusqlite::Connection>>),
    /// The pool jq opened, and the schema of the tables.
    Postgres {
        /// jq's pool.
        pool: sqlx::PgPool,
        /// Where `orders` and `order_items` live.
        schema: String,
    },
}

const SQLITE_TABLES: &str = "
    CREATE TABLE IF NOT EXISTS orders (
        id INTEGER PRIMARY KEY,
        customer TEXT NOT NULL,
        receipt_sent INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE IF NOT EXISTS order_items (
        order_id INTEGER NOT NULL REFERENCES orders (id),
        sku TEXT NOT NULL,
        qty INTEGER NOT NULL CHECK (qty > 0)
    );";

impl Db {
    /// Opens the application's side of the store `client` uses and creates
    /// its tables.
    pub async fn open(client: &Client) -> Result<Db, BoxError> {
        match client.storage() {
            Backend::Sqlite(s) => {
                let path = s.config().path().ok_or("the web example needs a SQLite file, not :memory:")?;
                let conn = rusqlite::Connection::open(path)?;
                // Writers queue behind each other (jq's writer, this one).
                conn.busy_timeout(std::time::Duration::from_secs(5))?;
                conn.execute_batch(SQLITE_TABLES)?;
                Ok(Db::Sqlite(Arc::new(Mutex::new(conn))))
            }
            Backend::Postgres(s) => {
                let schema = s.schema().to_owned();
                let tables = format!(
                    "CREATE TABLE IF NOT EXISTS {schema}.orders (
                         id BIGSERIAL PRIMARY KEY,
                         customer TEXT NOT NULL,
                         receipt_sent BOOLEAN NOT NULL DEFAULT false
                     );
                     CREATE TABLE IF NOT EXISTS {schema}.order_items (
                         order_id BIGINT NOT NULL REFERENCES {schema}.orders (id),
                         sku TEXT NOT NULL,
                         qty BIGINT NOT NULL CHECK (qty > 0)
                     );"
                );
                sqlx::raw_sql(sqlx::AssertSqlSafe(tables)).execute(s.pool()).await?;
                Ok(Db::Postgres { pool: s.pool().clone(), schema })
            }
            other => Err(format!("the web example needs SQLite or PostgreSQL, not {}", other.name()).into()),
        }
    }

    /// Inserts the order, enqueues its receipt job, inserts its items: all
    /// or nothing. `Ok(None)` when the database refused an item (rolled back).
    async fn create_order(&self, client: &Client, order: NewOrder) -> Result<Option<Order>, BoxError> {
        match self {
            Db::Sqlite(conn) => {
                let (conn, client) = (conn.clone(), client.clone());
                tokio::task::spawn_blocking(move || {
                    let mut conn = conn.lock().map_err(|_| "the database connection was poisoned")?;
                    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                    tx.execute("INSERT INTO orders (customer) VALUES (?1)", [&order.customer])?;
                    let id = tx.last_insert_rowid();
                    // Synchronous on SQLite: the caller's own transaction.
                    let job = client.enqueue_tx(&tx, SendReceipt { order: id })?;
                    for item in &order.items {
                        let added = tx.execute(
                            "INSERT INTO order_items (order_id, sku, qty) VALUES (?1, ?2, ?3)",
                            rusqlite::params![id, item.sku, item.qty],
                        );
                        if let Err(rusqlite::Error::SqliteFailure(e, _)) = &added
                            && e.code == rusqlite::ErrorCode::ConstraintViolation
                        {
                            return Ok(None); // dropping `tx` rolls everything back, the job too
                        }
                        added?;
                    }
                    tx.commit()?;
                    Ok(Some(Order { id, customer: order.customer, receipt_sent: false, job: Some(job) }))
                })
                .await?
            }
            Db::Postgres { pool, schema } => {
                let mut tx = pool.begin().await?;
                let id: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "INSERT INTO {schema}.orders (customer) VALUES ($1) RETURNING id"
                )))
                .bind(&order.customer)
                .fetch_one(&mut *tx)
                .await?;
                // Awaited on PostgreSQL: the NOTIFY that wakes workers commits with it.
                let job = client.enqueue_tx(&mut tx, SendReceipt { order: id }).await?;
                let insert = format!("INSERT INTO {schema}.order_items (order_id, sku, qty) VALUES ($1, $2, $3)");
                for item in &order.items {
                    let added = sqlx::query(sqlx::AssertSqlSafe(insert.as_str()))
                        .bind(id)
                        .bind(&item.sku)
                        .bind(item.qty)
                        .execute(&mut *tx)
                        .await;
                    if let Err(sqlx::Error::Database(e)) = &added
                        && e.is_check_violation()
                    {
                        return Ok(None); // dropping `tx` rolls everything back, the job too
                    }
                    added?;
                }
                tx.commit().await?;
                Ok(Some(Order { id, customer: order.customer, receipt_sent: false, job: Some(job) }))
            }
        }
    }

    /// One order, or `None`.
    pub async fn order(&self, id: i64) -> Result<Option<Order>, BoxError> {
        match self {
            Db::Sqlite(conn) => {
                let conn = conn.clone();
                tokio::task::spawn_blocking(move || {
                    let conn = conn.lock().map_err(|_| "the database connection was poisoned")?;
                    let found = conn.query_row("SELECT customer, receipt_sent FROM orders WHERE id = ?1", [id], |r| {
                        Ok(Order { id, customer: r.get(0)?, receipt_sent: r.get(1)?, job: None })
                    });
                    match found {
                        Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
                        other => Ok(Some(other?)),
                    }
                })
                .await?
            }
            Db::Postgres { pool, schema } => {
                let row: Option<(String, bool)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT customer, receipt_sent FROM {schema}.orders WHERE id = $1"
                )))
                .bind(id)
                .fetch_optional(pool)
                .await?;
                Ok(row.map(|(customer, receipt_sent)| Order { id, customer, receipt_sent, job: None }))
            }
        }
    }

    /// The ids of every stored order.
    pub async fn order_ids(&self) -> Result<Vec<i64>, BoxError> {
        match self {
            Db::Sqlite(conn) => {
                let conn = conn.clone();
                tokio::task::spawn_blocking(move || {
                    let conn = conn.lock().map_err(|_| "the database connection was poisoned")?;
                    let mut stmt = conn.prepare("SELECT id FROM orders ORDER BY id")?;
                    let ids = stmt.query_map([], |r| r.get(0))?.collect::<Result<Vec<i64>, _>>()?;
                    Ok(ids)
                })
                .await?
            }
            Db::Postgres { pool, schema } => {
                let sql = format!("SELECT id FROM {schema}.orders ORDER BY id");
                Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_all(pool).await?)
            }
        }
    }

    /// The job's effect: the receipt went out.
    async fn mark_receipt_sent(&self, id: i64) -> Result<(), BoxError> {
        match self {
            Db::Sqlite(conn) => {
                let conn = conn.clone();
                tokio::task::spawn_blocking(move || {
                    let conn = conn.lock().map_err(|_| "the database connection was poisoned")?;
                    conn.execute("UPDATE orders SET receipt_sent = 1 WHERE id = ?1", [id])?;
                    Ok(())
                })
                .await?
            }
            Db::Postgres { pool, schema } => {
                let sql = format!("UPDATE {schema}.orders SET receipt_sent = true WHERE id = $1");
                sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id).execute(pool).await?;
                Ok(())
            }
        }
    }
}

/// What every request handler gets.
#[derive(Clone)]
struct App {
    client: Client,
    db: Db,
}

async fn create_order(
    State(app): State<App>,
    Json(order): Json<NewOrder>,
) -> Result<(StatusCode, Json<Order>), (StatusCode, String)> {
    match app.db.create_order(&app.client, order).await {
        Ok(Some(order)) => Ok((StatusCode::CREATED, Json(order))),
        Ok(None) => {
            Err((StatusCode::UNPROCESSABLE_ENTITY, "every item needs a positive qty; nothing was stored\n".into()))
        }
        Err(e) => {
            tracing::error!(error = %e, "creating an order failed");
            Err((StatusCode::INTERNAL_SERVER_ERROR, "the order could not be stored\n".into()))
        }
    }
}

async fn show_order(State(app): State<App>, Path(id): Path<i64>) -> Result<Json<Order>, StatusCode> {
    match app.db.order(id).await {
        Ok(Some(order)) => Ok(Json(order)),
        Ok(None) => Err(StatusCode::NOT_FOUND),
        Err(e) => {
            tracing::error!(error = %e, "reading an order failed");
            Err(StatusCode::INTERNAL_SERVER_ERROR)
        }
    }
}

/// The job's handler: "sends" the receipt and records it on the order.
async fn send_receipt(db: Db, job: SendReceipt, _ctx: JobContext) -> HandlerResult {
    tracing::info!(order = job.order, "receipt sent");
    // Retried with backoff when the database fails.
    db.mark_receipt_sent(job.order).await.map_err(HandlerError::nack)
}

/// Serves on `listener` with the workers running beside the server, until
/// `shutdown` completes; then drains: the server stops accepting and
/// finishes the requests in flight (so no enqueue is cut off), then the
/// pool stops claiming, lets running jobs finish (within its grace) and
/// hands back the ones not started. Returns once everything is recorded.
pub async fn serve(
    listener: tokio::net::TcpListener,
    client: Client,
    db: Db,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), BoxError> {
    let handler_db = db.clone();
    let workers = client
        .worker_pool()
        .register::<SendReceipt, _, _>(move |job, ctx| send_receipt(handler_db.clone(), job, ctx))
        .start()?;
    let app = Router::new()
        .route("/orders", post(create_order))
        .route("/orders/{id}", get(show_order))
        .with_state(App { client, db });
    let served = axum::serve(listener, app).with_graceful_shutdown(shutdown).await;
    tracing::info!("server stopped; draining the workers");
    let drained = workers.shutdown().await; // Err: a fatal storage error stopped the pool
    served?;
    Ok(drained?)
}

/// Completes on SIGTERM (what orchestrators send) or ctrl-c. The handlers
/// are installed before this returns, so a signal sent right after is not
/// missed (nor left to kill the process).
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    Ok(async move {
        #[cfg(unix)]
        let terminated = term.recv();
        #[cfg(not(unix))]
        let terminated = std::future::pending::<Option<()>>();
        tokio::select! {
            _ = terminated => tracing::info!("SIGTERM: shutting down gracefully"),
            _ = tokio::signal::ctrl_c() => tracing::info!("ctrl-c: shutting down gracefully"),
        }
    })
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();

    let url = std::env::args().nth(1).unwrap_or_else(|| "sqlite://jq-web.db".to_owned());
    let addr = std::env::args().nth(2).unwrap_or_else(|| "127.0.0.1:3000".to_owned());
    let client = jq::connect(&url).await?;
    client.migrate().await?; // PostgreSQL: creates jq's schema (once per deployment in production)
    let db = Db::open(&client).await?;
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    tracing::info!(%addr, "listening; POST /orders, GET /orders/{{id}}");
    serve(listener, client, db, shutdown_signal()?).await
}
