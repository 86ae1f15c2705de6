//! Separate OS processes share one SQLite file: a producer enqueues while
//! two workers claim and ack; every job runs exactly once and ends Completed.
//!
//! The children are this same test executable, re-run with `--exact
//! mp_child` and `JQ_SQLITE_MP_ROLE` set; without that variable `mp_child`
//! returns at once.
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use jq_core::storage::{ClaimRequest, Outcome, Settlement, Storage};
use jq_core::{JobFilter, JobId, NewJob, Payload, QueueName, State};
use jq_sqlite::{SqliteConfig, SqliteStorage};

const ROLE: &str = "JQ_SQLITE_MP_ROLE";
const DB: &str = "JQ_SQLITE_MP_DB";
const OUT: &str = "JQ_SQLITE_MP_OUT";
const DONE: &str = "JQ_SQLITE_MP_DONE";
const JOBS: usize = 2_000;
const BATCH: usize = 100;
const CHILD_DEADLINE: Duration = Duration::from_secs(90);

#[test]
fn mp_child() {
    let Ok(role) = std::env::var(ROLE) else { return };
    let db = PathBuf::from(std::env::var(DB).unwrap());
    let out = PathBuf::from(std::env::var(OUT).unwrap());
    let done = PathBuf::from(std::env::var(DONE).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let storage = SqliteStorage::open(SqliteConfig::new(&db).busy_timeout(Duration::from_secs(30))).unwrap();
        match role.as_str() {
            "producer" => produce(&storage, &out, &done).await,
            "worker" => work(&storage, &out, &done).await,
            other => panic!("unknown role {other}"),
        }
    });
}

async fn produce(storage: &SqliteStorage, out: &Path, done: &Path) {
    let mut file = std::fs::File::create(out).unwrap();
    for _ in 0..JOBS / BATCH {
        let jobs: Vec<NewJob> = (0..BATCH)
            .map(|i| NewJob::builder("noop", Payload::from_json(format!("{{\"i\":{i}}}")).unwrap()).build().unwrap())
            .collect();
        let ids = storage.enqueue(jobs).await.unwrap();
        for id in ids {
            writeln!(file, "{id}").unwrap();
        }
        tokio::task::yield_now().await;
    }
    file.sync_all().unwrap();
    std::fs::write(done, "done").unwrap();
}

async fn work(storage: &SqliteStorage, out: &Path, done: &Path) {
    let mut file = std::fs::File::create(out).unwrap();
    let request = ClaimRequest::new(
        vec![QueueName::new("default").unwrap()],
        16,
        Duration::from_secs(300),
        format!("worker-{}", std::process::id()),
    );
    let started = Instant::now();
    loop {
        assert!(started.elapsed() < CHILD_DEADLINE, "worker did not finish in time");
        // Read the marker BEFORE claiming: an empty claim after it means
        // every job was enqueued and taken.
        let producer_done = done.exists();
        let request = ClaimRequest { token: jq_core::storage::LeaseToken::new(), ..request.clone() };
        let batch = storage.claim(&request).await.unwrap().jobs;
        if batch.is_empty() {
            if producer_done {
                break;
            }
            // Wait for work: the producer is another process, so no signal
            // reaches us; poll.
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        let mut settlements = Vec::with_capacity(batch.len());
        for job in &batch {
            writeln!(file, "{}", job.id).unwrap();
            settlements.push(Settlement { lease: job.lease_ref().unwrap(), outcome: Outcome::Ack });
        }
        for result in storage.settle(settlements).await.unwrap() {
            result.unwrap();
        }
    }
    file.sync_all().unwrap();
}

fn read_ids(path: &Path) -> Vec<JobId> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| l.parse().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_share_one_file_and_run_each_job_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let done = dir.path().join("producer.done");
    // Create and migrate the file first, so the children only open it.
    let storage = SqliteStorage::open(SqliteConfig::new(&db)).unwrap();
    let exe = std::env::current_exe().unwrap();
    let spawn = |role: &str, out: &Path| {
        tokio::process::Command::new(&exe)
            .args(["--exact", "mp_child", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env(DB, &db)
            .env(OUT, out)
            .env(DONE, &done)
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    };
    let outs: Vec<PathBuf> = (0..3).map(|i| dir.path().join(format!("out-{i}.txt"))).collect();
    // Workers first, so they run while the producer enqueues.
    let mut children = vec![spawn("worker", &outs[0]), spawn("worker", &outs[1]), spawn("producer", &outs[2])];
    for child in &mut children {
        let status = tokio::time::timeout(Duration::from_secs(120), child.wait())
            .await
            .expect("a child process did not finish within 120 s")
            .unwrap();
        assert!(status.success(), "a child process failed: {status}");
    }

    let enqueued = read_ids(&outs[2]);
    assert_eq!(enqueued.len(), JOBS);
    let mut runs: HashMap<JobId, usize> = HashMap::new();
    for out in &outs[..2] {
        for id in read_ids(out) {
            *runs.entry(id).or_default() += 1;
        }
    }
    assert_eq!(runs.len(), JOBS, "every job ran");
    assert!(runs.values().all(|&n| n == 1), "no job ran twice");
    assert!(enqueued.iter().all(|id| runs.contains_key(id)));

    let stats = storage.stats().await.unwrap();
    assert_eq!(stats.total(State::Completed), JOBS as u64);
    assert_eq!(stats.queues.values().map(|c| c.total()).sum::<u64>(), JOBS as u64);
    let page = storage
        .list(&JobFilter { state: Some(State::Completed), limit: JOBS + 1, ..Default::default() })
        .await
        .unwrap();
    assert_eq!(page.len(), JOBS);
}
