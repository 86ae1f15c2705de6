//! Wake-up across connections and processes, and several worker
//! "processes" (separate pools) draining one queue.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::Fixture;
use jq_core::storage::{ClaimRequest, Outcome, Settlement, Storage};
use jq_core::{Clock, NewJob, Payload, QueueName, State};

const WAIT: Duration = Duration::from_secs(20);

fn job(n: usize) -> NewJob {
    NewJob::builder("n", Payload::from_json(format!(r#"{{"n": {n}}}"#)).unwrap()).queue("work").build().unwrap()
}

fn request(worker: &str, limit: usize) -> ClaimRequest {
    ClaimRequest::new(vec![QueueName::new("work").unwrap()], limit, Duration::from_secs(60), worker)
}

/// Waits for the listener's first signal, sent once it is LISTENing.
async fn ready(signal: &mut jq_core::storage::WorkSignal) {
    tokio::time::timeout(WAIT, signal.changed()).await.expect("the listener came up").unwrap();
    signal.borrow_and_update();
}

#[tokio::test]
async fn idle_subscriber_is_woken_by_an_enqueue_from_another_pool() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let worker = f.connect(Clock::system()).await;
    let producer = f.connect(Clock::system()).await;
    let mut signal = worker.subscribe().expect("postgres can signal");
    ready(&mut signal).await;
    assert!(worker.claim(&request("w", 1)).await.unwrap().jobs.is_empty());

    let j = job(1);
    producer.enqueue(vec![j.clone()]).await.unwrap();
    tokio::time::timeout(WAIT, signal.changed()).await.expect("woken by the NOTIFY").unwrap();
    let claimed = worker.claim(&request("w", 1)).await.unwrap().jobs;
    assert_eq!(claimed[0].id, j.id);

    // A release hands the job back with a wake-up too.
    signal.borrow_and_update();
    producer
        .settle(vec![Settlement {
            lease: claimed[0].lease_ref().unwrap(),
            outcome: Outcome::Release { delay: Duration::ZERO },
        }])
        .await
        .unwrap();
    tokio::time::timeout(WAIT, signal.changed()).await.expect("woken by the release").unwrap();
    f.cleanup().await;
}

#[tokio::test]
async fn subscribers_of_clones_share_one_listener() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;
    let clone = s.clone();
    let mut a = s.subscribe().unwrap();
    let mut b = clone.subscribe().unwrap();
    ready(&mut a).await;
    b.borrow_and_update();
    f.connect(Clock::system()).await.enqueue(vec![job(1)]).await.unwrap();
    tokio::time::timeout(WAIT, a.changed()).await.unwrap().unwrap();
    tokio::time::timeout(WAIT, b.changed()).await.unwrap().unwrap();
    f.cleanup().await;
}

#[tokio::test]
async fn several_worker_pools_drain_a_queue_without_claiming_a_job_twice() {
    jq_testkit::needs!(postgres);
    const JOBS: usize = 2_000;
    const WORKERS: usize = 4;
    let f = Fixture::new().await;
    let producer = f.connect(Clock::system()).await;
    for chunk in (0..JOBS).collect::<Vec<_>>().chunks(500) {
        producer.enqueue(chunk.iter().map(|&n| job(n)).collect()).await.unwrap();
    }
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let storage = f.connect(Clock::system()).await;
        tasks.push(tokio::spawn(async move {
            let name = format!("worker-{w}");
            let mut mine = Vec::new();
            loop {
                let jobs = storage.claim(&request(&name, 16)).await.unwrap().jobs;
                if jobs.is_empty() {
                    return mine;
                }
                let batch: Vec<Settlement> =
                    jobs.iter().map(|j| Settlement { lease: j.lease_ref().unwrap(), outcome: Outcome::Ack }).collect();
                for r in storage.settle(batch).await.unwrap() {
                    assert_eq!(r.unwrap(), State::Completed);
                }
                mine.extend(jobs.into_iter().map(|j| j.id));
            }
        }));
    }
    let mut seen = HashSet::new();
    for t in tasks {
        for id in t.await.unwrap() {
            assert!(seen.insert(id), "job {id} was claimed twice");
        }
    }
    assert_eq!(seen.len(), JOBS);
    assert_eq!(producer.stats().await.unwrap().total(State::Completed), JOBS as u64);
    f.cleanup().await;
}

#[tokio::test]
async fn listener_reconnects_after_its_connection_is_killed() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let worker = f.connect(Clock::system()).await;
    let producer = f.connect(Clock::system()).await;
    let mut signal = worker.subscribe().unwrap();
    ready(&mut signal).await;
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = 'LISTEN \"' || $1 || '\"'",
    )
    .bind(worker.channel())
    .fetch_all(producer.pool())
    .await
    .unwrap();
    assert_eq!(killed, vec![true], "found the listener's connection");
    // The loss itself is signalled (subscribers poll), then the reconnect.
    tokio::time::timeout(WAIT, signal.changed()).await.expect("the loss is signalled").unwrap();
    let j = job(1);
    producer.enqueue(vec![j.clone()]).await.unwrap();
    loop {
        let claimed = worker.claim(&request("w", 1)).await.unwrap().jobs;
        if let Some(c) = claimed.first() {
            assert_eq!(c.id, j.id);
            break;
        }
        tokio::time::timeout(WAIT, signal.changed()).await.expect("woken after the reconnect").unwrap();
    }
    f.cleanup().await;
}

/// Role of a child process started by `wake_up_reaches_another_os_process`.
const ROLE: &str = "JQ_PG_TEST_ROLE";
const SCHEMA: &str = "JQ_PG_TEST_SCHEMA";

/// Runs only inside the child process: subscribes, says "ready", waits for
/// the wake-up, claims and acks the one job, says "done <id>".
#[tokio::test]
async fn child_process_worker() {
    jq_testkit::needs!(postgres);
    if std::env::var(ROLE).as_deref() != Ok("worker") {
        return;
    }
    let schema = std::env::var(SCHEMA).unwrap();
    let s = common::connect(&schema, Clock::system()).await;
    let mut signal = s.subscribe().unwrap();
    ready(&mut signal).await;
    println!("jq-child: ready");
    loop {
        let jobs = s.claim(&request("child", 1)).await.unwrap().jobs;
        if let Some(j) = jobs.first() {
            s.settle(vec![Settlement { lease: j.lease_ref().unwrap(), outcome: Outcome::Ack }]).await.unwrap();
            println!("jq-child: done {}", j.id);
            return;
        }
        tokio::time::timeout(WAIT, signal.changed()).await.expect("woken by the parent's enqueue").unwrap();
    }
}

#[tokio::test]
async fn wake_up_reaches_another_os_process() {
    jq_testkit::needs!(postgres);
    use tokio::io::{AsyncBufReadExt, BufReader};
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;
    let exe = std::env::current_exe().unwrap();
    let mut child = tokio::process::Command::new(exe)
        .args(["--exact", "child_process_worker", "--nocapture", "--test-threads=1"])
        .env(ROLE, "worker")
        .env(SCHEMA, &f.schema)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next_child_line = async || loop {
        let line = tokio::time::timeout(WAIT, lines.next_line()).await.expect("child answers").unwrap();
        let line = line.expect("child output ended early");
        // libtest may print "test name ... " on the same line first.
        if let Some(at) = line.find("jq-child: ") {
            return line[at + "jq-child: ".len()..].to_owned();
        }
    };
    assert_eq!(next_child_line().await, "ready");
    let j = job(7);
    s.enqueue(vec![j.clone()]).await.unwrap();
    assert_eq!(next_child_line().await, format!("done {}", j.id));
    let status = tokio::time::timeout(WAIT, child.wait()).await.unwrap().unwrap();
    assert!(status.success());
    assert_eq!(s.get(j.id).await.unwrap().state, State::Completed);
    f.cleanup().await;
}
