//! The capabilities a backend declares
//! ([`Storage::capabilities`]) are
//! exactly those its conformance run lists, and each one it lacks is
//! refused with [`Error::Unsupported`] naming it: at the call, and when a
//! worker pool that needs it starts.

use std::time::Duration;

use jq_core::periodic::Periodic;
use jq_core::storage::{Capability, Storage, StorageExt};
use jq_core::{Clock, Error, WorkerPool};

use crate::Harness;

/// The name `conformance!` lists a capability by.
pub fn listed_name(capability: Capability) -> &'static str {
    match capability {
        Capability::Roles => "roles",
        Capability::Periodic => "periodic",
        Capability::Controls => "controls",
        Capability::Throughput => "throughput",
        Capability::Cancellation => "cancellation",
        Capability::Workflows => "workflows",
        Capability::Keys => "keys",
        Capability::Durable => "durable",
        _ => "unknown",
    }
}

/// Without keyed jobs, a keyed job is refused as Unsupported and nothing
/// of its batch is stored: at enqueue, in a workflow's steps, and in a
/// periodic job's tick. *Storing it without its key would drop the key's
/// limits without a word.*
async fn refuses_keyed_jobs<S: Storage>(storage: &S) {
    let job = |queue: &str, key: Option<&str>| {
        let builder = jq_core::NewJob::builder("k", jq_core::Payload::of(&()).expect("json")).queue(queue);
        match key {
            Some(key) => builder.key(key),
            None => builder,
        }
        .build_at(storage.clock().now())
        .expect("a job")
    };
    let unsupported = |got: &jq_core::Result<Vec<jq_core::JobId>>| {
        matches!(got, Err(Error::Unsupported { capability: Capability::Keys }))
    };
    let batch = vec![job("no-keys", None), job("no-keys", Some("tenant-1"))];
    let ids: Vec<jq_core::JobId> = batch.iter().map(|j| j.id).collect();
    let got = storage.enqueue(batch).await;
    assert!(unsupported(&got), "a keyed job on a backend without keys is Unsupported: {got:?}");
    for id in ids {
        assert!(matches!(storage.get(id).await, Err(Error::NotFound { .. })), "and nothing of its batch is stored");
    }
    if let Some(workflows) = storage.capabilities().workflows {
        let plan = jq_core::workflow::Batch::new([job("no-keys", Some("tenant-1"))], job("no-keys", None))
            .plan()
            .expect("a plan");
        let got = workflows.enqueue_workflow(&plan).await;
        assert!(unsupported(&got), "a keyed step is Unsupported: {got:?}");
        for id in plan.ids() {
            assert!(matches!(storage.get(id).await, Err(Error::NotFound { .. })), "and no step is stored");
        }
    }
    if let Some(periodic) = storage.capabilities().periodic {
        let keyed = job("no-keys", Some("tenant-1"));
        let id = keyed.id;
        let now = storage.clock().now();
        let fire = jq_core::periodic::Fire {
            name: "keyed-tick".into(),
            queue: keyed.queue.clone(),
            spec: "every 60s".into(),
            zone: "UTC".into(),
            expected: None,
            expected_trigger: None,
            cursor: now,
            jobs: vec![keyed],
            missed: 0,
            last_missed: None,
        };
        let got = periodic.fire(&fire).await;
        assert!(
            matches!(got, Err(Error::Unsupported { capability: Capability::Keys })),
            "a keyed tick is Unsupported: {got:?}"
        );
        assert!(matches!(storage.get(id).await, Err(Error::NotFound { .. })), "and its job is not stored");
    }
}

/// The storage declares exactly `listed` (names as `conformance!` takes
/// them), and refuses every other capability with `Unsupported`.
pub async fn declares_its_capabilities<H: Harness>(h: &H, listed: &[&str]) {
    let storage = h.connect(Clock::system()).await;
    let mut declared: Vec<&str> = storage.capabilities().declared().into_iter().map(listed_name).collect();
    let mut listed = listed.to_vec();
    declared.sort_unstable();
    listed.sort_unstable();
    assert_eq!(
        declared, listed,
        "the storage declares these capabilities, the conformance run lists those: list every one it declares \
         (an unlisted one goes untested) and declare every one it lists"
    );
    for capability in Capability::ALL.into_iter().filter(|c| !c.of(&storage)) {
        let refused = match capability {
            Capability::Roles => storage.require_roles().err(),
            Capability::Periodic => storage.require_periodic().err(),
            Capability::Controls => storage.require_controls().err(),
            Capability::Throughput => storage.require_throughput().err(),
            Capability::Cancellation => storage.require_cancellation().err(),
            Capability::Workflows => storage.require_workflows().err(),
            Capability::Keys => storage.require_keys().err(),
            Capability::Durable => storage.require_durable().err(),
            _ => None,
        };
        assert!(
            matches!(refused, Some(Error::Unsupported { capability: c }) if c == capability),
            "{capability} is not declared, so it must be refused as Unsupported: {refused:?}"
        );
    }
    if !Capability::Workflows.of(&storage) {
        // A result is part of workflows: without them an AckWith is
        // refused at its place and changes nothing.
        let queue = "no-workflows";
        let job = jq_core::NewJob::builder("k", jq_core::Payload::of(&()).expect("json"))
            .queue(queue)
            .build()
            .expect("a job");
        let id = storage.enqueue_one(job).await.expect("enqueue");
        let request = jq_core::storage::ClaimRequest::new(
            vec![jq_core::QueueName::new(queue).expect("queue")],
            1,
            Duration::from_secs(30),
            "w",
        );
        let claimed = storage.claim(&request).await.expect("claim").jobs;
        let lease = claimed.first().and_then(|j| j.lease_ref()).expect("the job was claimed");
        let result = jq_core::Payload::of(&1).expect("json");
        let answer = storage.settle_one(lease, jq_core::storage::Outcome::AckWith { result }).await;
        assert!(
            matches!(answer, Err(Error::Unsupported { capability: Capability::Workflows })),
            "an AckWith without workflows is Unsupported: {answer:?}"
        );
        assert_eq!(storage.get(id).await.expect("get").state, jq_core::State::Running, "and changes nothing");
        storage.ack(lease).await.expect("a plain ack still works");
    }
    if !Capability::Keys.of(&storage) {
        refuses_keyed_jobs(&storage).await;
    }
    if !Capability::Periodic.of(&storage) {
        let every = Periodic::every("refused", Duration::from_secs(60))
            .and_then(|p| p.job_with("q", |_| jq_core::NewJob::builder("k", jq_core::Payload::of(&()).expect("json"))))
            .expect("a periodic job");
        let started = WorkerPool::new(storage.clone()).queues(["q"]).periodic(every).start();
        assert!(
            matches!(started, Err(Error::Unsupported { capability: Capability::Periodic })),
            "a pool with a periodic job must refuse to start on a backend without them: {:?}",
            started.err()
        );
    }
}
