//! Queue controls: a pause and limits stored in the backend, honoured by
//! every claimer on every connection inside the claim's atomic step.

use std::collections::BTreeMap;
use std::time::Duration;

use jq_core::storage::add;
use jq_core::storage::{Storage, StorageExt};
use jq_core::{Error, Job, JobId, QueueInfo, QueueLimits, Rate, State, Timestamp};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::support::{LEASE, MICRO, claim, enqueue_all, get, jobs, lease, manual_clock, queue};
use crate::Harness;

async fn info<S: Storage>(storage: &S, name: &str) -> QueueInfo {
    let all = storage.require_controls().expect("controls").queues().await.expect("queues");
    assert!(all.windows(2).all(|w| w[0].queue < w[1].queue), "queues are listed by name: {all:?}");
    all.into_iter().find(|q| q.queue.as_str() == name).unwrap_or_else(|| panic!("queue {name} is listed"))
}

async fn snapshot<S: Storage>(storage: &S, ids: &[JobId]) -> Vec<Job> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.push(get(storage, *id).await);
    }
    out
}

/// `queues` lists exactly the queues that hold a job, in any state, or
/// have a control: a queue whose jobs all finished is listed until they are
/// purged, one with only a pause is listed until it is resumed.
pub async fn queues_are_those_holding_jobs_or_a_control<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let controls = storage.require_controls().expect("controls");
    let names = || async {
        let all = controls.queues().await.expect("queues");
        all.into_iter().map(|q| q.queue.as_str().to_owned()).collect::<Vec<_>>()
    };
    enqueue_all(&storage, jobs(&clock, "live", 1)).await;
    enqueue_all(&storage, jobs(&clock, "done", 2)).await;
    for job in claim(&storage, &["done"], 2, "w").await {
        storage.ack(lease(&job)).await.expect("ack");
    }
    assert_eq!(names().await, ["done", "live"], "a queue of finished jobs is listed");
    controls.set_paused(&queue("quiet"), true).await.expect("pause");
    assert_eq!(names().await, ["done", "live", "quiet"], "a queue with a control and no job is listed");
    clock.advance(Duration::from_secs(1));
    assert_eq!(storage.purge(State::Completed, clock.now()).await.expect("purge"), 2);
    assert_eq!(names().await, ["live", "quiet"], "a queue whose jobs were purged is not");
    controls.set_paused(&queue("quiet"), false).await.expect("resume");
    assert_eq!(names().await, ["live"]);
}

/// A pause made through one handle stops claims through another at once,
/// leaves the queue's jobs untouched, lets enqueue and running jobs'
/// acks through, shows which claimers met it, and a resume through a
/// third handle makes the jobs claimable again.
pub async fn pause_is_honoured_across_handles<H: Harness>(h: &H) {
    let clock = manual_clock();
    let operator = h.connect(clock.clock()).await;
    let worker = h.connect(clock.clock()).await;
    let ids = enqueue_all(&operator, jobs(&clock, "paused", 3)).await;
    enqueue_all(&operator, jobs(&clock, "free", 1)).await;
    let running = claim(&worker, &["paused"], 1, "w1").await;
    assert_eq!(running.len(), 1);

    operator.require_controls().expect("controls").set_paused(&queue("paused"), true).await.expect("pause");
    let paused_at = clock.now();
    let waiting = snapshot(&worker, &ids[1..]).await;
    clock.advance(Duration::from_secs(1));
    let got = claim(&worker, &["paused", "free"], 10, "w2").await;
    assert_eq!(got.len(), 1, "only the other queue's job: {got:?}");
    assert_eq!(got[0].queue.as_str(), "free");
    assert_eq!(snapshot(&worker, &ids[1..]).await, waiting, "a paused queue's jobs are not touched");

    // Enqueue still stores; a running job still finishes.
    let more = enqueue_all(&worker, jobs(&clock, "paused", 1)).await;
    assert_eq!(get(&operator, more[0]).await.state, State::Pending);
    worker.ack(lease(&running[0])).await.expect("a running job of a paused queue finishes");

    // Pausing again keeps the instant it was first paused.
    operator.require_controls().expect("controls").set_paused(&queue("paused"), true).await.expect("pause again");
    let seen = info(&operator, "paused").await;
    assert_eq!(seen.paused_at, Some(paused_at));
    assert!(seen.paused());
    let w2 = seen.seen.iter().find(|s| s.worker == "w2").unwrap_or_else(|| panic!("w2 met the pause: {seen:?}"));
    assert!(w2.paused && w2.at >= paused_at, "{w2:?}");
    assert!(!info(&operator, "free").await.paused());

    let third = h.connect(clock.clock()).await;
    third.require_controls().expect("controls").set_paused(&queue("paused"), false).await.expect("resume");
    assert_eq!(info(&operator, "paused").await.paused_at, None);
    let got = claim(&worker, &["paused"], 10, "w2").await;
    assert_eq!(got.len(), 3, "every waiting job is claimable after the resume");
}

/// A pause is stored: a claimer connected after every other handle is
/// gone still finds the queue paused, and so does `queues`. A queue with
/// no job can be paused and is listed.
pub async fn pause_survives_reconnect<H: Harness>(h: &H) {
    let clock = manual_clock();
    {
        let operator = h.connect(clock.clock()).await;
        enqueue_all(&operator, jobs(&clock, "q", 2)).await;
        operator.require_controls().expect("controls").set_paused(&queue("q"), true).await.expect("pause");
        operator
            .require_controls()
            .expect("controls")
            .set_paused(&queue("empty"), true)
            .await
            .expect("pause an empty queue");
    }
    let restarted = h.connect(clock.clock()).await;
    assert!(claim(&restarted, &["q"], 5, "w").await.is_empty(), "still paused after reconnecting");
    assert!(info(&restarted, "q").await.paused());
    assert!(info(&restarted, "empty").await.paused());
    restarted.require_controls().expect("controls").set_paused(&queue("q"), false).await.expect("resume");
    assert_eq!(claim(&restarted, &["q"], 5, "w").await.len(), 2);
}

/// A concurrency limit counts Running jobs by their leases: an expired
/// lease keeps its slot until recover ends it, then the slot comes back;
/// an ack frees one at once. Lifting the limit frees the queue.
pub async fn concurrency_slot_returns_after_recover<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let other = h.connect(clock.clock()).await;
    let ids = enqueue_all(&storage, jobs(&clock, "c", 6)).await;
    let limits = QueueLimits { concurrency: Some(2), rate: None };
    storage.require_controls().expect("controls").set_limits(&queue("c"), &limits).await.expect("limit");
    assert_eq!(info(&other, "c").await.limits, limits);

    let first = claim(&other, &["c"], 10, "crashed").await;
    assert_eq!(first.len(), 2, "two slots");
    let held = snapshot(&storage, &ids[2..]).await;
    assert!(claim(&storage, &["c"], 10, "w").await.is_empty(), "no slot left");
    assert_eq!(snapshot(&storage, &ids[2..]).await, held, "held-back jobs are unchanged");

    clock.advance(LEASE);
    assert!(claim(&storage, &["c"], 10, "w").await.is_empty(), "an expired lease still holds its slot");
    assert_eq!(storage.recover().await.expect("recover"), 2);
    let second = claim(&storage, &["c"], 10, "w").await;
    assert_eq!(second.len(), 2, "recover gave the slots back");
    storage.ack(lease(&second[0])).await.expect("ack");
    assert_eq!(claim(&storage, &["c"], 10, "w").await.len(), 1, "an ack frees its slot");

    storage.require_controls().expect("controls").set_limits(&queue("c"), &QueueLimits::none()).await.expect("lift");
    assert_eq!(info(&other, "c").await.limits, QueueLimits::none());
    assert_eq!(claim(&storage, &["c"], 10, "w").await.len(), 3, "no limit: the rest");
}

/// A rate limit is a sliding window: at most N starts in any window
/// `(t - period, t]`, so a start leaves the window exactly one period
/// later and no edge lets 2N through. Held-back jobs are unchanged (no
/// attempt, no lease). Bad limits are refused.
pub async fn rate_limit_is_a_sliding_window<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let other = h.connect(clock.clock()).await;
    let ids = enqueue_all(&storage, jobs(&clock, "r", 10)).await;
    let period = Duration::from_secs(10);
    let limits = QueueLimits { concurrency: None, rate: Some(Rate::new(3, period)) };
    storage.require_controls().expect("controls").set_limits(&queue("r"), &limits).await.expect("limit");
    let start = clock.now();

    assert_eq!(claim(&other, &["r"], 2, "w").await.len(), 2);
    clock.advance(Duration::from_secs(6));
    assert_eq!(claim(&storage, &["r"], 10, "w").await.len(), 1, "three starts per window");
    let held = snapshot(&storage, &ids[3..]).await;
    clock.set(add(start, period - MICRO));
    assert!(claim(&other, &["r"], 10, "w").await.is_empty(), "the first starts are still in the window");
    assert_eq!(snapshot(&storage, &ids[3..]).await, held, "held-back jobs are unchanged");
    clock.set(add(start, period));
    assert_eq!(claim(&other, &["r"], 10, "w").await.len(), 2, "the two first starts left the window");
    clock.set(add(start, Duration::from_secs(16)));
    assert_eq!(claim(&other, &["r"], 10, "w").await.len(), 1, "then the third");

    let refused = [
        QueueLimits { concurrency: Some(0), rate: None },
        QueueLimits { concurrency: None, rate: Some(Rate::new(0, period)) },
        QueueLimits { concurrency: None, rate: Some(Rate::new(1, Duration::ZERO)) },
    ];
    for limits in refused {
        let got = storage.require_controls().expect("controls").set_limits(&queue("r"), &limits).await;
        assert!(matches!(got, Err(Error::InvalidInput { .. })), "{limits:?}: {got:?}");
    }
    assert_eq!(info(&storage, "r").await.limits.rate, Some(Rate::new(3, period)), "a refused change changes nothing");
}

/// Limits beyond what every backend can store are refused with
/// InvalidInput and change nothing: a rate period over 100 years (the
/// window's start must be a PostgreSQL timestamp), a concurrency or rate
/// over `i32::MAX`. The largest accepted ones read back equal, and claims
/// under them work. *`--rate 1/99999999h` was accepted, then every claim
/// of the queue failed on PostgreSQL with "timestamp out of range".*
pub async fn limits_beyond_what_backends_store_are_refused<H: Harness>(h: &H) {
    use jq_core::storage::{MAX_LIMIT, MAX_RATE_PERIOD};
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let ids = enqueue_all(&storage, jobs(&clock, "q", 3)).await;
    let hours = Duration::from_secs(99_999_999 * 3600);
    let refused = [
        QueueLimits { concurrency: None, rate: Some(Rate::new(1, hours)) },
        QueueLimits { concurrency: None, rate: Some(Rate::new(1, MAX_RATE_PERIOD + MICRO)) },
        QueueLimits { concurrency: Some(MAX_LIMIT + 1), rate: None },
        QueueLimits { concurrency: None, rate: Some(Rate::new(MAX_LIMIT + 1, Duration::from_secs(1))) },
    ];
    for limits in refused {
        let got = storage.require_controls().expect("controls").set_limits(&queue("q"), &limits).await;
        assert!(matches!(got, Err(Error::InvalidInput { .. })), "{limits:?}: {got:?}");
    }
    assert!(info(&storage, "q").await.limits.is_none(), "a refused limit changes nothing");
    assert!(matches!(Rate::parse("1/99999999h"), Err(Error::InvalidInput { .. })));

    let widest = QueueLimits { concurrency: Some(MAX_LIMIT), rate: Some(Rate::new(2, MAX_RATE_PERIOD)) };
    storage
        .require_controls()
        .expect("controls")
        .set_limits(&queue("q"), &widest)
        .await
        .expect("the largest limits are stored");
    assert_eq!(info(&storage, "q").await.limits, widest);
    assert_eq!(claim(&storage, &["q"], 10, "w").await.len(), 2, "two starts per 100 years");
    clock.advance(Duration::from_secs(3600));
    assert!(claim(&storage, &["q"], 10, "w").await.is_empty());
    assert_eq!(get(&storage, ids[2]).await.state, State::Pending);
}

/// A paused or limited queue whose jobs are older than the others' does
/// not take a claim's budget from them: with 10 to take over `reports`
/// (12 older jobs) and `emails`, a paused `reports` leaves all 10 to
/// `emails`, and a limited one takes only what its limit allows. *On Redis
/// Cluster the claim split its budget by a peek that ignored controls, so
/// every claim took nothing and `emails` never ran.*
pub async fn paused_or_limited_queue_leaves_the_claim_to_others<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    enqueue_all(&storage, jobs(&clock, "reports", 12)).await;
    clock.advance(Duration::from_secs(1));
    enqueue_all(&storage, jobs(&clock, "emails", 15)).await;
    let of = |got: &[Job], q: &str| got.iter().filter(|j| j.queue.as_str() == q).count();

    storage.require_controls().expect("controls").set_paused(&queue("reports"), true).await.expect("pause");
    let got = claim(&storage, &["reports", "emails"], 10, "w").await;
    assert_eq!((of(&got, "reports"), of(&got, "emails")), (0, 10), "a paused queue leaves the budget to the others");

    storage.require_controls().expect("controls").set_paused(&queue("reports"), false).await.expect("resume");
    storage
        .require_controls()
        .expect("controls")
        .set_limits(&queue("reports"), &QueueLimits { concurrency: Some(2), rate: None })
        .await
        .expect("limit");
    let got = claim(&storage, &["reports", "emails"], 4, "w").await;
    assert_eq!((of(&got, "reports"), of(&got, "emails")), (2, 2), "two slots of reports, the rest to emails");

    let rate = QueueLimits { concurrency: None, rate: Some(Rate::new(1, Duration::from_secs(3600))) };
    storage.require_controls().expect("controls").set_limits(&queue("reports"), &rate).await.expect("limit");
    let got = claim(&storage, &["reports", "emails"], 4, "w").await;
    assert_eq!((of(&got, "reports"), of(&got, "emails")), (1, 3), "one start of reports, the rest to emails");
}

/// `queues()` lists a claimer as having met a control for a day after its
/// latest claim of the queue (`SEEN_TTL`), then forgets it, while pools
/// that still claim stay listed. *The entries of every worker name ever
/// used piled up forever (rolling deploys name pools anew).*
pub async fn seen_forgets_claimers_after_a_day<H: Harness>(h: &H) {
    use jq_core::storage::SEEN_TTL;
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    enqueue_all(&storage, jobs(&clock, "q", 1)).await;
    storage.require_controls().expect("controls").set_paused(&queue("q"), true).await.expect("pause");
    let names = |info: QueueInfo| info.seen.into_iter().map(|s| s.worker).collect::<Vec<_>>();
    assert!(claim(&storage, &["q"], 1, "gone").await.is_empty());
    assert!(claim(&storage, &["q"], 1, "live").await.is_empty());
    clock.advance(SEEN_TTL - Duration::from_secs(3600));
    assert!(claim(&storage, &["q"], 1, "live").await.is_empty());
    assert_eq!(names(info(&storage, "q").await), vec!["gone", "live"], "a day is not over");
    clock.advance(Duration::from_secs(3600));
    assert_eq!(names(info(&storage, "q").await), vec!["live"], "listed for a day after its latest claim");
    clock.advance(Duration::from_secs(2 * 3600));
    assert!(claim(&storage, &["q"], 1, "new").await.is_empty());
    assert_eq!(names(info(&storage, "q").await), vec!["live", "new"]);
}

/// One case of [`limits_hold_under_concurrent_claimers`].
#[derive(Clone, Debug)]
struct Case {
    concurrency: Option<u32>,
    rate: Option<(u32, u64)>,
    /// Per round: each claimer's limit, how many Running jobs to ack
    /// after it, and how far the clock moves (ms).
    rounds: Vec<(Vec<usize>, usize, u64)>,
}

fn case() -> impl Strategy<Value = Case> {
    let round = (proptest::collection::vec(1usize..4, 8), 0usize..4, 0u64..700);
    (
        proptest::option::weighted(0.7, 1u32..6),
        proptest::option::weighted(0.7, (1u32..8, 200u64..2_000)),
        proptest::collection::vec(round, 1..8),
    )
        .prop_filter("at least one limit", |(c, r, _)| c.is_some() || r.is_some())
        .prop_map(|(concurrency, rate, rounds)| Case { concurrency, rate, rounds })
}

/// 8 claimers on 8 connections claim concurrently from a queue with a
/// concurrency and/or rate limit, under the test's clock, between acks and
/// clock moves (random cases, run with proptest): the Running jobs never
/// exceed the concurrency, no window of the period holds more starts than
/// the rate allows, and every job not claimed is exactly as it was.
pub async fn limits_hold_under_concurrent_claimers<H: Harness>(h: &H) {
    super::support::run_cases(case(), "limited", |name, case| async move { run_case(h, &name, case).await });
}

async fn run_case<H: Harness>(h: &H, name: &str, case: Case) -> Result<(), TestCaseError> {
    const JOBS: usize = 40;
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let mut claimers = Vec::new();
    for _ in 0..8 {
        claimers.push(h.connect(clock.clock()).await);
    }
    let ids = enqueue_all(&storage, jobs(&clock, name, JOBS)).await;
    let rate = case.rate.map(|(limit, ms)| Rate::new(limit, Duration::from_millis(ms)));
    let limits = QueueLimits { concurrency: case.concurrency, rate };
    storage.require_controls().expect("controls").set_limits(&queue(name), &limits).await.expect("limit");
    let mut before: BTreeMap<JobId, Job> = snapshot(&storage, &ids).await.into_iter().map(|j| (j.id, j)).collect();
    let mut starts: Vec<Timestamp> = Vec::new();
    let mut running: Vec<Job> = Vec::new();
    for (limits_per_claimer, acks, advance) in case.rounds {
        let now = clock.now();
        let mut tasks = Vec::new();
        for (c, (conn, limit)) in claimers.iter().zip(limits_per_claimer).enumerate() {
            let conn = conn.clone();
            let name = name.to_owned();
            tasks.push(tokio::spawn(async move { claim(&conn, &[&name], limit, &format!("c{c}")).await }));
        }
        for task in tasks {
            let got = task.await.expect("claimer task");
            starts.extend(got.iter().map(|_| now));
            for job in &got {
                prop_assert!(before.remove(&job.id).is_some(), "job {} claimed twice", job.id);
            }
            running.extend(got);
        }
        if let Some(n) = case.concurrency {
            prop_assert!(running.len() <= n as usize, "{} Running over a concurrency of {n}", running.len());
        }
        if let Some(rate) = rate {
            for s in &starts {
                let end = add(*s, rate.period);
                let inside = starts.iter().filter(|t| *t >= s && *t < &end).count();
                prop_assert!(inside <= rate.limit as usize, "{inside} starts within {rate} from {s}");
            }
        }
        for (id, job) in &before {
            prop_assert_eq!(&get(&storage, *id).await, job, "a job not claimed is unchanged");
        }
        for job in running.drain(..acks.min(running.len())) {
            storage.ack(lease(&job)).await.expect("ack");
        }
        clock.advance(Duration::from_millis(advance));
    }
    Ok(())
}

/// The answer of a claim that took `limit` or fewer from `queues`.
async fn answer<S: Storage>(storage: &S, queues: &[&str], limit: usize) -> jq_core::storage::ClaimAnswer {
    storage.claim(&super::support::request(queues, limit, "w")).await.expect("claim")
}

/// A short claim says when a queue's own limits held back claimable jobs
/// (`ClaimAnswer::limited`): `Concurrency` for a full concurrency, `Rate`
/// with the instant the window has room again for a full rate window; and
/// `None` for a full claim, a drained queue, a queue whose only jobs are
/// scheduled later, and a paused queue.
pub async fn a_short_claim_says_a_queue_limit_held_it_back<H: Harness>(h: &H) {
    use jq_core::storage::Limited;
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let controls = storage.require_controls().expect("controls");

    enqueue_all(&storage, jobs(&clock, "lc", 5)).await;
    controls.set_limits(&queue("lc"), &QueueLimits { concurrency: Some(2), rate: None }).await.expect("limit");
    let full = answer(&storage, &["lc"], 2).await;
    assert_eq!((full.jobs.len(), full.limited), (2, None), "a full claim reports nothing");
    let held = answer(&storage, &["lc"], 10).await;
    assert_eq!((held.jobs.len(), held.limited), (0, Some(Limited::Concurrency)), "the concurrency is full");
    controls.set_limits(&queue("lc"), &QueueLimits { concurrency: Some(4), rate: None }).await.expect("limit");
    let some = answer(&storage, &["lc"], 10).await;
    assert_eq!((some.jobs.len(), some.limited), (2, Some(Limited::Concurrency)), "short, one job left");
    controls.set_limits(&queue("lc"), &QueueLimits { concurrency: Some(10), rate: None }).await.expect("limit");
    let drained = answer(&storage, &["lc"], 10).await;
    assert_eq!((drained.jobs.len(), drained.limited), (1, None), "drained: nothing held back");
    let empty = answer(&storage, &["lc"], 10).await;
    assert_eq!((empty.jobs.len(), empty.limited), (0, None), "empty");

    let period = Duration::from_secs(10);
    enqueue_all(&storage, jobs(&clock, "lr", 5)).await;
    controls
        .set_limits(&queue("lr"), &QueueLimits { concurrency: None, rate: Some(Rate::new(3, period)) })
        .await
        .expect("limit");
    let start = clock.now();
    assert_eq!(answer(&storage, &["lr"], 2).await.jobs.len(), 2);
    clock.advance(Duration::from_secs(4));
    let rated = answer(&storage, &["lr"], 10).await;
    assert_eq!(rated.jobs.len(), 1, "three starts per window");
    assert_eq!(
        rated.limited,
        Some(Limited::Rate { until: add(start, period) }),
        "room again when the first starts leave"
    );

    enqueue_all(
        &storage,
        vec![super::support::build(super::support::builder("ls", 0).delay(Duration::from_secs(60)), &clock)],
    )
    .await;
    controls.set_limits(&queue("ls"), &QueueLimits { concurrency: Some(1), rate: None }).await.expect("limit");
    assert_eq!(answer(&storage, &["ls"], 10).await.limited, None, "a job scheduled later is not held back");

    enqueue_all(&storage, jobs(&clock, "lp", 2)).await;
    controls.set_paused(&queue("lp"), true).await.expect("pause");
    assert_eq!(answer(&storage, &["lp"], 10).await.limited, None, "a pause is not a limit: resume wakes the claimers");
}
