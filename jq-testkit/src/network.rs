//! Checks of what a backend on a network does when its connections go
//! silent (the peer vanished without FIN or RST, as behind a NAT or a
//! failover), run through a [`Proxy`] between the backend and its server.
//!
//! The backend under test must be configured to give up on a silent call
//! after a short response timeout ([`RESPONSE_TIMEOUT`]); the checks wait
//! for what must happen with deadlines of a few of those.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jq_core::storage::Storage;
use jq_core::{HandlerResult, Job, JobId, NewJob, Payload, State};
use jq_core::{JobContext, WorkerPool};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::proxy::Proxy;

/// The response timeout the backend under test should be given.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

/// The shutdown grace of the pools of these checks.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// What a shutdown may take, by the pool's documented bound (the grace,
/// one more grace of at least 1 s, about 2 s for the stragglers), plus
/// room for a slow machine.
pub const SHUTDOWN_BOUND: Duration = Duration::from_secs(10);

const QUEUE: &str = "net";
const KIND: &str = "net";
/// Jobs of the drain.
const JOBS: usize = 400;
/// Jobs that run before the connections go silent.
const BEFORE: usize = 100;

/// A pool over `through` (a handle whose connections pass `proxies`, one
/// per server) drains
/// jobs; mid-drain every open connection goes silent for good while new
/// ones pass ([`Proxy::strand`]). The pool must notice, open new
/// connections and finish every job (at least once: a job whose ack was
/// lost on a dead connection runs again once its lease expires). Then the
/// whole network goes silent with jobs running, and
/// [`jq_core::WorkerHandle::shutdown`] must return within
/// [`SHUTDOWN_BOUND`]; once the network is back, the jobs it could not
/// settle are recovered. `direct` is a handle on the same store that does
/// not pass the proxy.
pub async fn a_drain_survives_silent_connections<S: Storage>(proxies: &[Proxy], through: S, direct: &S) {
    let runs: Arc<Mutex<HashMap<JobId, u32>>> = Arc::default();
    let (gate, open) = watch::channel(false);
    let batch = (0..JOBS)
        .map(|i| NewJob::builder(KIND, Payload::of(&i).expect("payload")).queue(QUEUE).build().expect("job"))
        .collect();
    let ids = direct.enqueue(batch).await.expect("enqueue");

    let counted = runs.clone();
    let pool = WorkerPool::new(through)
        .queue(QUEUE)
        .concurrency(4)
        .lease(Duration::from_secs(3))
        .recover_interval(Duration::from_millis(200))
        .maintenance_lease(Duration::from_secs(2))
        .shutdown_grace(SHUTDOWN_GRACE)
        .poll_interval(Duration::from_millis(50))
        .worker_name("through-proxy")
        .register_raw(KIND, move |job: Job, _ctx: JobContext| {
            *counted.lock().unwrap_or_else(|e| e.into_inner()).entry(job.id).or_default() += 1;
            let index: usize = job.payload.decode().unwrap_or(0);
            let mut open = open.clone();
            async move {
                // Half way through, the jobs wait for the test to strand
                // the connections, so the silence comes mid-drain.
                if index >= BEFORE {
                    let _ = open.wait_for(|open| *open).await;
                }
                HandlerResult::Ok(())
            }
        })
        .start()
        .expect("start");

    until(direct, "the first jobs completed", Duration::from_secs(30), |s| {
        s.total(State::Completed) >= BEFORE as u64 / 2
    })
    .await;
    let before = accepted(proxies);
    proxies.iter().for_each(Proxy::strand);
    gate.send_replace(true);
    until(direct, "every job completed after the connections went silent", Duration::from_secs(60), |s| {
        s.total(State::Completed) == JOBS as u64
    })
    .await;
    assert!(accepted(proxies) > before, "the pool opened new connections");
    {
        let runs = runs.lock().unwrap_or_else(|e| e.into_inner());
        for id in &ids {
            assert!(runs.get(id).is_some_and(|n| *n >= 1), "job {id} never ran");
        }
    }

    // Now jobs running, and the whole network silent: the shutdown must
    // not wait for a store that cannot answer.
    gate.send_replace(false);
    let batch = (0..4)
        .map(|i| NewJob::builder(KIND, Payload::of(&(BEFORE + i)).expect("payload")).queue(QUEUE).build().expect("job"))
        .collect();
    let held = direct.enqueue(batch).await.expect("enqueue");
    until(direct, "the last jobs run", Duration::from_secs(30), |s| s.total(State::Running) == held.len() as u64).await;
    proxies.iter().for_each(Proxy::silence);
    let started = Instant::now();
    let stopped = tokio::time::timeout(SHUTDOWN_BOUND, pool.shutdown()).await;
    assert!(stopped.is_ok(), "shutdown hung with the store silent ({:?} so far)", started.elapsed());
    proxies.iter().for_each(Proxy::resume);
    proxies.iter().for_each(Proxy::reset);
    // What the shutdown could not release is recovered once its lease
    // expires, by anyone's maintenance: here, a direct call.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let recovered = direct.recover().await;
        let stats = direct.stats().await;
        if recovered.is_ok()
            && let Ok(stats) = &stats
            && stats.total(State::Running) == 0
        {
            break;
        }
        assert!(Instant::now() < deadline, "jobs left Running after the shutdown: {recovered:?} {stats:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// With every connection of `through` silent, maintenance and the other
/// calls fail within a few response timeouts instead of waiting forever,
/// and work again once the network is back.
pub async fn calls_are_bounded_while_silent<S: Storage>(proxies: &[Proxy], through: &S) {
    through.stats().await.expect("stats before the silence");
    proxies.iter().for_each(Proxy::silence);
    let bound = RESPONSE_TIMEOUT * 5;
    let recover = tokio::time::timeout(bound, through.recover()).await;
    assert!(matches!(recover, Ok(Err(jq_core::Error::Unavailable { .. }))), "recover: {recover:?}");
    let promote = tokio::time::timeout(bound, through.promote()).await;
    assert!(matches!(promote, Ok(Err(jq_core::Error::Unavailable { .. }))), "promote: {promote:?}");
    // Connections that went silent for good, new ones fine: the call after
    // a timeout opens a new connection.
    proxies.iter().for_each(Proxy::strand);
    let deadline = Instant::now() + bound * 2;
    loop {
        match tokio::time::timeout(bound, through.recover()).await {
            Ok(Ok(_)) => break,
            other => assert!(Instant::now() < deadline, "recover still failing after the network came back: {other:?}"),
        }
    }
}

/// The wake-up signal of `through` notices a listening connection that
/// went silent, reconnects, and signals work enqueued after that.
pub async fn the_wake_up_listener_reconnects<S: Storage>(proxies: &[Proxy], through: &S, direct: &S) {
    let Some(mut signal) = through.subscribe() else { return };
    let deadline = Instant::now() + Duration::from_secs(30);
    // Listening: an enqueue is signalled.
    loop {
        signal.borrow_and_update();
        enqueue_one(direct).await;
        if tokio::time::timeout(Duration::from_millis(500), signal.changed()).await.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "no wake-up before the silence");
    }
    let before = accepted(proxies);
    proxies.iter().for_each(Proxy::strand);
    let deadline = Instant::now() + RESPONSE_TIMEOUT * 10;
    while accepted(proxies) == before {
        assert!(Instant::now() < deadline, "the listener never reconnected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    loop {
        signal.borrow_and_update();
        enqueue_one(direct).await;
        if tokio::time::timeout(Duration::from_millis(500), signal.changed()).await.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "no wake-up after the listener reconnected");
    }
}

/// Connections the proxies accepted.
fn accepted(proxies: &[Proxy]) -> u64 {
    proxies.iter().map(Proxy::accepted).sum()
}

/// Enqueues one job, trying again after a failure (see [`until`]).
async fn enqueue_one<S: Storage>(direct: &S) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let job = NewJob::builder("wake", Payload::of(&0).expect("payload")).queue("wake").build().expect("job");
        match direct.enqueue(vec![job]).await {
            Ok(_) => return,
            Err(error) => assert!(Instant::now() < deadline, "enqueue kept failing: {error}"),
        }
    }
}

/// Polls `direct`'s stats until `done` holds, failing after `limit`. A
/// failed call is tried again: on a Redis Cluster whose nodes are reached
/// through the proxies, `direct` passes them too.
async fn until<S: Storage>(direct: &S, what: &str, limit: Duration, done: impl Fn(&jq_core::Stats) -> bool) {
    let deadline = Instant::now() + limit;
    loop {
        let stats = direct.stats().await;
        if let Ok(stats) = &stats
            && done(stats)
        {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting until {what}: {stats:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
