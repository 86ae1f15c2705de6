//! Bad input: each gives a typed error and changes nothing.

use jq_core::storage::{LeaseRef, LeaseToken, Storage, StorageExt};
use jq_core::{DEFAULT_MAX_PAYLOAD_BYTES, Error, JobId, NewJob, Payload, QueueName, State};

use super::support::{build, builder, claim_one, enqueue_all, get, manual_clock, payload_of_size, same_json, stats};
use crate::Harness;

/// A malformed queue name is refused by the builder with InvalidQueue.
pub async fn invalid_queue_name_rejected<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let id = enqueue_all(&storage, vec![build(builder("good", 0), &clock)]).await[0];
    let too_long = "x".repeat(129);
    for bad in ["", "a b", "queue/1", "é", too_long.as_str()] {
        let result = builder(bad, 0).build_at(clock.now());
        assert!(matches!(&result, Err(Error::InvalidQueue { name, .. }) if name == bad), "{bad:?}: {result:?}");
        assert!(matches!(QueueName::new(bad), Err(Error::InvalidQueue { .. })));
    }
    let s = stats(&storage).await;
    assert_eq!(s.queues.len(), 1);
    assert_eq!(s.total(State::Pending), 1);
    assert_eq!(get(&storage, id).await.state, State::Pending);
}

/// A payload over the limit is refused with PayloadTooLarge and nothing is
/// stored; one of exactly the limit is accepted.
pub async fn oversized_payload_rejected<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let big = build(NewJob::builder("big", payload_of_size(DEFAULT_MAX_PAYLOAD_BYTES + 1)).queue("q"), &clock);
    let big_id = big.id;
    let err = storage.enqueue_one(big).await.expect_err("over the limit");
    assert!(
        matches!(err, Error::PayloadTooLarge { size, limit } if size == DEFAULT_MAX_PAYLOAD_BYTES + 1 && limit == DEFAULT_MAX_PAYLOAD_BYTES),
        "{err:?}"
    );
    assert!(matches!(storage.get(big_id).await, Err(Error::NotFound { .. })));
    assert_eq!(stats(&storage).await.queues.len(), 0);

    let payload = payload_of_size(DEFAULT_MAX_PAYLOAD_BYTES);
    let fits = build(NewJob::builder("big", payload.clone()).queue("q"), &clock);
    let id = storage.enqueue_one(fits).await.expect("a payload of exactly the limit fits");
    let claimed = claim_one(&storage, "q", "w").await;
    assert_eq!(claimed.id, id);
    assert!(same_json(&claimed.payload, &payload));
}

/// get, cancel and retry of an unknown id give NotFound with that id.
pub async fn unknown_id_is_not_found<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    enqueue_all(&storage, vec![build(builder("q", 0), &clock)]).await;
    let unknown = JobId::new();
    let is_not_found = |r: &jq_core::Result<()>| matches!(r, Err(Error::NotFound { id }) if *id == unknown);
    assert!(matches!(storage.get(unknown).await, Err(Error::NotFound { id }) if id == unknown));
    assert!(is_not_found(&storage.cancel(unknown).await));
    assert!(is_not_found(&storage.retry(unknown).await));
    assert_eq!(stats(&storage).await.total(State::Pending), 1);
}

/// Completing or heartbeating an id that does not exist is LeaseLost / lost.
pub async fn ack_of_unknown_id_is_lease_lost<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let id = enqueue_all(&storage, vec![build(builder("q", 0), &clock)]).await[0];
    let unknown = LeaseRef { id: JobId::new(), token: LeaseToken::new() };
    assert!(matches!(storage.ack(unknown).await, Err(Error::LeaseLost { id }) if id == unknown.id));
    let nack = storage.nack(unknown, "e", std::time::Duration::ZERO).await;
    assert!(matches!(nack, Err(Error::LeaseLost { id }) if id == unknown.id));
    let lost = storage.heartbeat(&[unknown], super::support::LEASE).await.expect("heartbeat").lost;
    assert_eq!(lost, vec![unknown.id]);
    // A made-up token on a real, Pending job is no better.
    let forged = LeaseRef { id, token: LeaseToken::new() };
    assert!(matches!(storage.ack(forged).await, Err(Error::LeaseLost { id: lost }) if lost == id));
    assert_eq!(get(&storage, id).await.state, State::Pending);
    assert!(matches!(storage.get(unknown.id).await, Err(Error::NotFound { .. })));
}

/// Purging a non-terminal state is InvalidInput and deletes nothing.
pub async fn purge_of_non_terminal_state_is_invalid<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let scheduled = build(builder("q", 0).delay(std::time::Duration::from_secs(60)), &clock);
    let ids =
        enqueue_all(&storage, vec![scheduled, build(builder("q", 1), &clock), build(builder("q", 2), &clock)]).await;
    claim_one(&storage, "q", "w").await;
    let far_future = clock.now() + chrono::Duration::days(365);
    for state in [State::Scheduled, State::Pending, State::Running] {
        let result = storage.purge(state, far_future).await;
        assert!(matches!(result, Err(Error::InvalidInput { .. })), "purge {state}: {result:?}");
    }
    for id in ids {
        get(&storage, id).await;
    }
    let s = stats(&storage).await;
    assert_eq!((s.total(State::Scheduled), s.total(State::Pending), s.total(State::Running)), (1, 1, 1));
}

/// Text that is not JSON never becomes a payload (InvalidPayload).
pub async fn invalid_payload_json_rejected<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    for bad in ["{", "", "{'a': 1}", "[1,]", "nul"] {
        assert!(matches!(Payload::from_json(bad), Err(Error::InvalidPayload(_))), "{bad:?}");
    }
    // What is JSON round-trips as the same value.
    let text = r#"{"nested":{"list":[1,2,{"deep":null}],"unicode":"é✓"},"big":12345678901234}"#;
    let payload = Payload::from_json(text).expect("valid JSON");
    let id = enqueue_all(&storage, vec![build(NewJob::builder("k", payload.clone()).queue("q"), &clock)]).await[0];
    let stored = get(&storage, id).await;
    assert!(same_json(&stored.payload, &payload), "{:?}", stored.payload);
    let value: serde_json::Value = stored.payload.decode().expect("decodes");
    assert_eq!(value["nested"]["unicode"], "é✓");
}
