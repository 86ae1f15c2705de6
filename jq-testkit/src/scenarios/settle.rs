//! Failures: retries up to max_attempts, poison jobs, release and release.

use std::time::Duration;

use jq_core::clock::add;
use jq_core::{Outcome, State, StorageExt};

use super::support::{build, builder, claim, claim_one, enqueue_all, get, lease, manual_clock, settle};
use crate::Harness;

/// max_attempts 3, nacked 3 times: Scheduled, Scheduled, then Dead with
/// three errors numbered 1, 2, 3; attempts never exceed 3.
pub async fn nack_accounting_to_dead<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let id = enqueue_all(&storage, vec![build(builder("q", 0).max_attempts(3), &clock)]).await[0];
    let backoff = Duration::from_secs(10);
    for attempt in 1..=3u32 {
        let job = claim_one(&storage, "q", "w").await;
        assert_eq!(job.id, id);
        assert_eq!(job.attempts, attempt);
        let state = storage.nack(lease(&job), format!("boom {attempt}"), backoff).await.expect("nack");
        let stored = get(&storage, id).await;
        assert_eq!(stored.state, state);
        assert_eq!(stored.errors.len(), attempt as usize);
        assert!(stored.lease.is_none());
        if attempt < 3 {
            assert_eq!(state, State::Scheduled);
            assert_eq!(stored.run_at, add(clock.now(), backoff));
            assert!(stored.finished_at.is_none());
            assert!(claim(&storage, &["q"], 1, "w").await.is_empty(), "claimed during its backoff");
            clock.advance(backoff);
        } else {
            assert_eq!(state, State::Dead);
            assert_eq!(stored.finished_at, Some(clock.now()));
        }
    }
    let dead = get(&storage, id).await;
    assert_eq!(dead.attempts, 3);
    let numbers: Vec<u32> = dead.errors.iter().map(|e| e.attempt).collect();
    assert_eq!(numbers, vec![1, 2, 3]);
    let messages: Vec<&str> = dead.errors.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(messages, vec!["boom 1", "boom 2", "boom 3"]);
    assert!(dead.errors.windows(2).all(|w| w[0].at < w[1].at), "errors are oldest first");
    clock.advance(backoff);
    assert!(claim(&storage, &["q"], 1, "w").await.is_empty(), "a Dead job is never claimed");
}

/// A payload that can never run (it does not decode into the handler's
/// type) is buried: Dead at once with the reason, attempts left or not.
pub async fn poison_job_ends_dead<H: Harness>(h: &H) {
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Args {
        count: u32,
    }
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let payload = jq_core::Payload::from_json(r#"{"count":"many"}"#).expect("valid JSON");
    let job = build(jq_core::NewJob::builder("count", payload).queue("q").max_attempts(25), &clock);
    let id = enqueue_all(&storage, vec![job]).await[0];
    let claimed = claim_one(&storage, "q", "w").await;
    let reason = claimed.payload.decode::<Args>().expect_err("the payload does not fit Args").to_string();
    let state = settle(&storage, lease(&claimed), Outcome::Bury { error: reason.clone() }).await.expect("bury");
    assert_eq!(state, State::Dead);
    let dead = get(&storage, id).await;
    assert_eq!(dead.state, State::Dead);
    assert_eq!(dead.attempts, 1);
    assert_eq!(dead.finished_at, Some(clock.now()));
    assert_eq!(dead.errors.len(), 1);
    assert_eq!(dead.errors[0].attempt, 1);
    assert_eq!(dead.errors[0].message, reason);
    assert!(claim(&storage, &["q"], 1, "w").await.is_empty());
}

/// Release hands a job back without counting the attempt or recording an
/// error: a max_attempts(1) job can be released again and again.
pub async fn release_does_not_count_attempt<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let id = enqueue_all(&storage, vec![build(builder("q", 0).max_attempts(1), &clock)]).await[0];
    for _ in 0..3 {
        let job = claim_one(&storage, "q", "w").await;
        assert_eq!(job.attempts, 1);
        storage.release(lease(&job)).await.expect("release");
        let back = get(&storage, id).await;
        assert_eq!(back.state, State::Pending);
        assert_eq!(back.attempts, 0);
        assert_eq!(back.run_at, clock.now());
        assert!(back.errors.is_empty());
        assert!(back.lease.is_none());
        assert!(back.finished_at.is_none());
    }
    let job = claim_one(&storage, "q", "w").await;
    storage.ack(lease(&job)).await.expect("ack");
    let done = get(&storage, id).await;
    assert_eq!((done.state, done.attempts), (State::Completed, 1));
}

/// A job released in the instant it was claimed keeps its place in the
/// claim order and is claimable at once, later too, whatever claims of
/// other queues came between (the shrunk case of a model run on
/// PostgreSQL, whose claims start where the last one left off).
pub async fn release_in_the_claiming_instant_is_claimable_at_once<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let id = enqueue_all(&storage, vec![build(builder("q", 0), &clock)]).await[0];
    let job = claim_one(&storage, "q", "w").await;
    storage.release(lease(&job)).await.expect("release");
    clock.advance(Duration::from_secs(1));
    assert!(claim(&storage, &["other"], 1, "w").await.is_empty());
    let again = claim(&storage, &["q"], 1, "w").await;
    assert_eq!(again.iter().map(|j| j.id).collect::<Vec<_>>(), vec![id], "the released job, at once");
    storage.ack(lease(&again[0])).await.expect("ack");
    // The same with a nack of zero delay (Pending again, the attempt counted).
    let id = enqueue_all(&storage, vec![build(builder("q", 0), &clock)]).await[0];
    let job = claim_one(&storage, "q", "w").await;
    let nack = Outcome::Nack { error: "again".into(), delay: Duration::ZERO };
    assert_eq!(settle(&storage, lease(&job), nack).await.expect("nack"), State::Pending);
    clock.advance(Duration::from_secs(1));
    assert!(claim(&storage, &["other"], 1, "w").await.is_empty());
    assert_eq!(claim_one(&storage, "q", "w").await.id, id);
}

/// Release with a delay (a release): Scheduled at now + delay, attempt not
/// counted, claimable again at exactly that instant.
pub async fn release_with_delay_is_scheduled_at_now_plus_delay<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let id = enqueue_all(&storage, vec![build(builder("q", 0), &clock)]).await[0];
    let job = claim_one(&storage, "q", "w").await;
    let delay = Duration::from_secs(90);
    let state = settle(&storage, lease(&job), Outcome::Release { delay }).await.expect("release");
    assert_eq!(state, State::Scheduled);
    let released = get(&storage, id).await;
    assert_eq!(released.state, State::Scheduled);
    assert_eq!(released.run_at, add(clock.now(), delay));
    assert_eq!(released.attempts, 0);
    assert!(released.errors.is_empty());
    assert!(released.lease.is_none());
    clock.advance(delay - super::support::MICRO);
    assert!(claim(&storage, &["q"], 1, "w").await.is_empty(), "claimed before the release ended");
    clock.advance(super::support::MICRO);
    let again = claim_one(&storage, "q", "w").await;
    assert_eq!((again.id, again.attempts), (id, 1));
}

/// A nack with zero delay goes straight back to Pending at now.
pub async fn nack_with_zero_delay_is_pending<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let id = enqueue_all(&storage, vec![build(builder("q", 0).max_attempts(3), &clock)]).await[0];
    let job = claim_one(&storage, "q", "w").await;
    let state = storage.nack(lease(&job), "transient", Duration::ZERO).await.expect("nack");
    assert_eq!(state, State::Pending);
    let back = get(&storage, id).await;
    assert_eq!((back.state, back.run_at, back.errors.len()), (State::Pending, clock.now(), 1));
    let again = claim_one(&storage, "q", "w").await;
    assert_eq!((again.id, again.attempts), (id, 2));
}
