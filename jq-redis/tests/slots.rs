//! Every key a script touches for one queue falls in one Redis Cluster
//! hash slot: the queue's sets and hashes.

#![allow(clippy::unwrap_used)] // tests may unwrap

use jq_redis::Keys;
use jq_redis::schema::slot;

#[test]
fn every_key_of_a_queue_is_in_one_slot() {
    for prefix in ["jq", "myapp", "a:b"] {
        let keys = Keys::new(prefix);
        for queue in ["default", "mail", "a:b.c-d_e", "x", &"q".repeat(128)] {
            let expected = slot(&keys.base(queue));
            for key in keys.queue_keys(queue) {
                assert_eq!(slot(&key), expected, "{key}");
            }
        }
    }
}

#[test]
fn queues_spread_over_slots() {
    let keys = Keys::new("jq");
    let slots: std::collections::HashSet<u16> = (0..100).map(|i| slot(&keys.base(&format!("q{i}")))).collect();
    assert!(slots.len() > 90, "queues should hash to different slots");
}
