//! The shared conformance and property suites against a three-node Redis Cluster that this
//! test binary starts on free loopback ports (`redis-server
//! --cluster-enabled yes`, then `redis-cli --cluster create`), plus the
//! cluster-specific paths: claims over queues in different slots, batches
//! spanning queues, and wake-up through the cluster-wide PUBLISH.
//!
//! One cluster per test binary (a static, `common/cluster.rs`), a fresh key
//! prefix per test.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use jq_core::storage::{ClaimRequest, Storage, StorageExt};
use jq_core::{Clock, ManualClock, NewJob, Payload, Priority, QueueName, State};
use jq_redis::{RedisConfig, RedisStorage};

use common::cluster::{Cluster, redis_cli};

fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(common::cluster::start)
}

fn config(prefix: &str, clock: Clock) -> RedisConfig {
    let urls: Vec<String> = cluster().ports.iter().map(|p| format!("redis://127.0.0.1:{p}")).collect();
    RedisConfig::cluster(urls).prefix(prefix).clock(clock)
}

async fn connect(prefix: &str, clock: Clock) -> RedisStorage {
    RedisStorage::connect(config(prefix, clock)).await.unwrap_or_else(|e| panic!("cannot reach the test cluster: {e}"))
}

/// One test's namespace on the shared cluster: a random prefix.
struct ClusterHarness {
    prefix: String,
}

#[async_trait::async_trait]
impl jq_testkit::Harness for ClusterHarness {
    type Storage = RedisStorage;

    async fn connect(&self, clock: Clock) -> RedisStorage {
        connect(&self.prefix, clock).await
    }

    async fn cleanup(&self) {
        connect(&self.prefix, Clock::system()).await.delete_all_keys().await.expect("delete the test's keys");
    }

    fn cross_queue_batches(&self) -> bool {
        false
    }
}

/// `None` (skip) when Redis's programs are not installed.
async fn setup() -> Option<ClusterHarness> {
    jq_testkit::services::redis_programs()?;
    cluster();
    Some(ClusterHarness { prefix: format!("jqtest:{}", uuid::Uuid::new_v4().simple()) })
}

jq_testkit::conformance!(setup; roles, periodic, controls, throughput, cancellation, workflows, keys, durable);
jq_testkit::properties!(setup; periodic, workflows);

fn job(queue: &str, n: usize) -> jq_core::JobBuilder {
    NewJob::builder("test", Payload::from_json(format!(r#"{{"n":{n}}}"#)).unwrap()).queue(queue)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_and_claims_over_several_slots() {
    let Some(h) = setup().await else { return };
    let clock = ManualClock::starting_now();
    let s = connect(&h.prefix, clock.clock()).await;
    let at = clock.now();
    let jobs = [
        job("a", 0).priority(Priority::Low).build_at(at).unwrap(),
        job("b", 1).priority(Priority::High).build_at(at).unwrap(),
        job("c", 2).build_at(at).unwrap(),
        job("d", 3).priority(Priority::Critical).build_at(at).unwrap(),
        job("a", 4).build_at(at).unwrap(),
        job("c", 5).unique_key("u").build_at(at).unwrap(),
        job("c", 6).unique_key("u").build_at(at).unwrap(),
    ];
    // One batch per queue: their slots differ.
    let mut ids = Vec::new();
    for queue in ["a", "b", "c", "d"] {
        let batch: Vec<NewJob> = jobs.iter().filter(|j| j.queue.as_str() == queue).cloned().collect();
        let stored = s.enqueue(batch.clone()).await.unwrap();
        ids.extend(batch.iter().map(|j| j.id).zip(stored));
    }
    let ids: Vec<jq_core::JobId> =
        jobs.iter().map(|j| ids.iter().find(|(id, _)| *id == j.id).map(|(_, stored)| *stored).unwrap()).collect();
    assert_eq!(ids[6], ids[5], "the unique key holds within a queue's batch");
    let queues: Vec<QueueName> = ["a", "b", "c", "d"].iter().map(|q| QueueName::new(*q).unwrap()).collect();
    let request = |limit| ClaimRequest::new(queues.clone(), limit, Duration::from_secs(30), "w");
    let first: Vec<_> = s.claim(&request(3)).await.unwrap().jobs.into_iter().map(|j| j.id).collect();
    assert_eq!(first, vec![ids[3], ids[1], ids[2]], "priority first, then run_at and id, across slots");
    let rest = s.claim(&request(10)).await.unwrap().jobs;
    let rest_ids: Vec<_> = rest.iter().map(|j| j.id).collect();
    assert_eq!(rest_ids, vec![ids[4], ids[5], ids[0]]);
    // one settlement batch over three queues, from a handle that did not claim
    let other = connect(&h.prefix, clock.clock()).await;
    let batch = rest.iter().map(|j| jq_core::storage::Settlement {
        lease: j.lease_ref().unwrap(),
        outcome: jq_core::storage::Outcome::Ack,
    });
    let results = other.settle(batch.collect()).await.unwrap();
    assert!(results.iter().all(|r| matches!(r, Ok(State::Completed))), "{results:?}");
    let stats = s.stats().await.unwrap();
    assert_eq!(stats.total(State::Completed), 3);
    assert_eq!(stats.total(State::Running), 3);
    // the queues really are spread: at least two nodes hold keys of this test
    let holding = cluster()
        .ports
        .iter()
        .filter(|p| !redis_cli(**p, &["--scan", "--pattern", &format!("{}:*", h.prefix)]).trim().is_empty())
        .count();
    assert!(holding >= 2, "queues a..d should spread over the nodes, {holding} node(s) hold keys");
    jq_testkit::Harness::cleanup(&h).await;
    for port in &cluster().ports {
        assert_eq!(redis_cli(*port, &["--scan", "--pattern", &format!("{}:*", h.prefix)]).trim(), "", "cleanup");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_on_any_node_wakes_the_subscriber() {
    let Some(h) = setup().await else { return };
    let clock = ManualClock::starting_now();
    let worker = connect(&h.prefix, clock.clock()).await;
    let producer = connect(&h.prefix, clock.clock()).await;
    let mut signal = worker.subscribe().expect("redis signals new work");
    tokio::time::timeout(Duration::from_secs(5), signal.changed()).await.expect("listener subscribed").unwrap();
    // queues on different nodes: the PUBLISH of each reaches the one node
    // the listener is connected to
    for q in ["a", "b", "c", "d"] {
        signal.borrow_and_update();
        producer.enqueue_one(job(q, 0).build_at(clock.now()).unwrap()).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), signal.changed())
            .await
            .unwrap_or_else(|_| panic!("not woken by an enqueue into {q}"))
            .unwrap();
    }
    jq_testkit::Harness::cleanup(&h).await;
}

/// A batch over queues in different hash slots is refused before anything
/// is stored; over queues that share a slot it is one atomic script call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_batch_over_several_slots_is_refused_whole() {
    let Some(h) = setup().await else { return };
    let clock = ManualClock::starting_now();
    let s = connect(&h.prefix, clock.clock()).await;
    let slot = |q: &str| jq_redis::schema::slot(&s.keys().base(q));
    let other = (0..).map(|n| format!("o{n}")).find(|q| slot(q) != slot("a")).unwrap();
    let twin = (0..).map(|n| format!("t{n}")).find(|q| slot(q) == slot("a")).unwrap();
    let at = clock.now();

    let spread = vec![job("a", 0).build_at(at).unwrap(), job(&other, 1).build_at(at).unwrap()];
    let err = s.enqueue(spread.clone()).await.unwrap_err();
    match &err {
        jq_core::Error::BatchNotAtomic { queues, .. } => assert_eq!(queues, &vec!["a".to_owned(), other.clone()]),
        other => panic!("expected BatchNotAtomic, got {other:?}"),
    }
    assert!(err.to_string().contains("one batch per queue"), "{err}");
    for j in &spread {
        assert!(matches!(s.get(j.id).await, Err(jq_core::Error::NotFound { .. })), "nothing stored");
    }

    // Same slot: one script call, stored whole.
    let together = vec![job("a", 2).build_at(at).unwrap(), job(&twin, 3).build_at(at).unwrap()];
    let ids = s.enqueue(together.clone()).await.unwrap();
    assert_eq!(ids, together.iter().map(|j| j.id).collect::<Vec<_>>());
    let stats = s.stats().await.unwrap();
    assert_eq!((stats.total(State::Pending), stats.queues.len()), (2, 2));
    jq_testkit::Harness::cleanup(&h).await;
}

/// A workflow's steps must share one hash slot on Cluster: a plan over
/// queues in two slots is refused with BatchNotAtomic and nothing of it
/// is stored; over `{t}a` and `{t}b` (one hash tag, so one slot) it is
/// stored, and the ack of a step in one queue releases its child in the
/// other, in the ack's own script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_must_live_in_one_slot() {
    use jq_core::storage::WorkflowStorage;
    use jq_core::workflow::{Step, Workflow};
    let Some(h) = setup().await else { return };
    let clock = ManualClock::starting_now();
    let s = connect(&h.prefix, clock.clock()).await;
    let slot = |q: &str| jq_redis::schema::slot(&s.keys().base(q));
    let other = (0..).map(|n| format!("o{n}")).find(|q| slot(q) != slot("a")).unwrap();
    let at = clock.now();

    let spread = Workflow::new()
        .step(Step::new("first", job("a", 0).build_at(at).unwrap()))
        .step(Step::new("second", job(&other, 1).build_at(at).unwrap()).after(["first"]))
        .plan()
        .unwrap();
    let err = s.enqueue_workflow(&spread).await.unwrap_err();
    match &err {
        jq_core::Error::BatchNotAtomic { queues, .. } => assert_eq!(queues, &vec!["a".to_owned(), other.clone()]),
        other => panic!("expected BatchNotAtomic, got {other:?}"),
    }
    for id in spread.ids() {
        assert!(matches!(s.get(id).await, Err(jq_core::Error::NotFound { .. })), "nothing stored");
    }
    assert!(matches!(s.workflow(spread.id).await, Err(jq_core::Error::WorkflowNotFound { .. })));

    assert_eq!(slot("{t}a"), slot("{t}b"), "one hash tag, one slot");
    let tagged = Workflow::new()
        .step(Step::new("first", job("{t}a", 0).build_at(at).unwrap()))
        .step(Step::new("second", job("{t}b", 1).build_at(at).unwrap()).after(["first"]))
        .plan()
        .unwrap();
    let ids = s.enqueue_workflow(&tagged).await.unwrap();
    assert_eq!(ids, tagged.ids());
    assert_eq!(s.get(ids[1]).await.unwrap().state, State::Waiting);
    let queues = |q: &str| vec![QueueName::new(q).unwrap()];
    let first = s.claim(&ClaimRequest::new(queues("{t}a"), 10, Duration::from_secs(30), "w")).await.unwrap().jobs;
    assert_eq!(first.iter().map(|j| j.id).collect::<Vec<_>>(), vec![ids[0]]);
    let result = Payload::from_json(r#"{"rows":3}"#).unwrap();
    let outcome = jq_core::storage::Outcome::AckWith { result };
    s.settle_one(first[0].lease_ref().unwrap(), outcome).await.unwrap();
    assert_eq!(s.get(ids[1]).await.unwrap().state, State::Pending, "released across the two queues");
    let parents = s.parent_results(ids[1]).await.unwrap();
    assert_eq!(parents.len(), 1);
    assert_eq!(parents[0].result.as_ref().map(|r| r.as_str().to_owned()), Some(r#"{"rows":3}"#.to_owned()));
    let info = s.workflow(tagged.id).await.unwrap();
    assert_eq!((info.counts.get(State::Completed), info.counts.get(State::Pending)), (1, 1));
    let steps = s.workflow_steps(tagged.id).await.unwrap();
    assert_eq!(steps.iter().map(|st| st.id).collect::<Vec<_>>(), ids);
    jq_testkit::Harness::cleanup(&h).await;
}
