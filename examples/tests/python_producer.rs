//! Runs examples/python/producer.py (standard library only) against the
//! HTTP API on a SQLite store while a Rust worker pool runs what it
//! enqueues: every job completes, with the payload Python sent.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::sync::{Arc, Mutex};

use jq::{HandlerResult, JobContext, JobType, State};
use serde::{Deserialize, Serialize};

/// The job the Python producer enqueues.
#[derive(Debug, Serialize, Deserialize)]
struct Thumbnail {
    image: String,
    width: u32,
}

impl JobType for Thumbnail {
    const KIND: &'static str = "thumbnail";
    const QUEUE: &'static str = "images";
}

#[tokio::test]
async fn python_producer_enqueues_what_a_rust_pool_runs() {
    let dir = tempfile::tempdir().unwrap();
    let client = jq::connect(&format!("sqlite://{}", dir.path().join("jobs.db").display())).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let options = jq_dashboard::api::ApiOptions::new(jq_dashboard::Options::new());
    let server = tokio::spawn(axum::serve(listener, jq_dashboard::api::router(client.clone(), options)).into_future());

    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let seen = seen.clone();
        move |job: Thumbnail, _ctx: JobContext| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(job.image);
                HandlerResult::Ok(())
            }
        }
    };
    let pool = client.worker_pool().register::<Thumbnail, _, _>(handler).start().unwrap();

    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/producer.py");
    let output = tokio::process::Command::new("python3")
        .arg(&script)
        .args(["--url", &format!("http://{address}"), "--jobs", "6", "--deadline", "60"])
        .output()
        .await
        .expect("python3 runs (install it: apt-get install python3)");
    pool.shutdown().await.unwrap();
    server.abort();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "producer failed: {stdout}\n{}", String::from_utf8_lossy(&output.stderr));

    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let ids = summary["ids"].as_array().unwrap();
    assert_eq!(ids.len(), 6);
    for id in ids {
        let job = client.get(id.as_str().unwrap().parse().unwrap()).await.unwrap();
        assert_eq!(job.state, State::Completed, "{id}");
        assert_eq!(job.queue.as_str(), "images");
    }
    assert_eq!(summary["refused"], serde_json::json!({"status": 400, "field": "queue"}));
    let mut images = seen.lock().unwrap().clone();
    images.sort();
    assert_eq!(images, (0..6).map(|i| format!("cat-{i}.png")).collect::<Vec<_>>());
}
