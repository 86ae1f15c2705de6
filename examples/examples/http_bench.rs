//! The HTTP API's enqueue throughput against the Rust batch enqueue, on
//! SQLite, in the same sitting.
//!
//! ```text
//! cargo run --release -p examples --example http_bench [-- --batches 20 --runs 3]
//! ```
//!
//! Each run, on a fresh SQLite file: `--batches` batches of 1,000 small jobs
//! through `Client::enqueue_many` (the `batch` figure of the main bench),
//! then the same through `POST /api/v1/jobs/batch` on a real listener in
//! this process, over one kept-alive HTTP/1.1 connection (what a producer's
//! HTTP client does). Prints the median jobs/s of each and their ratio.
//! Kept out of the main bench (`--example bench`), whose default run it
//! would lengthen by a scenario on one backend only.

use std::time::{Duration, Instant};

use jq::{Client, NewJob, Payload};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const BATCH: usize = 1_000;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut batches = 20;
    let mut runs = 3;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().ok_or("--batches and --runs take a number")?.parse::<usize>()?;
        match arg.as_str() {
            "--batches" => batches = value.max(1),
            "--runs" => runs = value.max(1),
            other => return Err(format!("unknown argument {other}: use --batches N, --runs N").into()),
        }
    }
    let (mut rust, mut http) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        rust.push(run_rust(batches).await?);
        http.push(run_http(batches).await?);
    }
    let (rust, http) = (median(rust), median(http));
    println!("enqueue {} jobs in batches of {BATCH} on SQLite (median of {runs})", batches * BATCH);
    println!("  rust batch enqueue   {rust:>10.0} jobs/s");
    println!("  HTTP API batch       {http:>10.0} jobs/s");
    println!("  ratio HTTP / rust    {:>10.1} % (target >= 50 %)", http / rust * 100.0);
    Ok(())
}

/// A client over a fresh SQLite file, and the directory holding it.
async fn fresh() -> Result<(Client, tempfile::TempDir), BoxError> {
    let dir = tempfile::tempdir()?;
    let client = jq::connect(&format!("sqlite://{}", dir.path().join("jobs.db").display())).await?;
    Ok((client, dir))
}

/// The `i`th job's payload, the same both ways.
fn payload(i: usize) -> serde_json::Value {
    serde_json::json!({ "to": format!("user-{i}@example.com"), "template": "welcome", "n": i })
}

async fn run_rust(batches: usize) -> Result<f64, BoxError> {
    let (client, _dir) = fresh().await?;
    let jobs: Vec<Vec<NewJob>> = (0..batches)
        .map(|b| {
            (0..BATCH)
                .map(|i| {
                    Ok(NewJob::builder("send_email", Payload::of(&payload(b * BATCH + i))?).queue("mail").build()?)
                })
                .collect::<Result<_, BoxError>>()
        })
        .collect::<Result<_, _>>()?;
    let started = Instant::now();
    for batch in jobs {
        client.enqueue_many(batch).await?;
    }
    Ok(rate(batches, started.elapsed()))
}

async fn run_http(batches: usize) -> Result<f64, BoxError> {
    let (client, _dir) = fresh().await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let options = jq_dashboard::api::ApiOptions::new(jq_dashboard::Options::new());
    let server = tokio::spawn(axum::serve(listener, jq_dashboard::api::router(client, options)).into_future());
    // The bodies are made before the clock starts, as the Rust jobs are.
    let bodies: Vec<String> = (0..batches)
        .map(|b| {
            let jobs: Vec<_> = (0..BATCH)
                .map(|i| serde_json::json!({"kind": "send_email", "queue": "mail", "payload": payload(b * BATCH + i)}))
                .collect();
            serde_json::json!({ "jobs": jobs }).to_string()
        })
        .collect();
    let mut connection = BufReader::new(TcpStream::connect(address).await?);
    let started = Instant::now();
    for body in bodies {
        let head = format!(
            "POST /api/v1/jobs/batch HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            body.len()
        );
        connection.get_mut().write_all(head.as_bytes()).await?;
        connection.get_mut().write_all(body.as_bytes()).await?;
        let (status, answer) = read_response(&mut connection).await?;
        if status != 200 {
            return Err(format!("HTTP {status}: {answer}").into());
        }
    }
    let elapsed = started.elapsed();
    server.abort();
    Ok(rate(batches, elapsed))
}

/// One HTTP/1.1 response with a Content-Length: its status and body.
async fn read_response(connection: &mut BufReader<TcpStream>) -> Result<(u16, String), BoxError> {
    let mut line = String::new();
    connection.read_line(&mut line).await?;
    let status = line.split_whitespace().nth(1).ok_or("no status line")?.parse::<u16>()?;
    let mut length = 0;
    loop {
        line.clear();
        connection.read_line(&mut line).await?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse()?;
        }
    }
    let mut body = vec![0; length];
    connection.read_exact(&mut body).await?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

fn rate(batches: usize, elapsed: Duration) -> f64 {
    (batches * BATCH) as f64 / elapsed.as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
