//! Metrics: a small drain on every compiled backend, with the Prometheus
//! recorder installed and its HTTP listener scraped: the counters equal
//! the jobs run and their outcomes, the histograms count every run, and the
//! store's gauges agree with `stats`.

#![cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use common::Namespace;
use jq::{Clock, HandlerError, HandlerResult, JobContext, NewJob, Payload};
use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// Jobs per backend: `i % 10 == 3` fails for good, `i % 10 == 5` fails its
/// first attempt and succeeds on the second, the rest succeed at once.
const JOBS: u64 = 30;

/// One sample: metric name and sorted labels to value.
type Samples = BTreeMap<(String, Vec<(String, String)>), f64>;

/// Parses the Prometheus text format (only what the exporter writes).
fn parse(text: &str) -> Samples {
    let mut out = Samples::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let mut labels: Vec<(String, String)> = labels
            .split(',')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once('=').unwrap();
                (k.to_owned(), v.trim_matches('"').to_owned())
            })
            .collect();
        labels.sort();
        out.insert((name.to_owned(), labels), value.parse().unwrap());
    }
    out
}

fn get(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut key: Vec<(String, String)> = labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    key.sort();
    *samples.get(&(name.to_owned(), key)).unwrap_or_else(|| panic!("no {name}{labels:?} in the scrape"))
}

/// GET /metrics over plain HTTP/1.0.
async fn scrape(addr: SocketAddr) -> Samples {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"), "{head}");
    parse(body)
}

/// Runs the drain on `url` in queue `queue`, then checks the scrape.
async fn drain_and_check(url: &str, queue: &str, addr: SocketAddr) {
    let client = common::connect(url, Clock::system()).await;
    let jobs: Vec<NewJob> =
        (0..JOBS).map(|i| NewJob::builder("drain", Payload::of(&i).unwrap()).queue(queue).build().unwrap()).collect();
    client.enqueue_many(jobs).await.unwrap();
    let later = NewJob::builder("later", Payload::of(&0).unwrap()).queue(queue).delay(Duration::from_secs(3600));
    let cancelled = client.enqueue_many([later.build().unwrap(), later_copy(queue)]).await.unwrap();
    for id in cancelled {
        client.cancel(id).await.unwrap();
    }

    let (ran, mut finished) = mpsc::unbounded_channel();
    let pool = client
        .worker_pool()
        .queue(queue)
        .register_raw("drain", move |job: jq::Job, ctx: JobContext| {
            let ran = ran.clone();
            async move {
                let i: u64 = job.payload.decode().unwrap();
                let result: HandlerResult = match i % 10 {
                    3 => Err(HandlerError::bury("bad input")),
                    5 if ctx.attempt() == 1 => return Err(HandlerError::nack_after("flaky", Duration::ZERO)),
                    _ => Ok(()),
                };
                ran.send(i).unwrap();
                result
            }
        })
        .start()
        .unwrap();
    for _ in 0..JOBS {
        finished.recv().await.unwrap();
    }
    // Every outcome recorded (and counted) once this returns.
    pool.shutdown().await.unwrap();
    jq::observe::sample_store(client.storage()).await.unwrap();

    let s = scrape(addr).await;
    let drain = [("queue", queue), ("kind", "drain")];
    let (dead, retried) = (3.0, 3.0);
    assert_eq!(get(&s, "jq_jobs_enqueued_total", &drain), JOBS as f64);
    assert_eq!(get(&s, "jq_jobs_enqueued_total", &[("queue", queue), ("kind", "later")]), 2.0);
    assert_eq!(get(&s, "jq_jobs_started_total", &drain), JOBS as f64 + retried);
    assert_eq!(get(&s, "jq_jobs_completed_total", &drain), JOBS as f64 - dead);
    assert_eq!(get(&s, "jq_jobs_nacked_total", &drain), retried);
    assert_eq!(get(&s, "jq_jobs_dead_total", &drain), dead);
    assert_eq!(get(&s, "jq_jobs_cancelled_total", &[("queue", queue), ("kind", "later")]), 2.0);
    assert_eq!(get(&s, "jq_job_run_duration_seconds_count", &drain), JOBS as f64 + retried);
    assert_eq!(get(&s, "jq_job_queue_lag_seconds_count", &drain), JOBS as f64 + retried);
    let stats = client.stats().await.unwrap();
    for state in jq::State::ALL {
        let stored = stats.queues.get(queue).map_or(0, |c| c.get(state));
        assert_eq!(get(&s, "jq_jobs", &[("queue", queue), ("state", state.as_str())]), stored as f64, "{state}");
    }
    assert_eq!(get(&s, "jq_jobs", &[("queue", queue), ("state", "completed")]), JOBS as f64 - dead);
    assert_eq!(get(&s, "jq_oldest_pending_age_seconds", &[("queue", queue)]), 0.0);
}

fn later_copy(queue: &str) -> NewJob {
    NewJob::builder("later", Payload::of(&1).unwrap()).queue(queue).delay(Duration::from_secs(3600)).build().unwrap()
}

/// One test for every backend: the recorder is global to the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scraped_counters_equal_the_jobs_run() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let (recorder, serve) = PrometheusBuilder::new().with_http_listener(addr).build().unwrap();
    metrics::set_global_recorder(recorder).unwrap();
    tokio::spawn(serve);

    #[cfg(feature = "sqlite")]
    {
        let ns = Namespace::sqlite();
        drain_and_check(&ns.url, "metrics-sqlite", addr).await;
        ns.cleanup().await;
    }
    #[cfg(feature = "postgres")]
    if jq_testkit::services::postgres().is_some() {
        let ns = Namespace::postgres().await;
        drain_and_check(&ns.url, "metrics-postgres", addr).await;
        ns.cleanup().await;
    }
    #[cfg(feature = "redis")]
    if jq_testkit::services::redis().is_some() {
        let ns = Namespace::redis();
        drain_and_check(&ns.url, "metrics-redis", addr).await;
        ns.cleanup().await;
    }
}
