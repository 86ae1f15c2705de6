//! Behaviour specific to the Redis backend: large promotes (Lua's unpack
//! limit), wake-up over pub/sub from another connection, corrupt hashes,
//! an unreachable server, and a queue spanning several claims' ordering.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use std::time::Duration;

use jq_core::storage::{ClaimRequest, Outcome, PeriodicStorage, Settlement, Storage, StorageExt};
use jq_core::{Error, Job, JobFilter, JobId, ManualClock, NewJob, Payload, Priority, QueueName, State};
use jq_redis::{RedisConfig, RedisStorage};

fn job(queue: &str, n: usize) -> jq_core::JobBuilder {
    NewJob::builder("test", Payload::from_json(format!(r#"{{"n":{n}}}"#)).unwrap()).queue(queue)
}

fn request(queue: &str, limit: usize) -> ClaimRequest {
    ClaimRequest::new(vec![QueueName::new(queue).unwrap()], limit, Duration::from_secs(30), "w")
}

async fn raw_conn() -> redis::aio::MultiplexedConnection {
    redis::Client::open(common::url()).unwrap().get_multiplexed_async_connection().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promote_and_recover_10000_due_jobs_at_once() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let jobs: Vec<NewJob> =
        (0..10_000).map(|i| job("big", i).delay(Duration::from_secs(60)).build_at(clock.now()).unwrap()).collect();
    s.enqueue(jobs).await.unwrap();
    assert_eq!(s.stats().await.unwrap().total(State::Scheduled), 10_000);
    clock.advance(Duration::from_secs(61));
    assert_eq!(s.promote().await.unwrap(), 10_000);
    assert_eq!(s.promote().await.unwrap(), 0, "promote is idempotent");
    let claimed = s.claim(&request("big", 10_000)).await.unwrap().jobs;
    assert_eq!(claimed.len(), 10_000);
    clock.advance(Duration::from_secs(31));
    assert_eq!(s.recover().await.unwrap(), 10_000);
    let stats = s.stats().await.unwrap();
    assert_eq!(stats.total(State::Pending), 10_000);
    assert_eq!(stats.total(State::Running), 0);
    common::drop_prefix(&prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_takes_10000_due_scheduled_jobs_without_promote() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let jobs: Vec<NewJob> =
        (0..10_000).map(|i| job("big", i).delay(Duration::from_secs(1)).build_at(clock.now()).unwrap()).collect();
    s.enqueue(jobs).await.unwrap();
    clock.advance(Duration::from_secs(2));
    let mut total = 0;
    loop {
        let got = s.claim(&request("big", 700)).await.unwrap().jobs;
        if got.is_empty() {
            break;
        }
        total += got.len();
    }
    assert_eq!(total, 10_000);
    common::drop_prefix(&prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_from_another_connection_wakes_the_subscriber() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let worker = common::connect(&prefix, clock.clock()).await;
    let producer = common::connect(&prefix, clock.clock()).await;
    let mut signal = worker.subscribe().expect("redis signals new work");
    // the listener bumps once when it has subscribed
    tokio::time::timeout(Duration::from_secs(5), signal.changed()).await.expect("listener subscribed").unwrap();
    signal.borrow_and_update();
    producer.enqueue_one(job("wake", 0).build_at(clock.now()).unwrap()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), signal.changed()).await.expect("woken by the enqueue").unwrap();
    assert_eq!(worker.claim(&request("wake", 10)).await.unwrap().jobs.len(), 1);
    // a scheduled job does not wake anyone until promoted
    common::drop_prefix(&prefix).await;
}

/// A queue's job hashes are hashtables from its first job, whatever Redis's
/// listpack limits: a listpack is searched from the front on every lookup
/// (common/base.lua, HASHTABLE). A purge that removes every job keeps them so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queues_job_hashes_are_hashtables_from_the_first_job() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let id = s.enqueue_one(job("q", 0).build_at(clock.now()).unwrap()).await.unwrap();
    let mut conn = raw_conn().await;
    let encodings = |conn: &mut redis::aio::MultiplexedConnection| {
        let (jobs, states) = (s.keys().jobs("q"), s.keys().states("q"));
        let mut conn = conn.clone();
        async move {
            let a: String = redis::cmd("OBJECT").arg("ENCODING").arg(jobs).query_async(&mut conn).await.unwrap();
            let b: String = redis::cmd("OBJECT").arg("ENCODING").arg(states).query_async(&mut conn).await.unwrap();
            (a, b)
        }
    };
    assert_eq!(encodings(&mut conn).await, ("hashtable".to_owned(), "hashtable".to_owned()));
    let claimed = s.claim(&request("q", 1)).await.unwrap().jobs;
    s.settle(vec![Settlement { lease: claimed[0].lease_ref().unwrap(), outcome: Outcome::Ack }]).await.unwrap();
    clock.advance(Duration::from_secs(1));
    assert_eq!(s.purge(State::Completed, clock.now()).await.unwrap(), 1);
    assert!(matches!(s.get(id).await, Err(Error::NotFound { .. })));
    assert_eq!(encodings(&mut conn).await, ("hashtable".to_owned(), "hashtable".to_owned()));
    assert!(s.list(&JobFilter::default()).await.unwrap().is_empty(), "the field that keeps them so is no job");
    common::drop_prefix(&prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_hash_is_reported_as_corrupt() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let id = s.enqueue_one(job("q", 0).build_at(clock.now()).unwrap()).await.unwrap();
    corrupt(&s, "q", id, "priority", "urgent").await;
    match s.get(id).await {
        Err(Error::Corrupt { id: Some(got), reason }) => {
            assert_eq!(got, id);
            assert!(reason.contains("priority"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // list leaves it out (and logs it) instead of failing the page
    assert!(s.list(&JobFilter::default()).await.unwrap().is_empty());
    common::drop_prefix(&prefix).await;
}

/// Sets one field of job `id` to `value` (bytes), around the backend.
async fn corrupt(s: &RedisStorage, queue: &str, id: jq_core::JobId, field: &str, value: impl AsRef<[u8]>) {
    let mut conn = raw_conn().await;
    jq_redis::raw::set_field(&mut conn, s.keys(), queue, id, field, value.as_ref()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_skips_corrupt_hashes_and_pages_past_them() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let mut jobs: Vec<NewJob> = (0..8).map(|n| job("q", n).build_at(clock.now()).unwrap()).collect();
    jobs.sort_by_key(|j| j.id);
    s.enqueue(jobs.clone()).await.unwrap();
    // The first three in a row (a whole page of 2 and more), and two later.
    let bad = [
        ("priority", "urgent", 0),
        ("state", "bogus", 1),
        ("errors", "not json", 2),
        ("attempts", "x", 5),
        ("max_attempts", "many", 6),
    ];
    for (field, value, i) in bad {
        corrupt(&s, "q", jobs[i].id, field, value).await;
    }
    let good: Vec<_> = [3, 4, 7].iter().map(|&i| jobs[i].id).collect();

    let bad: Vec<_> = bad.iter().map(|&(_, _, i)| jobs[i].id).collect();
    jq_testkit::assert_list_skips_corrupt(&s, &bad, &good).await;
    // stats count the indexes, not the hashes: corrupt fields do not matter
    assert_eq!(s.stats().await.unwrap().total(State::Pending), 8);
    common::drop_prefix(&prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_buries_corrupt_running_jobs_and_recovers_the_others() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let jobs: Vec<NewJob> = (0..6).map(|n| job("q", n).build_at(clock.now()).unwrap()).collect();
    s.enqueue(jobs.clone()).await.unwrap();
    assert_eq!(s.claim(&request("q", 10)).await.unwrap().jobs.len(), 6);
    // Corrupted while Running. Each of these used to fail recover.lua
    // halfway: the job left the lease index but stayed Running (or became
    // Pending outside the ready index), and the batch stopped there.
    let bad = [
        ("priority", "urgent", 0),
        ("attempts", "x", 1),
        ("max_attempts", "many", 2),
        ("lease_expires_at", "soon", 3),
        ("priority", "nan", 4),
    ];
    for (field, value, i) in bad {
        corrupt(&s, "q", jobs[i].id, field, value).await;
    }
    clock.advance(Duration::from_secs(31));
    assert_eq!(s.recover().await.unwrap(), 6);
    assert_eq!(s.recover().await.unwrap(), 0);
    let good = s.get(jobs[5].id).await.unwrap();
    assert_eq!(good.state, State::Pending);
    assert_eq!(good.errors.len(), 1);

    let mut conn = raw_conn().await;
    let base = s.keys().base("q");
    let leased: u64 = redis::cmd("ZCARD").arg(format!("{base}leases")).query_async(&mut conn).await.unwrap();
    assert_eq!(leased, 0, "no job stays in the lease index");
    for (field, _, i) in bad {
        let (state, errors) = raw_state_and_errors(&s, "q", jobs[i].id).await;
        assert_eq!(state, "dead", "{field}");
        assert!(errors.contains(field) && errors.contains("lease expired"), "{field}: {errors}");
    }
    let stats = s.stats().await.unwrap();
    assert_eq!((stats.total(State::Dead), stats.total(State::Pending), stats.total(State::Running)), (5, 1, 0));
    let claimed = s.claim(&request("q", 10)).await.unwrap().jobs;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![jobs[5].id]);
    common::drop_prefix(&prefix).await;
}

/// State and errors of a job, read raw (a corrupt job does not decode).
async fn raw_state_and_errors(s: &RedisStorage, queue: &str, id: jq_core::JobId) -> (String, String) {
    jq_redis::raw::state_and_errors(&mut raw_conn().await, s.keys(), queue, id).await.unwrap()
}

/// claim.lua returns each job as one string of NUL-separated fields; a
/// field written around jq with a NUL or bytes that are not UTF-8 cannot be
/// split back, so that job is buried with the reason and the others of the
/// claim are handed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimed_fields_that_cannot_be_split_bury_their_job() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let jobs: Vec<NewJob> = (0..3).map(|n| job("q", n).build_at(clock.now()).unwrap()).collect();
    s.enqueue(jobs.clone()).await.unwrap();
    corrupt(&s, "q", jobs[0].id, "kind", "send\0email").await;
    corrupt(&s, "q", jobs[2].id, "payload", &b"{\"n\":\xff}"[..]).await;
    let claimed = s.claim(&request("q", 10)).await.unwrap().jobs;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![jobs[1].id]);
    for (job, reason) in [(&jobs[0], "NUL"), (&jobs[2], "UTF-8")] {
        let (state, errors) = raw_state_and_errors(&s, "q", job.id).await;
        assert_eq!(state, "dead", "{reason}");
        assert!(errors.contains(reason), "{reason}: {errors}");
    }
    common::drop_prefix(&prefix).await;
}

/// Claim and settle check the numbers they compute with before writing:
/// a script that failed halfway would leave its batch partly applied (out
/// of every index, or Running without a lease entry), which Redis never
/// rolls back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_and_complete_bury_jobs_whose_numbers_are_corrupt() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let base = s.keys().base("q");
    let mut conn = raw_conn().await;

    // Claim, fast path (pending only): attempts corrupt in the middle of the batch.
    let pending: Vec<NewJob> = (0..3).map(|n| job("q", n).build_at(clock.now()).unwrap()).collect();
    s.enqueue(pending.clone()).await.unwrap();
    corrupt(&s, "q", pending[1].id, "attempts", "x").await;
    let claimed = s.claim(&request("q", 10)).await.unwrap().jobs;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![pending[0].id, pending[2].id]);
    let (state, errors) = raw_state_and_errors(&s, "q", pending[1].id).await;
    assert_eq!(state, "dead");
    assert!(errors.contains("attempts") && errors.contains("claimed"), "{errors}");
    let leased: u64 = redis::cmd("ZCARD").arg(format!("{base}leases")).query_async(&mut conn).await.unwrap();
    assert_eq!(leased, 2, "exactly the two claimed jobs hold a lease entry");

    // Settle: a nack and a release of jobs corrupted while Running.
    corrupt(&s, "q", claimed[0].id, "max_attempts", "many").await;
    corrupt(&s, "q", claimed[1].id, "priority", "urgent").await;
    let results = s
        .settle(vec![
            Settlement {
                lease: claimed[0].lease_ref().unwrap(),
                outcome: Outcome::Nack { error: "boom".into(), delay: Duration::ZERO },
            },
            Settlement { lease: claimed[1].lease_ref().unwrap(), outcome: Outcome::Release { delay: Duration::ZERO } },
        ])
        .await
        .unwrap();
    assert!(results.iter().all(|r| matches!(r, Ok(State::Dead))), "{results:?}");
    for (job, field) in [(&claimed[0], "max_attempts"), (&claimed[1], "priority")] {
        let (state, errors) = raw_state_and_errors(&s, "q", job.id).await;
        assert_eq!(state, "dead", "{field}");
        assert!(errors.contains(field), "{field}: {errors}");
    }

    // Claim, general path (a due Scheduled job): its priority cannot be sorted.
    let later = job("q", 9).run_at(clock.now() + chrono::Duration::seconds(5)).build_at(clock.now()).unwrap();
    let ok = job("q", 10).build_at(clock.now()).unwrap();
    s.enqueue(vec![later.clone(), ok.clone()]).await.unwrap();
    corrupt(&s, "q", later.id, "priority", "soon").await;
    clock.advance(Duration::from_secs(6));
    let claimed = s.claim(&request("q", 10)).await.unwrap().jobs;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![ok.id]);
    let (state, errors) = raw_state_and_errors(&s, "q", later.id).await;
    assert_eq!(state, "dead");
    assert!(errors.contains("priority"), "{errors}");

    let stats = s.stats().await.unwrap();
    assert_eq!((stats.total(State::Dead), stats.total(State::Running), stats.total(State::Pending)), (4, 1, 0));
    common::drop_prefix(&prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_a_connect_error() {
    // port 1 on loopback: nothing listens there
    let err = RedisStorage::connect(RedisConfig::new("redis://127.0.0.1:1")).await.unwrap_err();
    assert!(matches!(err, jq_redis::RedisError::Connect { .. }), "{err}");
    assert!(err.to_string().contains("start-services"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_prefix_is_refused() {
    let err = RedisStorage::connect(RedisConfig::new(common::url()).prefix("a{b}")).await.unwrap_err();
    assert!(matches!(err, jq_redis::RedisError::InvalidPrefix { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_are_reloaded_after_script_flush() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let mut conn = raw_conn().await;
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut conn).await.unwrap();
    let id = s.enqueue_one(job("q", 0).build_at(clock.now()).unwrap()).await.unwrap();
    let claimed = s.claim(&request("q", 1)).await.unwrap().jobs;
    assert_eq!(claimed[0].id, id);
    common::drop_prefix(&prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_over_several_queues_keeps_global_order() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let low = job("a", 0).priority(Priority::Low).build_at(clock.now()).unwrap();
    let high = job("b", 1).priority(Priority::High).build_at(clock.now()).unwrap();
    let normal = job("a", 2).build_at(clock.now()).unwrap();
    let ids = s.enqueue(vec![low, high, normal]).await.unwrap();
    let req =
        ClaimRequest { queues: vec![QueueName::new("a").unwrap(), QueueName::new("b").unwrap()], ..request("a", 10) };
    let got: Vec<_> = s.claim(&req).await.unwrap().jobs.into_iter().map(|j| j.id).collect();
    assert_eq!(got, vec![ids[1], ids[2], ids[0]]);
    // a second handle (no memory of the claim) can settle them
    let other = common::connect(&prefix, clock.clock()).await;
    let claimed = s.list(&JobFilter { state: Some(State::Running), ..Default::default() }).await.unwrap();
    for j in claimed {
        other.ack(j.lease_ref().unwrap()).await.unwrap();
    }
    assert_eq!(s.stats().await.unwrap().total(State::Completed), 3);
    common::drop_prefix(&prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_after_delete_all_keys_registers_the_queue_again() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    s.enqueue_one(job("q", 0).build_at(clock.now()).unwrap()).await.unwrap();
    assert!(s.delete_all_keys().await.unwrap() > 0);
    assert_eq!(s.stats().await.unwrap(), jq_core::Stats::default());
    let id = s.enqueue_one(job("q", 1).build_at(clock.now()).unwrap()).await.unwrap();
    assert_eq!(s.get(id).await.unwrap().state, State::Pending, "the queue is in the registry again");
    common::drop_prefix(&prefix).await;
}

/// A long-running worker's cache of claimed jobs shrinks back to nothing:
/// round after round, jobs complete, lose their lease to an operator's
/// release (the heartbeat reports it) and are claimed again, and a corrupt
/// job is buried by the claim that took it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_worker_forgets_the_jobs_it_no_longer_holds() {
    jq_testkit::needs!(redis);
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};

    use jq_core::{JobContext, WorkerPool};

    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let operator = common::connect(&prefix, clock.clock()).await;
    // The first run of an even job blocks until its lease is lost.
    let seen: Arc<Mutex<HashSet<jq_core::JobId>>> = Arc::default();
    let blocked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (handler_seen, handler_blocked) = (seen.clone(), blocked.clone());
    let handle = WorkerPool::new(s.clone())
        .queues(["long"])
        .concurrency(16)
        .prefetch(0)
        .heartbeat_interval(Duration::from_millis(20))
        .poll_interval(Duration::from_millis(10))
        .maintenance(false)
        .register_raw("test", move |job: jq_core::Job, ctx: JobContext| {
            let first = handler_seen.lock().unwrap().insert(job.id);
            let even = serde_json_even(job.payload.as_str());
            let blocked = handler_blocked.clone();
            async move {
                if first && even {
                    blocked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    ctx.cancellation().cancelled().await;
                }
                Ok(())
            }
        })
        .start()
        .unwrap();
    let until = |what: &'static str, check: Box<dyn Fn(jq_core::Stats) -> bool + Send>| {
        let operator = operator.clone();
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                let stats = operator.stats().await.unwrap();
                if check(stats.clone()) {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}: {stats:?}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    for round in 0..3u64 {
        let jobs: Vec<NewJob> = (0..20).map(|n| job("long", n).build_at(clock.now()).unwrap()).collect();
        // Due only once corrupted, so no claim sees it intact.
        let broken = job("long", 99).delay(Duration::from_secs(1)).build_at(clock.now()).unwrap();
        operator.enqueue(vec![broken.clone()]).await.unwrap();
        corrupt(&s, "long", broken.id, "created_at", "yesterday").await;
        clock.advance(Duration::from_secs(1));
        operator.enqueue(jobs.clone()).await.unwrap();
        let done = 20 * round;
        until("the odd jobs to complete", Box::new(move |st| st.total(State::Completed) == done + 10)).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while blocked.load(std::sync::atomic::Ordering::SeqCst) < 10 * (round as usize + 1) {
            assert!(std::time::Instant::now() < deadline, "the even jobs never started");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for j in jobs.iter().filter(|j| serde_json_even(j.payload.as_str())) {
            let lease = operator.get(j.id).await.unwrap().lease_ref().unwrap();
            operator.release(lease).await.unwrap();
        }
        until("every job to complete", Box::new(move |st| st.total(State::Completed) == done + 20)).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while s.owned_jobs() != 0 {
            assert!(std::time::Instant::now() < deadline, "round {round}: {} jobs still remembered", s.owned_jobs());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    assert_eq!(operator.stats().await.unwrap().total(State::Dead), 3, "the corrupt jobs were buried");
    handle.shutdown().await.unwrap();
    common::drop_prefix(&prefix).await;
}

/// True for the payload `{"n":N}` with N even.
fn serde_json_even(payload: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(payload).ok().and_then(|v| v["n"].as_u64()).is_some_and(|n| n % 2 == 0)
}

/// A periodic job's move to another queue whose second half was lost (the
/// old hash sealed, the new queue's never written): the next pools finish
/// it, whichever queue they declare, a trigger still lands, and every
/// tick is fired once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_periodic_job_move_cut_in_half_is_finished_by_the_next_pool() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let declare = |queue: &str| {
        jq_core::periodic::PeriodicRunner::new(vec![
            jq_core::periodic::Periodic::every("moving", Duration::from_secs(60))
                .unwrap()
                .job_with(queue, |tick| NewJob::builder("tick", Payload::of(&tick.timestamp()).unwrap()))
                .unwrap(),
        ])
        .unwrap()
    };
    let (a, b) = (declare("qa"), declare("qb"));
    a.run_once(&s).await.unwrap();
    let keys = jq_redis::schema::Keys::new(&prefix);
    let mut raw = raw_conn().await;
    // seal.lua's effect, without fire.lua's in qb.
    let _: () = redis::cmd("HSET")
        .arg(keys.periodic_job("qa", "moving"))
        .arg("moved_to")
        .arg("qb")
        .query_async(&mut raw)
        .await
        .unwrap();
    let rows = s.periodic().await.unwrap();
    assert_eq!((rows.len(), rows[0].queue.as_str()), (1, "qa"), "the sealed row is shown until the move ends");
    s.trigger("moving").await.unwrap();
    let mut fired = 0;
    for minute in 0..6 {
        clock.advance(Duration::from_secs(60));
        let pool = if minute % 2 == 0 { &a } else { &b };
        fired += pool.run_once(&s).await.unwrap().jobs;
        fired += pool.run_once(&s).await.unwrap().jobs;
    }
    let mut ticks = Vec::new();
    for queue in ["qa", "qb"] {
        let filter = JobFilter { queue: Some(QueueName::new(queue).unwrap()), ..Default::default() };
        ticks.extend(s.list(&filter).await.unwrap().into_iter().map(|j| j.payload.as_str().to_owned()));
    }
    let distinct: std::collections::BTreeSet<_> = ticks.iter().collect();
    assert_eq!((fired, ticks.len(), distinct.len()), (7, 7, 7), "6 ticks and the request, once each: {ticks:?}");
    assert_eq!(s.periodic().await.unwrap().len(), 1);
    common::drop_prefix(&prefix).await;
}

/// On a single server a workflow may span queues in different hash slots:
/// the ack of a step in one queue releases its child in another, in the
/// ack's own script, and a cancel cascades across them; a batch of 5,000
/// members and a callback is stored by one call and released once, by the
/// last member's ack. Purge takes every step's workflow keys with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_spans_queues_on_a_single_server() {
    use jq_core::storage::WorkflowStorage;
    use jq_core::workflow::{Batch, Step, Workflow};
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let slot = |q: &str| jq_redis::schema::slot(&s.keys().base(q));
    assert_ne!(slot("left"), slot("right"), "two slots, which Cluster would refuse");
    let at = clock.now();
    let plan = Workflow::new()
        .step(Step::new("a", job("left", 0).build_at(at).unwrap()))
        .step(Step::new("b", job("right", 1).build_at(at).unwrap()).after(["a"]))
        .step(Step::new("c", job("left", 2).build_at(at).unwrap()).after(["b"]))
        .plan()
        .unwrap();
    let ids = s.enqueue_workflow(&plan).await.unwrap();
    let a = s.claim(&request("left", 10)).await.unwrap().jobs;
    assert_eq!(a.iter().map(|j| j.id).collect::<Vec<_>>(), vec![ids[0]]);
    s.settle_one(a[0].lease_ref().unwrap(), Outcome::Ack).await.unwrap();
    assert_eq!(s.get(ids[1]).await.unwrap().state, State::Pending, "released in the other queue");
    s.cancel(ids[1]).await.unwrap();
    assert_eq!(s.get(ids[2]).await.unwrap().state, State::Cancelled, "and cancelled back across");
    assert_eq!(s.links(ids[2]).await.unwrap().cancelled_by, Some(ids[1]));
    let info = s.workflow(plan.id).await.unwrap();
    assert_eq!((info.counts.get(State::Completed), info.counts.get(State::Cancelled)), (1, 2));

    let members: Vec<NewJob> = (0..5_000).map(|i| job("many", i).build_at(at).unwrap()).collect();
    let batch = Batch::new(members, job("many", 5_000).build_at(at).unwrap()).plan().unwrap();
    let ids = s.enqueue_workflow(&batch).await.unwrap();
    let callback = ids[5_000];
    let claimed = s.claim(&request("many", 10_000)).await.unwrap().jobs;
    assert_eq!(claimed.len(), 5_000, "every member, not the callback");
    let (last, rest) = claimed.split_last().unwrap();
    let settled = s
        .settle(rest.iter().map(|j| Settlement { lease: j.lease_ref().unwrap(), outcome: Outcome::Ack }).collect())
        .await
        .unwrap();
    assert!(settled.iter().all(|r| matches!(r, Ok(State::Completed))));
    assert_eq!(s.get(callback).await.unwrap().state, State::Waiting);
    assert_eq!(s.links(callback).await.unwrap().unfinished_parents, 1);
    s.settle_one(last.lease_ref().unwrap(), Outcome::Ack).await.unwrap();
    assert_eq!(s.get(callback).await.unwrap().state, State::Pending);
    let info = s.workflow(batch.id).await.unwrap();
    assert_eq!((info.counts.get(State::Completed), info.counts.get(State::Pending)), (5_000, 1));

    // Purge takes the steps' results, nodes, edges and counts with them.
    clock.advance(Duration::from_secs(1));
    let callback_job = s.claim(&request("many", 1)).await.unwrap().jobs;
    let result = Payload::from_json(r#"{"done":true}"#).unwrap();
    s.settle_one(callback_job[0].lease_ref().unwrap(), Outcome::AckWith { result }).await.unwrap();
    assert!(s.result(callback).await.unwrap().is_some());
    clock.advance(Duration::from_secs(1));
    s.purge(State::Completed, clock.now()).await.unwrap();
    let mut conn = raw_conn().await;
    let base = s.keys().base("many");
    for key in ["results", "nodes", "parents", "children", "released"] {
        let n: u64 = redis::cmd("HLEN").arg(format!("{base}{key}")).query_async(&mut conn).await.unwrap();
        assert_eq!(n, 0, "{key} emptied by purge");
    }
    let info = s.workflow(batch.id).await.unwrap();
    assert_eq!(info.counts.total(), 0, "the workflow stays known, with no step: {info:?}");
    common::drop_prefix(&prefix).await;
}

/// The keyed jobs' keys (schema.rs, "Keyed jobs") follow every move of a
/// keyed job: Running counts per key go back to nothing once no job of the
/// key runs (ack, nack with and without delay, bury, cancel of a Pending
/// one, promote of a Scheduled one), `kwait` and the Pending count
/// leave with the last Pending job, and plain jobs never touch them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_jobs_keys_follow_every_move() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let base = s.keys().base("q");
    let mut conn = raw_conn().await;
    let plain: Vec<NewJob> = (0..3).map(|n| job("q", n).build_at(clock.now()).unwrap()).collect();
    s.enqueue(plain).await.unwrap();
    let exists = |conn: &mut redis::aio::MultiplexedConnection, keys: Vec<String>| {
        let mut conn = conn.clone();
        async move { redis::cmd("EXISTS").arg(keys).query_async::<u64>(&mut conn).await.unwrap() }
    };
    let keyed_keys =
        |base: &str| ["kwait", "kscheduled", "kpending", "krun", "kcursor"].map(|k| format!("{base}{k}")).to_vec();
    assert_eq!(exists(&mut conn, keyed_keys(&base)).await, 0, "plain jobs touch no keyed key");
    let first = s.claim(&request("q", 10)).await.unwrap().jobs;
    assert_eq!(first.len(), 3);
    for job in &first {
        s.ack(job.lease_ref().unwrap()).await.unwrap();
    }
    assert_eq!(exists(&mut conn, keyed_keys(&base)).await, 0, "nor does their claim or ack");

    let mut keyed: Vec<NewJob> = (0..4).map(|n| job("q", n).key("a").build_at(clock.now()).unwrap()).collect();
    keyed.extend((4..6).map(|n| job("q", n).key("b").build_at(clock.now()).unwrap()));
    keyed.push(job("q", 6).key("b").delay(Duration::from_secs(5)).build_at(clock.now()).unwrap());
    let ids = s.enqueue(keyed).await.unwrap();
    assert_eq!(s.stats().await.unwrap().total(State::Pending), 6);
    assert_eq!(s.stats().await.unwrap().total(State::Scheduled), 1);
    s.cancel(ids[5]).await.unwrap();
    let claimed = s.claim(&request("q", 10)).await.unwrap().jobs;
    assert_eq!(claimed.len(), 5, "every keyed Pending job but the cancelled one");
    let running: std::collections::HashMap<String, String> =
        redis::cmd("HGETALL").arg(format!("{base}krun")).query_async(&mut conn).await.unwrap();
    assert_eq!(running.get("a").map(String::as_str), Some("4"));
    assert_eq!(running.get("b").map(String::as_str), Some("1"));
    let outcomes = [
        Outcome::Ack,
        Outcome::Nack { error: "again".to_owned(), delay: Duration::ZERO },
        Outcome::Nack { error: "later".to_owned(), delay: Duration::from_secs(1) },
        Outcome::Bury { error: "never".to_owned() },
        Outcome::Ack,
    ];
    let batch = claimed
        .iter()
        .zip(outcomes)
        .map(|(job, outcome)| Settlement { lease: job.lease_ref().unwrap(), outcome })
        .collect();
    s.settle(batch).await.unwrap();
    let running: Vec<String> = redis::cmd("HKEYS").arg(format!("{base}krun")).query_async(&mut conn).await.unwrap();
    // field "" keeps the hash a hashtable (schema.rs): it counts no key
    assert!(running.iter().all(String::is_empty), "no keyed job runs: {running:?}");
    clock.advance(Duration::from_secs(6));
    s.promote().await.unwrap();
    let again = s.claim(&request("q", 10)).await.unwrap().jobs;
    assert_eq!(again.len(), 3, "the nacked ones and the promoted one");
    assert!(again.iter().all(|j| j.key.is_some()));
    for job in &again {
        s.ack(job.lease_ref().unwrap()).await.unwrap();
    }
    let pending: Option<u64> = redis::cmd("GET").arg(format!("{base}kpending")).query_async(&mut conn).await.unwrap();
    assert_eq!(pending.unwrap_or(0), 0);
    // (and krun's field "", which counts no key: checked above)
    let left = keyed_keys(&base)
        .into_iter()
        .filter(|k| !k.ends_with("kcursor") && !k.ends_with("kpending") && !k.ends_with("krun"))
        .collect();
    assert_eq!(exists(&mut conn, left).await, 0, "nothing left of the keyed jobs but the cursors");
    let stats = s.stats().await.unwrap();
    assert_eq!((stats.total(State::Pending), stats.total(State::Running), stats.total(State::Scheduled)), (0, 0, 0));
    common::drop_prefix(&prefix).await;
}

/// A keyed Pending job's member in `kwait` starts with its priority,
/// read from its stored body: when that is corrupt, cancel looks for the
/// member at every priority the queue holds, so the job still leaves the
/// index and the Pending count, and the key's other jobs are claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_finds_a_keyed_job_whose_priority_is_corrupt() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let base = s.keys().base("q");
    let mut conn = raw_conn().await;
    let jobs = vec![
        job("q", 0).key("a").build_at(clock.now()).unwrap(),
        job("q", 1).key("a").priority(Priority::High).build_at(clock.now()).unwrap(),
        job("q", 2).key("a").build_at(clock.now()).unwrap(),
    ];
    let ids = s.enqueue(jobs).await.unwrap();
    corrupt(&s, "q", ids[1], "priority", "urgent").await;
    s.cancel(ids[1]).await.unwrap();
    let members: Vec<Vec<u8>> =
        redis::cmd("ZRANGE").arg(format!("{base}kwait")).arg(0).arg(-1).query_async(&mut conn).await.unwrap();
    assert_eq!(members.len(), 2, "the cancelled job left the index");
    let pending: u64 = redis::cmd("GET").arg(format!("{base}kpending")).query_async(&mut conn).await.unwrap();
    assert_eq!(pending, 2);
    let claimed = s.claim(&request("q", 10)).await.unwrap().jobs;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![ids[0], ids[2]], "the key's other jobs");
    common::drop_prefix(&prefix).await;
}

/// The rotation reads a priority's keys a page at a time from the cursor
/// (`rotations()` in common/rotation.lua): over several pages, and across claims
/// that stop mid-page, every key still gets one job per turn, in byte
/// order, wrapping around.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rotation_walks_many_keys_in_turn() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let keys: Vec<String> = (0..150).map(|k| format!("k{k:03}")).collect();
    let jobs: Vec<NewJob> =
        (0..300).map(|n| job("q", n).key(keys[n % 150].clone()).build_at(clock.now()).unwrap()).collect();
    s.enqueue(jobs).await.unwrap();
    let mut order = Vec::new();
    while order.len() < 300 {
        let got = s.claim(&request("q", 7)).await.unwrap().jobs;
        assert!(!got.is_empty());
        for job in &got {
            order.push(job.key.clone().unwrap());
            s.ack(job.lease_ref().unwrap()).await.unwrap();
        }
    }
    let expected: Vec<String> = keys.iter().chain(keys.iter()).cloned().collect();
    assert_eq!(order, expected);
    common::drop_prefix(&prefix).await;
}

/// A batch of one queue without unique keys takes its own script
/// (`lua/enqueue_many.lua`): it stores what enqueue.lua stores (Pending,
/// Scheduled, keyed, with a timeout); a batch holding a resend stores
/// nothing twice (enqueue.lua answers each job), and one holding an id
/// twice stores it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_one_queue_is_stored_as_any_batch_stores_it() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let variants: [fn() -> jq_core::JobBuilder; 5] = [
        || job("many", 0).priority(Priority::High),
        || job("many", 1).delay(Duration::from_secs(60)),
        || job("many", 2).key("k").priority(Priority::Low),
        || job("many", 3).key("k").delay(Duration::from_secs(60)),
        || job("many", 4).timeout(Duration::from_millis(1500)),
    ];
    let many: Vec<NewJob> = variants.iter().map(|v| v().build_at(clock.now()).unwrap()).collect();
    let general: Vec<NewJob> = variants.iter().map(|v| v().build_at(clock.now()).unwrap()).collect();
    let ids = s.enqueue(many.clone()).await.unwrap();
    assert_eq!(ids, many.iter().map(|j| j.id).collect::<Vec<_>>());
    // another queue's job keeps a batch on enqueue.lua
    let mut mixed = general.clone();
    mixed.push(job("other", 0).build_at(clock.now()).unwrap());
    s.enqueue(mixed).await.unwrap();
    for (a, b) in many.iter().zip(&general) {
        let (a, b) = (s.get(a.id).await.unwrap(), s.get(b.id).await.unwrap());
        assert_eq!(Job { id: b.id, ..a.clone() }, b, "a job of one queue's batch is stored as in any batch");
    }
    // a resend beside a new job: the resent ones answer their ids, stored once
    let fresh = job("many", 5).build_at(clock.now()).unwrap();
    let before = s.get(many[0].id).await.unwrap();
    let mut again = many.clone();
    again.push(fresh.clone());
    let ids = s.enqueue(again.clone()).await.unwrap();
    assert_eq!(ids, again.iter().map(|j| j.id).collect::<Vec<_>>());
    assert_eq!(s.get(many[0].id).await.unwrap(), before, "a resend stores nothing");
    // an id twice in one batch is stored once
    let twice = job("many", 6).build_at(clock.now()).unwrap();
    let ids = s.enqueue(vec![twice.clone(), twice.clone()]).await.unwrap();
    assert_eq!(ids, vec![twice.id, twice.id]);
    let stats = s.stats().await.unwrap();
    assert_eq!(
        (stats.total(State::Pending), stats.total(State::Scheduled)),
        (3 * 2 + 1 + 1 + 1, 2 * 2),
        "each pair, the other queue's job, the fresh one and the twice-sent one"
    );
    // more than one chunk of 1,000 per command, and a resend in its last chunk
    let big: Vec<NewJob> = (0..2_500).map(|n| job("big", n).build_at(clock.now()).unwrap()).collect();
    s.enqueue(big[..2_400].to_vec()).await.unwrap();
    let ids = s.enqueue(big[2_399..].to_vec()).await.unwrap();
    assert_eq!(ids, big[2_399..].iter().map(|j| j.id).collect::<Vec<_>>());
    let claimed = s.claim(&request("big", 3_000)).await.unwrap().jobs;
    let mut order: Vec<JobId> = claimed.iter().map(|j| j.id).collect();
    order.sort();
    assert_eq!(order, big.iter().map(|j| j.id).collect::<Vec<_>>(), "every job once");
    common::drop_prefix(&prefix).await;
}

/// A lone job without a unique key takes its own script
/// (`lua/enqueue_one.lua`): it stores what a batch stores (Pending,
/// Scheduled, keyed, with a timeout), and a lone resend stores nothing
/// twice, whatever state the job reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_job_is_stored_as_a_batch_stores_it() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let variants: [fn() -> jq_core::JobBuilder; 5] = [
        || job("lone", 0).priority(Priority::High),
        || job("lone", 1).delay(Duration::from_secs(60)),
        || job("lone", 2).key("k").priority(Priority::Low),
        || job("lone", 3).key("k").delay(Duration::from_secs(60)),
        || job("lone", 4).timeout(Duration::from_millis(1500)),
    ];
    for variant in variants {
        let (lone, batched) = (variant().build_at(clock.now()).unwrap(), variant().build_at(clock.now()).unwrap());
        assert_eq!(s.enqueue_one(lone.clone()).await.unwrap(), lone.id);
        // a batch of one more job keeps it off the lone path
        let ids = s.enqueue(vec![batched.clone(), job("other", 0).build_at(clock.now()).unwrap()]).await.unwrap();
        assert_eq!(ids[0], batched.id);
        let (a, b) = (s.get(lone.id).await.unwrap(), s.get(batched.id).await.unwrap());
        assert_eq!(Job { id: b.id, ..a.clone() }, b, "a lone job is stored as in a batch");
        assert_eq!(s.enqueue_one(lone.clone()).await.unwrap(), lone.id, "a lone resend answers its id");
        assert_eq!(s.get(lone.id).await.unwrap(), a, "and stores nothing");
    }
    let stats = s.stats().await.unwrap();
    assert_eq!(
        (stats.total(State::Pending), stats.total(State::Scheduled)),
        (3 * 2 + 5, 2 * 2),
        "each pair, and the other queue's 5"
    );
    // a lone resend of a Running job leaves it under its lease
    let running = s.claim(&request("lone", 1)).await.unwrap().jobs.remove(0);
    let resent = NewJob { id: running.id, ..job("lone", 0).priority(Priority::High).build_at(clock.now()).unwrap() };
    assert_eq!(s.enqueue_one(resent).await.unwrap(), running.id);
    assert_eq!(s.get(running.id).await.unwrap().state, State::Running);
    common::drop_prefix(&prefix).await;
}

/// `ucreated` (the unique period's index) holds every stored job with a
/// unique key, plain unique enqueues too, and a purge takes the purged
/// ones out: the index follows the stored jobs, not the store's history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unique_period_index_follows_purge() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let period = Duration::from_secs(60);
    let plain = job("u", 0).unique_key("a").build_at(clock.now()).unwrap();
    let ruled = job("u", 1).unique_key("b").unique_for(period).build_at(clock.now()).unwrap();
    let keyless = job("u", 2).build_at(clock.now()).unwrap();
    s.enqueue(vec![plain, ruled, keyless]).await.unwrap();
    let mut conn = raw_conn().await;
    let index = format!("{}ucreated", s.keys().base("u"));
    let count = |conn: &mut redis::aio::MultiplexedConnection| {
        let index = index.clone();
        let mut conn = conn.clone();
        async move { redis::cmd("ZCARD").arg(index).query_async::<u64>(&mut conn).await.unwrap() }
    };
    assert_eq!(count(&mut conn).await, 2, "the two jobs with a unique key");
    for job in s.claim(&request("u", 3)).await.unwrap().jobs {
        s.ack(jq_core::storage::LeaseRef { id: job.id, token: job.token().unwrap() }).await.unwrap();
    }
    let again = job("u", 3).unique_key("a").unique_for(period).build_at(clock.now()).unwrap();
    assert_ne!(s.enqueue(vec![again.clone()]).await.unwrap(), vec![again.id], "a plain unique job counts too");
    clock.advance(Duration::from_secs(1));
    assert_eq!(s.purge(State::Completed, clock.now()).await.unwrap(), 3);
    assert_eq!(count(&mut conn).await, 0, "purged jobs leave the index");
    assert_eq!(s.enqueue(vec![again.clone()]).await.unwrap(), vec![again.id], "a purged job no longer counts");
    common::drop_prefix(&prefix).await;
}
