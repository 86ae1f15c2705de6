//! The worker pool against the in-memory reference storage, with real time
//! for the pool's own timers. Nothing sleeps to synchronise: tests wait on
//! conditions (a job's state) with a bounded timeout, or on channels.

#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use jq_core::storage::Operation;
use jq_core::storage::{Storage, StorageExt};
use jq_core::{ConstantBackoff, Job, JobId, JobType, NewJob, Payload, State};
use jq_core::{HandlerError, HandlerResult, JobContext, WorkerPool};
use jq_testkit::MemoryStorage;
use jq_testkit::faults::{FaultyStorage, When};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

const PATIENCE: Duration = Duration::from_secs(10);

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Greet {
    name: String,
}

impl JobType for Greet {
    const KIND: &'static str = "greet";
    const QUEUE: &'static str = "greetings";
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Other {
    n: u32,
}

impl JobType for Other {
    const KIND: &'static str = "other";
    const QUEUE: &'static str = "others";
}

/// A pool with test-friendly settings: zero backoff, maintenance off (the
/// tests that need it turn it on).
fn pool(storage: &MemoryStorage) -> WorkerPool<MemoryStorage> {
    WorkerPool::new(storage.clone()).backoff(ConstantBackoff(Duration::ZERO)).maintenance(false)
}

async fn enqueue<T: JobType>(storage: &MemoryStorage, job: &T, max_attempts: u32) -> JobId {
    storage.enqueue_one(NewJob::typed(job).max_attempts(max_attempts).build().unwrap()).await.unwrap()
}

/// Polls `check` until it returns `Some`, failing the test after PATIENCE.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until job `id` reaches `state` and returns it.
async fn until_state(storage: &MemoryStorage, id: JobId, state: State) -> Job {
    eventually(&format!("job {id} to be {state}"), || async {
        let job = storage.get(id).await.unwrap();
        (job.state == state).then_some(job)
    })
    .await
}

fn messages(job: &Job) -> Vec<&str> {
    job.errors.iter().map(|e| e.message.as_str()).collect()
}

#[tokio::test]
async fn typed_handler_runs_and_acks() {
    let storage = MemoryStorage::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handle = pool(&storage)
        .register::<Greet, _, _>(move |job, ctx: JobContext| {
            let tx = tx.clone();
            async move {
                tx.send((job, ctx.attempt(), ctx.queue().to_string())).unwrap();
                Ok(())
            }
        })
        .start()
        .unwrap();
    let id = enqueue(&storage, &Greet { name: "ada".into() }, 3).await;
    let (seen, attempt, queue) = rx.recv().await.unwrap();
    assert_eq!(seen, Greet { name: "ada".into() });
    assert_eq!((attempt, queue.as_str()), (1, "greetings"));
    let job = until_state(&storage, id, State::Completed).await;
    assert_eq!(job.attempts, 1);
    assert!(job.errors.is_empty());
    assert!(job.finished_at.is_some());
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn retry_then_success() {
    let storage = MemoryStorage::new();
    let handle = pool(&storage)
        .register::<Greet, _, _>(|_job, ctx: JobContext| async move {
            if ctx.attempt() == 1 {
                // `?` on a std error retries with its message.
                Err(std::io::Error::other("smtp down"))?;
            }
            Ok(())
        })
        .start()
        .unwrap();
    let id = enqueue(&storage, &Greet { name: "bob".into() }, 3).await;
    let job = until_state(&storage, id, State::Completed).await;
    assert_eq!(job.attempts, 2);
    assert_eq!(messages(&job), ["smtp down"]);
    assert_eq!(job.errors[0].attempt, 1);
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn always_failing_job_ends_dead_with_one_error_per_attempt() {
    let storage = MemoryStorage::new();
    let handle = pool(&storage)
        .register::<Greet, _, _>(|_job, ctx: JobContext| async move {
            Err(HandlerError::nack(format!("failure {}", ctx.attempt())))
        })
        .start()
        .unwrap();
    let id = enqueue(&storage, &Greet { name: "eve".into() }, 3).await;
    let job = until_state(&storage, id, State::Dead).await;
    assert_eq!(job.attempts, 3);
    assert_eq!(messages(&job), ["failure 1", "failure 2", "failure 3"]);
    assert_eq!(job.errors.iter().map(|e| e.attempt).collect::<Vec<_>>(), [1, 2, 3]);
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn fail_goes_dead_at_once() {
    let storage = MemoryStorage::new();
    let handle = pool(&storage)
        .register::<Greet, _, _>(|_job, _ctx| async { Err(HandlerError::bury("no such user")) })
        .start()
        .unwrap();
    let id = enqueue(&storage, &Greet { name: "x".into() }, 5).await;
    let job = until_state(&storage, id, State::Dead).await;
    assert_eq!((job.attempts, messages(&job)), (1, vec!["no such user"]));
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn panic_is_caught_and_recorded() {
    let storage = MemoryStorage::new();
    let handle = pool(&storage)
        .register::<Greet, _, _>(|job: Greet, _ctx| async move {
            if job.name == "boom" {
                panic!("kaboom for {}", job.name);
            }
            Ok(())
        })
        .start()
        .unwrap();
    let id = enqueue(&storage, &Greet { name: "boom".into() }, 2).await;
    let job = until_state(&storage, id, State::Dead).await;
    assert_eq!(messages(&job), ["handler panicked: kaboom for boom", "handler panicked: kaboom for boom"]);
    // The pool survived the panics: the next job still runs.
    let ok = enqueue(&storage, &Greet { name: "fine".into() }, 1).await;
    until_state(&storage, ok, State::Completed).await;
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn bad_payload_goes_dead_at_once_with_the_serde_reason() {
    let storage = MemoryStorage::new();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let handle = pool(&storage)
        .register::<Greet, _, _>(move |_job, _ctx| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        })
        .start()
        .unwrap();
    let bad = NewJob::builder(Greet::KIND, Payload::from_json(r#"{"nom": 1}"#).unwrap())
        .queue(Greet::QUEUE)
        .max_attempts(25)
        .build()
        .unwrap();
    let id = storage.enqueue_one(bad).await.unwrap();
    let job = until_state(&storage, id, State::Dead).await;
    assert_eq!(job.attempts, 1, "a payload that can never decode must not be retried");
    assert_eq!(job.errors.len(), 1);
    assert!(job.errors[0].message.contains("missing field `name`"), "{:?}", job.errors);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn unknown_kind_goes_dead_with_a_clear_reason() {
    let storage = MemoryStorage::new();
    let handle =
        pool(&storage).queues(["greetings"]).register::<Greet, _, _>(|_j, _c| async { Ok(()) }).start().unwrap();
    let job = NewJob::builder("mystery", Payload::from_json("{}").unwrap()).queue("greetings").build().unwrap();
    let id = storage.enqueue_one(job).await.unwrap();
    let job = until_state(&storage, id, State::Dead).await;
    assert_eq!(messages(&job), [r#"no handler registered for kind "mystery" on this worker"#]);
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn timeout_is_recorded() {
    let storage = MemoryStorage::new();
    let handle = pool(&storage)
        .job_timeout(Some(Duration::from_millis(50)))
        .register::<Greet, _, _>(|_job, _ctx| std::future::pending::<HandlerResult>())
        .start()
        .unwrap();
    let id = enqueue(&storage, &Greet { name: "slow".into() }, 1).await;
    let job = until_state(&storage, id, State::Dead).await;
    assert_eq!(messages(&job), ["timed out after 50ms"]);
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn release_hands_the_job_back_without_counting_the_attempt() {
    let storage = MemoryStorage::new();
    let runs = Arc::new(AtomicU32::new(0));
    let counted = runs.clone();
    let handle = pool(&storage)
        .register::<Greet, _, _>(move |_job, ctx: JobContext| {
            let run = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                // Every run sees attempt 1: the release gave it back.
                assert_eq!(ctx.attempt(), 1);
                if run < 3 { Err(HandlerError::release(Duration::from_millis(20))) } else { Ok(()) }
            }
        })
        .start()
        .unwrap();
    let id = enqueue(&storage, &Greet { name: "later".into() }, 1).await;
    let job = until_state(&storage, id, State::Completed).await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!(job.attempts, 1);
    assert!(job.errors.is_empty());
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn prefetched_jobs_wait_claimed_and_are_released_at_shutdown() {
    let storage = MemoryStorage::new();
    let first = enqueue(&storage, &Greet { name: "runs".into() }, 3).await;
    let second = enqueue(&storage, &Greet { name: "waits".into() }, 3).await;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let handle = pool(&storage)
        .concurrency(1)
        .prefetch(1)
        .shutdown_grace(Duration::from_millis(50))
        .register::<Greet, _, _>(move |job: Greet, _ctx| {
            let started_tx = started_tx.clone();
            async move {
                started_tx.send(job.name).unwrap();
                std::future::pending::<HandlerResult>().await
            }
        })
        .start()
        .unwrap();
    assert_eq!(started.recv().await.unwrap(), "runs");
    // One executor runs the first job; the second is claimed ahead and waits.
    until_state(&storage, second, State::Running).await;
    assert_eq!(storage.get(first).await.unwrap().state, State::Running);
    handle.shutdown().await.unwrap();
    assert!(started.try_recv().is_err(), "the prefetched job never started");
    for id in [first, second] {
        let job = storage.get(id).await.unwrap();
        assert_eq!((job.state, job.attempts), (State::Pending, 0), "{job:?}");
        assert!(job.errors.is_empty());
    }
}

#[tokio::test]
async fn graceful_shutdown_releases_an_unfinished_job_with_its_attempt_given_back() {
    let storage = MemoryStorage::new();
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (cancelled_tx, mut cancelled) = mpsc::unbounded_channel();
    let handle = pool(&storage)
        .shutdown_grace(Duration::from_millis(100))
        .register::<Greet, _, _>(move |_job, ctx: JobContext| {
            let started_tx = started_tx.clone();
            let cancelled_tx = cancelled_tx.clone();
            async move {
                started_tx.send(()).unwrap();
                // Watches its token from a separate task, as work outside
                // the future would.
                let token = ctx.cancellation().clone();
                tokio::spawn(async move {
                    token.cancelled().await;
                    let _ = cancelled_tx.send(());
                });
                std::future::pending::<HandlerResult>().await
            }
        })
        .start()
        .unwrap();
    let id = enqueue(&storage, &Greet { name: "long".into() }, 3).await;
    started.recv().await.unwrap();
    assert_eq!(storage.get(id).await.unwrap().state, State::Running);
    handle.shutdown().await.unwrap();
    // Everything is flushed when shutdown returns: no waiting needed.
    let job = storage.get(id).await.unwrap();
    assert_eq!(job.state, State::Pending);
    assert_eq!(job.attempts, 0);
    assert!(job.errors.is_empty());
    assert!(job.lease.is_none());
    cancelled.recv().await.expect("the job's cancellation token fired");
}

#[tokio::test]
async fn graceful_shutdown_lets_a_job_finish_within_the_grace() {
    let storage = MemoryStorage::new();
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (go_tx, go_rx) = async_channel::bounded::<()>(1);
    let handle = pool(&storage)
        .shutdown_grace(Duration::from_secs(30))
        .register::<Greet, _, _>(move |_job, _ctx| {
            let started_tx = started_tx.clone();
            let go_rx = go_rx.clone();
            async move {
                started_tx.send(()).unwrap();
                go_rx.recv().await.unwrap();
                Ok(())
            }
        })
        .start()
        .unwrap();
    let id = enqueue(&storage, &Greet { name: "finishing".into() }, 3).await;
    started.recv().await.unwrap();
    let shutdown = tokio::spawn(handle.shutdown());
    go_tx.send(()).await.unwrap();
    shutdown.await.unwrap().unwrap();
    let job = storage.get(id).await.unwrap();
    assert_eq!((job.state, job.attempts), (State::Completed, 1));
}

#[tokio::test]
async fn takes_from_several_queues_and_only_those() {
    let storage = MemoryStorage::new();
    let handle = pool(&storage)
        .register::<Greet, _, _>(|_j, _c| async { Ok(()) })
        .register::<Other, _, _>(|_j, _c| async { Ok(()) })
        .start()
        .unwrap();
    let a = enqueue(&storage, &Greet { name: "a".into() }, 1).await;
    let b = enqueue(&storage, &Other { n: 1 }, 1).await;
    let elsewhere =
        storage.enqueue_one(NewJob::typed(&Other { n: 2 }).queue("unwatched").build().unwrap()).await.unwrap();
    until_state(&storage, a, State::Completed).await;
    until_state(&storage, b, State::Completed).await;
    handle.shutdown().await.unwrap();
    assert_eq!(storage.get(elsewhere).await.unwrap().state, State::Pending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrency_limit_is_never_exceeded() {
    const LIMIT: usize = 3;
    let storage = MemoryStorage::new();
    let running = Arc::new(AtomicUsize::new(0));
    let max_seen = Arc::new(AtomicUsize::new(0));
    let (r, m) = (running.clone(), max_seen.clone());
    let handle = pool(&storage)
        .concurrency(LIMIT)
        .register::<Other, _, _>(move |_job, _ctx| {
            let (r, m) = (r.clone(), m.clone());
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                // Simulated work, so that runs overlap.
                tokio::time::sleep(Duration::from_millis(2)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .start()
        .unwrap();
    let jobs: Vec<NewJob> = (0..40).map(|n| NewJob::typed(&Other { n }).build().unwrap()).collect();
    let ids = storage.enqueue(jobs).await.unwrap();
    for id in ids {
        until_state(&storage, id, State::Completed).await;
    }
    handle.shutdown().await.unwrap();
    let max = max_seen.load(Ordering::SeqCst);
    assert!((1..=LIMIT).contains(&max), "max concurrently running handlers: {max}");
}

#[tokio::test]
async fn an_idle_pool_wakes_on_enqueue_without_waiting_for_its_poll() {
    let storage = MemoryStorage::new();
    let handle = pool(&storage)
        .poll_interval(Duration::from_secs(3600))
        .register::<Greet, _, _>(|_j, _c| async { Ok(()) })
        .start()
        .unwrap();
    // The first job proves the fetcher ran a claim; it is then idle, and
    // with an hour's poll only the storage's signal can wake it.
    let first = enqueue(&storage, &Greet { name: "1".into() }, 1).await;
    until_state(&storage, first, State::Completed).await;
    for n in 2..5 {
        let id = enqueue(&storage, &Greet { name: n.to_string() }, 1).await;
        until_state(&storage, id, State::Completed).await;
    }
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn raw_handler_gets_the_payload_text() {
    let storage = MemoryStorage::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handle = pool(&storage)
        .queues(["raw"])
        .register_raw("exec", move |job: Job, _ctx| {
            let tx = tx.clone();
            async move {
                tx.send(job.payload.as_str().to_owned()).unwrap();
                Ok(())
            }
        })
        .start()
        .unwrap();
    let job = NewJob::builder("exec", Payload::from_json(r#"{"cmd":"true"}"#).unwrap()).queue("raw").build().unwrap();
    let id = storage.enqueue_one(job).await.unwrap();
    assert_eq!(rx.recv().await.unwrap(), r#"{"cmd":"true"}"#);
    until_state(&storage, id, State::Completed).await;
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn fallback_runs_kinds_without_a_handler_of_their_own() {
    let storage = MemoryStorage::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handle = pool(&storage)
        .queues(["raw"])
        .register_raw("exec", |_job: Job, _ctx| async { Err(HandlerError::bury("the specific handler must not run")) })
        .register_fallback(move |job: Job, _ctx| {
            let tx = tx.clone();
            async move {
                tx.send(job.kind.clone()).unwrap();
                Ok(())
            }
        })
        .start()
        .unwrap();
    let job = NewJob::builder("anything", Payload::from_json("{}").unwrap()).queue("raw").build().unwrap();
    let id = storage.enqueue_one(job).await.unwrap();
    assert_eq!(rx.recv().await.unwrap(), "anything");
    until_state(&storage, id, State::Completed).await;
    let exec = NewJob::builder("exec", Payload::from_json("{}").unwrap()).queue("raw").build().unwrap();
    let exec = storage.enqueue_one(exec).await.unwrap();
    let dead = until_state(&storage, exec, State::Dead).await;
    assert_eq!(messages(&dead), ["the specific handler must not run"]);
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_lost_lease_cancels_the_handler_and_records_nothing() {
    let storage = MemoryStorage::new();
    let (cancelled_tx, mut cancelled) = mpsc::unbounded_channel();
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let handle = pool(&storage)
        .lease(Duration::from_millis(300))
        .heartbeat_interval(Duration::from_millis(20))
        .register::<Greet, _, _>(move |_job, ctx: JobContext| {
            let (cancelled_tx, started_tx) = (cancelled_tx.clone(), started_tx.clone());
            async move {
                let token = ctx.cancellation().clone();
                tokio::spawn(async move {
                    token.cancelled().await;
                    let _ = cancelled_tx.send(());
                });
                started_tx.send(ctx.lease()).unwrap();
                std::future::pending::<HandlerResult>().await
            }
        })
        .start()
        .unwrap();
    let id = enqueue(&storage, &Greet { name: "stolen".into() }, 3).await;
    let lease = started.recv().await.unwrap();
    // Someone else finishes the job under the same token (as an operator
    // tool might); the next heartbeat finds the lease gone.
    storage.ack(lease).await.unwrap();
    cancelled.recv().await.unwrap();
    eventually("the pool to let go of the job", || async { (handle.in_flight() == 0).then_some(()) }).await;
    handle.shutdown().await.unwrap();
    let job = storage.get(id).await.unwrap();
    assert_eq!((job.state, job.errors.len()), (State::Completed, 0));
}

#[tokio::test]
async fn maintenance_purges_past_retention() {
    let storage = MemoryStorage::new();
    let handle = pool(&storage)
        .maintenance(true)
        .purge_interval(Duration::from_millis(20))
        .retention(jq_core::Retention { completed: Some(Duration::ZERO), ..jq_core::Retention::FOREVER })
        .register::<Greet, _, _>(|_j, _c| async { Ok(()) })
        .start()
        .unwrap();
    let id = enqueue(&storage, &Greet { name: "gone".into() }, 1).await;
    eventually("the completed job to be purged", || async {
        matches!(storage.get(id).await, Err(jq_core::Error::NotFound { .. })).then_some(())
    })
    .await;
    handle.shutdown().await.unwrap();
}

/// The pool takes "now" from the storage: a retention of an hour purges a
/// job once the storage's manual clock has moved two hours, with no clock
/// given to the pool.
#[tokio::test]
async fn retention_follows_the_storage_clock() {
    let manual = jq_core::ManualClock::starting_now();
    let storage = MemoryStorage::new().clock(manual.clock());
    let handle = pool(&storage)
        .maintenance(true)
        .purge_interval(Duration::from_millis(20))
        .retention(jq_core::Retention { completed: Some(Duration::from_secs(3600)), ..jq_core::Retention::FOREVER })
        .register::<Greet, _, _>(|_j, _c| async { Ok(()) })
        .start()
        .unwrap();
    let id = enqueue(&storage, &Greet { name: "kept, then gone".into() }, 1).await;
    until_state(&storage, id, State::Completed).await;
    manual.advance(Duration::from_secs(2 * 3600));
    eventually("the completed job to be purged", || async {
        matches!(storage.get(id).await, Err(jq_core::Error::NotFound { .. })).then_some(())
    })
    .await;
    handle.shutdown().await.unwrap();
}

/// The default retention, with no `retention` call: a completed and a
/// cancelled job go after a day, a dead one stays until a week has passed.
#[tokio::test]
async fn default_retention_keeps_finished_jobs_a_day_and_dead_ones_a_week() {
    let manual = jq_core::ManualClock::starting_now();
    let storage = MemoryStorage::new().clock(manual.clock());
    let handle = pool(&storage)
        .maintenance(true)
        .purge_interval(Duration::from_millis(20))
        .register::<Greet, _, _>(|job: Greet, _c| async move {
            if job.name == "fails" { Err(HandlerError::bury("no")) } else { Ok(()) }
        })
        .start()
        .unwrap();
    let done = enqueue(&storage, &Greet { name: "done".into() }, 1).await;
    let dead = enqueue(&storage, &Greet { name: "fails".into() }, 1).await;
    let later = NewJob::typed(&Greet { name: "later".into() }).delay(Duration::from_secs(3600)).build().unwrap();
    let cancelled = storage.enqueue_one(later).await.unwrap();
    storage.cancel(cancelled).await.unwrap();
    until_state(&storage, done, State::Completed).await;
    until_state(&storage, dead, State::Dead).await;
    let gone = |id| {
        let storage = storage.clone();
        async move { matches!(storage.get(id).await, Err(jq_core::Error::NotFound { .. })) }
    };
    manual.advance(jq_core::DEFAULT_KEEP_COMPLETED.max(jq_core::DEFAULT_KEEP_CANCELLED) + Duration::from_secs(1));
    eventually("the completed and cancelled jobs to be purged", || async {
        (gone(done).await && gone(cancelled).await).then_some(())
    })
    .await;
    assert_eq!(storage.get(dead).await.unwrap().state, State::Dead, "a dead job is kept a week");
    manual.advance(jq_core::DEFAULT_KEEP_DEAD);
    eventually("the dead job to be purged", || async { gone(dead).await.then_some(()) }).await;
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn start_refuses_bad_settings() {
    let storage = MemoryStorage::new();
    let ok = |_j: Greet, _c: JobContext| async { Ok(()) };
    assert!(WorkerPool::new(storage.clone()).start().is_err(), "no queue");
    assert!(pool(&storage).register::<Greet, _, _>(ok).concurrency(0).start().is_err());
    assert!(pool(&storage).register::<Greet, _, _>(ok).queues(["a b"]).start().is_err());
    assert!(pool(&storage).register::<Greet, _, _>(ok).heartbeat_interval(Duration::from_secs(60)).start().is_err());
    assert!(pool(&storage).register::<Greet, _, _>(ok).purge_interval(Duration::ZERO).start().is_err());
    // Without a retention, the purge interval is never used.
    let kept = pool(&storage).register::<Greet, _, _>(ok).purge_interval(Duration::ZERO).keep_forever().start();
    kept.unwrap().shutdown().await.unwrap();
}

/// MemoryStorage whose first `claim` and `settle` calls fail as if the
/// server were down, and which records the largest claim asked of it.
#[derive(Clone)]
struct Flaky {
    inner: MemoryStorage,
    claim_failures: Arc<AtomicUsize>,
    settle_failures: Arc<AtomicUsize>,
    largest_claim: Arc<AtomicUsize>,
}

impl Flaky {
    fn new(inner: &MemoryStorage, claim_failures: usize, settle_failures: usize) -> Self {
        Flaky {
            inner: inner.clone(),
            claim_failures: Arc::new(AtomicUsize::new(claim_failures)),
            settle_failures: Arc::new(AtomicUsize::new(settle_failures)),
            largest_claim: Arc::default(),
        }
    }

    fn down() -> jq_core::Error {
        jq_core::Error::Unavailable { backend: "flaky", source: "connection refused".into() }
    }

    fn fails(counter: &AtomicUsize) -> bool {
        counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    }
}

#[async_trait::async_trait]
impl jq_core::storage::Wrapper for Flaky {
    type Inner = MemoryStorage;
    fn inner(&self) -> &MemoryStorage {
        &self.inner
    }
    async fn claim(&self, request: &jq_core::storage::ClaimRequest) -> jq_core::Result<jq_core::storage::ClaimAnswer> {
        if Self::fails(&self.claim_failures) {
            return Err(Self::down());
        }
        self.largest_claim.fetch_max(request.limit, Ordering::SeqCst);
        self.inner.claim(request).await
    }
    async fn settle(
        &self,
        batch: Vec<jq_core::storage::Settlement>,
    ) -> jq_core::Result<Vec<jq_core::storage::Settled>> {
        if Self::fails(&self.settle_failures) {
            return Err(Self::down());
        }
        self.inner.settle(batch).await
    }
}

#[tokio::test]
async fn storage_errors_are_retried_and_no_outcome_is_lost() {
    let inner = MemoryStorage::new();
    let storage = Flaky::new(&inner, 2, 2);
    let handle = WorkerPool::new(storage.clone())
        .maintenance(false)
        .register::<Greet, _, _>(|_j, _c| async { Ok(()) })
        .start()
        .unwrap();
    let id = enqueue(&inner, &Greet { name: "persistent".into() }, 1).await;
    let job = until_state(&inner, id, State::Completed).await;
    assert_eq!(job.attempts, 1);
    assert_eq!(storage.claim_failures.load(Ordering::SeqCst), 0);
    assert_eq!(storage.settle_failures.load(Ordering::SeqCst), 0);
    handle.shutdown().await.unwrap();
}

/// Runs `jobs` jobs of kind `Other` whose handler takes `work`, with
/// `concurrency` executors and the default prefetch, and returns the
/// largest claim the pool asked for: the slots free at that moment, of
/// `concurrency` plus the prefetch of then.
async fn largest_claim_with_default_prefetch(concurrency: usize, jobs: u32, work: Duration) -> usize {
    let inner = MemoryStorage::new();
    let storage = Flaky::new(&inner, 0, 0);
    let handle = WorkerPool::new(storage.clone())
        .maintenance(false)
        .concurrency(concurrency)
        .register::<Other, _, _>(move |_job, _ctx| async move {
            if !work.is_zero() {
                tokio::time::sleep(work).await;
            }
            Ok(())
        })
        .start()
        .unwrap();
    let all: Vec<NewJob> = (0..jobs).map(|n| NewJob::typed(&Other { n }).build().unwrap()).collect();
    let ids = inner.enqueue(all).await.unwrap();
    for id in ids {
        until_state(&inner, id, State::Completed).await;
    }
    handle.shutdown().await.unwrap();
    storage.largest_claim.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_prefetch_grows_for_a_backlog_of_short_jobs() {
    // Thousands of no-op jobs a second: 10 ms of them is far more than
    // the 4 + 4 slots a prefetch of the concurrency would allow.
    let largest = largest_claim_with_default_prefetch(4, 5_000, Duration::ZERO).await;
    assert!(largest > 8, "the largest claim asked for {largest} jobs");
    let cap = 4 + 256;
    assert!(largest <= cap, "a claim asked for {largest} jobs, over the {cap} slots");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_prefetch_of_slow_jobs_stays_at_the_concurrency() {
    // 2 executors, 20 ms a job: 100 jobs/s, one job per 10 ms, so at most
    // one job per executor waits.
    let largest = largest_claim_with_default_prefetch(2, 40, Duration::from_millis(20)).await;
    assert!((1..=4).contains(&largest), "a claim asked for {largest} jobs with 2 executors");
}

fn schema_missing() -> jq_core::Error {
    jq_core::Error::Fatal {
        backend: "test",
        source: "jq's tables are missing: run `jqctl migrate` once; relation \"jobs\" does not exist".into(),
    }
}

#[tokio::test]
async fn a_fatal_claim_error_stops_the_pool_and_reaches_the_handle() {
    let inner = MemoryStorage::new();
    let storage = FaultyStorage::new(inner.clone());
    storage.fail_with(Operation::Claim, 1, When::Before, schema_missing);
    let id = enqueue(&inner, &Greet { name: "never".into() }, 1).await;
    let handle = WorkerPool::new(storage.clone())
        .register::<Greet, _, _>(|_j, _c| async { Ok(()) })
        .poll_interval(Duration::from_millis(5))
        .start()
        .unwrap();
    let stopped = handle.shutdown_token();
    tokio::time::timeout(PATIENCE, stopped.cancelled()).await.expect("the pool stops by itself");
    assert!(handle.has_failed());
    let err = handle.wait().await.expect_err("the fatal error reaches the handle");
    assert!(matches!(err, jq_core::Error::Fatal { .. }), "{err:?}");
    assert!(err.is_fatal() && err.to_string().contains("jqctl migrate"), "{err}");
    assert_eq!(storage.calls(Operation::Claim), 1, "a fatal error is not retried");
    assert_eq!(inner.get(id).await.unwrap().state, State::Pending);
    assert!(inner.require_roles().expect("roles").leaders().await.unwrap().is_empty(), "the stopped pool resigned");
}

#[tokio::test]
async fn a_fatal_settlement_error_stops_the_pool() {
    let inner = MemoryStorage::new();
    let storage = FaultyStorage::new(inner.clone());
    storage.fail_with(Operation::Settle, 1, When::Before, || jq_core::Error::Fatal {
        backend: "test",
        source: "the writer thread died: restart the process".into(),
    });
    let id = enqueue(&inner, &Greet { name: "unrecorded".into() }, 1).await;
    let result = WorkerPool::new(storage.clone())
        .maintenance(false)
        .register::<Greet, _, _>(|_j, _c| async { Ok(()) })
        .run_until(std::future::pending())
        .await;
    assert!(matches!(result, Err(jq_core::Error::Fatal { .. })), "{result:?}");
    assert_eq!(storage.calls(Operation::Settle), 1, "a fatal error is not retried");
    // The ack was not recorded: the lease expires and recovery runs it again.
    assert_eq!(inner.get(id).await.unwrap().state, State::Running);
}

#[tokio::test]
async fn a_claim_unanswered_at_shutdown_hands_its_jobs_back() {
    let inner = MemoryStorage::new();
    let storage = FaultyStorage::new(inner.clone());
    let ids = inner
        .enqueue((0..3).map(|n| NewJob::typed(&Other { n }).max_attempts(1).build().unwrap()).collect())
        .await
        .unwrap();
    storage.fail(Operation::Claim, 1, When::AfterEffect);
    let handle = pool(&inner).register::<Other, _, _>(|_j, _c| async { Ok(()) }).start().unwrap();
    drop(handle);
    let handle = WorkerPool::new(storage.clone())
        .maintenance(false)
        .register::<Other, _, _>(|_j, _c| async { Ok(()) })
        .start()
        .unwrap();
    eventually("the claim to fail", || async { (storage.injected() == 1).then_some(()) }).await;
    // Shut down during the backoff, before the claim is sent again.
    handle.shutdown().await.unwrap();
    assert_eq!(storage.calls(Operation::Claim), 2, "one last resend collected the jobs");
    for id in ids {
        let job = inner.get(id).await.unwrap();
        assert_eq!((job.state, job.attempts), (State::Pending, 0), "released with the attempt given back: {job:?}");
    }
}

#[tokio::test]
async fn without_maintenance_a_pool_never_campaigns_and_with_it_resigns_at_shutdown() {
    let inner = MemoryStorage::new();
    let storage = FaultyStorage::new(inner.clone());
    let quiet = WorkerPool::new(storage.clone())
        .maintenance(false)
        .register::<Greet, _, _>(|_j, _c| async { Ok(()) })
        .start()
        .unwrap();
    let maintainer = WorkerPool::new(inner.clone())
        .worker_name("maintainer")
        .register::<Greet, _, _>(|_j, _c| async { Ok(()) })
        .start()
        .unwrap();
    let held = eventually("the maintainer to take the role", || async {
        inner.require_roles().expect("roles").leaders().await.unwrap().pop().filter(|l| l.holder == "maintainer")
    })
    .await;
    assert_eq!(held.role, jq_core::storage::MAINTENANCE_ROLE);
    quiet.shutdown().await.unwrap();
    assert_eq!(storage.calls(Operation::Elect) + storage.calls(Operation::Resign), 0);
    maintainer.shutdown().await.unwrap();
    assert!(inner.require_roles().expect("roles").leaders().await.unwrap().is_empty(), "resigned at shutdown");
}

/// Sends once when dropped.
struct OnDrop(mpsc::UnboundedSender<()>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// A job whose lease this pool lost and that the pool claims again before
/// any heartbeat noticed: the earlier run is cancelled (it would otherwise
/// hold its executor until it finished by itself), the new one completes.
#[tokio::test]
async fn a_job_claimed_again_by_the_same_pool_cancels_its_earlier_run() {
    let storage = MemoryStorage::new();
    let (cancelled_tx, mut cancelled) = mpsc::unbounded_channel();
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let runs = Arc::new(AtomicU32::new(0));
    let handler_runs = runs.clone();
    let handle = pool(&storage)
        .concurrency(2)
        .prefetch(0)
        .heartbeat_interval(Duration::from_secs(20))
        .register::<Greet, _, _>(move |_job, ctx: JobContext| {
            let (cancelled_tx, started_tx) = (cancelled_tx.clone(), started_tx.clone());
            let first = handler_runs.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                if first {
                    // The pool drops a cancelled handler: the guard says so.
                    let _dropped = OnDrop(cancelled_tx);
                    started_tx.send(ctx.lease()).unwrap();
                    std::future::pending::<()>().await;
                }
                Ok(())
            }
        })
        .start()
        .unwrap();
    let id = enqueue(&storage, &Greet { name: "twice".into() }, 3).await;
    let lease = started.recv().await.unwrap();
    storage.release(lease).await.unwrap(); // as an operator, or recover after expiry, would hand it back
    tokio::time::timeout(PATIENCE, cancelled.recv()).await.expect("the earlier run is cancelled").unwrap();
    let job = until_state(&storage, id, State::Completed).await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(job.attempts, 1, "the release gave the first attempt back");
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_pool_refuses_two_periodic_jobs_of_one_name_and_a_zero_interval() {
    let periodic_job = || {
        jq_core::periodic::Periodic::every("twice", Duration::from_secs(60))
            .expect("every")
            .job_with("q", |_| NewJob::builder("k", Payload::from_json("{}").expect("json")))
            .expect("periodic job")
    };
    let pool = WorkerPool::new(MemoryStorage::new()).queues(["q"]).periodic(periodic_job()).periodic(periodic_job());
    let err = pool.start().expect_err("a name declared twice");
    assert!(matches!(err, jq_core::Error::InvalidInput { .. }) && err.to_string().contains("twice"), "{err}");
    let pool =
        WorkerPool::new(MemoryStorage::new()).queues(["q"]).periodic(periodic_job()).periodic_interval(Duration::ZERO);
    assert!(matches!(pool.start(), Err(jq_core::Error::InvalidInput { .. })));
}

/// Handlers that block every thread of their runtime (a synchronous call in
/// an async handler) must not cost their leases: the heartbeat runs on a
/// thread of its own.
#[test]
fn handlers_blocking_every_runtime_thread_keep_their_leases() {
    let storage = MemoryStorage::default();
    jq_testkit::blocking::blocking_handlers_keep_their_leases(move || {
        let storage = storage.clone();
        async move { storage }
    });
}

/// A periodic job whose job builder panics fails its own step (counted and
/// logged, its ticks wait) while the other periodic jobs of the round fire,
/// round after round. *The panic ended the pool's periodic task, so every
/// periodic job of the pool stopped without a word.*
#[tokio::test]
async fn a_panicking_periodic_job_builder_stops_only_its_own_ticks() {
    let manual = jq_core::ManualClock::starting_now();
    let storage = MemoryStorage::new().clock(manual.clock());
    let every = |name: &str| jq_core::periodic::Periodic::every(name, Duration::from_secs(60)).expect("every");
    let runner = jq_core::periodic::PeriodicRunner::new(vec![
        every("boom").job_with("q", |_| -> jq_core::JobBuilder { panic!("the builder broke") }).expect("periodic job"),
        every("fine")
            .job_with("q", |_| NewJob::builder("k", Payload::from_json("{}").expect("json")))
            .expect("periodic job"),
    ])
    .unwrap();
    // The first round stores both rows (no tick is due yet).
    let first = runner.run_once(&storage).await.unwrap();
    assert_eq!(first.failed, 0);
    for round in 1..=3 {
        manual.advance(Duration::from_secs(60));
        let got = runner.run_once(&storage).await.expect("a panicking builder does not fail the round");
        assert_eq!((got.fired, got.jobs, got.failed), (1, 1, 1), "round {round}: {got:?}");
    }
    let rows = storage.require_periodic().unwrap().periodic().await.unwrap();
    let (boom, fine) = (&rows[0], &rows[1]);
    assert_eq!((boom.name.as_str(), fine.name.as_str()), ("boom", "fine"));
    assert!(fine.cursor > boom.cursor, "only the fine periodic job's cursor moved: {rows:?}");
    let err = every("x")
        .job_with("q", |_| -> jq_core::JobBuilder { panic!("at build") })
        .unwrap()
        .build(manual.now(), manual.now())
        .expect_err("a panic is an error");
    assert!(err.to_string().contains("panicked: at build"), "{err}");
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Slow {
    n: u32,
}

impl JobType for Slow {
    const KIND: &'static str = "slow";
    const QUEUE: &'static str = "slow";
    const TIMEOUT: Option<Duration> = Some(Duration::from_millis(50));
}

/// A handler that ignores its token is dropped after the stop grace: a
/// cancel request still ends the job Cancelled, not retried.
#[tokio::test]
async fn a_handler_ignoring_a_cancel_is_dropped_after_the_stop_grace() {
    let storage = MemoryStorage::new();
    let runs = Arc::new(AtomicU32::new(0));
    let counted = runs.clone();
    let handle = pool(&storage)
        .heartbeat_interval(Duration::from_millis(20))
        .stop_grace(Duration::from_millis(100))
        .register::<Other, _, _>(move |_job, _ctx: JobContext| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                // never looks at its token
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(())
            }
        })
        .start()
        .unwrap();
    let id = enqueue(&storage, &Other { n: 1 }, 5).await;
    until_state(&storage, id, State::Running).await;
    let cancels = storage.require_cancellation().unwrap();
    assert_eq!(cancels.request_cancel(id, "stop").await.unwrap(), jq_core::storage::CancelAnswer::Requested);
    let job = until_state(&storage, id, State::Cancelled).await;
    assert!(job.errors.is_empty());
    handle.shutdown().await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "not retried");
}

/// A kind's timeout (JobType::TIMEOUT) applies over the pool's; the
/// handler is told through its token, and the attempt is a nack.
#[tokio::test]
async fn a_kinds_timeout_tells_the_handler_and_nacks_the_attempt() {
    let storage = MemoryStorage::new();
    let told = Arc::new(AtomicU32::new(0));
    let seen = told.clone();
    let handle = pool(&storage)
        .job_timeout(Some(Duration::from_secs(3600)))
        .register::<Slow, _, _>(move |_job, ctx: JobContext| {
            let seen = seen.clone();
            async move {
                ctx.cancellation().cancelled().await;
                if ctx.is_timed_out() {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
                Err(HandlerError::nack("gave up"))
            }
        })
        .start()
        .unwrap();
    let id = enqueue(&storage, &Slow { n: 1 }, 2).await;
    let job = until_state(&storage, id, State::Dead).await;
    handle.shutdown().await.unwrap();
    assert_eq!(messages(&job), vec!["timed out after 50ms", "timed out after 50ms"]);
    assert_eq!(told.load(Ordering::SeqCst), 2, "told through its token on each attempt");
}

/// A job's own timeout wins over its kind's.
#[tokio::test]
async fn a_jobs_own_timeout_wins_over_its_kinds() {
    let storage = MemoryStorage::new();
    let handle = pool(&storage)
        .stop_grace(Duration::from_millis(10))
        .register::<Slow, _, _>(|_job, _ctx: JobContext| async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(())
        })
        .start()
        .unwrap();
    let long = NewJob::typed(&Slow { n: 2 }).timeout(Duration::from_secs(60)).build().unwrap();
    let id = storage.enqueue_one(long).await.unwrap();
    let job = until_state(&storage, id, State::Completed).await;
    handle.shutdown().await.unwrap();
    assert!(job.errors.is_empty(), "{:?}", job.errors);
}
