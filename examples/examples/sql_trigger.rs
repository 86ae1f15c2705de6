//! Enqueue from SQL: a trigger hands every new order to jq's Rust workers,
//! in the transaction that inserts the order.
//!
//! ```text
//! cargo run -p examples --example sql_trigger                        # the local server
//! cargo run -p examples --example sql_trigger -- postgres://postgres@127.0.0.1:5432/postgres
//! ```
//!
//! The jobs live in the schema `jq_sql_trigger` (unless the URL names
//! another with `?schema=`), emptied at start; the table `orders` lives
//! beside them. The trigger calls `<schema>.enqueue(kind, payload, ...)`,
//! the function `migrate` installs (jq-postgres/src/functions/enqueue.sql),
//! which stores the job exactly as `Client::enqueue` does: an order inserted
//! in a transaction that rolls back leaves no job behind, and one that
//! commits wakes the pool. `tests/sql_trigger.rs` runs this file's
//! `open_fresh` and `run`.

use std::time::{Duration, Instant};

use jq::postgres::sqlx::{self, AssertSqlSafe};
use jq::{Backend, Client, HandlerResult, Job, JobContext, JobType, State};
use serde::{Deserialize, Serialize};

/// What `main` and the test return on failure.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The job the trigger stores for a new order: its payload is what the
/// trigger's `json_build_object` makes.
#[derive(Debug, Serialize, Deserialize)]
pub struct OrderPlaced {
    /// The order's row id.
    pub order_id: i64,
    /// Its total, in cents.
    pub cents: i64,
}

impl JobType for OrderPlaced {
    const KIND: &'static str = "order_placed";
    const QUEUE: &'static str = "orders";
}

async fn order_placed(job: OrderPlaced, _ctx: JobContext) -> HandlerResult {
    println!("order {} placed: {} cents", job.order_id, job.cents);
    Ok(())
}

/// Opens `url` (PostgreSQL), empties the example's schema, migrates it and
/// creates the orders table with its trigger.
pub async fn open_fresh(url: &str) -> Result<Client, BoxError> {
    let sep = if url.contains('?') { '&' } else { '?' };
    let url = if url.contains("schema=") { url.to_owned() } else { format!("{url}{sep}schema=jq_sql_trigger") };
    let client = jq::connect(&url).await?;
    let Backend::Postgres(storage) = client.storage() else {
        return Err("enqueue from SQL is a PostgreSQL feature: give a postgres:// URL".into());
    };
    let schema = format!("\"{}\"", storage.schema());
    let drop = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
    sqlx::raw_sql(AssertSqlSafe(drop)).execute(storage.pool()).await?;
    client.migrate().await?;
    // The application's own table and the trigger that enqueues. The
    // enqueue runs in the inserting transaction: no order without its job,
    // no job without its order.
    let setup = format!(
        "CREATE TABLE {schema}.orders (id bigserial PRIMARY KEY, cents bigint NOT NULL);
         CREATE FUNCTION {schema}.order_placed() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             PERFORM {schema}.enqueue('order_placed', json_build_object('order_id', NEW.id, 'cents', NEW.cents),
                                      queue => 'orders');
             RETURN NEW;
         END $$;
         CREATE TRIGGER order_placed AFTER INSERT ON {schema}.orders
             FOR EACH ROW EXECUTE FUNCTION {schema}.order_placed();"
    );
    sqlx::raw_sql(AssertSqlSafe(setup)).execute(storage.pool()).await?;
    Ok(client)
}

/// Inserts three orders (two committed, one rolled back) with a pool
/// running, and returns the jobs the trigger stored once they finished.
pub async fn run(client: &Client) -> Result<Vec<Job>, BoxError> {
    let Backend::Postgres(storage) = client.storage() else {
        return Err("enqueue from SQL is a PostgreSQL feature".into());
    };
    let schema = format!("\"{}\"", storage.schema());
    let pool = client.worker_pool().register::<OrderPlaced, _, _>(order_placed).start()?;

    let insert = format!("INSERT INTO {schema}.orders (cents) VALUES ($1)");
    let mut tx = storage.pool().begin().await?;
    for cents in [1999_i64, 500] {
        sqlx::query(AssertSqlSafe(insert.clone())).bind(cents).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    let mut tx = storage.pool().begin().await?;
    sqlx::query(AssertSqlSafe(insert)).bind(7_i64).execute(&mut *tx).await?;
    tx.rollback().await?; // the order and its job go together
    println!("inserted 2 orders (and one rolled back)");

    let deadline = Instant::now() + Duration::from_secs(15);
    let jobs = loop {
        let filter = jq::JobFilter { queue: Some("orders".parse()?), ..Default::default() };
        let jobs = client.list(&filter).await?;
        let done = jobs.len() >= 2 && jobs.iter().all(|j| j.state == State::Completed);
        if done || Instant::now() > deadline {
            break jobs;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    pool.shutdown().await?;
    Ok(jobs)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::args().nth(1).unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let client = open_fresh(&url).await?;
    for job in run(&client).await? {
        println!("{} {} {:?}: {}", job.id, job.kind, job.state, job.payload.as_str());
    }
    Ok(())
}
