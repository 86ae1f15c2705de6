//! Claiming: exclusivity under concurrency, limits, order, queues, run_at.

use std::collections::HashSet;
use std::time::Duration;

use jq_core::storage::add;
use jq_core::storage::{Outcome, Settlement, Storage};
use jq_core::{JobId, Priority, State};

use super::support::{
    MICRO, build, builder, claim, claim_one, count_ids, enqueue_all, enqueue_mixed, get, jobs, lease, manual_clock,
    settle, stats,
};
use crate::Harness;

/// 8 claimers on 8 connections drain 400 jobs in small batches: every job
/// is claimed exactly once.
pub async fn claim_exclusivity<H: Harness>(h: &H) {
    const JOBS: usize = 400;
    const CLAIMERS: usize = 8;
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let mut ids = Vec::new();
    for _ in 0..JOBS / 100 {
        ids.extend(enqueue_all(&storage, jobs(&clock, "work", 100)).await);
    }
    let mut tasks = Vec::new();
    for c in 0..CLAIMERS {
        let conn = h.connect(clock.clock()).await;
        tasks.push(tokio::spawn(async move {
            let worker = format!("claimer-{c}");
            let mut mine = Vec::new();
            loop {
                let batch = claim(&conn, &["work"], 3, &worker).await;
                if batch.is_empty() {
                    break;
                }
                for job in &batch {
                    assert_eq!(job.attempts, 1, "job {} claimed a second time", job.id);
                }
                let settlements: Vec<Settlement> =
                    batch.iter().map(|j| Settlement { lease: lease(j), outcome: Outcome::Ack }).collect();
                let results = conn.settle(settlements).await.expect("complete");
                for (job, result) in batch.iter().zip(results) {
                    assert!(
                        matches!(result, Ok(State::Completed)),
                        "ack of {} by its only claimer: {result:?}",
                        job.id
                    );
                }
                mine.extend(batch.iter().map(|j| j.id));
            }
            mine
        }));
    }
    let mut claimed = Vec::new();
    for task in tasks {
        claimed.extend(task.await.expect("claimer task"));
    }
    let counts = count_ids(claimed.iter().copied());
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "jobs claimed more than once: {twice:?}");
    assert_eq!(counts.len(), JOBS, "every job claimed once");
    let expected: HashSet<JobId> = ids.into_iter().collect();
    assert_eq!(counts.keys().copied().collect::<HashSet<_>>(), expected);
    assert!(claim(&storage, &["work"], 10, "late").await.is_empty());
    let stats = stats(&storage).await;
    assert_eq!(stats.total(State::Completed), JOBS as u64);
    assert_eq!(stats.total(State::Running), 0);
}

/// A claim returns at most `limit` jobs, and successive claims share none.
pub async fn batch_claim_respects_limit<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let ids = enqueue_all(&storage, jobs(&clock, "q", 10)).await;
    let mut seen = HashSet::new();
    for expected in [4, 4, 2, 0] {
        let batch = claim(&storage, &["q"], 4, "w").await;
        assert_eq!(batch.len(), expected);
        for job in batch {
            assert_eq!(job.attempts, 1);
            assert!(seen.insert(job.id), "job {} returned by two claims", job.id);
        }
    }
    assert_eq!(seen, ids.into_iter().collect::<HashSet<_>>());
}

/// Limit 0, or no queue at all, claims nothing and changes nothing.
pub async fn claim_limit_zero_returns_nothing<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let ids = enqueue_all(&storage, jobs(&clock, "q", 3)).await;
    assert!(claim(&storage, &["q"], 0, "w").await.is_empty());
    assert!(claim(&storage, &[], 5, "w").await.is_empty());
    for id in ids {
        let job = get(&storage, id).await;
        assert_eq!((job.state, job.attempts), (State::Pending, 0));
        assert!(job.lease.is_none());
    }
}

/// Claims take priority high to low, then run_at, then id; a due Scheduled
/// job competes without being promoted first.
pub async fn claim_order_priority_run_at_id<H: Harness>(h: &H) {
    let clock = manual_clock();
    let t0 = clock.now();
    let storage = h.connect(clock.clock()).await;
    let at = |secs: i64| t0 + chrono::Duration::seconds(secs);
    // Enqueued in an order unlike the claim order, so ids alone cannot explain it.
    let d = build(builder("q", 0).priority(Priority::Low).run_at(at(-100)), &clock);
    let a = build(builder("q", 1).priority(Priority::Normal).run_at(at(-10)), &clock);
    let e = build(builder("q", 2).priority(Priority::Normal).run_at(at(-10)), &clock);
    let b = build(builder("q", 3).priority(Priority::Normal).run_at(at(-20)), &clock);
    let g = build(builder("q", 4).priority(Priority::High).run_at(at(5)), &clock);
    let c = build(builder("q", 5).priority(Priority::High), &clock);
    let expected = [c.id, g.id, b.id, a.id, e.id, d.id];
    enqueue_all(&storage, vec![d, a, e, b, g, c]).await;
    assert_eq!(get(&storage, expected[1]).await.state, State::Scheduled);
    clock.advance(Duration::from_secs(10));
    let mut order = Vec::new();
    while let Some(job) = claim(&storage, &["q"], 1, "w").await.pop() {
        order.push(job.id);
    }
    assert_eq!(order, expected, "claim order: priority desc, run_at asc, id asc");

    // A batch takes the top of that order (its return order is not part of the contract).
    let low = build(builder("b", 0).priority(Priority::Low), &clock);
    let crit = build(builder("b", 1).priority(Priority::Critical), &clock);
    let normal = build(builder("b", 2), &clock);
    let high = build(builder("b", 3).priority(Priority::High), &clock);
    let top: HashSet<JobId> = [crit.id, high.id].into_iter().collect();
    enqueue_all(&storage, vec![low, crit, normal, high]).await;
    let batch: HashSet<JobId> = claim(&storage, &["b"], 2, "w").await.into_iter().map(|j| j.id).collect();
    assert_eq!(batch, top);
}

/// A claim returns only jobs of the queues it names; across named queues
/// priority still decides.
pub async fn queue_isolation<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let alpha = enqueue_all(&storage, jobs(&clock, "alpha", 3)).await;
    let beta = enqueue_all(&storage, jobs(&clock, "beta", 2)).await;
    let got: HashSet<JobId> = claim(&storage, &["beta"], 10, "w").await.into_iter().map(|j| j.id).collect();
    assert_eq!(got, beta.iter().copied().collect());
    assert!(claim(&storage, &["beta"], 10, "w").await.is_empty());
    assert!(claim(&storage, &["gamma"], 10, "w").await.is_empty());
    for id in &alpha {
        assert_eq!(get(&storage, *id).await.state, State::Pending);
    }
    let got: HashSet<JobId> = claim(&storage, &["alpha", "gamma"], 10, "w").await.into_iter().map(|j| j.id).collect();
    assert_eq!(got, alpha.iter().copied().collect());

    let low = build(builder("x", 0).priority(Priority::Low), &clock);
    let high = build(builder("y", 0).priority(Priority::High), &clock);
    let high_id = high.id;
    enqueue_mixed(h, &storage, vec![low, high]).await;
    assert_eq!(claim_one(&storage, "x", "w").await.queue.as_str(), "x");
    enqueue_all(&storage, vec![build(builder("x", 1).priority(Priority::Low), &clock)]).await;
    let job = claim(&storage, &["x", "y"], 1, "w").await.pop().expect("one job");
    assert_eq!(job.id, high_id, "across queues the higher priority goes first");
}

/// Delayed and scheduled jobs are never claimed before their run_at, and
/// are claimable at exactly run_at (with or without promote).
pub async fn never_claimed_before_run_at<H: Harness>(h: &H) {
    let clock = manual_clock();
    let t0 = clock.now();
    let storage = h.connect(clock.clock()).await;
    let now_job = build(builder("q", 0), &clock);
    let delayed = build(builder("q", 1).delay(Duration::from_secs(60)), &clock);
    let scheduled = build(builder("q", 2).run_at(add(t0, Duration::from_secs(120))), &clock);
    let (now_id, delayed_id, scheduled_id) = (now_job.id, delayed.id, scheduled.id);
    enqueue_all(&storage, vec![now_job, delayed, scheduled]).await;
    assert_eq!(get(&storage, delayed_id).await.state, State::Scheduled);
    assert_eq!(get(&storage, delayed_id).await.run_at, add(t0, Duration::from_secs(60)));
    assert_eq!(get(&storage, scheduled_id).await.state, State::Scheduled);

    let first: Vec<JobId> = claim(&storage, &["q"], 10, "w").await.into_iter().map(|j| j.id).collect();
    assert_eq!(first, vec![now_id]);
    clock.advance(Duration::from_secs(60) - MICRO);
    assert_eq!(storage.promote().await.expect("promote"), 0);
    assert!(claim(&storage, &["q"], 10, "w").await.is_empty(), "claimed 1 µs before run_at");
    clock.advance(MICRO);
    let second: Vec<JobId> = claim(&storage, &["q"], 10, "w").await.into_iter().map(|j| j.id).collect();
    assert_eq!(second, vec![delayed_id], "due at exactly run_at, without promote");

    clock.advance(Duration::from_secs(60));
    assert_eq!(storage.promote().await.expect("promote"), 1);
    assert_eq!(get(&storage, scheduled_id).await.state, State::Pending);
    assert_eq!(claim_one(&storage, "q", "w").await.id, scheduled_id);
}

/// A claim counts the attempt and sets a fresh lease: worker, expiry and
/// the claim's own token (shared by the jobs of that claim), never seen
/// before for that job.
pub async fn claim_sets_lease_and_attempts<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let ids = enqueue_all(&storage, jobs(&clock, "q", 2)).await;
    let lease_len = Duration::from_secs(45);
    let request = super::support::request(&["q"], 2, "w-1");
    let request = jq_core::storage::ClaimRequest { lease: lease_len, ..request };
    let claimed = storage.claim(&request).await.expect("claim").jobs;
    assert_eq!(claimed.len(), 2);
    let now = clock.now();
    for job in &claimed {
        let held = job.lease.as_ref().expect("lease");
        assert_eq!(held.worker, "w-1");
        assert_eq!(held.token, request.token, "the lease holds the claim's token");
        assert_eq!(held.expires_at, add(now, lease_len));
        assert_eq!(job.attempts, 1);
        assert!(ids.contains(&job.id));
        let stored = get(&storage, job.id).await;
        assert_eq!(stored.state, State::Running);
        assert_eq!(stored.lease, job.lease, "get shows the lease the claim returned");
    }

    // Release gives the attempt back, yet the next claim's token is new.
    let first = &claimed[0];
    assert_eq!(
        settle(&storage, lease(first), jq_core::storage::Outcome::Release { delay: Duration::ZERO }).await.ok(),
        Some(State::Pending)
    );
    let again = claim(&storage, &["q"], 1, "w-2").await.pop().expect("reclaimed");
    assert_eq!(again.id, first.id);
    assert_eq!(again.attempts, 1);
    assert_ne!(again.token(), first.token(), "a token is never repeated for a job");
}

/// A claim sent again with the same token and `resend` (its answer was
/// lost) returns the jobs the first attempt took, leases untouched, and
/// takes nothing more; a resend whose token holds nothing claims as
/// usual, and a fresh token claims the rest.
pub async fn claim_resend_returns_the_earlier_claim<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let other = h.connect(clock.clock()).await;
    let ids = enqueue_all(&storage, jobs(&clock, "q", 5)).await;
    let first = super::support::request(&["q"], 2, "w");
    let took = storage.claim(&first).await.expect("claim").jobs;
    assert_eq!(took.iter().map(|j| j.id).collect::<Vec<_>>(), ids[..2]);

    clock.advance(Duration::from_secs(1));
    let resend = jq_core::storage::ClaimRequest { resend: true, ..first.clone() };
    let again = other.claim(&resend).await.expect("resend").jobs;
    assert_eq!(again, took, "the resend returns the same jobs with the same leases, on any connection");
    for id in &ids[2..] {
        assert_eq!(get(&storage, *id).await.state, State::Pending, "a resend claims nothing more");
    }

    // One of the two finishes: a resend returns what its token still holds.
    assert_eq!(settle(&storage, lease(&took[0]), Outcome::Ack).await.ok(), Some(State::Completed));
    let rest = storage.claim(&resend).await.expect("resend").jobs;
    assert_eq!(rest.iter().map(|j| j.id).collect::<Vec<_>>(), vec![ids[1]]);
    assert_eq!(rest[0].attempts, 1);

    // A resend whose first attempt took nothing claims as usual.
    let lost = jq_core::storage::ClaimRequest { resend: true, ..super::support::request(&["q"], 2, "w") };
    let fresh = storage.claim(&lost).await.expect("resend of a claim that took nothing").jobs;
    assert_eq!(fresh.iter().map(|j| j.id).collect::<Vec<_>>(), ids[2..4]);
    assert!(fresh.iter().all(|j| j.token() == Some(lost.token) && j.attempts == 1));
    let last = claim(&storage, &["q"], 5, "w").await;
    assert_eq!(last.iter().map(|j| j.id).collect::<Vec<_>>(), ids[4..]);
}
