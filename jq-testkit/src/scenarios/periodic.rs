//! Periodic jobs ([`PeriodicStorage::fire`], [`PeriodicStorage::periodic`],
//! [`PeriodicStorage::trigger`]): one job per (periodic job, tick) whatever the
//! number of pools, missed ticks, orphans and daylight-saving time.
//!
//! [`PeriodicStorage::fire`]: jq_core::storage::PeriodicStorage::fire
//! [`PeriodicStorage::periodic`]: jq_core::storage::PeriodicStorage::periodic
//! [`PeriodicStorage::trigger`]: jq_core::storage::PeriodicStorage::trigger
//!
//! The pools here are [`PeriodicRunner`]s, the step a worker pool repeats every
//! second, called directly under manual clocks so time moves without
//! sleeping.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use jq_core::periodic::{Fire, FireOutcome, MissedPolicy, Periodic, PeriodicBuilder, PeriodicInfo, PeriodicRunner};
use jq_core::periodic::{ORPHAN_AFTER, Spec};
use jq_core::storage::{Storage, StorageExt, Wrapper};
use jq_core::{
    Error, HandlerResult, Job, JobContext, JobFilter, JobId, ManualClock, NewJob, Payload, QueueName, Timestamp,
    WorkerPool,
};

use crate::Harness;
use crate::faults::{FaultyStorage, When};
use jq_core::storage::Operation;

/// A periodic job whose job, of kind `tick` on `queue`, carries its tick
/// (`{"periodic": name, "tick": rfc3339}`).
pub fn tick_periodic(builder: PeriodicBuilder, name: &str, queue: &str) -> Periodic {
    let name = name.to_owned();
    builder
        .job_with(queue, move |tick| {
            let payload = serde_json::json!({ "periodic": name, "tick": tick.to_rfc3339() });
            NewJob::builder("tick", Payload::of(&payload).expect("a JSON payload"))
        })
        .expect("scenario queue names are valid")
}

/// Every job of `queue` as (periodic job, tick), in id order; panics on a
/// duplicate pair.
pub async fn tick_jobs<S: Storage + ?Sized>(storage: &S, queue: &str) -> Vec<(String, Timestamp)> {
    let filter = JobFilter { queue: Some(QueueName::new(queue).expect("queue")), limit: 500, ..Default::default() };
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for id in crate::list_pages(storage, filter).await.concat() {
        let job = storage.get(id).await.expect("get");
        let value: serde_json::Value = serde_json::from_str(job.payload.as_str()).expect("JSON");
        let name = value["periodic"].as_str().expect("periodic").to_owned();
        let tick = DateTime::parse_from_rfc3339(value["tick"].as_str().expect("tick")).expect("rfc3339").to_utc();
        assert!(seen.insert((name.clone(), tick)), "two jobs for {name} at {tick}");
        out.push((name, tick));
    }
    out
}

fn utc(s: &str) -> Timestamp {
    DateTime::parse_from_rfc3339(s).expect("rfc3339").with_timezone(&Utc)
}

fn every_minute(name: &str, queue: &str) -> Periodic {
    tick_periodic(Periodic::cron(name, "* * * * *").expect("cron"), name, queue)
}

async fn row<S: Storage + ?Sized>(storage: &S, name: &str) -> PeriodicInfo {
    let rows = storage.require_periodic().expect("periodic").periodic().await.expect("periodic jobs");
    rows.into_iter().find(|r| r.name == name).unwrap_or_else(|| panic!("no row for {name}"))
}

/// A storage whose `periodic` answers only once every pool of the round
/// has read: the pools then all fire from the same cursor, the worst
/// interleaving, at every tick (and on any backend, even one whose calls
/// never yield).
#[derive(Clone)]
struct Lockstep<S> {
    inner: S,
    barrier: std::sync::Arc<tokio::sync::Barrier>,
}

#[async_trait::async_trait]
impl<S: Storage> Wrapper for Lockstep<S> {
    type Inner = S;
    fn inner(&self) -> &S {
        &self.inner
    }
    async fn periodic(&self) -> jq_core::Result<Vec<PeriodicInfo>> {
        let rows = self.inner.require_periodic()?.periodic().await;
        self.barrier.wait().await;
        rows
    }
}

/// Four pools on four connections, with clocks up to 3 s apart, race over
/// 1,000 ticks of a per-minute periodic job, each round all reading the cursor
/// before any fires: exactly one job per tick, for exactly the ticks that
/// passed.
pub async fn periodic_one_job_per_tick_under_racing_pools<H: Harness>(h: &H) {
    let start = utc("2026-05-04T10:00:30Z");
    let skews = [0i64, 1_500, -2_000, 3_000];
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(skews.len()));
    let mut pools = Vec::new();
    for skew in skews {
        let clock = ManualClock::new(start + chrono::Duration::milliseconds(skew));
        let storage = Lockstep { inner: h.connect(clock.clock()).await, barrier: barrier.clone() };
        let runner = PeriodicRunner::new(vec![every_minute("race", "cron-race")]).expect("runner");
        pools.push((clock, storage, runner));
    }
    for _ in 0..=1_000 {
        let rounds = pools.iter().map(|(_, storage, runner)| runner.run_once(storage));
        for round in futures::future::join_all(rounds).await {
            round.expect("round");
        }
        for (clock, _, _) in &pools {
            clock.advance(Duration::from_secs(60));
        }
    }
    let storage = &pools[0].1.inner;
    let got: Vec<Timestamp> = tick_jobs(storage, "cron-race").await.into_iter().map(|(_, t)| t).collect();
    let expected: Vec<Timestamp> =
        (1..=1_000).map(|m| utc("2026-05-04T10:00:00Z") + chrono::Duration::minutes(m)).collect();
    let got_set: BTreeSet<_> = got.iter().copied().collect();
    assert_eq!(got.len(), 1_000, "one job per tick, no more, no less");
    assert_eq!(got_set, expected.iter().copied().collect(), "exactly the ticks that passed");
    let row = row(storage, "race").await;
    assert_eq!((row.cursor, row.missed, row.last_missed), (expected[999], 0, None));
    let last = row.last_job.expect("a last job");
    let job = storage.get(last).await.expect("the last job");
    assert!(job.payload.as_str().contains(&expected[999].to_rfc3339()), "{}", job.payload.as_str());
}

/// Every pool down for 3 h 20 min over an hourly periodic job: `skip` stores
/// nothing, `latest` one job for 13:00, `all` the most recent `cap`; the
/// others are counted with the most recent of them.
pub async fn periodic_missed_ticks_follow_the_policy<H: Harness>(h: &H) {
    let clock = ManualClock::new(utc("2026-01-01T10:00:00Z"));
    let storage = h.connect(clock.clock()).await;
    let hourly = |name: &str, policy| {
        tick_periodic(Periodic::cron(name, "0 * * * *").expect("cron").missed(policy), name, "cron-missed")
    };
    let runner = PeriodicRunner::new(vec![
        hourly("skip", MissedPolicy::Skip),
        hourly("latest", MissedPolicy::Latest),
        hourly("all", MissedPolicy::All { cap: 2 }),
    ])
    .expect("runner");
    let round = runner.run_once(&storage).await.expect("round");
    assert_eq!((round.fired, round.jobs), (3, 0), "first declaration stores the rows, no job");
    clock.set(utc("2026-01-01T13:20:00Z"));
    let round = runner.run_once(&storage).await.expect("round");
    assert_eq!(round.jobs, 3);
    let mut by_name: BTreeMap<String, Vec<Timestamp>> = BTreeMap::new();
    for (name, tick) in tick_jobs(&storage, "cron-missed").await {
        by_name.entry(name).or_default().push(tick);
    }
    by_name.values_mut().for_each(|ticks| ticks.sort());
    assert_eq!(by_name.get("skip"), None);
    assert_eq!(by_name["latest"], [utc("2026-01-01T13:00:00Z")]);
    assert_eq!(by_name["all"], [utc("2026-01-01T12:00:00Z"), utc("2026-01-01T13:00:00Z")]);
    for (name, missed, last) in
        [("skip", 3, "2026-01-01T13:00:00Z"), ("latest", 2, "2026-01-01T12:00:00Z"), ("all", 1, "2026-01-01T11:00:00Z")]
    {
        let row = row(&storage, name).await;
        assert_eq!((row.missed, row.last_missed), (missed, Some(utc(last))), "{name}");
        assert_eq!(row.cursor, utc("2026-01-01T13:00:00Z"), "{name}");
    }
    // On time again: 14:00 runs under every policy.
    clock.set(utc("2026-01-01T14:00:10Z"));
    assert_eq!(runner.run_once(&storage).await.expect("round").jobs, 3);
}

/// The step itself: a compare-and-set on the cursor and the trigger,
/// with the jobs stored in the same step or not at all.
pub async fn periodic_fire_is_a_compare_and_set<H: Harness>(h: &H) {
    let clock = ManualClock::new(utc("2026-02-01T00:00:00Z"));
    let storage = h.connect(clock.clock()).await;
    let queue = QueueName::new("cron-cas").expect("queue");
    let job = |n: u32| {
        NewJob::builder(
            "tick",
            Payload::of(&serde_json::json!({"periodic": "cas", "tick": format!("2026-02-01T00:0{n}:00+00:00")}))
                .expect("json"),
        )
        .queue("cron-cas")
        .build_at(clock.now())
        .expect("job")
    };
    let step = |expected, cursor, jobs| Fire {
        name: "cas".into(),
        queue: queue.clone(),
        spec: "* * * * *".into(),
        zone: "UTC".into(),
        expected,
        expected_trigger: None,
        cursor,
        jobs,
        missed: 0,
        last_missed: None,
    };
    let t0 = clock.now();
    assert_eq!(
        storage.require_periodic().expect("periodic").fire(&step(None, t0, vec![])).await.expect("create"),
        FireOutcome::Fired(vec![])
    );
    assert_eq!(
        storage.require_periodic().expect("periodic").fire(&step(None, t0, vec![job(1)])).await.expect("again"),
        FireOutcome::Moved
    );
    let t1 = utc("2026-02-01T00:01:00Z");
    assert_eq!(
        storage.require_periodic().expect("periodic").fire(&step(Some(t1), t1, vec![job(1)])).await.expect("wrong"),
        FireOutcome::Moved
    );
    let first = job(1);
    let id = first.id;
    clock.set(utc("2026-02-01T00:01:02Z"));
    assert_eq!(
        storage
            .require_periodic()
            .expect("periodic")
            .fire(&step(Some(t0), t1, vec![first.clone()]))
            .await
            .expect("fire"),
        FireOutcome::Fired(vec![id])
    );
    // The same step sent again after a lost answer finds the cursor moved.
    assert_eq!(
        storage.require_periodic().expect("periodic").fire(&step(Some(t0), t1, vec![first])).await.expect("resend"),
        FireOutcome::Moved
    );
    assert_eq!(tick_jobs(&storage, "cron-cas").await.len(), 1);
    let stored = row(&storage, "cas").await;
    assert_eq!(
        (stored.cursor, stored.last_job, stored.declared_at, stored.queue.as_str()),
        (t1, Some(id), clock.now(), "cron-cas")
    );

    // A job of another queue, or an oversized payload: refused, nothing stored.
    let mut stray = job(2);
    stray.queue = QueueName::new("elsewhere").expect("queue");
    let t2 = utc("2026-02-01T00:02:00Z");
    let err = storage
        .require_periodic()
        .expect("periodic")
        .fire(&step(Some(t1), t2, vec![stray]))
        .await
        .expect_err("another queue");
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    let mut big = job(2);
    big.payload = Payload::of(&"x".repeat(jq_core::DEFAULT_MAX_PAYLOAD_BYTES + 1)).expect("json");
    let err = storage
        .require_periodic()
        .expect("periodic")
        .fire(&step(Some(t1), t2, vec![big]))
        .await
        .expect_err("too large");
    assert!(matches!(err, Error::PayloadTooLarge { .. }), "{err:?}");
    assert_eq!(row(&storage, "cas").await.cursor, t1, "nothing moved");
    assert_eq!(tick_jobs(&storage, "cron-cas").await.len(), 1);

    // An operator's trigger takes part in the comparison.
    let err = storage.require_periodic().expect("periodic").trigger("nope").await.expect_err("unknown");
    assert!(matches!(err, Error::PeriodicNotFound { ref name } if name == "nope"), "{err:?}");
    storage.require_periodic().expect("periodic").trigger("cas").await.expect("request");
    let asked = clock.now();
    clock.advance(Duration::from_secs(1));
    storage.require_periodic().expect("periodic").trigger("cas").await.expect("requests coalesce");
    assert_eq!(row(&storage, "cas").await.triggered_at, Some(asked));
    assert_eq!(
        storage.require_periodic().expect("periodic").fire(&step(Some(t1), t1, vec![])).await.expect("stale"),
        FireOutcome::Moved
    );
    let run = job(3);
    let run_id = run.id;
    let with_run =
        Fire { expected_trigger: Some(asked), missed: 2, last_missed: Some(t1), ..step(Some(t1), t1, vec![run]) };
    assert_eq!(
        storage.require_periodic().expect("periodic").fire(&with_run).await.expect("served"),
        FireOutcome::Fired(vec![run_id])
    );
    let stored = row(&storage, "cas").await;
    assert_eq!(
        (stored.triggered_at, stored.last_job, stored.missed, stored.last_missed),
        (None, Some(run_id), 2, Some(t1))
    );
}

/// `jqctl periodic trigger`: a trigger is served once, by the next round of a
/// pool that declares the periodic job, with the request's instant as tick.
pub async fn periodic_trigger_is_served_once<H: Harness>(h: &H) {
    let clock = ManualClock::new(utc("2026-03-01T08:00:10Z"));
    let daily = || tick_periodic(Periodic::cron("daily", "0 3 * * *").expect("cron"), "daily", "cron-run");
    let a = h.connect(clock.clock()).await;
    let b = h.connect(clock.clock()).await;
    let (sa, sb) = (PeriodicRunner::new(vec![daily()]).expect("a"), PeriodicRunner::new(vec![daily()]).expect("b"));
    sa.run_once(&a).await.expect("declare");
    clock.advance(Duration::from_secs(5));
    b.require_periodic().expect("periodic").trigger("daily").await.expect("request");
    let asked = clock.now();
    clock.advance(Duration::from_secs(1));
    let (ra, rb) = tokio::join!(sa.run_once(&a), sb.run_once(&b));
    assert_eq!(ra.expect("a").jobs + rb.expect("b").jobs, 1, "one job for one request");
    assert_eq!(sa.run_once(&a).await.expect("again").jobs, 0);
    assert_eq!(tick_jobs(&a, "cron-run").await, [("daily".to_owned(), asked)]);
    assert_eq!(row(&a, "daily").await.triggered_at, None);
}

/// A deploy that changes an expression changes the stored one; a periodic job
/// no pool declares any more stops and shows as orphaned.
pub async fn periodic_changes_with_the_code_and_orphans_stop<H: Harness>(h: &H) {
    let clock = ManualClock::new(utc("2026-06-01T00:00:30Z"));
    let storage = h.connect(clock.clock()).await;
    let old = PeriodicRunner::new(vec![every_minute("kept", "cron-deploy"), every_minute("dropped", "cron-deploy")])
        .expect("old");
    old.run_once(&storage).await.expect("declare");
    clock.advance(Duration::from_secs(60));
    assert_eq!(old.run_once(&storage).await.expect("round").jobs, 2);

    // The new deploy: "kept" every two minutes, "dropped" gone.
    let kept = tick_periodic(Periodic::cron("kept", "*/2 * * * *").expect("cron"), "kept", "cron-deploy");
    let new = PeriodicRunner::new(vec![kept]).expect("new");
    clock.advance(Duration::from_secs(30)); // 00:02:00
    new.run_once(&storage).await.expect("round");
    assert_eq!(row(&storage, "kept").await.spec, "*/2 * * * *");
    for _ in 0..10 {
        clock.advance(Duration::from_secs(60));
        new.run_once(&storage).await.expect("round");
    }
    let now = clock.now();
    let jobs = tick_jobs(&storage, "cron-deploy").await;
    let kept_ticks: Vec<_> = jobs.iter().filter(|(n, _)| n == "kept").map(|(_, t)| *t).collect();
    assert!(kept_ticks[1..].iter().all(|t| t.timestamp() % 120 == 0), "{kept_ticks:?}");
    assert_eq!(kept_ticks.len(), 1 + 6, "00:01, then 00:02 to 00:12 every two minutes");
    assert_eq!(jobs.iter().filter(|(n, _)| n == "dropped").count(), 1, "stopped with the deploy");
    clock.advance(ORPHAN_AFTER);
    new.run_once(&storage).await.expect("round");
    let (kept, dropped) = (row(&storage, "kept").await, row(&storage, "dropped").await);
    assert!(!kept.is_orphaned(clock.now()), "{kept:?}");
    assert!(dropped.is_orphaned(clock.now()), "{dropped:?}");
    assert!(dropped.declared_at < now);
}

/// Daylight-saving time in a northern and a southern zone, both
/// directions: a daily 02:30 job runs once on every day, at the first
/// instant after a spring-forward gap and at the first occurrence of a
/// repeated time.
pub async fn periodic_daylight_saving_in_two_zones<H: Harness>(h: &H) {
    let clock = ManualClock::new(utc("2026-03-27T06:00:00Z"));
    let storage = h.connect(clock.clock()).await;
    let daily = |name: &str, zone: &str| {
        let builder = Periodic::cron(name, "30 2 * * *").expect("cron").zone(zone).expect("zone");
        tick_periodic(builder.missed(MissedPolicy::Skip).grace(Duration::from_secs(3600)), name, "cron-dst")
    };
    let runner = PeriodicRunner::new(vec![daily("berlin", "Europe/Berlin"), daily("sydney", "Australia/Sydney")])
        .expect("runner");
    // Three days around each transition, 30 minutes a round; the jumps
    // between windows skip (policy skip, nothing on time).
    for start in ["2026-03-27T06:00:00Z", "2026-04-03T06:00:00Z", "2026-10-02T06:00:00Z", "2026-10-23T06:00:00Z"] {
        clock.set(utc(start));
        for _ in 0..=(3 * 48) {
            runner.run_once(&storage).await.expect("round");
            clock.advance(Duration::from_secs(1800));
        }
    }
    let mut got: BTreeMap<String, Vec<Timestamp>> = BTreeMap::new();
    for (name, tick) in tick_jobs(&storage, "cron-dst").await {
        got.entry(name).or_default().push(tick);
    }
    got.values_mut().for_each(|ticks| ticks.sort());
    let berlin = [
        "2026-03-28T01:30:00Z",
        "2026-03-29T01:00:00Z", // 02:30 does not exist: 03:00 CEST, the end of the gap
        "2026-03-30T00:30:00Z",
        "2026-04-04T00:30:00Z",
        "2026-04-05T00:30:00Z",
        "2026-04-06T00:30:00Z",
        "2026-10-03T00:30:00Z",
        "2026-10-04T00:30:00Z",
        "2026-10-05T00:30:00Z",
        "2026-10-24T00:30:00Z",
        "2026-10-25T00:30:00Z", // 02:30 happens twice: the first (CEST)
        "2026-10-26T01:30:00Z",
    ];
    let sydney = [
        "2026-03-27T15:30:00Z",
        "2026-03-28T15:30:00Z",
        "2026-03-29T15:30:00Z",
        "2026-04-03T15:30:00Z",
        "2026-04-04T15:30:00Z", // 5 April 02:30 happens twice: the first (AEDT)
        "2026-04-05T16:30:00Z",
        "2026-10-02T16:30:00Z",
        "2026-10-03T16:00:00Z", // 4 October 02:30 does not exist: 03:00 AEDT
        "2026-10-04T15:30:00Z",
        "2026-10-23T15:30:00Z",
        "2026-10-24T15:30:00Z",
        "2026-10-25T15:30:00Z",
    ];
    assert_eq!(got["berlin"], berlin.map(utc), "Europe/Berlin");
    assert_eq!(got["sydney"], sydney.map(utc), "Australia/Sydney");
    // The zone's wall clock, checked independently of the store.
    let spec = Spec::cron("30 2 * * *").expect("cron");
    let sydney_tz = jq_core::periodic::zone("Australia/Sydney").expect("zone");
    assert_eq!(spec.next_after(utc("2026-10-03T00:00:00Z"), sydney_tz), Some(utc("2026-10-03T16:00:00Z")));
    let _: Option<JobId> = row(&storage, "berlin").await.last_job;
}

/// Three real worker pools declare one periodic job, over storages that lose
/// some `fire` answers (after the effect) and fail others (before it): each
/// of 20 ticks gets exactly one job, and the pools run them.
pub async fn periodic_worker_pools_store_each_tick_once_through_faults<H: Harness>(h: &H) {
    let clock = ManualClock::new(utc("2026-07-01T00:00:30Z"));
    let mut handles = Vec::new();
    let mut stores = Vec::new();
    for i in 0..3u64 {
        let store = FaultyStorage::new(h.connect(clock.clock()).await);
        stores.push(store.clone());
        store.fail(Operation::Fire, 2 + i, When::AfterEffect);
        store.fail(Operation::Fire, 5 + i, When::Before);
        let handle = WorkerPool::new(store)
            .queues(["cron-pool"])
            .register_raw("tick", |_job: Job, _ctx: JobContext| async { HandlerResult::Ok(()) })
            .maintenance(false)
            .poll_interval(Duration::from_millis(5))
            .periodic_interval(Duration::from_millis(5))
            .periodic(every_minute("pooled", "cron-pool"))
            .worker_name(format!("cron-pool-{i}"))
            .start()
            .expect("start the pool");
        handles.push(handle);
    }
    let storage = h.connect(clock.clock()).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !storage
        .require_periodic()
        .expect("periodic")
        .periodic()
        .await
        .expect("periodic jobs")
        .iter()
        .any(|r| r.name == "pooled")
    {
        assert!(std::time::Instant::now() < deadline, "no pool declared the periodic job");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for tick in 1..=20 {
        clock.advance(Duration::from_secs(60));
        while tick_jobs(&storage, "cron-pool").await.len() < tick {
            assert!(std::time::Instant::now() < deadline, "tick {tick} got no job");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    for handle in handles {
        handle.shutdown().await.expect("no fatal error");
    }
    let got: BTreeSet<Timestamp> = tick_jobs(&storage, "cron-pool").await.into_iter().map(|(_, t)| t).collect();
    let want: BTreeSet<Timestamp> =
        (1..=20).map(|m| utc("2026-07-01T00:00:00Z") + chrono::Duration::minutes(m)).collect();
    assert_eq!(got, want, "one job per tick");
    let faults: u64 = stores.iter().map(FaultyStorage::injected).sum();
    assert!(faults >= 2, "the lost and failed steps happened: {faults}");
}

/// A rolling deploy that moves a periodic job to another queue: old pools
/// declare it in `cron-old`, new ones in `cron-new`, and for an hour they
/// run their rounds alone or at once, in turn first; an operator's run
/// request comes in the middle; then only new pools are left. Every tick
/// gets exactly one job, in one queue or the other, and the request one;
/// the periodic job keeps one row and one cursor, in the new queue at the end.
/// *On Redis each queue had its own cursor, so a tick was fired twice or
/// skipped.*
pub async fn periodic_moved_to_another_queue_keeps_one_cursor<H: Harness>(h: &H) {
    let clock = ManualClock::new(utc("2026-07-01T00:00:30Z"));
    let old = h.connect(clock.clock()).await;
    let new = h.connect(clock.clock()).await;
    let so = PeriodicRunner::new(vec![every_minute("moving", "cron-old")]).expect("old");
    let sn = PeriodicRunner::new(vec![every_minute("moving", "cron-new")]).expect("new");
    so.run_once(&old).await.expect("declare");
    let mut requested = None;
    for minute in 1..=65u32 {
        clock.advance(Duration::from_secs(60));
        if minute == 30 {
            old.require_periodic().expect("periodic").trigger("moving").await.expect("request");
            requested = Some(clock.now());
        }
        match minute % 4 {
            _ if minute > 60 => {
                sn.run_once(&new).await.expect("new alone");
            }
            0 => {
                so.run_once(&old).await.expect("old alone");
            }
            1 => {
                sn.run_once(&new).await.expect("new alone");
            }
            2 => {
                let (a, b) = tokio::join!(so.run_once(&old), sn.run_once(&new));
                a.expect("old");
                b.expect("new");
            }
            _ => {
                let (b, a) = tokio::join!(sn.run_once(&new), so.run_once(&old));
                a.expect("old");
                b.expect("new");
            }
        }
    }
    let mut got: Vec<(String, Timestamp)> = tick_jobs(&old, "cron-old").await;
    got.extend(tick_jobs(&old, "cron-new").await);
    let got: BTreeSet<Timestamp> = got.into_iter().map(|(_, t)| t).collect();
    let mut expected: BTreeSet<Timestamp> =
        (1..=65).map(|m| utc("2026-07-01T00:00:00Z") + chrono::Duration::minutes(m)).collect();
    expected.insert(requested.expect("a request"));
    assert_eq!(got, expected, "every tick once, in either queue, and the request");
    let total = tick_jobs(&old, "cron-old").await.len() + tick_jobs(&old, "cron-new").await.len();
    assert_eq!(total, 66, "no tick twice across the two queues");
    let rows = old.require_periodic().expect("periodic").periodic().await.expect("periodic jobs");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let last = utc("2026-07-01T01:05:00Z");
    assert_eq!((rows[0].queue.as_str(), rows[0].cursor, rows[0].triggered_at), ("cron-new", last, None));
}
