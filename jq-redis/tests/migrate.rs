//! Jobs stored in the key layout before v2 (a hash per job, see keys.rs)
//! are carried over: by `connect`, in every state, with their fields, and
//! later by recover for what an older producer still stores meanwhile.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use std::time::Duration;

use jq_core::storage::{ClaimRequest, LeaseRef, LeaseToken, Storage, StorageExt};
use jq_core::{JobFilter, JobId, ManualClock, QueueName, State};
use jq_redis::keys::id_hex;

/// One job as the layout before v2 stored it: its hash, and the index it
/// was in (key suffix, score, member).
struct Legacy {
    id: JobId,
    fields: Vec<(&'static str, String)>,
    index: (&'static str, i64, String),
}

/// A job of queue `q` in `state`, written the way jq before v2 wrote it.
fn legacy(state: &str, now: i64, extra: &[(&'static str, String)]) -> Legacy {
    let id = JobId::new();
    let hex = id_hex(id);
    let mut fields = vec![
        ("state", state.to_owned()),
        ("kind", "legacy".to_owned()),
        ("payload", format!(r#"{{"id":"{hex}"}}"#)),
        ("priority", "1".to_owned()),
        ("max_attempts", "3".to_owned()),
        ("run_at", (now - 1_000_000).to_string()),
        ("created_at", (now - 2_000_000).to_string()),
        ("id", hex.clone()),
        ("queue", "q".to_owned()),
    ];
    for (k, v) in extra {
        match fields.iter_mut().find(|(name, _)| name == k) {
            Some(slot) => slot.1 = v.clone(),
            None => fields.push((k, v.clone())),
        }
    }
    let get = |name: &str| fields.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone()).unwrap_or_default();
    let index = match state {
        "pending" => ("ready", -1, format!("{:020}{hex}", get("run_at").parse::<i64>().unwrap_or(0))),
        "scheduled" => ("scheduled", get("run_at").parse().unwrap(), hex.clone()),
        "running" => ("leases", get("lease_expires_at").parse().unwrap(), hex.clone()),
        other => (
            if other == "completed" { "done:completed" } else { "done:dead" },
            get("finished_at").parse().unwrap(),
            hex,
        ),
    };
    Legacy { id, fields, index }
}

/// Writes `jobs` in the layout before v2 under `prefix`.
async fn store_legacy(prefix: &str, jobs: &[&Legacy]) {
    let mut conn = redis::Client::open(common::url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let keys = jq_redis::Keys::new(prefix);
    let base = keys.base("q");
    let mut pipe = redis::pipe();
    pipe.cmd("SADD").arg(keys.registry()).arg("q").ignore();
    for job in jobs {
        let hex = id_hex(job.id);
        let mut hset = redis::cmd("HSET");
        hset.arg(keys.legacy_job("q", job.id));
        for (k, v) in &job.fields {
            hset.arg(*k).arg(v);
        }
        pipe.add_command(hset).ignore();
        let (index, score, member) = &job.index;
        pipe.cmd("ZADD").arg(format!("{base}{index}")).arg(*score).arg(member).ignore();
        pipe.cmd("ZADD").arg(format!("{base}ids")).arg(0).arg(&hex).ignore();
        if let Some((_, uk)) = job.fields.iter().find(|(k, _)| *k == "unique_key") {
            pipe.cmd("HSET").arg(format!("{base}unique")).arg(uk).arg(&hex).ignore();
        }
    }
    let () = pipe.query_async(&mut conn).await.unwrap();
}

/// Keys of the layout before v2 left under `prefix`.
async fn legacy_keys(prefix: &str) -> Vec<String> {
    let mut conn = redis::Client::open(common::url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let all: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(&mut conn).await.unwrap();
    let base = jq_redis::Keys::new(prefix).base("q");
    all.into_iter()
        .filter(|k| {
            k.strip_prefix(&base).is_some_and(|rest| {
                rest.starts_with("job:")
                    || rest.starts_with("done:")
                    || ["ready", "scheduled", "leases", "ids"].contains(&rest)
            })
        })
        .collect()
}

fn request(limit: usize) -> ClaimRequest {
    ClaimRequest::new(vec![QueueName::new("q").unwrap()], limit, Duration::from_secs(30), "w")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_carries_every_state_over_from_the_layout_before_v2() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let now = clock.now().timestamp_micros();
    let token = LeaseToken::new();
    let pending = legacy("pending", now, &[]);
    let unique = legacy("pending", now, &[("unique_key", "u".to_owned())]);
    let scheduled = legacy("scheduled", now, &[("run_at", (now + 60_000_000).to_string())]);
    let running = legacy(
        "running",
        now,
        &[
            ("attempts", "1".to_owned()),
            ("lease_token", token.to_string()),
            ("lease_worker", "old-worker".to_owned()),
            ("lease_expires_at", (now + 30_000_000).to_string()),
        ],
    );
    let completed = legacy(
        "completed",
        now,
        &[
            ("attempts", "1".to_owned()),
            ("finished_at", (now - 500_000).to_string()),
            ("lease_token", "stale".to_owned()),
        ],
    );
    let dead = legacy(
        "dead",
        now,
        &[
            ("attempts", "3".to_owned()),
            ("finished_at", (now - 400_000).to_string()),
            ("errors", format!(r#"[{{"attempt":3,"at":{now},"message":"boom"}}]"#)),
        ],
    );
    let corrupt = legacy("pending", now, &[("priority", "urgent".to_owned())]);
    store_legacy(&prefix, &[&pending, &unique, &scheduled, &running, &completed, &dead, &corrupt]).await;

    let s = common::connect(&prefix, clock.clock()).await;
    assert_eq!(legacy_keys(&prefix).await, Vec::<String>::new(), "the older layout's keys are gone");

    let job = s.get(pending.id).await.unwrap();
    assert_eq!(
        (job.state, job.kind.as_str(), job.priority.as_i16(), job.max_attempts),
        (State::Pending, "legacy", 1, 3)
    );
    assert_eq!(job.payload.as_str(), format!(r#"{{"id":"{}"}}"#, id_hex(pending.id)));
    assert_eq!((job.run_at.timestamp_micros(), job.created_at.timestamp_micros()), (now - 1_000_000, now - 2_000_000));
    assert_eq!(s.get(scheduled.id).await.unwrap().state, State::Scheduled);
    let job = s.get(running.id).await.unwrap();
    let lease = job.lease.clone().unwrap();
    assert_eq!((job.state, job.attempts, lease.token, lease.worker.as_str()), (State::Running, 1, token, "old-worker"));
    let job = s.get(completed.id).await.unwrap();
    assert_eq!(
        (job.state, job.finished_at.map(|t| t.timestamp_micros()), job.lease),
        (State::Completed, Some(now - 500_000), None)
    );
    let job = s.get(dead.id).await.unwrap();
    assert_eq!((job.state, job.errors.len(), job.errors[0].message.as_str()), (State::Dead, 1, "boom"));
    // A job whose index score cannot be computed is buried with the reason
    // (and, its priority being corrupt, does not decode).
    assert!(matches!(s.get(corrupt.id).await, Err(jq_core::Error::Corrupt { .. })));
    let mut conn = redis::Client::open(common::url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let hex = id_hex(corrupt.id);
    let state: String = redis::cmd("HGET").arg(s.keys().states("q")).arg(&hex).query_async(&mut conn).await.unwrap();
    let errors: String = redis::cmd("HGET").arg(s.keys().errors("q")).arg(&hex).query_async(&mut conn).await.unwrap();
    assert!(state.starts_with("dead\0"), "{state:?}");
    assert!(errors.contains("priority") && errors.contains("carried over"), "{errors}");

    let stats = s.stats().await.unwrap();
    let counts: Vec<u64> = [State::Pending, State::Scheduled, State::Running, State::Completed, State::Dead]
        .map(|st| stats.total(st))
        .to_vec();
    assert_eq!(counts, vec![2, 1, 1, 1, 2]);
    assert_eq!(s.list(&JobFilter::default()).await.unwrap().len(), 6, "all but the corrupt one");

    // The unique key is still held, the claim order kept, the old lease honoured.
    let again = jq_core::NewJob::builder("legacy", jq_core::Payload::from_json("{}").unwrap())
        .queue("q")
        .unique_key("u")
        .build_at(clock.now())
        .unwrap();
    assert_eq!(s.enqueue_one(again).await.unwrap(), unique.id);
    // same priority and run_at: id order
    let mut expected = vec![pending.id, unique.id];
    expected.sort();
    let claimed: Vec<JobId> = s.claim(&request(10)).await.unwrap().iter().map(|j| j.id).collect();
    assert_eq!(claimed, expected);
    s.ack(LeaseRef { id: running.id, token }).await.unwrap();
    assert_eq!(s.get(running.id).await.unwrap().state, State::Completed, "the old lease is honoured");
    common::drop_prefix(&prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_carries_over_what_an_older_producer_stores_later() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let now = clock.now().timestamp_micros();
    let late = legacy("pending", now, &[]);
    store_legacy(&prefix, &[&late]).await;
    assert!(s.claim(&request(10)).await.unwrap().is_empty(), "not carried over yet");
    s.recover().await.unwrap();
    let claimed: Vec<JobId> = s.claim(&request(10)).await.unwrap().iter().map(|j| j.id).collect();
    assert_eq!(claimed, vec![late.id]);
    assert_eq!(legacy_keys(&prefix).await, Vec::<String>::new());
    common::drop_prefix(&prefix).await;
}

/// A live job an older producer stored in the layout before v2 holds its
/// unique key: an enqueue of the same key before recover carried it over
/// answers with it (and carries it over now) instead of storing a second
/// job and taking the key from it; a live job carried over while a v2 job
/// holds its key shares the key, which stays taken until both are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_job_of_the_older_layout_keeps_its_unique_key() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let s = common::connect(&prefix, clock.clock()).await;
    let now = clock.now().timestamp_micros();
    let keyed = |key: &str| {
        jq_core::NewJob::builder("legacy", jq_core::Payload::from_json("{}").unwrap())
            .queue("q")
            .unique_key(key)
            .build_at(clock.now())
            .unwrap()
    };
    let old = legacy("pending", now, &[("unique_key", "u".to_owned())]);
    store_legacy(&prefix, &[&old]).await;
    assert_eq!(s.enqueue_one(keyed("u")).await.unwrap(), old.id, "the older layout's live job holds the key");
    assert_eq!(s.get(old.id).await.unwrap().state, State::Pending, "carried over at once");
    assert_eq!(s.stats().await.unwrap().total(State::Pending), 1);

    // A v2 job took key "v" (its older holder was stored later by an older
    // producer, which does not see v2 jobs), then recover carries that one
    // over: both hold "v" until the last of them is done.
    let newer = s.enqueue_one(keyed("v")).await.unwrap();
    let late = legacy("pending", now, &[("unique_key", "v".to_owned())]);
    store_legacy(&prefix, &[&late]).await;
    let mut conn = redis::Client::open(common::url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let base = jq_redis::Keys::new(&prefix).base("q");
    let _: () = redis::cmd("HSET")
        .arg(format!("{base}unique"))
        .arg("v")
        .arg(id_hex(newer))
        .query_async(&mut conn)
        .await
        .unwrap();
    s.recover().await.unwrap();
    let claimed = s.claim(&request(10)).await.unwrap();
    let lease_of = |id: JobId| claimed.iter().find(|j| j.id == id).unwrap().lease_ref().unwrap();
    s.ack(lease_of(newer)).await.unwrap();
    assert_eq!(s.enqueue_one(keyed("v")).await.unwrap(), late.id, "the key is still held by the carried-over job");
    s.ack(lease_of(late.id)).await.unwrap();
    let third = keyed("v");
    let third_id = third.id;
    assert_eq!(s.enqueue_one(third).await.unwrap(), third_id, "free once both are done");
    common::drop_prefix(&prefix).await;
}

/// A queue stored by the build before keyed jobs (layout v2 with no key
/// field) needs no migration: its Pending, due Scheduled and Running jobs,
/// written here as that build wrote them, are claimed, recovered and
/// settled beside keyed jobs of the same queue, and `keys()` and `stats`
/// count both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_stored_before_keyed_jobs_stay_claimable_beside_them() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let clock = ManualClock::starting_now();
    let now = clock.now().timestamp_micros();
    let keys = jq_redis::Keys::new(&prefix);
    let base = keys.base("q");
    let (pending, scheduled, running) = (JobId::new(), JobId::new(), JobId::new());
    let mut conn = redis::Client::open(common::url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let mut pipe = redis::pipe();
    pipe.cmd("SADD").arg(keys.registry()).arg("q").ignore();
    let token = LeaseToken::new();
    for (id, state, run_at, lease) in [
        (pending, "pending", now - 3_000_000, String::new()),
        (scheduled, "scheduled", now - 2_000_000, String::new()),
        (running, "running", now - 4_000_000, format!("{}\0{token}\0old-worker", now - 1_000_000)),
    ] {
        let hex = id_hex(id);
        let lease = if lease.is_empty() { "\0\0".to_owned() } else { lease };
        pipe.cmd("HSET")
            .arg(keys.jobs("q"))
            .arg(&hex)
            .arg(format!("old\0{{}}\x001\x003\0{}\0", now - 5_000_000))
            .ignore();
        let attempts = if state == "running" { 1 } else { 0 };
        pipe.cmd("HSET")
            .arg(keys.states("q"))
            .arg(&hex)
            .arg(format!("{state}\0{attempts}\0{run_at}\0\0{lease}\0"))
            .ignore();
        pipe.cmd("ZADD").arg(format!("{base}v2:ids")).arg(0).arg(&hex).ignore();
        match state {
            "pending" => pipe.cmd("ZADD").arg(format!("{base}v2:ready")).arg(-1).arg(format!("{run_at:020}{hex}")),
            "scheduled" => pipe.cmd("ZADD").arg(format!("{base}v2:scheduled")).arg(run_at).arg(&hex),
            _ => pipe.cmd("ZADD").arg(format!("{base}v2:leases")).arg(now - 1_000_000).arg(&hex),
        };
        pipe.ignore();
    }
    let () = pipe.query_async(&mut conn).await.unwrap();

    let s = common::connect(&prefix, clock.clock()).await;
    let keyed: Vec<jq_core::NewJob> = (0..2)
        .map(|i| {
            jq_core::NewJob::builder("new", jq_core::Payload::from_json(format!("{{\"i\":{i}}}")).unwrap())
                .queue("q")
                .key("tenant")
                .build_at(clock.now())
                .unwrap()
        })
        .collect();
    s.enqueue(keyed).await.unwrap();
    jq_core::storage::KeyStorage::set_key_limits(
        &s,
        &QueueName::new("q").unwrap(),
        None,
        &jq_core::QueueLimits { concurrency: Some(1), rate: None },
    )
    .await
    .unwrap();
    let stats = s.stats().await.unwrap();
    assert_eq!(
        [State::Pending, State::Scheduled, State::Running].map(|st| stats.total(st)),
        [3, 1, 1],
        "the older build's jobs and the keyed ones are counted"
    );
    assert_eq!(s.recover().await.unwrap(), 1, "the older build's expired lease is recovered");
    let claimed = s.claim(&request(10)).await.unwrap();
    let mut ids: Vec<JobId> = claimed.iter().filter(|j| j.key.is_none()).map(|j| j.id).collect();
    ids.sort();
    let mut expected = vec![pending, scheduled, running];
    expected.sort();
    assert_eq!(ids, expected, "every job of the older build is claimed");
    assert_eq!(claimed.iter().filter(|j| j.key.is_some()).count(), 1, "one keyed job: its key's concurrency is 1");
    for job in &claimed {
        s.ack(job.lease_ref().unwrap()).await.unwrap();
    }
    let report = jq_core::storage::KeyStorage::keys(&s, &QueueName::new("q").unwrap(), 10).await.unwrap();
    assert_eq!(
        report.busiest.iter().map(|k| (k.key.as_str(), k.running, k.pending)).collect::<Vec<_>>(),
        [("tenant", 0, 1)]
    );
    let last = s.claim(&request(10)).await.unwrap();
    assert_eq!((last.len(), last[0].key.as_deref()), (1, Some("tenant")), "the key's slot came back with the ack");
    common::drop_prefix(&prefix).await;
}
