//! A core-only backend through the shared suites, then through the client
//! and a worker pool: everything about jobs works, and what needs a
//! capability is refused with a clear `Unsupported` before it does anything.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::time::Duration;

use custom_backend::MinimalStorage;
use jq::periodic::Periodic;
use jq::storage::{Capability, ClaimRequest, Storage};
use jq::{Client, Clock, Error, JobType, ManualClock, NewJob, QueueName, State};
use serde::{Deserialize, Serialize};

struct Harness {
    store: MinimalStorage,
}

#[async_trait::async_trait]
impl jq_testkit::Harness for Harness {
    type Storage = MinimalStorage;

    async fn connect(&self, clock: Clock) -> MinimalStorage {
        self.store.connect(clock)
    }

    async fn cleanup(&self) {
        // In-process: nothing outlives the test.
    }
}

async fn setup() -> Harness {
    Harness { store: MinimalStorage::default() }
}

// No capability listed: `declares_its_capabilities` checks it declares none
// and refuses each with `Unsupported`.
jq_testkit::conformance!(setup);
// The model comparison covers the core; only periodic jobs have a property
// of their own, and this backend has none.
jq_testkit::properties!(setup);

#[derive(Serialize, Deserialize)]
struct Resize {
    image: String,
}

impl JobType for Resize {
    const KIND: &'static str = "resize";
    const QUEUE: &'static str = "images";
}

/// How long a test waits for a pool to run a job before failing: a bound
/// so a broken backend fails instead of hanging, not a speed check.
const PATIENCE: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_pool_runs_jobs_over_it() {
    let client = Client::new(MinimalStorage::default());
    assert!(client.capabilities().is_empty(), "core only: {:?}", client.capabilities());
    let (done, mut finished) = tokio::sync::mpsc::unbounded_channel();
    let pool = client
        .worker_pool()
        .register::<Resize, _, _>(move |job, ctx| {
            let done = done.clone();
            async move {
                // The first attempt of "flaky" fails: nacked, then run again.
                if job.image == "flaky.png" && ctx.attempt() == 1 {
                    return Err(jq::HandlerError::nack("the image server hung up"));
                }
                done.send(job.image).ok();
                Ok(())
            }
        })
        .backoff(jq::ConstantBackoff(Duration::ZERO))
        .start()
        .unwrap();
    let images = ["a.png", "b.png", "flaky.png"];
    let ids = client.enqueue_many(images.map(|image| Resize { image: image.into() })).await.unwrap();
    let mut ran = Vec::new();
    for _ in images {
        ran.push(tokio::time::timeout(PATIENCE, finished.recv()).await.unwrap().unwrap());
    }
    pool.shutdown().await.unwrap();
    ran.sort();
    assert_eq!(ran, images);
    for id in ids {
        assert_eq!(client.get(id).await.unwrap().state, State::Completed);
    }
    let flaky = client.list(&jq::JobFilter::default()).await.unwrap().into_iter().find(|j| j.attempts == 2).unwrap();
    assert_eq!(flaky.errors.len(), 1, "one error per failed attempt");
    assert_eq!(flaky.errors[0].message, "the image server hung up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_without_roles_maintains_it() {
    // A worker claimed a job and died; its lease has expired.
    let clock = ManualClock::starting_now();
    let client = Client::new(MinimalStorage::new(clock.clock()));
    let id = client.enqueue(Resize { image: "orphan.png".into() }).await.unwrap();
    let request = ClaimRequest::new(vec![QueueName::new("images").unwrap()], 1, Duration::from_secs(1), "crashed");
    assert_eq!(client.storage().claim(&request).await.unwrap().jobs.len(), 1);
    clock.advance(Duration::from_secs(2));

    // No election without roles: the pool maintains on its own, and its
    // recover hands the job on to its own workers.
    let (done, mut finished) = tokio::sync::mpsc::unbounded_channel();
    let pool = client
        .worker_pool()
        .recover_interval(Duration::from_millis(10))
        .register::<Resize, _, _>(move |job, _ctx| {
            let done = done.clone();
            async move {
                done.send(job.image).ok();
                Ok(())
            }
        })
        .start()
        .unwrap();
    let ran = tokio::time::timeout(PATIENCE, finished.recv()).await.unwrap().unwrap();
    pool.shutdown().await.unwrap();
    assert_eq!(ran, "orphan.png");
    let job = client.get(id).await.unwrap();
    assert_eq!((job.state, job.attempts), (State::Completed, 2));
    assert!(job.errors[0].message.starts_with("lease expired (worker crashed "), "{:?}", job.errors);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_needs_a_capability_is_refused_and_changes_nothing() {
    let client = Client::new(MinimalStorage::default());
    let id = client.enqueue(Resize { image: "a.png".into() }).await.unwrap();
    let unsupported = |result: jq::Result<()>, capability: Capability| match result {
        Err(Error::Unsupported { capability: c }) if c == capability => {}
        other => panic!("{capability} is not declared, so it must be Unsupported: {other:?}"),
    };

    // A pool with a periodic job is refused at start, before it claims anything.
    let nightly = Periodic::every("nightly", Duration::from_secs(86_400))
        .unwrap()
        .job_with("images", |_tick| NewJob::typed(&Resize { image: "nightly.png".into() }))
        .unwrap();
    let started = client.worker_pool().register::<Resize, _, _>(|_, _| async { Ok(()) }).periodic(nightly).start();
    let error = started.map(drop).unwrap_err();
    assert_eq!(
        error.to_string(),
        "this store does not support periodic jobs: its backend does not implement PeriodicStorage"
    );
    unsupported(Err(error), Capability::Periodic);

    unsupported(client.pause("images").await, Capability::Controls);
    unsupported(client.trigger("nightly").await, Capability::Periodic);
    unsupported(client.leaders().await.map(drop), Capability::Roles);
    unsupported(client.queues().await.map(drop), Capability::Controls);
    unsupported(client.throughput(client.clock().now()).await.map(drop), Capability::Throughput);

    // Nothing ran and nothing changed: the job still waits, the only one.
    let job = client.get(id).await.unwrap();
    assert_eq!((job.state, job.attempts), (State::Pending, 0));
    assert_eq!(client.stats().await.unwrap().total(State::Pending), 1);
}
