//! A real [`WorkerPool`] over the backend, through a [`FaultyStorage`]:
//! a failed claim, settlement or heartbeat (before or after its effect)
//! strands no job, and of many pools on one store exactly one maintains it.
//!
//! Time that leases and roles depend on is the storage's manual clock; the
//! pool's own timers (poll, backoff, heartbeat and campaign intervals) are
//! real but short, and the tests wait on conditions, never on sleeps.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jq_core::storage::Storage;
use jq_core::storage::{MAINTENANCE_ROLE, StorageExt};
use jq_core::{HandlerResult, JobContext, WorkerHandle, WorkerPool};
use jq_core::{Job, JobId, State};
use tokio::sync::watch;

use super::support::{LEASE, MICRO, build, builder, enqueue_all, get, manual_clock};
use crate::Harness;
use crate::faults::{FaultyStorage, When};
use jq_core::storage::Operation;

/// The longest any condition below is waited for.
const PATIENCE: Duration = Duration::from_secs(30);
const QUEUE: &str = "pooled";

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

/// How many times the handler ran each job.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<HashMap<JobId, u32>>>);

impl Runs {
    fn count(&self, id: JobId) -> u32 {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).get(&id).copied().unwrap_or(0)
    }

    fn started(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// A pool on [`QUEUE`] whose handler counts its runs and, when `gate` is
/// given, waits until it opens. Maintenance off.
fn pool<S: Storage>(storage: S, runs: &Runs, gate: Option<watch::Receiver<bool>>) -> WorkerPool<S> {
    let runs = runs.clone();
    WorkerPool::new(storage)
        .queues([QUEUE])
        .concurrency(4)
        .prefetch(4)
        .lease(LEASE)
        .poll_interval(Duration::from_millis(10))
        .maintenance(false)
        .register_raw("test", move |job: Job, _ctx: JobContext| {
            *runs.0.lock().unwrap_or_else(|p| p.into_inner()).entry(job.id).or_insert(0) += 1;
            let gate = gate.clone();
            async move {
                if let Some(mut gate) = gate {
                    let _ = gate.wait_for(|open| *open).await;
                }
                HandlerResult::Ok(())
            }
        })
}

/// `n` jobs of [`QUEUE`] with one attempt each: an attempt lost to a
/// stranded claim would leave a job Dead instead of Completed.
async fn one_shot_jobs<S: Storage>(storage: &S, clock: &jq_core::ManualClock, n: usize) -> Vec<JobId> {
    enqueue_all(storage, (0..n).map(|i| build(builder(QUEUE, i).max_attempts(1), clock)).collect()).await
}

/// Waits until every job is Completed, then checks each ran exactly once,
/// in its first attempt, with no error recorded.
async fn all_completed_once<S: Storage>(storage: &S, ids: &[JobId], runs: &Runs) {
    for &id in ids {
        let job = eventually(&format!("job {id} to be completed"), || async {
            let job = get(storage, id).await;
            job.state.is_terminal().then_some(job)
        })
        .await;
        assert_eq!(job.state, State::Completed, "job {id} ended {:?}: {job:?}", job.state);
        assert_eq!(job.attempts, 1, "job {id} lost an attempt: {job:?}");
        assert!(job.errors.is_empty(), "job {id}: {:?}", job.errors);
        assert_eq!(runs.count(id), 1, "job {id} ran {} times", runs.count(id));
    }
}

/// Runs 12 one-shot jobs through a pool whose first call of `operation`
/// fails `when`.
async fn pool_through_a_fault<H: Harness>(h: &H, operation: Operation, when: When) {
    let clock = manual_clock();
    let storage = FaultyStorage::new(h.connect(clock.clock()).await);
    let ids = one_shot_jobs(storage.inner(), &clock, 12).await;
    storage.fail(operation, 1, when);
    let runs = Runs::default();
    let handle = pool(storage.clone(), &runs, None).start().expect("start the pool");
    all_completed_once(storage.inner(), &ids, &runs).await;
    assert_eq!(storage.injected(), 1, "the fault struck");
    handle.shutdown().await.expect("no fatal error");
}

/// The pool's first claim fails before reaching the store: sent again, it
/// claims as usual.
pub async fn pool_claim_failing_before_effect_strands_nothing<H: Harness>(h: &H) {
    pool_through_a_fault(h, Operation::Claim, When::Before).await;
}

/// The pool's first claim takes its jobs but the answer is lost: sent
/// again with the same token, it returns them, and each runs once in its
/// first attempt (without the resend they would stay Running, then die).
pub async fn pool_claim_failing_after_effect_strands_nothing<H: Harness>(h: &H) {
    pool_through_a_fault(h, Operation::Claim, When::AfterEffect).await;
}

/// The pool's first settlement batch fails before reaching the store: it is
/// written again.
pub async fn pool_settle_failing_before_effect_strands_nothing<H: Harness>(h: &H) {
    pool_through_a_fault(h, Operation::Settle, When::Before).await;
}

/// The pool's first settlement batch is written but the answer is lost:
/// written again, it finds the jobs finished (`LeaseLost`, logged) and
/// nothing runs twice.
pub async fn pool_settle_failing_after_effect_strands_nothing<H: Harness>(h: &H) {
    pool_through_a_fault(h, Operation::Settle, When::AfterEffect).await;
}

/// 4 jobs run longer than a lease; one heartbeat fails `when`. The next
/// beat extends every lease, so past the first lease's expiry recover
/// finds nothing, and each job still completes once.
async fn heartbeat_through_a_fault<H: Harness>(h: &H, when: When) {
    let clock = manual_clock();
    let storage = FaultyStorage::new(h.connect(clock.clock()).await);
    let ids = one_shot_jobs(storage.inner(), &clock, 4).await;
    let runs = Runs::default();
    let (open, gate) = watch::channel(false);
    let handle = pool(storage.clone(), &runs, Some(gate))
        .prefetch(0)
        .heartbeat_interval(Duration::from_millis(20))
        .start()
        .expect("start the pool");
    eventually("the 4 jobs to start", || async { (runs.started() == 4).then_some(()) }).await;

    let faulty = storage.fail_next(Operation::Heartbeat, when);
    clock.advance(LEASE * 2 / 3);
    // The first beat that starts after the advance and is not the faulty
    // one: once the beat after it starts, it has extended every lease.
    let good = storage.calls(Operation::Heartbeat).max(faulty) + 1;
    eventually("a heartbeat to succeed after the failed one", || async {
        (storage.calls(Operation::Heartbeat) > good).then_some(())
    })
    .await;
    assert_eq!(storage.injected(), 1, "the fault struck");
    clock.advance(LEASE * 2 / 3);
    assert_eq!(storage.inner().recover().await.expect("recover"), 0, "no lease expired: the next beat made up for it");

    open.send_replace(true);
    all_completed_once(storage.inner(), &ids, &runs).await;
    handle.shutdown().await.expect("no fatal error");
}

/// A heartbeat fails before reaching the store.
pub async fn pool_heartbeat_failing_before_effect_strands_nothing<H: Harness>(h: &H) {
    heartbeat_through_a_fault(h, When::Before).await;
}

/// A heartbeat extends the leases but its answer is lost.
pub async fn pool_heartbeat_failing_after_effect_strands_nothing<H: Harness>(h: &H) {
    heartbeat_through_a_fault(h, When::AfterEffect).await;
}

/// The maintenance lease of the pools below: takeover within this long.
const MAINTENANCE_LEASE: Duration = Duration::from_millis(1200);

/// Promote and recover calls of each pool.
fn work(stores: &[FaultyStorage<impl Storage>]) -> Vec<u64> {
    stores.iter().map(|s| s.calls(Operation::Promote) + s.calls(Operation::Recover)).collect()
}

/// Waits until every pool of `alive` campaigned twice more.
async fn two_campaigns(stores: &[FaultyStorage<impl Storage>], alive: &[usize]) {
    let before: Vec<u64> = stores.iter().map(|s| s.calls(Operation::Elect)).collect();
    eventually("every pool to campaign twice", || async {
        alive.iter().all(|&i| stores[i].calls(Operation::Elect) >= before[i] + 2).then_some(())
    })
    .await;
}

/// The one pool of `alive` doing maintenance work, once one is.
async fn the_maintainer(stores: &[FaultyStorage<impl Storage>], alive: &[usize]) -> usize {
    let busy = eventually("a pool to do maintenance", || async {
        let work = work(stores);
        let busy: Vec<usize> = alive.iter().copied().filter(|&i| work[i] >= 2).collect();
        (!busy.is_empty()).then_some(busy)
    })
    .await;
    assert_eq!(busy.len(), 1, "one maintainer at a time: {:?}", work(stores));
    busy[0]
}

/// 8 pools on one store: exactly one does promote and recover, the others
/// only campaign. When it dies without resigning, nobody takes over a
/// microsecond before its role expires, and one other pool takes over
/// once it has (one lease after its last renewal by the storage's clock,
/// within one real lease after that); at shutdown it resigns.
pub async fn one_maintainer_among_eight_pools<H: Harness>(h: &H) {
    const POOLS: usize = 8;
    let clock = manual_clock();
    let mut stores = Vec::new();
    let mut handles: Vec<Option<WorkerHandle>> = Vec::new();
    for i in 0..POOLS {
        let store = FaultyStorage::new(h.connect(clock.clock()).await);
        let handle = WorkerPool::new(store.clone())
            .queues([QUEUE])
            .register_raw("test", |_job: Job, _ctx: JobContext| async { HandlerResult::Ok(()) })
            .poll_interval(Duration::from_millis(50))
            .maintenance_lease(MAINTENANCE_LEASE)
            .promote_interval(Duration::from_millis(5))
            .recover_interval(Duration::from_millis(5))
            .worker_name(format!("pool-{i}"))
            .start()
            .expect("start the pool");
        stores.push(store);
        handles.push(Some(handle));
    }
    let everyone: Vec<usize> = (0..POOLS).collect();
    let maintainer = the_maintainer(&stores, &everyone).await;
    two_campaigns(&stores, &everyone).await;
    let done = work(&stores);
    assert!(done.iter().enumerate().all(|(i, n)| (i == maintainer) == (*n > 0)), "only the maintainer works: {done:?}");
    let held = stores[0].inner().require_roles().expect("roles").leaders().await.expect("leaders");
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!((held[0].role.as_str(), held[0].holder.clone()), (MAINTENANCE_ROLE, format!("pool-{maintainer}")));

    // Killed: it stops renewing and never resigns.
    stores[maintainer].fail_next(Operation::Resign, When::Before);
    if let Some(handle) = handles[maintainer].take() {
        handle.shutdown().await.expect("no fatal error");
    }
    let expires_at = stores[0].inner().require_roles().expect("roles").leaders().await.expect("leaders")[0].expires_at;
    let others: Vec<usize> = everyone.iter().copied().filter(|&i| i != maintainer).collect();
    let idle = work(&stores);
    clock.set(expires_at - chrono::Duration::microseconds(1));
    two_campaigns(&stores, &others).await;
    assert_eq!(work(&stores), idle, "no takeover before the role expires");
    assert_eq!(
        stores[0].inner().require_roles().expect("roles").leaders().await.expect("leaders")[0].holder,
        format!("pool-{maintainer}")
    );

    clock.advance(MICRO);
    let expired = Instant::now();
    let successor = the_maintainer(&stores, &others).await;
    let waited = expired.elapsed();
    assert!(waited <= MAINTENANCE_LEASE, "takeover {waited:?} after the role expired");
    two_campaigns(&stores, &others).await;
    let done = work(&stores);
    for &i in &others {
        assert_eq!(done[i] > idle[i], i == successor, "only the successor works: {done:?}");
    }
    let held = stores[0].inner().require_roles().expect("roles").leaders().await.expect("leaders");
    assert_eq!(held[0].holder, format!("pool-{successor}"));

    for handle in handles.into_iter().flatten() {
        handle.shutdown().await.expect("no fatal error");
    }
    assert!(
        stores[0].inner().require_roles().expect("roles").leaders().await.expect("leaders").is_empty(),
        "the successor resigned at shutdown"
    );
}

/// The most handlers of each key that ran at once.
#[derive(Clone, Default)]
struct Overlap(Arc<Mutex<HashMap<String, (u32, u32)>>>);

impl Overlap {
    fn enter(&self, key: &str) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (now, most) = map.entry(key.to_owned()).or_default();
        *now += 1;
        *most = (*most).max(*now);
    }

    fn leave(&self, key: &str) {
        if let Some((now, _)) = self.0.lock().unwrap_or_else(|p| p.into_inner()).get_mut(key) {
            *now = now.saturating_sub(1);
        }
    }

    fn most(&self, key: &str) -> u32 {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).get(key).map_or(0, |(_, most)| *most)
    }
}

/// Two pools of eight, whose poll interval (a minute) would never drain
/// the queue in time, run a key limited to 2 (and one limited to 1) to the
/// end: every claim the limit cut short is sent again when a job of the
/// pool settles, or after the short limited poll, and the keys never run
/// more handlers at once than their limits allow.
pub async fn pool_under_a_key_limit_never_exceeds_it<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let keys = storage.require_keys().expect("keys");
    let q = jq_core::QueueName::new(QUEUE).expect("queue name");
    keys.set_key_limits(&q, None, &jq_core::QueueLimits { concurrency: Some(2), rate: None }).await.expect("default");
    keys.set_key_limits(&q, Some("one"), &jq_core::QueueLimits { concurrency: Some(1), rate: None })
        .await
        .expect("override");
    let mut jobs: Vec<_> = (0..24).map(|i| build(builder(QUEUE, i).key("two"), &clock)).collect();
    jobs.extend((24..36).map(|i| build(builder(QUEUE, i).key("one"), &clock)));
    let ids = enqueue_all(&storage, jobs).await;
    let runs = Runs::default();
    let overlap = Overlap::default();
    let mut handles = Vec::new();
    for n in 0..2 {
        let (runs, overlap) = (runs.clone(), overlap.clone());
        let pool = WorkerPool::new(h.connect(clock.clock()).await)
            .queues([QUEUE])
            .concurrency(8)
            .lease(LEASE)
            .poll_interval(Duration::from_secs(60))
            .maintenance(false)
            .worker_name(format!("limited-{n}"))
            .register_raw("test", move |job: Job, _ctx: JobContext| {
                *runs.0.lock().unwrap_or_else(|p| p.into_inner()).entry(job.id).or_insert(0) += 1;
                let overlap = overlap.clone();
                async move {
                    let key = job.key.clone().unwrap_or_default();
                    overlap.enter(&key);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    overlap.leave(&key);
                    HandlerResult::Ok(())
                }
            });
        handles.push(pool.start().expect("start the pool"));
    }
    all_completed_once(&storage, &ids, &runs).await;
    assert!(overlap.most("two") <= 2, "key two ran {} at once, over its limit of 2", overlap.most("two"));
    assert!(overlap.most("one") <= 1, "key one ran {} at once, over its limit of 1", overlap.most("one"));
    for handle in handles {
        handle.shutdown().await.expect("no fatal error");
    }
}
