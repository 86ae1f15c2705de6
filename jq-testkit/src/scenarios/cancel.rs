//! Cancelling running jobs, timeouts and progress
//! ([`Capability::Cancellation`](jq_core::storage::Capability::Cancellation)): the
//! contract's "Cancelling a running job", its races, and a real worker
//! pool stopping a handler on a request made through another connection.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use jq_core::storage::{CancelAnswer, Outcome, ProgressReport, Storage, StorageExt};
use jq_core::{Error, HandlerError, HandlerResult, Job, JobContext, JobFilter, JobId, State, WorkerPool};

use super::support::{LEASE, build, builder, claim_one, enqueue_all, get, lease, list_all, manual_clock, settle};
use crate::Harness;

const QUEUE: &str = "cancels";
/// The longest any condition below is waited for.
const PATIENCE: Duration = Duration::from_secs(30);

/// Polls `check` every 5 ms until it gives `Some`; panics after [`PATIENCE`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {PATIENCE:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Cancelled jobs by stats agree with a listing of them.
async fn stats_agree<S: Storage>(storage: &S) {
    let stats = storage.stats().await.expect("stats");
    for state in State::ALL {
        let listed = list_all(storage, JobFilter { state: Some(state), ..JobFilter::default() }).await.len() as u64;
        assert_eq!(stats.total(state), listed, "stats of {state} agree with the list");
    }
}

/// A cancel request for a Running job is stored (first instant and reason
/// kept on a resend), reported by every heartbeat of its lease but not of
/// a stale one, and the fenced Cancel outcome ends it Cancelled, not
/// retried. A Pending job is cancelled at once; resends of either answer
/// with the state reached.
pub async fn cancel_of_a_running_job_is_stored_and_reported<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let other = h.connect(clock.clock()).await;
    let cancels = other.require_cancellation().expect("declared");
    let ids = enqueue_all(&storage, vec![build(builder(QUEUE, 0), &clock), build(builder(QUEUE, 1), &clock)]).await;
    let job = claim_one(&storage, QUEUE, "w1").await;
    let waiting = ids.iter().copied().find(|id| *id != job.id).expect("two jobs");

    assert_eq!(cancels.request_cancel(waiting, "not needed").await.expect("cancel"), CancelAnswer::Cancelled);
    assert_eq!(get(&storage, waiting).await.state, State::Cancelled);
    assert_eq!(
        cancels.request_cancel(waiting, "again").await.expect("resend"),
        CancelAnswer::Finished(State::Cancelled),
        "a resend after a lost answer says it took effect"
    );

    let beat = storage.heartbeat(&[lease(&job)], LEASE).await.expect("heartbeat");
    assert!(beat.cancel.is_empty() && beat.lost.is_empty(), "no request yet: {beat:?}");
    let asked_at = clock.now();
    assert_eq!(cancels.request_cancel(job.id, "operator: runaway").await.expect("cancel"), CancelAnswer::Requested);
    clock.advance(Duration::from_secs(1));
    assert_eq!(cancels.request_cancel(job.id, "second").await.expect("resend"), CancelAnswer::Requested);
    let stored = get(&storage, job.id).await;
    assert_eq!(stored.state, State::Running, "a running job keeps running until its pool stops it");
    let request = stored.cancel_requested.expect("the request is stored on the job");
    assert_eq!((request.at, request.reason.as_str()), (asked_at, "operator: runaway"), "a resend keeps the first");

    let beat = storage.heartbeat(&[lease(&job)], LEASE).await.expect("heartbeat");
    assert_eq!((beat.lost, beat.cancel.clone()), (vec![], vec![job.id]), "the heartbeat carries the request");
    let stale = jq_core::storage::LeaseRef { id: job.id, token: jq_core::storage::LeaseToken::new() };
    let beat = storage.heartbeat(&[stale], LEASE).await.expect("heartbeat");
    assert_eq!((beat.lost, beat.cancel), (vec![job.id], vec![]), "a stale lease hears nothing of it");
    assert!(
        matches!(settle(&storage, stale, Outcome::Cancel).await, Err(Error::LeaseLost { .. })),
        "the Cancel outcome is fenced"
    );

    assert_eq!(settle(&storage, lease(&job), Outcome::Cancel).await.expect("settle"), State::Cancelled);
    let done = get(&storage, job.id).await;
    assert_eq!(done.state, State::Cancelled);
    assert!(done.finished_at.is_some() && done.lease.is_none() && done.errors.is_empty());
    assert_eq!(
        cancels.request_cancel(job.id, "third").await.expect("resend"),
        CancelAnswer::Finished(State::Cancelled)
    );
    assert!(matches!(cancels.request_cancel(JobId::new(), "").await, Err(Error::NotFound { .. })));
    stats_agree(&storage).await;
}

/// A cancel that arrives after the handler's success is too late: the job
/// stays Completed and the caller is told so; an ack that beats the pool
/// to a stored request completes the job too.
pub async fn cancel_after_success_is_too_late<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let cancels = storage.require_cancellation().expect("declared");
    enqueue_all(&storage, vec![build(builder(QUEUE, 0), &clock), build(builder(QUEUE, 1), &clock)]).await;
    let first = claim_one(&storage, QUEUE, "w1").await;
    settle(&storage, lease(&first), Outcome::Ack).await.expect("ack");
    assert_eq!(
        cancels.request_cancel(first.id, "late").await.expect("cancel"),
        CancelAnswer::Finished(State::Completed)
    );
    let kept = get(&storage, first.id).await;
    assert_eq!((kept.state, kept.cancel_requested), (State::Completed, None), "nothing changed");

    let second = claim_one(&storage, QUEUE, "w1").await;
    assert_eq!(cancels.request_cancel(second.id, "racing").await.expect("cancel"), CancelAnswer::Requested);
    assert_eq!(settle(&storage, lease(&second), Outcome::Ack).await.expect("ack"), State::Completed, "success wins");
    assert_eq!(
        cancels.request_cancel(second.id, "late").await.expect("cancel"),
        CancelAnswer::Finished(State::Completed)
    );
    stats_agree(&storage).await;
}

/// A job whose lease expired (its worker died, maybe while cancelling)
/// can still be asked to stop, and recover then ends it Cancelled, with
/// no error recorded, instead of handing it on; one nacked before its pool
/// heard keeps the request and is cancelled once Pending. A retry clears
/// a request.
pub async fn cancel_of_an_expired_lease_ends_cancelled_at_recover<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let cancels = storage.require_cancellation().expect("declared");
    enqueue_all(&storage, vec![build(builder(QUEUE, 0), &clock), build(builder(QUEUE, 1), &clock)]).await;
    let dying = claim_one(&storage, QUEUE, "w1").await;
    assert_eq!(cancels.request_cancel(dying.id, "stop").await.expect("cancel"), CancelAnswer::Requested);
    clock.advance(LEASE);
    let expired = claim_one(&storage, QUEUE, "w2").await;
    assert_eq!(cancels.request_cancel(expired.id, "stop").await.expect("cancel"), CancelAnswer::Requested, "expired");
    assert_eq!(storage.recover().await.expect("recover"), 1, "only the first one's lease is over yet");
    let ended = get(&storage, dying.id).await;
    assert_eq!(ended.state, State::Cancelled, "a requested cancel wins over another attempt");
    assert!(ended.errors.is_empty() && ended.lease.is_none() && ended.finished_at.is_some());
    assert_eq!(storage.claim(&super::support::request(&[QUEUE], 5, "w3")).await.expect("claim").jobs, vec![]);

    // Nacked before its pool heard: the request stays; Pending, it is
    // cancelled at once.
    let state = settle(&storage, lease(&expired), Outcome::Nack { error: "boom".into(), delay: Duration::ZERO })
        .await
        .expect("nack");
    assert_eq!(state, State::Pending);
    assert!(get(&storage, expired.id).await.cancel_requested.is_some(), "the request stays with the job");
    assert_eq!(cancels.request_cancel(expired.id, "stop").await.expect("cancel"), CancelAnswer::Cancelled);
    stats_agree(&storage).await;

    // A retry is an operator's new start: no request carried over.
    let once = build(builder(QUEUE, 2).max_attempts(1), &clock);
    let once = enqueue_all(&storage, vec![once]).await[0];
    let job = claim_one(&storage, QUEUE, "w1").await;
    assert_eq!(job.id, once);
    cancels.request_cancel(once, "stop").await.expect("cancel");
    settle(&storage, lease(&job), Outcome::Nack { error: "boom".into(), delay: Duration::ZERO }).await.expect("nack");
    assert_eq!(get(&storage, once).await.state, State::Dead);
    storage.retry(once).await.expect("retry");
    let retried = get(&storage, once).await;
    assert_eq!((retried.state, retried.cancel_requested), (State::Pending, None));
}

/// Progress reports are fenced like settlements, stored, read back by
/// get and list, and kept once the job finishes.
pub async fn progress_is_stored_and_read_back<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let other = h.connect(clock.clock()).await;
    let cancels = storage.require_cancellation().expect("declared");
    enqueue_all(&storage, vec![build(builder(QUEUE, 0), &clock)]).await;
    let job = claim_one(&storage, QUEUE, "w1").await;
    assert_eq!(job.progress, None);
    let value = r#"{"message":"step 2 of 5: résumé","percent":40}"#;
    let report = ProgressReport { lease: lease(&job), value: value.to_owned() };
    assert!(cancels.progress(std::slice::from_ref(&report)).await.expect("progress").is_empty());
    let read: serde_json::Value =
        serde_json::from_str(get(&other, job.id).await.progress.as_deref().expect("stored")).expect("JSON");
    assert_eq!(read, serde_json::json!({"percent": 40, "message": "step 2 of 5: résumé"}));
    let listed = list_all(&other, JobFilter::default()).await;
    assert_eq!(listed[0].progress, get(&other, job.id).await.progress, "list reads it too");

    let stale = ProgressReport {
        lease: jq_core::storage::LeaseRef { id: job.id, token: jq_core::storage::LeaseToken::new() },
        value: "99".to_owned(),
    };
    assert_eq!(cancels.progress(&[stale]).await.expect("progress"), vec![job.id], "a stale lease stores nothing");
    let bad = ProgressReport { lease: lease(&job), value: "not json".to_owned() };
    assert!(matches!(cancels.progress(&[bad]).await, Err(Error::InvalidInput { .. })));
    settle(&storage, lease(&job), Outcome::Ack).await.expect("ack");
    let done = get(&storage, job.id).await;
    assert_eq!(done.progress.map(|p| serde_json::from_str::<serde_json::Value>(&p).expect("JSON")), Some(read));
    let late = ProgressReport { lease: lease(&job), value: "100".to_owned() };
    assert_eq!(cancels.progress(&[late]).await.expect("progress"), vec![job.id], "a finished job's is kept");
}

/// A real pool at default settings (heartbeat, grace) stops a running
/// handler when another connection asks: the handler sees the request
/// through its token, the job ends Cancelled within 2 s, not retried, and
/// its progress, reported meanwhile, is stored.
pub async fn pool_cancels_a_running_job_from_another_connection_within_2s<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let other = h.connect(clock.clock()).await;
    let told = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicU32::new(0));
    let (seen, told_in, runs_in) = (Arc::new(AtomicBool::new(false)), told.clone(), runs.clone());
    let started = seen.clone();
    let handle = WorkerPool::new(storage.clone())
        .queues([QUEUE])
        .maintenance(false)
        .register_raw("test", move |_job: Job, ctx: JobContext| {
            let (started, told, runs) = (started.clone(), told_in.clone(), runs_in.clone());
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                ctx.progress(&serde_json::json!({"percent": 10})).map_err(HandlerError::nack)?;
                started.store(true, Ordering::SeqCst);
                ctx.cancellation().cancelled().await;
                told.store(ctx.is_cancel_requested(), Ordering::SeqCst);
                HandlerResult::Err(HandlerError::nack("stopped on request"))
            }
        })
        .start()
        .expect("pool starts");
    let id = enqueue_all(&other, vec![build(builder(QUEUE, 0), &clock)]).await[0];
    eventually("the handler to start", || async { seen.load(Ordering::SeqCst).then_some(()) }).await;
    eventually("the progress to be stored", || async { get(&other, id).await.progress }).await;

    let asked = Instant::now();
    let answer = other.require_cancellation().expect("declared").request_cancel(id, "from the test").await;
    assert_eq!(answer.expect("cancel"), CancelAnswer::Requested);
    let ended = eventually("the job to end", || async {
        let job = get(&other, id).await;
        job.state.is_terminal().then_some(job)
    })
    .await;
    let took = asked.elapsed();
    assert_eq!(ended.state, State::Cancelled, "{ended:?}");
    assert!(took < Duration::from_secs(2), "cancelled after {took:?}, over the 2 s the contract allows");
    assert!(told.load(Ordering::SeqCst), "the handler's context says a cancel was requested");
    assert!(ended.errors.is_empty(), "a cancel is not a failure: {:?}", ended.errors);
    handle.shutdown().await.expect("shutdown");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "not retried");
}

/// An attempt past its job's timeout is told through its token, and is a
/// failed attempt retried by the policy; the timeout is stored with the
/// job.
pub async fn timed_out_attempt_is_retried<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let runs = Arc::new(AtomicU32::new(0));
    let told = Arc::new(AtomicBool::new(false));
    let (counted, told_in) = (runs.clone(), told.clone());
    let handle = WorkerPool::new(storage.clone())
        .queues([QUEUE])
        .maintenance(false)
        .poll_interval(Duration::from_millis(10))
        .backoff(jq_core::ConstantBackoff(Duration::ZERO))
        .register_raw("test", move |_job: Job, ctx: JobContext| {
            let run = counted.fetch_add(1, Ordering::SeqCst) + 1;
            let told = told_in.clone();
            async move {
                if run == 1 {
                    ctx.cancellation().cancelled().await;
                    told.store(ctx.is_timed_out() && !ctx.is_cancel_requested(), Ordering::SeqCst);
                    return HandlerResult::Err(HandlerError::nack("gave up"));
                }
                HandlerResult::Ok(())
            }
        })
        .start()
        .expect("pool starts");
    let job = build(builder(QUEUE, 0).timeout(Duration::from_millis(200)), &clock);
    let id = enqueue_all(&storage, vec![job]).await[0];
    assert_eq!(get(&storage, id).await.timeout, Some(Duration::from_millis(200)), "stored with the job");
    let done = eventually("the retry to complete", || async {
        let job = get(&storage, id).await;
        job.state.is_terminal().then_some(job)
    })
    .await;
    handle.shutdown().await.expect("shutdown");
    assert_eq!((done.state, done.attempts), (State::Completed, 2), "{done:?}");
    assert_eq!(done.errors.len(), 1);
    assert!(done.errors[0].message.contains("timed out after 200ms"), "{:?}", done.errors);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert!(told.load(Ordering::SeqCst), "the handler was told of its timeout through its token");
}
