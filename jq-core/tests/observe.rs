//! The pool's metrics, read back through a debugging recorder on one
//! thread (a current-thread runtime runs every task of the pool there):
//! per-job counters by queue and kind, the store's gauges sampled by the
//! maintaining pool, and nothing at all with `observe(false)`.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::time::Duration;

use jq_core::storage::Storage;
use jq_core::{HandlerError, HandlerResult, JobContext, NewJob, Payload, WorkerPool};
use jq_testkit::MemoryStorage;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// One snapshot (taking it resets the counters and histograms it reads).
type Snapshot = Vec<(metrics_util::CompositeKey, Option<metrics::Unit>, Option<metrics::SharedString>, DebugValue)>;

/// The value of `name` with exactly `labels`, if recorded.
fn value<'a>(snapshot: &'a Snapshot, name: &str, labels: &[(&str, &str)]) -> Option<&'a DebugValue> {
    snapshot.iter().find_map(|(key, _, _, value)| {
        let key = key.key();
        let mut got: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
        let mut want = labels.to_vec();
        got.sort_unstable();
        want.sort_unstable();
        (key.name() == name && got == want).then_some(value)
    })
}

async fn enqueue(storage: &MemoryStorage, n: u64) {
    let jobs = (0..n).map(|i| NewJob::builder("obs", Payload::of(&i).unwrap()).queue("q").build().unwrap()).collect();
    storage.enqueue(jobs).await.unwrap();
}

/// Jobs 0..n: odd ones fail for good, even ones succeed.
fn handler(job: jq_core::Job, _ctx: JobContext) -> impl Future<Output = HandlerResult> {
    let i: u64 = job.payload.decode().unwrap();
    async move { if i % 2 == 1 { Err(HandlerError::bury("odd")) } else { Ok(()) } }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_pool_counts_runs_and_its_maintainer_samples_the_store() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let storage = MemoryStorage::default();
    enqueue(&storage, 10).await;
    let pool = WorkerPool::new(storage.clone())
        .queue("q")
        .register_raw("obs", handler)
        .sample_interval(Duration::from_secs(1))
        .start()
        .unwrap();
    let labels = [("queue", "q"), ("kind", "obs")];
    let completed = [("queue", "q"), ("state", "completed")];
    // Paused time: each sleep lets every task run, with no real waiting.
    while storage.stats().await.unwrap().total(jq_core::State::Completed) < 5
        || storage.stats().await.unwrap().total(jq_core::State::Dead) < 5
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Two sample intervals: the maintainer samples the drained store.
    tokio::time::sleep(Duration::from_secs(2)).await;
    pool.shutdown().await.unwrap();
    let snapshot = snapshotter.snapshot().into_vec();
    assert_eq!(value(&snapshot, "jq_jobs", &completed), Some(&DebugValue::Gauge(5.0.into())));
    assert_eq!(value(&snapshot, "jq_jobs_started_total", &labels), Some(&DebugValue::Counter(10)));
    assert_eq!(value(&snapshot, "jq_jobs_completed_total", &labels), Some(&DebugValue::Counter(5)));
    assert_eq!(value(&snapshot, "jq_jobs_dead_total", &labels), Some(&DebugValue::Counter(5)));
    assert_eq!(value(&snapshot, "jq_jobs_nacked_total", &labels), Some(&DebugValue::Counter(0)));
    let Some(DebugValue::Histogram(durations)) = value(&snapshot, "jq_job_run_duration_seconds", &labels) else {
        panic!("no run duration histogram");
    };
    assert_eq!(durations.len(), 10);
    assert_eq!(value(&snapshot, "jq_jobs", &[("queue", "q"), ("state", "dead")]), Some(&DebugValue::Gauge(5.0.into())));
    assert_eq!(
        value(&snapshot, "jq_jobs", &[("queue", "q"), ("state", "pending")]),
        Some(&DebugValue::Gauge(0.0.into()))
    );
    assert_eq!(
        value(&snapshot, "jq_oldest_pending_age_seconds", &[("queue", "q")]),
        Some(&DebugValue::Gauge(0.0.into()))
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn observe_false_records_nothing() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let storage = MemoryStorage::default();
    enqueue(&storage, 4).await;
    let pool = WorkerPool::new(storage.clone())
        .queue("q")
        .register_raw("obs", handler)
        .observe(false)
        .sample_interval(Duration::from_millis(100))
        .start()
        .unwrap();
    while storage.stats().await.unwrap().total(jq_core::State::Pending) > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Long enough for several sample intervals, had sampling been on.
    tokio::time::sleep(Duration::from_secs(2)).await;
    pool.shutdown().await.unwrap();
    assert!(snapshotter.snapshot().into_vec().is_empty(), "{:?}", snapshotter.snapshot().into_vec());
}

/// A handler that never returns: dropped after the stop grace once its
/// timeout passed, and at the end of the shutdown grace; both counted in
/// `jq_jobs_dropped_total` with the reason, and neither holds the pool.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn handlers_ignoring_their_token_are_dropped_and_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let storage = MemoryStorage::default();
    let hung = |_job: jq_core::Job, _ctx: JobContext| std::future::pending::<HandlerResult>();
    let timed = NewJob::builder("hung", Payload::of(&1).unwrap())
        .queue("q")
        .max_attempts(1)
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let timed = storage.enqueue(vec![timed]).await.unwrap()[0];
    let pool = WorkerPool::new(storage.clone())
        .queue("q")
        .register_raw("hung", hung)
        .stop_grace(Duration::from_secs(2))
        .shutdown_grace(Duration::from_secs(3))
        .start()
        .unwrap();
    while storage.get(timed).await.unwrap().state != jq_core::State::Dead {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stuck = NewJob::builder("hung", Payload::of(&2).unwrap()).queue("q").build().unwrap();
    let stuck = storage.enqueue(vec![stuck]).await.unwrap()[0];
    while storage.get(stuck).await.unwrap().state != jq_core::State::Running {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pool.shutdown().await.unwrap();
    assert_eq!(storage.get(stuck).await.unwrap().state, jq_core::State::Pending, "released at shutdown");
    let snapshot = snapshotter.snapshot().into_vec();
    let dropped =
        |reason| value(&snapshot, "jq_jobs_dropped_total", &[("queue", "q"), ("kind", "hung"), ("reason", reason)]);
    assert_eq!(dropped("timeout"), Some(&DebugValue::Counter(1)));
    assert_eq!(dropped("shutdown"), Some(&DebugValue::Counter(1)));
}
