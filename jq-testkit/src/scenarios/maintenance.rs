//! Maintenance: promote and recover, each run from many connections at once.

use std::sync::Arc;
use std::time::Duration;

use jq_core::State;
use jq_core::storage::Storage;
use tokio::sync::Barrier;

use super::support::{LEASE, build, builder, claim, enqueue_all, get, manual_clock, stats};
use crate::Harness;

/// N connections promote at once: the counts add up to the number of due
/// jobs, each due job is Pending, the rest stay Scheduled, and a second
/// promote moves nothing.
pub async fn promote_exactly_once_under_concurrent_promoters<H: Harness>(h: &H) {
    const DUE: usize = 50;
    const LATER: usize = 10;
    const PROMOTERS: usize = 6;
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let mut due = Vec::new();
    for i in 0..DUE {
        due.push(build(builder("q", i).delay(Duration::from_secs(1 + i as u64)), &clock));
    }
    let later: Vec<_> = (0..LATER).map(|i| build(builder("q", i).delay(Duration::from_secs(1000)), &clock)).collect();
    let due_ids = enqueue_all(&storage, due).await;
    let later_ids = enqueue_all(&storage, later).await;
    assert_eq!(storage.promote().await.expect("promote"), 0, "nothing is due yet");
    clock.advance(Duration::from_secs(DUE as u64));

    let barrier = Arc::new(Barrier::new(PROMOTERS));
    let mut tasks = Vec::new();
    for _ in 0..PROMOTERS {
        let conn = h.connect(clock.clock()).await;
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            conn.promote().await.expect("promote")
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("promoter");
    }
    assert_eq!(total, DUE as u64, "each due job promoted exactly once");
    for id in due_ids {
        assert_eq!(get(&storage, id).await.state, State::Pending);
    }
    for id in later_ids {
        assert_eq!(get(&storage, id).await.state, State::Scheduled);
    }
    assert_eq!(storage.promote().await.expect("promote"), 0, "promote is idempotent");
    let s = stats(&storage).await;
    assert_eq!((s.total(State::Pending), s.total(State::Scheduled)), (DUE as u64, LATER as u64));
}

/// N connections recover at once: each expired job is recovered exactly
/// once (one error each), and a second recover finds nothing.
pub async fn recover_is_idempotent_under_concurrent_recoverers<H: Harness>(h: &H) {
    const JOBS: usize = 40;
    const RECOVERERS: usize = 4;
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let ids = enqueue_all(&storage, super::support::jobs(&clock, "q", JOBS)).await;
    assert_eq!(claim(&storage, &["q"], JOBS, "w").await.len(), JOBS);
    clock.advance(LEASE);
    let barrier = Arc::new(Barrier::new(RECOVERERS));
    let mut tasks = Vec::new();
    for _ in 0..RECOVERERS {
        let conn = h.connect(clock.clock()).await;
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            conn.recover().await.expect("recover")
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("recoverer");
    }
    assert_eq!(total, JOBS as u64);
    for id in ids {
        let job = get(&storage, id).await;
        assert_eq!(job.state, State::Pending);
        assert_eq!(job.errors.len(), 1, "job {id} recovered more than once: {:?}", job.errors);
    }
    assert_eq!(storage.recover().await.expect("recover"), 0);
}
