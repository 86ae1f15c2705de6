//! Keyed jobs ([`Capability::Keys`](jq_core::storage::Capability::Keys)):
//! per-key concurrency and rate limits honoured by every claimer inside
//! the claim's atomic step, the rotation that takes a queue's keys in
//! turn, its merge with the jobs without a key, and the `keys()` report.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use jq_core::storage::{KeyStorage, Storage, StorageExt, add};
use jq_core::{Error, Job, JobId, KeyLimit, QueueLimits, Rate, State};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::support::{LEASE, MICRO, build, builder, claim, enqueue_all, get, lease, manual_clock, queue};
use crate::Harness;

fn keys<S: Storage>(storage: &S) -> &dyn KeyStorage {
    storage.require_keys().expect("the backend declares keyed jobs")
}

/// `n` jobs of `key` in `queue` (payloads numbered from `from`).
fn keyed(clock: &jq_core::ManualClock, queue: &str, key: &str, from: usize, n: usize) -> Vec<jq_core::NewJob> {
    (from..from + n).map(|i| build(builder(queue, i).key(key), clock)).collect()
}

async fn set<S: Storage>(storage: &S, q: &str, key: Option<&str>, limits: QueueLimits) {
    keys(storage).set_key_limits(&queue(q), key, &limits).await.expect("set key limits");
}

fn concurrency(n: u32) -> QueueLimits {
    QueueLimits { concurrency: Some(n), rate: None }
}

/// How many of `jobs` have each key.
fn per_key(jobs: &[Job]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for job in jobs {
        *counts.entry(job.key.clone().unwrap_or_default()).or_insert(0) += 1;
    }
    counts
}

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
}

/// A job a key's limit holds back is not touched: still Pending, no
/// attempt, no lease; and the key is stored and read back with the job.
pub async fn key_limit_leaves_held_back_jobs_untouched<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let ids = enqueue_all(&storage, keyed(&clock, "held", "tenant-1", 0, 3)).await;
    assert_eq!(get(&storage, ids[0]).await.key.as_deref(), Some("tenant-1"), "the key is stored");
    set(&storage, "held", None, concurrency(1)).await;
    let first = claim(&storage, &["held"], 10, "w").await;
    assert_eq!(first.len(), 1, "one slot per key");
    assert_eq!(first[0].key.as_deref(), Some("tenant-1"), "a claimed job carries its key");
    let waiting: Vec<JobId> = ids.iter().copied().filter(|id| *id != first[0].id).collect();
    let mut before = Vec::new();
    for id in &waiting {
        before.push(get(&storage, *id).await);
    }
    clock.advance(Duration::from_secs(1));
    assert!(claim(&storage, &["held"], 10, "w").await.is_empty(), "the key's slot is taken");
    for (id, was) in waiting.iter().zip(&before) {
        let job = get(&storage, *id).await;
        assert_eq!(&job, was, "a held-back job is unchanged");
        assert_eq!((job.state, job.attempts, job.lease.is_none()), (State::Pending, 0, true));
    }
}

/// A worker killed while holding a key's slots keeps them until recover
/// ends its leases (an expired lease still counts), then they return.
pub async fn key_slots_return_after_recover<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let other = h.connect(clock.clock()).await;
    let mut jobs = keyed(&clock, "slots", "a", 0, 5);
    jobs.extend(keyed(&clock, "slots", "b", 5, 1));
    enqueue_all(&storage, jobs).await;
    set(&storage, "slots", None, concurrency(2)).await;

    let killed = claim(&other, &["slots"], 10, "killed").await;
    assert_eq!(per_key(&killed), counts(&[("a", 2), ("b", 1)]), "two slots of a, b's one job");
    assert!(claim(&storage, &["slots"], 10, "w").await.is_empty(), "no slot left");
    clock.advance(LEASE);
    assert!(claim(&storage, &["slots"], 10, "w").await.is_empty(), "an expired lease still holds its slot");
    assert_eq!(storage.recover().await.expect("recover"), 3);
    let second = claim(&storage, &["slots"], 10, "w").await;
    assert_eq!(per_key(&second), counts(&[("a", 2), ("b", 1)]), "recover gave the slots back");
    let acked = second.iter().find(|j| j.key.as_deref() == Some("a")).expect("a job of a");
    storage.ack(lease(acked)).await.expect("ack");
    let third = claim(&storage, &["slots"], 10, "w").await;
    assert_eq!(per_key(&third), counts(&[("a", 1)]), "an ack frees its slot");
}

/// An override wins over the default for its key; an override of
/// `QueueLimits::none()` makes the key unlimited; clearing an override
/// makes the key follow the default again (clearing one that does not
/// exist changes nothing). Bad limits and bad keys are refused.
pub async fn key_overrides_apply_and_clearing_restores_the_default<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let mut jobs = keyed(&clock, "ov", "a", 0, 5);
    jobs.extend(keyed(&clock, "ov", "big", 5, 5));
    jobs.extend(keyed(&clock, "ov", "free", 10, 5));
    enqueue_all(&storage, jobs).await;
    set(&storage, "ov", None, concurrency(1)).await;
    set(&storage, "ov", Some("big"), concurrency(3)).await;
    set(&storage, "ov", Some("free"), QueueLimits::none()).await;
    keys(&storage).clear_key_limits(&queue("ov"), "never-set").await.expect("clearing nothing is a no-op");
    let report = keys(&storage).keys(&queue("ov"), 10).await.expect("keys");
    assert_eq!(report.default, concurrency(1));
    assert_eq!(
        report.overrides,
        vec![
            KeyLimit { key: "big".into(), limits: concurrency(3) },
            KeyLimit { key: "free".into(), limits: QueueLimits::none() },
        ]
    );

    let first = claim(&storage, &["ov"], 100, "w").await;
    assert_eq!(per_key(&first), counts(&[("a", 1), ("big", 3), ("free", 5)]), "default, override, unlimited");

    keys(&storage).clear_key_limits(&queue("ov"), "big").await.expect("clear");
    for job in first.iter().filter(|j| j.key.as_deref() == Some("big")).take(2) {
        storage.ack(lease(job)).await.expect("ack");
    }
    assert!(claim(&storage, &["ov"], 100, "w").await.is_empty(), "big follows the default of 1 again, and holds it");
    let last_big = first.iter().filter(|j| j.key.as_deref() == Some("big")).nth(2).expect("a third job of big");
    storage.ack(lease(last_big)).await.expect("ack");
    let second = claim(&storage, &["ov"], 100, "w").await;
    assert_eq!(per_key(&second), counts(&[("big", 1)]));

    let q = queue("ov");
    let refused = [
        keys(&storage).set_key_limits(&q, Some("a"), &concurrency(0)).await,
        keys(&storage)
            .set_key_limits(&q, None, &QueueLimits { concurrency: None, rate: Some(Rate::new(0, LEASE)) })
            .await,
        keys(&storage).set_key_limits(&q, Some(""), &concurrency(2)).await,
        keys(&storage).set_key_limits(&q, Some("a\0b"), &concurrency(2)).await,
        keys(&storage).set_key_limits(&q, Some("k".repeat(256).as_str()), &concurrency(2)).await,
        keys(&storage).clear_key_limits(&q, "").await,
    ];
    for got in refused {
        assert!(matches!(got, Err(Error::InvalidInput { .. })), "{got:?}");
    }
    let report = keys(&storage).keys(&q, 10).await.expect("keys");
    assert_eq!(report.default, concurrency(1), "a refused change changes nothing");
    assert_eq!(report.overrides, vec![KeyLimit { key: "free".into(), limits: QueueLimits::none() }]);
}

/// A key's rate is a sliding window of its starts: at most N in any
/// window `(t - period, t]`, a start leaves it exactly one period later;
/// another key is not slowed by it, and held-back jobs are unchanged.
pub async fn key_rate_is_a_sliding_window<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let other = h.connect(clock.clock()).await;
    let ids = enqueue_all(&storage, keyed(&clock, "kr", "slow", 0, 10)).await;
    let period = Duration::from_secs(10);
    set(&storage, "kr", Some("slow"), QueueLimits { concurrency: None, rate: Some(Rate::new(3, period)) }).await;
    let start = clock.now();

    assert_eq!(claim(&other, &["kr"], 2, "w").await.len(), 2);
    clock.advance(Duration::from_secs(6));
    assert_eq!(claim(&storage, &["kr"], 10, "w").await.len(), 1, "three starts per window");
    enqueue_all(&storage, keyed(&clock, "kr", "fast", 10, 4)).await;
    let got = claim(&storage, &["kr"], 10, "w").await;
    assert_eq!(per_key(&got), counts(&[("fast", 4)]), "another key is not held back by slow's rate");
    let mut held = Vec::new();
    for id in &ids[3..] {
        held.push(get(&storage, *id).await);
    }
    clock.set(add(start, period - MICRO));
    assert!(claim(&other, &["kr"], 10, "w").await.is_empty(), "the first starts are still in the window");
    for (id, was) in ids[3..].iter().zip(&held) {
        assert_eq!(&get(&storage, *id).await, was, "held-back jobs are unchanged");
    }
    clock.set(add(start, period));
    assert_eq!(claim(&other, &["kr"], 10, "w").await.len(), 2, "the two first starts left the window");
    clock.set(add(start, Duration::from_secs(16)));
    assert_eq!(claim(&other, &["kr"], 10, "w").await.len(), 1, "then the third");
}

/// One case of [`key_concurrency_holds_under_concurrent_claimers`].
#[derive(Clone, Debug)]
struct Case {
    /// The default concurrency, and overrides of keys 0 and 1.
    default: u32,
    overrides: [Option<u32>; 2],
    /// Jobs per key (keys `k0`, `k1`, ...), and plain jobs.
    jobs: Vec<usize>,
    plain: usize,
    /// Per round: each claimer's limit, how many Running jobs to ack
    /// after it, and how far the clock moves (ms).
    rounds: Vec<(Vec<usize>, usize, u64)>,
}

fn case() -> impl Strategy<Value = Case> {
    let round = (proptest::collection::vec(1usize..5, 8), 0usize..6, 0u64..700);
    (
        1u32..4,
        [proptest::option::weighted(0.5, 1u32..5), proptest::option::weighted(0.5, 1u32..5)],
        proptest::collection::vec(1usize..12, 1..5),
        0usize..6,
        proptest::collection::vec(round, 1..8),
    )
        .prop_map(|(default, overrides, jobs, plain, rounds)| Case { default, overrides, jobs, plain, rounds })
}

/// 8 claimers on 8 connections claim concurrently from a queue of keyed
/// jobs (and a few without a key) under per-key concurrency limits
/// (a default and overrides), between acks and moves of the test clock
/// (random cases, run with proptest): no key ever has more Running jobs
/// than its limit, no job is claimed twice, and every job not claimed is
/// exactly as it was.
pub async fn key_concurrency_holds_under_concurrent_claimers<H: Harness>(h: &H) {
    super::support::run_cases(case(), "keyed", |name, case| async move { run_case(h, &name, case).await });
}

async fn run_case<H: Harness>(h: &H, name: &str, case: Case) -> Result<(), TestCaseError> {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let mut claimers = Vec::new();
    for _ in 0..8 {
        claimers.push(h.connect(clock.clock()).await);
    }
    let mut jobs = Vec::new();
    for (k, n) in case.jobs.iter().enumerate() {
        jobs.extend(keyed(&clock, name, &format!("k{k}"), jobs.len(), *n));
    }
    jobs.extend((0..case.plain).map(|i| build(builder(name, 1000 + i), &clock)));
    let ids = enqueue_all(&storage, jobs).await;
    set(&storage, name, None, concurrency(case.default)).await;
    let mut limit_of: HashMap<String, u32> = HashMap::new();
    for (k, limit) in case.overrides.iter().enumerate() {
        if let Some(limit) = limit {
            set(&storage, name, Some(&format!("k{k}")), concurrency(*limit)).await;
            limit_of.insert(format!("k{k}"), *limit);
        }
    }
    let mut before: BTreeMap<JobId, Job> = BTreeMap::new();
    for id in &ids {
        before.insert(*id, get(&storage, *id).await);
    }
    let mut running: Vec<Job> = Vec::new();
    for (limits_per_claimer, acks, advance) in case.rounds {
        let mut tasks = Vec::new();
        for (c, (conn, limit)) in claimers.iter().zip(limits_per_claimer).enumerate() {
            let conn = conn.clone();
            let name = name.to_owned();
            tasks.push(tokio::spawn(async move { claim(&conn, &[&name], limit, &format!("c{c}")).await }));
        }
        for task in tasks {
            let got = task.await.expect("claimer task");
            for job in &got {
                prop_assert!(before.remove(&job.id).is_some(), "job {} claimed twice", job.id);
            }
            running.extend(got);
        }
        for (key, n) in per_key(&running) {
            if key.is_empty() {
                continue;
            }
            let limit = limit_of.get(&key).copied().unwrap_or(case.default);
            prop_assert!(n <= limit as usize, "{n} Running jobs of key {key} over its concurrency of {limit}");
        }
        for (id, job) in &before {
            prop_assert_eq!(&get(&storage, *id).await, job, "a job not claimed is unchanged");
        }
        // Ack the oldest claims first: every key's slots come and go.
        for job in running.drain(..acks.min(running.len())) {
            storage.ack(lease(&job)).await.expect("ack");
        }
        clock.advance(Duration::from_millis(advance));
    }
    Ok(())
}

/// Fair turns between keys: one key with 20,000 Pending jobs and 50 keys
/// with 10 each, all enqueued before any claim (the big key's first), are
/// claimed 10 at a time as a pool would: every small key's jobs all start
/// within the first 51 x 10 = 510 claimed jobs of 20,500 (2.5%; the
/// contract's bound: a key waits at most one job of every other key).
pub async fn keys_take_turns_in_a_rotation<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    for batch in 0..20 {
        enqueue_all(&storage, keyed(&clock, "fair", "big", batch * 1_000, 1_000)).await;
    }
    clock.advance(Duration::from_millis(1));
    let mut small = Vec::new();
    for k in 0..50 {
        small.extend(keyed(&clock, "fair", &format!("small-{k:02}"), 20_000 + k * 10, 10));
    }
    let small_ids = enqueue_all(&storage, small).await;

    let mut position: HashMap<JobId, usize> = HashMap::new();
    let mut claimed = 0usize;
    // 5% of the jobs: far more than the bound needs, little for a backend.
    while claimed < 1_025 {
        let got = claim(&storage, &["fair"], 10, "pool").await;
        assert!(!got.is_empty(), "jobs are left to claim");
        for job in &got {
            position.insert(job.id, claimed);
            claimed += 1;
        }
        for job in &got {
            storage.ack(lease(job)).await.expect("ack");
        }
    }
    let mut latest = 0;
    for id in &small_ids {
        let at =
            *position.get(id).unwrap_or_else(|| panic!("small key job {id} not among the first {claimed} claimed"));
        latest = latest.max(at);
    }
    assert!(latest < 510, "the last small key's job started at position {latest}, over the bound of 510");
}

/// A key whose jobs all ended, and which gets a job again, waits for the
/// rotation's cursor to come round to it, never ahead of the keys already
/// waiting: with keys a, b, c waiting and a's job done, a's new job starts
/// after b's and c's. *A key that came back at the front could take a job
/// before every other key's, again and again, by emptying and refilling.*
/// Keys of a higher priority go first, and jobs of different queues at the
/// same instant go by queue name.
pub async fn a_key_that_comes_back_enters_behind_the_waiting_keys<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let mut jobs = keyed(&clock, "back", "a", 0, 1);
    jobs.extend(keyed(&clock, "back", "b", 1, 1));
    jobs.extend(keyed(&clock, "back", "c", 2, 1));
    enqueue_all(&storage, jobs).await;
    let first = claim(&storage, &["back"], 1, "w").await;
    assert_eq!(per_key(&first), counts(&[("a", 1)]), "no cursor yet: the smallest key");
    storage.ack(lease(&first[0])).await.expect("ack");
    clock.advance(Duration::from_millis(1));
    enqueue_all(&storage, keyed(&clock, "back", "a", 3, 1)).await;
    let mut order = Vec::new();
    for _ in 0..3 {
        let got = claim(&storage, &["back"], 1, "w").await;
        assert_eq!(got.len(), 1);
        order.push(got[0].key.clone().unwrap_or_default());
    }
    assert_eq!(order, ["b", "c", "a"], "the key that came back waits for the keys already waiting");

    // Priority before the rotation; queues by name at the same instant.
    clock.advance(Duration::from_millis(1));
    let mut jobs = vec![
        build(builder("q2", 10).key("x"), &clock),
        build(builder("q1", 11).key("y"), &clock),
        build(builder("q2", 12).key("z").priority(jq_core::Priority::High), &clock),
    ];
    jobs.push(build(builder("q1", 13), &clock));
    for job in jobs {
        enqueue_all(&storage, vec![job]).await;
    }
    let mut order = Vec::new();
    for _ in 0..4 {
        let got = claim(&storage, &["q2", "q1"], 1, "w").await;
        assert_eq!(got.len(), 1);
        order.push((got[0].queue.as_str().to_owned(), got[0].key.clone()));
    }
    let expected = [("q2", Some("z")), ("q1", None), ("q1", Some("y")), ("q2", Some("x"))];
    let expected: Vec<(String, Option<String>)> =
        expected.iter().map(|(q, k)| ((*q).to_owned(), k.map(str::to_owned))).collect();
    assert_eq!(order, expected, "high priority first, then the plain job, then the rotations by queue name");
}

/// Jobs without a key and keyed jobs of one queue are not starved by each
/// other: they are merged by run_at (a job without a key first on a tie),
/// so a plain job and a keyed job enqueued at each instant start in that
/// order, instant by instant, with the keyed ones all of one busy key.
pub async fn plain_and_keyed_jobs_are_merged_by_run_at<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let mut expected = Vec::new();
    for i in 0..100 {
        let plain = build(builder("mixed", i), &clock);
        let keyed = build(builder("mixed", 1_000 + i).key("busy"), &clock);
        expected.extend([plain.id, keyed.id]);
        enqueue_all(&storage, vec![keyed, plain]).await;
        clock.advance(Duration::from_millis(1));
    }
    let mut order = Vec::new();
    while order.len() < expected.len() {
        let got = claim(&storage, &["mixed"], 10, "pool").await;
        assert!(!got.is_empty(), "jobs are left to claim");
        let mut got: Vec<&Job> = got.iter().collect();
        // Inside one claim the answer's order is free: put it in the
        // order the merge took the jobs.
        got.sort_by_key(|j| (j.run_at, j.key.is_some()));
        order.extend(got.iter().map(|j| j.id));
        for job in got {
            storage.ack(lease(job)).await.expect("ack");
        }
    }
    assert_eq!(order, expected, "plain and keyed jobs alternate by run_at");
}

/// `keys()` reports the queue's default, its overrides by key, and its
/// busiest keys: Running and Pending (with Scheduled) jobs per key, the
/// limits each follows, ordered by running + pending descending then key,
/// at most `top`; finished jobs and jobs without a key do not count.
pub async fn keys_report_the_busiest_keys<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let mut jobs = keyed(&clock, "rep", "a", 0, 3);
    jobs.extend(keyed(&clock, "rep", "b", 3, 4));
    jobs.extend(keyed(&clock, "rep", "c", 7, 2));
    jobs.extend(keyed(&clock, "rep", "done", 9, 1));
    enqueue_all(&storage, jobs).await;
    set(&storage, "rep", None, concurrency(5)).await;
    set(&storage, "rep", Some("a"), concurrency(2)).await;
    set(&storage, "rep", Some("zz"), QueueLimits::none()).await;
    // One of each key: the rotation takes every key once before any twice.
    let running = claim(&storage, &["rep"], 4, "w").await;
    assert_eq!(per_key(&running), counts(&[("a", 1), ("b", 1), ("c", 1), ("done", 1)]));
    let done = running.iter().find(|j| j.key.as_deref() == Some("done")).expect("done's job");
    storage.ack(lease(done)).await.expect("ack");
    clock.advance(Duration::from_millis(1));
    let mut later = keyed(&clock, "rep", "e", 10, 2);
    later.push(build(builder("rep", 12).key("b").delay(Duration::from_secs(3600)), &clock));
    later.push(build(builder("rep", 13), &clock));
    enqueue_all(&storage, later).await;

    let report = keys(&storage).keys(&queue("rep"), 3).await.expect("keys");
    assert_eq!(report.queue, queue("rep"));
    assert_eq!(report.default, concurrency(5));
    assert_eq!(report.overrides.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), ["a", "zz"]);
    let busiest: Vec<(&str, u64, u64, QueueLimits)> =
        report.busiest.iter().map(|k| (k.key.as_str(), k.running, k.pending, k.limits)).collect();
    assert_eq!(
        busiest,
        [("b", 1, 4, concurrency(5)), ("a", 1, 2, concurrency(2)), ("c", 1, 1, concurrency(5))],
        "by running + pending, then key; e (2) ties with c and comes after it; at most 3"
    );
    let all = keys(&storage).keys(&queue("rep"), 100).await.expect("keys");
    assert_eq!(all.busiest.iter().map(|k| k.key.as_str()).collect::<Vec<_>>(), ["b", "a", "c", "e"]);
    assert!(keys(&storage).keys(&queue("rep"), 0).await.expect("keys").busiest.is_empty());
    let empty = keys(&storage).keys(&queue("nothing-here"), 10).await.expect("keys of an unknown queue");
    assert!(empty.default.is_none() && empty.overrides.is_empty() && empty.busiest.is_empty());
}

/// Keyed claims take what the reference model takes (`MemoryStorage`,
/// memory/keys.rs): the same jobs go to the backend and to the model, and
/// every claim of a random size takes the same jobs from both, between
/// acks of random Running jobs and moves of the clock, until both are
/// drained (jobs compared by run_at, distinct per job, since their ids
/// differ). Seeded cases, each its own queue: a default concurrency of 1,
/// 2 or none, an override on one key, two priorities, Scheduled jobs
/// coming due, jobs without a key, and a deep key (a fifth of the jobs).
pub async fn keyed_claims_follow_the_reference_model<H: Harness>(h: &H) {
    for seed in 1..=24u64 {
        keyed_claims_against_the_model(h, seed).await;
    }
}

/// One seeded case of [`keyed_claims_follow_the_reference_model`].
async fn keyed_claims_against_the_model<H: Harness>(h: &H, seed: u64) {
    let mut rand = crate::seeded_draws(seed);
    let clock = manual_clock();
    let backend = h.connect(clock.clock()).await;
    let model = crate::MemoryStorage::new().clock(clock.clock());
    let q = format!("model{seed}");
    let default = match seed % 3 {
        0 => Some(concurrency(1)),
        1 => Some(concurrency(2)),
        _ => None,
    };
    let total = 30 + rand(60) as usize;
    let key_count = 1 + rand(20);
    for storage in [keys(&backend), keys(&model)] {
        if let Some(limits) = default {
            storage.set_key_limits(&queue(&q), None, &limits).await.expect("set the default");
        }
        if seed.is_multiple_of(4) {
            storage.set_key_limits(&queue(&q), Some("k0"), &concurrency(3)).await.expect("set an override");
        }
    }
    // Due jobs one millisecond apart in the past, a few due later.
    let base = clock.now();
    clock.advance(Duration::from_millis(total as u64 + 1));
    let mut specs = Vec::new();
    for i in 0..total {
        let key = match rand(10) {
            0 if seed.is_multiple_of(5) => None,
            1 | 2 => Some("deep".to_owned()),
            _ => Some(format!("k{}", rand(key_count))),
        };
        let high = seed % 4 == 2 && rand(3) == 0;
        let at = if seed.is_multiple_of(2) && rand(8) == 0 { total + 2 + i } else { i };
        specs.push((key, high, add(base, Duration::from_millis(at as u64))));
    }
    let jobs = || {
        specs
            .iter()
            .enumerate()
            .map(|(i, (key, high, at))| {
                let b = builder(&q, i).run_at(*at);
                let b = if *high { b.priority(jq_core::Priority::High) } else { b };
                build(if let Some(key) = key { b.key(key.clone()) } else { b }, &clock)
            })
            .collect::<Vec<_>>()
    };
    enqueue_all(&backend, jobs()).await;
    enqueue_all(&model, jobs()).await;

    let mut running: [Vec<Job>; 2] = [Vec::new(), Vec::new()];
    let mut done = 0;
    for round in 0.. {
        assert!(round < 2_000, "seed {seed}: the drain did not end");
        let limit = 1 + rand(12) as usize;
        let from_backend = claim(&backend, &[q.as_str()], limit, "w").await;
        let from_model = claim(&model, &[q.as_str()], limit, "w").await;
        let taken = |jobs: &[Job]| {
            let mut at: Vec<_> = jobs.iter().map(|j| (j.run_at, j.key.clone())).collect();
            at.sort();
            at
        };
        assert_eq!(
            taken(&from_backend),
            taken(&from_model),
            "seed {seed}, round {round}: a claim of {limit} took other jobs than the model's"
        );
        let empty = from_model.is_empty();
        running[0].extend(from_backend);
        running[1].extend(from_model);
        // About half of the Running jobs acked, the same in both.
        let acked: Vec<_> = running[1].iter().map(|j| j.run_at).filter(|_| rand(2) == 0).collect();
        for job in running[0].iter().filter(|j| acked.contains(&j.run_at)) {
            backend.ack(lease(job)).await.expect("ack");
        }
        for job in running[1].iter().filter(|j| acked.contains(&j.run_at)) {
            model.ack(lease(job)).await.expect("ack");
        }
        for jobs in &mut running {
            jobs.retain(|j| !acked.contains(&j.run_at));
        }
        done += acked.len();
        if done == total {
            break;
        }
        if empty {
            clock.advance(Duration::from_millis(20));
        }
    }
}

/// A short claim says when keys' limits held back claimable jobs
/// (`ClaimAnswer::limited`): `Concurrency` for a key at its concurrency;
/// for a key whose rate window is full, `Rate` with the instant it has
/// room again (or `Concurrency`, which a backend may answer for a key's
/// rate); `None` once the keys' jobs are all taken, and for keyed jobs
/// scheduled later.
pub async fn a_short_claim_says_a_key_limit_held_it_back<H: Harness>(h: &H) {
    use jq_core::storage::Limited;
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let answer = |queue: &'static str| {
        let storage = &storage;
        async move { storage.claim(&super::support::request(&[queue], 10, "w")).await.expect("claim") }
    };

    let mut jobs = keyed(&clock, "kc", "big", 0, 5);
    jobs.extend(keyed(&clock, "kc", "small", 5, 1));
    enqueue_all(&storage, jobs).await;
    set(&storage, "kc", None, concurrency(2)).await;
    let first = answer("kc").await;
    assert_eq!(per_key(&first.jobs), counts(&[("big", 2), ("small", 1)]));
    assert_eq!(first.limited, Some(Limited::Concurrency), "big's other jobs wait for a slot");
    let again = answer("kc").await;
    assert_eq!((again.jobs.len(), again.limited), (0, Some(Limited::Concurrency)), "still held back");
    set(&storage, "kc", None, QueueLimits::none()).await;
    let rest = answer("kc").await;
    assert_eq!((rest.jobs.len(), rest.limited), (3, None), "drained: nothing held back");

    let period = Duration::from_secs(10);
    enqueue_all(&storage, keyed(&clock, "kr2", "slow", 0, 4)).await;
    set(&storage, "kr2", Some("slow"), QueueLimits { concurrency: None, rate: Some(Rate::new(2, period)) }).await;
    let start = clock.now();
    let rated = answer("kr2").await;
    assert_eq!(rated.jobs.len(), 2, "two starts per window");
    assert!(
        matches!(rated.limited, Some(Limited::Concurrency))
            || rated.limited == Some(Limited::Rate { until: add(start, period) }),
        "a full window holds the others back: {:?}",
        rated.limited
    );

    enqueue_all(&storage, vec![build(builder("ks", 0).key("later").delay(Duration::from_secs(60)), &clock)]).await;
    set(&storage, "ks", None, concurrency(1)).await;
    assert_eq!(answer("ks").await.limited, None, "a keyed job scheduled later is not held back");
}
