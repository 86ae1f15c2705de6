//! A handler that blocks its thread must not cost its job's lease: the
//! check every backend runs ([`blocking_handlers_keep_their_leases`]).
//!
//! A synchronous call inside an async handler blocks its runtime thread;
//! on a runtime with as many threads as the pool runs handlers, every
//! thread blocks, and with them every task and every socket that runtime
//! drives. If the heartbeat depended on that runtime, the leases would
//! expire and another pool would run the jobs again while the first one
//! still ran them.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jq_core::storage::Storage;
use jq_core::{HandlerResult, Job, JobId, NewJob, Payload, State};
use jq_core::{JobContext, WorkerPool};

/// How many handlers the blocking pool runs at once, and the threads of
/// its runtime.
pub const CONCURRENCY: usize = 2;

/// The lease of the blocking pool.
pub const LEASE: Duration = Duration::from_millis(600);

/// How long each handler blocks its thread: several leases.
pub const BLOCK: Duration = Duration::from_millis(2_000);

const QUEUE: &str = "blocking";
const KIND: &str = "blocks";

/// Pool A, on a runtime of [`CONCURRENCY`] threads, with that concurrency
/// and a lease of [`LEASE`], runs handlers that block their thread for
/// [`BLOCK`] with `std::thread::sleep`; once both of its jobs are Running,
/// pool B, on another runtime and the same store, takes the other jobs and
/// recovers expired leases every 50 ms. Every job must run exactly once,
/// on its first attempt: pool A's leases were kept while its runtime was
/// blocked.
///
/// `connect` opens a new handle on one store (the same each call); each
/// pool's handle is opened on that pool's runtime, as an application's
/// would be. Call it from a plain `#[test]`, not inside a runtime.
pub fn blocking_handlers_keep_their_leases<S, F, Fut>(connect: F)
where
    S: Storage + Clone,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let runs: Arc<Mutex<HashMap<JobId, u32>>> = Arc::default();
    let observer = runtime(1);
    let store = observer.block_on(connect());
    let jobs = CONCURRENCY * 2;
    let ids = observer.block_on(async {
        let batch = (0..jobs)
            .map(|i| NewJob::builder(KIND, Payload::of(&i).expect("payload")).queue(QUEUE).build().expect("job"))
            .collect();
        store.enqueue(batch).await.expect("enqueue")
    });

    let blocking = runtime(CONCURRENCY);
    let pool_a = {
        let storage = blocking.block_on(connect());
        let runs = runs.clone();
        blocking
            .block_on(async move {
                WorkerPool::new(storage)
                    .queue(QUEUE)
                    .concurrency(CONCURRENCY)
                    .prefetch(0)
                    .lease(LEASE)
                    .heartbeat_interval(LEASE / 6)
                    .maintenance(false)
                    .worker_name("blocking")
                    .register_raw(KIND, move |job: Job, _ctx: JobContext| {
                        count(&runs, job.id);
                        async move {
                            // The mistake under test: a synchronous call in an async handler.
                            std::thread::sleep(BLOCK);
                            HandlerResult::Ok(())
                        }
                    })
                    .start()
            })
            .expect("start pool A")
    };
    // Pool A holds CONCURRENCY jobs, and its handlers block every thread.
    wait_for(&observer, "pool A runs its jobs", || async {
        store.stats().await.expect("stats").total(State::Running) == CONCURRENCY as u64
    });

    let healthy = runtime(2);
    let pool_b = {
        let storage = healthy.block_on(connect());
        let runs = runs.clone();
        healthy
            .block_on(async move {
                WorkerPool::new(storage)
                    .queue(QUEUE)
                    .concurrency(CONCURRENCY)
                    .recover_interval(Duration::from_millis(50))
                    .worker_name("healthy")
                    .register_raw(KIND, move |job: Job, _ctx: JobContext| {
                        count(&runs, job.id);
                        async move { HandlerResult::Ok(()) }
                    })
                    .start()
            })
            .expect("start pool B")
    };
    wait_for(&observer, "every job completed", || async {
        store.stats().await.expect("stats").total(State::Completed) == jobs as u64
    });
    healthy.block_on(pool_b.shutdown()).expect("pool B shutdown");
    blocking.block_on(pool_a.shutdown()).expect("pool A shutdown");

    let runs = runs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for id in &ids {
        assert_eq!(
            runs.get(id),
            Some(&1),
            "job {id} ran {:?} times: a lease expired while its handler blocked",
            runs.get(id)
        );
        let job = observer.block_on(store.get(*id)).expect("get");
        assert_eq!(job.attempts, 1, "job {id} was recovered and claimed again");
    }
}

fn count(runs: &Mutex<HashMap<JobId, u32>>, id: JobId) {
    *runs.lock().unwrap_or_else(|e| e.into_inner()).entry(id).or_default() += 1;
}

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build().expect("runtime")
}

/// Polls `condition` on `rt` until it holds, failing after 30 s.
fn wait_for<C, Fut>(rt: &tokio::runtime::Runtime, what: &str, condition: C)
where
    C: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    rt.block_on(async {
        while !condition().await {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}
