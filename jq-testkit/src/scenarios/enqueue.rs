//! Enqueueing: stored fields, uniqueness, atomic batches.

use std::time::Duration;

use jq_core::clock::add;
use jq_core::{
    DEFAULT_MAX_PAYLOAD_BYTES, Error, JobFilter, NewJob, Payload, Priority, State, Storage, StorageExt, TraceContext,
};

use super::support::{
    build, builder, claim, claim_one, enqueue_all, get, lease, list_all, manual_clock, payload_of_size, same_json,
    stats,
};
use crate::Harness;

/// Every field of a NewJob is stored; run_at None means now (Pending), a
/// delay means Scheduled at now + delay.
pub async fn enqueue_stores_every_field<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let payload = Payload::from_json(r#"{"to":"a@example.com","tags":["x","y"],"n":1.5}"#).expect("JSON");
    let now_job = build(
        NewJob::builder("send_email", payload.clone())
            .queue("mail")
            .priority(Priority::High)
            .max_attempts(7)
            .unique_key("k1"),
        &clock,
    );
    let delay = Duration::from_secs(300);
    let later = build(builder("mail", 1).delay(delay), &clock);
    let ids = enqueue_all(&storage, vec![now_job.clone(), later.clone()]).await;

    let job = get(&storage, ids[0]).await;
    assert_eq!(job.id, now_job.id);
    assert_eq!(job.queue.as_str(), "mail");
    assert_eq!(job.kind, "send_email");
    assert!(same_json(&job.payload, &payload), "payload {:?} read back as {:?}", payload, job.payload);
    assert_eq!(job.priority, Priority::High);
    assert_eq!(job.state, State::Pending);
    assert_eq!(job.attempts, 0);
    assert_eq!(job.max_attempts, 7);
    assert_eq!(job.run_at, clock.now());
    assert_eq!(job.created_at, clock.now());
    assert_eq!(job.finished_at, None);
    assert_eq!(job.lease, None);
    assert!(job.errors.is_empty());
    assert_eq!(job.unique_key.as_deref(), Some("k1"));

    let job = get(&storage, ids[1]).await;
    assert_eq!(job.state, State::Scheduled);
    assert_eq!(job.run_at, add(clock.now(), delay));
    assert_eq!(job.priority, Priority::Normal);
    assert_eq!(job.unique_key, None);
    assert!(storage.enqueue(Vec::new()).await.expect("empty batch").is_empty());
}

/// A batch sent again (its answer was lost) stores nothing twice: each job
/// whose id is stored already is answered with that id and left as it is,
/// Running under its lease or finished, and the rest of the batch is stored.
pub async fn resent_enqueue_stores_nothing_twice<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let first = vec![build(builder("q", 0), &clock), build(builder("q", 1), &clock)];
    enqueue_all(&storage, first.clone()).await;
    let running = claim_one(&storage, "q", "w").await;
    let done = claim_one(&storage, "q", "w").await;
    storage.ack(lease(&done)).await.expect("ack");

    clock.advance(Duration::from_secs(1));
    let fresh = build(builder("q", 2), &clock);
    let again = vec![first[0].clone(), fresh.clone(), first[1].clone()];
    enqueue_all(&storage, again).await;
    assert_eq!(get(&storage, running.id).await, running, "a Running job is left under its lease");
    assert_eq!(get(&storage, done.id).await.state, State::Completed, "a finished job is not run again");
    assert_eq!(stats(&storage).await.total(State::Pending), 1, "only the new job is Pending");
    assert_eq!(claim(&storage, &["q"], 10, "w").await.iter().map(|j| j.id).collect::<Vec<_>>(), vec![fresh.id]);
}

/// A unique key deduplicates against live jobs of the same queue, stored or
/// earlier in the same batch; a finished job or another queue does not count.
pub async fn unique_keys<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let keyed = |queue: &str, key: &str| build(builder(queue, 0).unique_key(key), &clock);

    let a = keyed("q", "k");
    let a_id = enqueue_all(&storage, vec![a]).await[0];
    let dup = keyed("q", "k");
    assert_eq!(storage.enqueue_one(dup.clone()).await.expect("enqueue"), a_id);
    assert!(matches!(storage.get(dup.id).await, Err(Error::NotFound { .. })), "a duplicate is not stored");

    let (c, d) = (keyed("q", "k2"), keyed("q", "k2"));
    let c_id = c.id;
    let ids = storage.enqueue(vec![c, d.clone()]).await.expect("enqueue");
    assert_eq!(ids, vec![c_id, c_id], "a duplicate within one batch gets the first one's id");
    assert!(matches!(storage.get(d.id).await, Err(Error::NotFound { .. })));

    let other_queue = keyed("other", "k");
    let other_id = other_queue.id;
    assert_eq!(storage.enqueue_one(other_queue).await.expect("enqueue"), other_id, "another queue is no duplicate");

    let running = claim_one(&storage, "q", "w").await;
    assert_eq!(running.id, a_id);
    assert_eq!(storage.enqueue_one(keyed("q", "k")).await.expect("enqueue"), a_id, "a Running job still counts");
    storage.ack(lease(&running)).await.expect("ack");
    let fresh = keyed("q", "k");
    let fresh_id = fresh.id;
    assert_eq!(storage.enqueue_one(fresh).await.expect("enqueue"), fresh_id, "a Completed job no longer counts");

    storage.cancel(c_id).await.expect("cancel");
    let after_cancel = keyed("q", "k2");
    let after_cancel_id = after_cancel.id;
    assert_eq!(storage.enqueue_one(after_cancel).await.expect("enqueue"), after_cancel_id);

    let all = list_all(&storage, JobFilter::default()).await;
    let mut stored: Vec<_> = all.iter().map(|j| j.id).collect();
    stored.sort();
    let mut expected = vec![a_id, c_id, other_id, fresh_id, after_cancel_id];
    expected.sort();
    assert_eq!(stored, expected);
}

/// An operator's retry brings a Dead job back even when a newer live job
/// holds its unique key: the two share it. Enqueue of the key answers with
/// the smaller id, and the key stays taken until the last of them
/// finishes, whichever finishes first.
pub async fn a_retried_job_shares_its_unique_key<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let keyed = |key: &str| build(builder("q", 0).unique_key(key), &clock);
    for (key, older_finishes_first) in [("newer-first", false), ("older-first", true)] {
        let old = enqueue_all(&storage, vec![keyed(key)]).await[0];
        let job = claim_one(&storage, "q", "w").await;
        storage.bury(lease(&job), "poison").await.expect("bury");
        let newer = keyed(key);
        let newer_id = newer.id;
        assert_eq!(storage.enqueue_one(newer).await.expect("enqueue"), newer_id, "a Dead job no longer counts");
        storage.retry(old).await.expect("retry while a newer live job holds the key");

        let smaller = old.min(newer_id);
        let dup = keyed(key);
        assert_eq!(storage.enqueue_one(dup.clone()).await.expect("enqueue"), smaller, "{key}: the smaller id answers");
        assert!(matches!(storage.get(dup.id).await, Err(Error::NotFound { .. })), "{key}: not stored");

        let running = claim(&storage, &["q"], 2, "w").await;
        assert_eq!(running.len(), 2, "{key}: both are live");
        let (first, last) = if older_finishes_first { (old, newer_id) } else { (newer_id, old) };
        let by_id = |id| lease(running.iter().find(|j| j.id == id).expect("claimed"));
        storage.ack(by_id(first)).await.expect("ack");
        let dup = keyed(key);
        assert_eq!(
            storage.enqueue_one(dup.clone()).await.expect("enqueue"),
            last,
            "{key}: the job still live keeps the key"
        );
        assert!(matches!(storage.get(dup.id).await, Err(Error::NotFound { .. })), "{key}: not stored");
        storage.ack(by_id(last)).await.expect("ack");
        let fresh = keyed(key);
        let fresh_id = fresh.id;
        assert_eq!(storage.enqueue_one(fresh).await.expect("enqueue"), fresh_id, "{key}: free once both finished");
        let job = claim_one(&storage, "q", "w").await;
        assert_eq!(job.id, fresh_id);
        storage.ack(lease(&job)).await.expect("ack");
    }
}

/// One oversized payload in a batch stores nothing of the batch.
pub async fn enqueue_batch_is_atomic<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let ok1 = build(builder("q", 0), &clock);
    let big = build(NewJob::builder("big", payload_of_size(DEFAULT_MAX_PAYLOAD_BYTES + 1)).queue("q"), &clock);
    let ok2 = build(builder("q", 2).unique_key("u"), &clock);
    let ids = [ok1.id, big.id, ok2.id];
    let err = storage.enqueue(vec![ok1, big, ok2]).await.expect_err("an oversized payload fails the batch");
    assert!(
        matches!(err, Error::PayloadTooLarge { size, limit } if size == DEFAULT_MAX_PAYLOAD_BYTES + 1 && limit == DEFAULT_MAX_PAYLOAD_BYTES),
        "{err:?}"
    );
    for id in ids {
        assert!(matches!(storage.get(id).await, Err(Error::NotFound { .. })), "job {id} of a failed batch was stored");
    }
    assert_eq!(stats(&storage).await, jq_core::Stats::default(), "nothing stored");
    // The unique key of the failed batch was not taken either.
    let retry = build(builder("q", 3).unique_key("u"), &clock);
    let retry_id = retry.id;
    assert_eq!(storage.enqueue_one(retry).await.expect("enqueue"), retry_id);
}

/// A job's trace context is stored as given (with and without a
/// `tracestate`, single and batch enqueue, keyed or not), comes back with
/// its claim, and is kept when the job is retried, by the pool or by an
/// operator; a job enqueued without one has none.
pub async fn trace_context_is_stored_and_kept<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let with_state = TraceContext::new(parent, Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")).expect("context");
    let plain = TraceContext::new("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", None).expect("context");
    let single = build(builder("traced", 0).trace(Some(with_state.clone())), &clock);
    let ids = enqueue_all(&storage, vec![single]).await;
    let batch = vec![
        build(builder("traced", 1).trace(Some(plain.clone())), &clock),
        build(builder("traced", 2).trace(None), &clock),
        build(builder("traced", 3).trace(Some(plain.clone())).unique_key("traced-key"), &clock),
    ];
    let more = enqueue_all(&storage, batch).await;
    assert_eq!(get(&storage, ids[0]).await.trace.as_ref(), Some(&with_state));
    assert_eq!(get(&storage, more[0]).await.trace.as_ref(), Some(&plain));
    assert_eq!(get(&storage, more[1]).await.trace, None);
    assert_eq!(get(&storage, more[2]).await.trace.as_ref(), Some(&plain));

    let claimed = claim(&storage, &["traced"], 4, "w").await;
    assert_eq!(claimed.len(), 4);
    for job in &claimed {
        assert_eq!(job.trace, get(&storage, job.id).await.trace, "claim of {}", job.id);
    }
    let first = claimed.iter().find(|j| j.id == ids[0]).expect("claimed");
    let state = storage.nack(lease(first), "boom", Duration::ZERO).await.expect("nack");
    assert_eq!(state, State::Pending);
    let again = claim_one(&storage, "traced", "w").await;
    assert_eq!(again.id, ids[0]);
    assert_eq!(again.trace.as_ref(), Some(&with_state), "the pool's retry keeps the context");
    storage.bury(lease(&again), "dead").await.expect("bury");
    storage.retry(ids[0]).await.expect("operator retry");
    assert_eq!(get(&storage, ids[0]).await.trace.as_ref(), Some(&with_state), "an operator's retry keeps it");
}
