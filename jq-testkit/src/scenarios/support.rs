//! Small helpers shared by the scenarios.

use std::collections::HashMap;
use std::time::Duration;

use jq_core::storage::{ClaimRequest, LeaseRef, Outcome, Settled, Settlement, Storage};
use jq_core::{Job, JobBuilder, JobFilter, JobId, ManualClock, NewJob, Payload, QueueName, Stats};

use crate::Harness;

/// Runs `run(name, case)` on random cases of `strategy` (`PROPTEST_CASES`
/// of them, 6 by default), each with a queue name of its own
/// (`prefix-0`, `prefix-1`, ...), from inside a scenario: a case's
/// failure fails the scenario with proptest's shrunk case.
pub(crate) fn run_cases<T, Fut>(
    strategy: impl proptest::strategy::Strategy<Value = T>,
    prefix: &str,
    run: impl Fn(String, T) -> Fut,
) where
    T: std::fmt::Debug,
    Fut: std::future::Future<Output = Result<(), proptest::test_runner::TestCaseError>>,
{
    use proptest::test_runner::{Config, TestRunner};
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(6);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let runtime = tokio::runtime::Handle::current();
    let n = std::sync::atomic::AtomicU32::new(0);
    let result = runner.run(&strategy, |case| {
        let name = format!("{prefix}-{}", n.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        tokio::task::block_in_place(|| runtime.block_on(run(name, case)))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// The lease most scenarios claim with.
pub(crate) const LEASE: Duration = Duration::from_secs(30);

/// One microsecond: the storage's time resolution.
pub(crate) const MICRO: Duration = Duration::from_micros(1);

/// A manual clock starting at the current wall-clock instant.
pub(crate) fn manual_clock() -> ManualClock {
    ManualClock::starting_now()
}

/// A valid queue name.
pub(crate) fn queue(name: &str) -> QueueName {
    QueueName::new(name).expect("scenario queue names are valid")
}

/// A builder for a job of kind "test" in `queue` with payload `{"n": n}`.
pub(crate) fn builder(queue: &str, n: usize) -> JobBuilder {
    let payload = Payload::from_json(format!(r#"{{"n":{n}}}"#)).expect("valid JSON");
    NewJob::builder("test", payload).queue(queue)
}

/// Builds with the manual clock's "now" (delays are relative to it).
pub(crate) fn build(builder: JobBuilder, clock: &ManualClock) -> NewJob {
    builder.build_at(clock.now()).expect("scenario jobs are valid")
}

/// `n` plain jobs in `queue`.
pub(crate) fn jobs(clock: &ManualClock, queue: &str, n: usize) -> Vec<NewJob> {
    (0..n).map(|i| build(builder(queue, i), clock)).collect()
}

/// Enqueues and checks that every job was stored under its own id.
pub(crate) async fn enqueue_all<S: Storage>(storage: &S, jobs: Vec<NewJob>) -> Vec<JobId> {
    let expected: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    let ids = storage.enqueue(jobs).await.expect("enqueue");
    assert_eq!(ids, expected, "enqueue returns the jobs' own ids in input order");
    ids
}

/// [`enqueue_all`] of a batch over several queues: one batch, or one per
/// queue (in order of first appearance) when the backend refuses batches
/// over several queues ([`Harness::cross_queue_batches`]).
pub(crate) async fn enqueue_mixed<H: Harness>(h: &H, storage: &H::Storage, jobs: Vec<NewJob>) -> Vec<JobId> {
    if h.cross_queue_batches() {
        return enqueue_all(storage, jobs).await;
    }
    let order: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    let mut by_queue: Vec<(QueueName, Vec<NewJob>)> = Vec::new();
    for job in jobs {
        match by_queue.iter_mut().find(|(q, _)| *q == job.queue) {
            Some((_, batch)) => batch.push(job),
            None => by_queue.push((job.queue.clone(), vec![job])),
        }
    }
    for (_, batch) in by_queue {
        enqueue_all(storage, batch).await;
    }
    order
}

/// A claim request with the default [`LEASE`].
pub(crate) fn request(queues: &[&str], limit: usize, worker: &str) -> ClaimRequest {
    ClaimRequest::new(queues.iter().map(|q| queue(q)).collect(), limit, LEASE, worker)
}

/// Claims and checks what every claim must hold.
pub(crate) async fn claim<S: Storage>(storage: &S, queues: &[&str], limit: usize, worker: &str) -> Vec<Job> {
    let request = request(queues, limit, worker);
    let jobs = storage.claim(&request).await.expect("claim").jobs;
    assert!(jobs.len() <= limit, "claim returned {} jobs for a limit of {limit}", jobs.len());
    for job in &jobs {
        assert_eq!(job.state, jq_core::State::Running, "claimed job {} is Running", job.id);
        assert!(request.queues.contains(&job.queue), "claimed job {} is from an asked queue", job.id);
        let lease = job.lease.as_ref().expect("a claimed job has a lease");
        assert_eq!(lease.worker, worker, "the lease names the claimer");
    }
    jobs
}

/// Claims exactly one job and returns it.
pub(crate) async fn claim_one<S: Storage>(storage: &S, queue: &str, worker: &str) -> Job {
    let mut jobs = claim(storage, &[queue], 1, worker).await;
    assert_eq!(jobs.len(), 1, "expected one claimable job in {queue}");
    jobs.pop().expect("one job")
}

/// The lease of a claimed job.
pub(crate) fn lease(job: &Job) -> LeaseRef {
    job.lease_ref().expect("a claimed job has a lease")
}

/// Applies one outcome.
pub(crate) async fn settle<S: Storage>(storage: &S, lease: LeaseRef, outcome: Outcome) -> Settled {
    let mut results = storage.settle(vec![Settlement { lease, outcome }]).await.expect("complete");
    assert_eq!(results.len(), 1, "complete returns one result per item");
    results.pop().expect("one result")
}

/// Gets a job that must exist.
pub(crate) async fn get<S: Storage>(storage: &S, id: JobId) -> Job {
    storage.get(id).await.unwrap_or_else(|e| panic!("get {id}: {e}"))
}

/// Every job matching `filter`, following `after` across pages.
pub(crate) async fn list_all<S: Storage>(storage: &S, mut filter: JobFilter) -> Vec<Job> {
    let mut all: Vec<Job> = Vec::new();
    loop {
        let page = storage.list(&filter).await.expect("list");
        assert!(page.len() <= filter.page_size(), "a page holds at most page_size jobs");
        assert!(page.windows(2).all(|w| w[0].id < w[1].id), "a page is in ascending id order");
        let Some(last) = page.last() else { break };
        if let Some(prev) = all.last() {
            assert!(prev.id < page[0].id, "pages continue after the cursor");
        }
        filter.after = Some(last.id);
        all.extend(page);
    }
    all
}

/// The stats, read once.
pub(crate) async fn stats<S: Storage>(storage: &S) -> Stats {
    storage.stats().await.expect("stats")
}

/// The stats, checked against a count of every job `list` returns (the
/// contract's "stats agree with list"), after `what`.
pub(crate) async fn stats_as_listed<S: Storage>(storage: &S, what: &str) -> Stats {
    let listed = list_all(storage, JobFilter { limit: 1_000, ..JobFilter::default() }).await;
    let mut expected = Stats::default();
    for job in &listed {
        expected.queues.entry(job.queue.as_str().to_owned()).or_default().add(job.state, 1);
    }
    let got = stats(storage).await;
    assert_eq!(got, expected, "after {what}: stats disagree with the jobs list returns");
    got
}

/// True when two payloads are the same JSON value (a backend may store
/// JSON in a normalised form, e.g. PostgreSQL jsonb).
pub(crate) fn same_json(a: &Payload, b: &Payload) -> bool {
    match (serde_json::from_str::<serde_json::Value>(a.as_str()), serde_json::from_str::<serde_json::Value>(b.as_str()))
    {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// A payload of exactly `bytes` bytes of JSON (a string).
pub(crate) fn payload_of_size(bytes: usize) -> Payload {
    assert!(bytes >= 2);
    Payload::from_json(format!("\"{}\"", "x".repeat(bytes - 2))).expect("valid JSON")
}

/// Counts per job id, to check "exactly once".
pub(crate) fn count_ids(ids: impl IntoIterator<Item = JobId>) -> HashMap<JobId, usize> {
    let mut counts = HashMap::new();
    for id in ids {
        *counts.entry(id).or_insert(0) += 1;
    }
    counts
}
