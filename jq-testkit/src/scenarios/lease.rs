//! Leases: crash recovery, fencing of stale tokens, expiry boundaries,
//! heartbeats, and recover racing ack.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jq_core::storage::add;
use jq_core::storage::{LeaseRef, LeaseToken, Outcome, Settlement, Storage, StorageExt};
use jq_core::{Error, JobId, State};
use tokio::sync::Barrier;

use super::support::{
    LEASE, MICRO, build, builder, claim, claim_one, enqueue_all, get, jobs, lease, manual_clock, stats,
};
use crate::Harness;

fn assert_lease_lost(result: &jq_core::Result<impl std::fmt::Debug>, id: JobId) {
    assert!(
        matches!(result, Err(Error::LeaseLost { id: lost }) if *lost == id),
        "expected LeaseLost for {id}: {result:?}"
    );
}

/// A worker claims and "crashes" (its connection is dropped). After the
/// lease expires, recover hands the job on; a new connection claims it as
/// attempt 2, and the error says the lease expired.
pub async fn crash_before_ack_recovered_after_lease_expiry<H: Harness>(h: &H) {
    let clock = manual_clock();
    let id;
    let first_token;
    {
        let crashed = h.connect(clock.clock()).await;
        let job = build(builder("q", 0).max_attempts(5), &clock);
        id = enqueue_all(&crashed, vec![job]).await[0];
        let claimed = claim_one(&crashed, "q", "w1").await;
        first_token = claimed.token().expect("token");
        drop(crashed);
    }
    let maintenance = h.connect(clock.clock()).await;
    clock.advance(LEASE - MICRO);
    assert_eq!(maintenance.recover().await.expect("recover"), 0, "lease still valid");
    assert_eq!(get(&maintenance, id).await.state, State::Running);
    clock.advance(MICRO);
    assert_eq!(maintenance.recover().await.expect("recover"), 1);
    let job = get(&maintenance, id).await;
    assert_eq!(job.state, State::Pending);
    assert!(job.lease.is_none());
    assert_eq!(job.run_at, clock.now());
    assert_eq!(job.errors.len(), 1);
    assert_eq!(job.errors[0].attempt, 1);
    assert_eq!(job.errors[0].at, clock.now());
    assert!(job.errors[0].message.contains("lease expired"), "{:?}", job.errors[0].message);
    assert!(job.errors[0].message.contains("w1"), "the error names the worker: {:?}", job.errors[0].message);

    let restarted = h.connect(clock.clock()).await;
    let again = claim_one(&restarted, "q", "w2").await;
    assert_eq!(again.id, id);
    assert_eq!(again.attempts, 2);
    assert_ne!(again.token(), Some(first_token));
    assert_lease_lost(&restarted.ack(LeaseRef { id, token: first_token }).await, id);
    restarted.ack(lease(&again)).await.expect("ack with the current token");
    let done = get(&restarted, id).await;
    assert_eq!(done.state, State::Completed);
    assert_eq!(done.finished_at, Some(clock.now()));
}

/// After recover and a new claim, the first token can no longer ack, nack,
/// bury, release or heartbeat: each gets LeaseLost and changes nothing.
pub async fn stale_token_fencing<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let ids = enqueue_all(&storage, jobs(&clock, "q", 5)).await;
    let first = claim(&storage, &["q"], 5, "old").await;
    assert_eq!(first.len(), 5);
    let stale: HashMap<JobId, LeaseRef> = first.iter().map(|j| (j.id, lease(j))).collect();
    clock.advance(LEASE);
    assert_eq!(storage.recover().await.expect("recover"), 5);
    let second = claim(&storage, &["q"], 5, "new").await;
    assert_eq!(second.len(), 5);
    let current: HashMap<JobId, LeaseRef> = second.iter().map(|j| (j.id, lease(j))).collect();

    let mut before = HashMap::new();
    for id in &ids {
        before.insert(*id, get(&storage, *id).await);
    }
    let outcomes = [
        Outcome::Ack,
        Outcome::Nack { error: "stale".into(), delay: Duration::ZERO },
        Outcome::Bury { error: "stale".into() },
        Outcome::Release { delay: Duration::ZERO },
    ];
    let batch: Vec<Settlement> =
        ids.iter().zip(outcomes.iter()).map(|(id, o)| Settlement { lease: stale[id], outcome: o.clone() }).collect();
    let results = storage.settle(batch).await.expect("complete");
    assert_eq!(results.len(), 4);
    for (id, result) in ids.iter().zip(&results) {
        assert_lease_lost(result, *id);
    }
    let lost = storage.heartbeat(&[stale[&ids[4]]], LEASE).await.expect("heartbeat").lost;
    assert_eq!(lost, vec![ids[4]], "a stale heartbeat reports the job lost");
    for id in &ids {
        assert_eq!(get(&storage, *id).await, before[id], "a stale token changed job {id}");
    }

    // A batch mixing stale and current tokens applies the current ones only.
    let mixed = vec![
        Settlement { lease: stale[&ids[0]], outcome: Outcome::Ack },
        Settlement { lease: current[&ids[0]], outcome: Outcome::Ack },
        Settlement { lease: current[&ids[1]], outcome: Outcome::Nack { error: "e".into(), delay: Duration::ZERO } },
        Settlement { lease: current[&ids[2]], outcome: Outcome::Bury { error: "e".into() } },
        Settlement { lease: current[&ids[3]], outcome: Outcome::Release { delay: Duration::ZERO } },
    ];
    let results = storage.settle(mixed).await.expect("complete");
    assert_lease_lost(&results[0], ids[0]);
    assert_eq!(results[1].as_ref().ok(), Some(&State::Completed));
    assert_eq!(results[2].as_ref().ok(), Some(&State::Pending));
    assert_eq!(results[3].as_ref().ok(), Some(&State::Dead));
    assert_eq!(results[4].as_ref().ok(), Some(&State::Pending));
    assert!(storage.heartbeat(&[current[&ids[4]]], LEASE).await.expect("heartbeat").lost.is_empty());

    // A token that already completed its job is stale too.
    assert_lease_lost(&storage.ack(current[&ids[0]]).await, ids[0]);
    assert_eq!(get(&storage, ids[0]).await.state, State::Completed);
}

/// Many expired leases; one connection acks them while others recover.
/// Per job: the ack won (Completed) or recover won (ack got LeaseLost, job
/// Pending). An acked job is never overwritten.
pub async fn recover_racing_ack_keeps_ack<H: Harness>(h: &H) {
    const JOBS: usize = 200;
    let clock = manual_clock();
    let acker = h.connect(clock.clock()).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.extend(enqueue_all(&acker, jobs(&clock, "q", JOBS / 2)).await);
    }
    let mut claimed = Vec::new();
    while claimed.len() < JOBS {
        let batch = claim(&acker, &["q"], 100, "w").await;
        assert!(!batch.is_empty());
        claimed.extend(batch);
    }
    clock.advance(LEASE + Duration::from_secs(1));
    let leases: Vec<LeaseRef> = claimed.iter().map(lease).collect();

    let barrier = Arc::new(Barrier::new(3));
    let ack_task = {
        let barrier = barrier.clone();
        let leases = leases.clone();
        tokio::spawn(async move {
            barrier.wait().await;
            let mut results = Vec::new();
            for chunk in leases.chunks(10) {
                let batch = chunk.iter().map(|l| Settlement { lease: *l, outcome: Outcome::Ack }).collect();
                let out = acker.settle(batch).await.expect("complete");
                assert_eq!(out.len(), chunk.len());
                results.extend(chunk.iter().map(|l| l.id).zip(out));
            }
            results
        })
    };
    let mut recoverers = Vec::new();
    for _ in 0..2 {
        let barrier = barrier.clone();
        let conn = h.connect(clock.clock()).await;
        recoverers.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut total = 0;
            for _ in 0..5 {
                total += conn.recover().await.expect("recover");
                tokio::task::yield_now().await;
            }
            total
        }));
    }
    let results = ack_task.await.expect("ack task");
    let mut recovered = 0;
    for task in recoverers {
        recovered += task.await.expect("recover task");
    }

    let check = h.connect(clock.clock()).await;
    let mut lost = 0;
    for (id, result) in results {
        let job = get(&check, id).await;
        match result {
            Ok(state) => {
                assert_eq!(state, State::Completed);
                assert_eq!(job.state, State::Completed, "job {id} was acked, then overwritten: {job:?}");
                assert!(job.errors.is_empty(), "acked job {id} got a recover error: {job:?}");
            }
            Err(Error::LeaseLost { id: lost_id }) => {
                assert_eq!(lost_id, id);
                lost += 1;
                assert_eq!(job.state, State::Pending, "recover won the race for {id}: {job:?}");
                assert_eq!(job.errors.len(), 1);
                assert!(job.lease.is_none());
            }
            Err(e) => panic!("unexpected error for {id}: {e}"),
        }
    }
    assert_eq!(recovered, lost, "recover counts exactly the jobs whose ack lost");
    let s = stats(&check).await;
    assert_eq!(s.total(State::Completed) + s.total(State::Pending), JOBS as u64);
}

/// At now < expires_at recover does nothing; a heartbeat extends the lease
/// (even an expired one not yet recovered); at exactly expires_at recover
/// takes the job; heartbeat reports lost ids.
pub async fn lease_boundary_and_heartbeat<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let ids = enqueue_all(&storage, jobs(&clock, "q", 2)).await;
    let a = claim_one(&storage, "q", "w").await;
    let b = claim_one(&storage, "q", "w").await;
    assert_eq!(a.id, ids[0]);
    assert_eq!(b.id, ids[1]);
    let t0 = clock.now();
    assert_eq!(a.lease.as_ref().map(|l| l.expires_at), Some(add(t0, LEASE)));

    clock.advance(LEASE - MICRO);
    assert_eq!(storage.recover().await.expect("recover"), 0, "1 µs before expiry nothing is recovered");
    let lost = storage.heartbeat(&[lease(&a)], LEASE).await.expect("heartbeat").lost;
    assert!(lost.is_empty(), "a valid lease is not lost: {lost:?}");
    let extended = get(&storage, a.id).await;
    assert_eq!(extended.lease.as_ref().map(|l| l.expires_at), Some(add(clock.now(), LEASE)));
    assert_eq!(extended.token(), a.token(), "a heartbeat keeps the token");

    // b expired 1 µs from now; advance past it: it may still be extended until recovered.
    clock.advance(Duration::from_secs(1));
    let lost = storage.heartbeat(&[lease(&b)], LEASE).await.expect("heartbeat").lost;
    assert!(lost.is_empty(), "an expired, unrecovered lease can still be extended");
    assert_eq!(storage.recover().await.expect("recover"), 0);
    assert_eq!(get(&storage, b.id).await.state, State::Running);

    // a now expires at (t0 + LEASE - 1µs) + LEASE; stand exactly there.
    let a_expiry = get(&storage, a.id).await.lease.expect("lease").expires_at;
    clock.set(a_expiry);
    assert_eq!(storage.recover().await.expect("recover"), 1, "at exactly expires_at the lease is over");
    assert_eq!(get(&storage, a.id).await.state, State::Pending);
    assert_eq!(get(&storage, b.id).await.state, State::Running);

    let unknown = LeaseRef { id: JobId::new(), token: LeaseToken::new() };
    let mut lost = storage.heartbeat(&[lease(&a), lease(&b), unknown], LEASE).await.expect("heartbeat").lost;
    lost.sort();
    let mut expected = vec![a.id, unknown.id];
    expected.sort();
    assert_eq!(lost, expected, "heartbeat reports the recovered and the unknown job, not the valid one");
}

/// Two claims under the same worker name (a restarted worker): the old
/// instance's jobs keep their leases until they expire, then are recovered.
/// Nothing is stranded.
pub async fn reused_worker_identity_strands_nothing<H: Harness>(h: &H) {
    let clock = manual_clock();
    let before_restart = h.connect(clock.clock()).await;
    let ids = enqueue_all(&before_restart, jobs(&clock, "q", 4)).await;
    let old = claim(&before_restart, &["q"], 2, "worker-a").await;
    assert_eq!(old.len(), 2);
    drop(before_restart);
    let after_restart = h.connect(clock.clock()).await;
    let new = claim(&after_restart, &["q"], 2, "worker-a").await;
    assert_eq!(new.len(), 2);
    for job in &old {
        let stored = get(&after_restart, job.id).await;
        assert_eq!(stored.state, State::Running);
        assert_eq!(stored.token(), job.token(), "a second claim under the same name left job {} alone", job.id);
    }
    after_restart.ack(lease(&new[0])).await.expect("ack");
    clock.advance(LEASE);
    let maintenance = h.connect(clock.clock()).await;
    assert_eq!(maintenance.recover().await.expect("recover"), 3);
    let again = claim(&maintenance, &["q"], 10, "worker-a").await;
    assert_eq!(again.len(), 3);
    for job in &again {
        assert_eq!(job.attempts, 2);
        maintenance.ack(lease(job)).await.expect("ack");
    }
    for id in ids {
        assert_eq!(get(&maintenance, id).await.state, State::Completed);
    }
    let s = stats(&maintenance).await;
    assert_eq!(s.total(State::Running), 0);
    assert_eq!(s.total(State::Completed), 4);
}

/// A lease that expires on the last attempt sends the job to Dead.
pub async fn recover_with_no_attempts_left_is_dead<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let id = enqueue_all(&storage, vec![build(builder("q", 0).max_attempts(1), &clock)]).await[0];
    claim_one(&storage, "q", "w").await;
    clock.advance(LEASE);
    assert_eq!(storage.recover().await.expect("recover"), 1);
    let job = get(&storage, id).await;
    assert_eq!(job.state, State::Dead);
    assert_eq!(job.finished_at, Some(clock.now()));
    assert_eq!((job.attempts, job.errors.len()), (1, 1));
    assert!(job.errors[0].message.contains("lease expired"));
    assert!(job.lease.is_none());
    assert!(claim(&storage, &["q"], 1, "w").await.is_empty());
}
