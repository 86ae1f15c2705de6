//! Text from outside: what every backend stores, or refuses, the same way
//! (`jq_core::text`). PostgreSQL's `text` and `jsonb` cannot hold a NUL, so
//! an error message with one is stored with U+FFFD in its place, and a
//! payload or a name with one is refused before anything is stored.

use std::time::Duration;

use jq_core::storage::{Election, LeaseToken, Outcome, Settlement, Storage};
use jq_core::{Error, JobId, NewJob, Payload, State, TraceContext};

use super::support::{build, builder, claim, enqueue_all, get, lease, manual_clock, request, same_json, stats};
use crate::Harness;

/// Nacks and buries whose messages hold NUL characters (a command's
/// stderr), in one settle batch with an ack and a plain nack: every item
/// applies, and the messages read back with each NUL replaced by U+FFFD.
/// *PostgreSQL refused the whole batch, which the pool sent again forever.*
pub async fn nul_in_error_messages_is_stored_replaced<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let ids = enqueue_all(&storage, (0..4).map(|i| build(builder("q", i).max_attempts(5), &clock)).collect()).await;
    let mut jobs = claim(&storage, &["q"], 4, "w").await;
    jobs.sort_by_key(|j| j.id);
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), ids);
    let backoff = Duration::from_secs(10);
    let batch = vec![
        Settlement {
            lease: lease(&jobs[0]),
            outcome: Outcome::Nack { error: "exit 78: \0boom\0".into(), delay: backoff },
        },
        Settlement { lease: lease(&jobs[1]), outcome: Outcome::Ack },
        Settlement { lease: lease(&jobs[2]), outcome: Outcome::Bury { error: "stderr: a\0b".into() } },
        Settlement { lease: lease(&jobs[3]), outcome: Outcome::Nack { error: "plain".into(), delay: backoff } },
    ];
    let results = storage.settle(batch).await.expect("a batch with NULs in its messages is applied");
    let states: Vec<State> = results.into_iter().map(|r| r.expect("every item applies")).collect();
    assert_eq!(states, vec![State::Scheduled, State::Completed, State::Dead, State::Scheduled]);
    let messages = |id: JobId| {
        let storage = &storage;
        async move { get(storage, id).await.errors.into_iter().map(|e| e.message).collect::<Vec<_>>() }
    };
    assert_eq!(messages(ids[0]).await, vec!["exit 78: \u{FFFD}boom\u{FFFD}"]);
    assert_eq!(messages(ids[1]).await, Vec::<String>::new());
    assert_eq!(messages(ids[2]).await, vec!["stderr: a\u{FFFD}b"]);
    assert_eq!(messages(ids[3]).await, vec!["plain"]);
    assert_eq!(get(&storage, ids[2]).await.state, State::Dead);
}

/// A payload holding the JSON escape `\u0000` is refused with
/// InvalidPayload: by `Payload::from_json` and `Payload::of`, and by
/// enqueue on every backend for one made without them, storing nothing of
/// its batch. An escaped backslash before `u0000` is plain text, stored.
pub async fn payload_with_a_nul_escape_is_refused<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let nul = r#"{"s":"a\u0000b"}"#;
    assert!(matches!(Payload::from_json(nul), Err(Error::InvalidPayload(_))));
    assert!(matches!(Payload::of(&"a\0b"), Err(Error::InvalidPayload(_))));

    let good = build(builder("q", 0), &clock);
    let good_id = good.id;
    let bad = build(NewJob::builder("k", Payload::from_stored(nul.to_owned())).queue("q"), &clock);
    let bad_id = bad.id;
    let err = storage.enqueue(vec![good, bad]).await.expect_err("a payload with \\u0000 is refused");
    assert!(matches!(&err, Error::InvalidPayload(reason) if reason.contains("\\u0000")), "{err:?}");
    for id in [good_id, bad_id] {
        assert!(matches!(storage.get(id).await, Err(Error::NotFound { .. })), "nothing of the batch is stored");
    }
    assert_eq!(stats(&storage).await.queues.len(), 0);

    let text = Payload::from_json(r#"{"s":"\\u0000"}"#).expect("an escaped backslash is no NUL");
    let id = enqueue_all(&storage, vec![build(NewJob::builder("k", text.clone()).queue("q"), &clock)]).await[0];
    let stored = get(&storage, id).await;
    assert!(same_json(&stored.payload, &text), "{:?}", stored.payload);
}

/// Names with a NUL are refused with InvalidInput before anything changes:
/// a kind, unique key or trace context of a job made without the builder
/// (enqueue), a worker name (claim), a role holder's name (elect) and a
/// periodic job's expression (fire).
pub async fn names_with_a_nul_are_refused<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let invalid = |r: &jq_core::Result<Vec<JobId>>, what: &str| {
        assert!(matches!(r, Err(Error::InvalidInput { what: w, .. }) if *w == what), "{what}: {r:?}");
    };
    assert!(matches!(builder("q", 0).unique_key("a\0b").build_at(clock.now()), Err(Error::InvalidInput { .. })));

    let mut kind = build(builder("q", 0), &clock);
    kind.kind = "send\0mail".into();
    invalid(&storage.enqueue(vec![kind]).await, "kind");
    let mut key = build(builder("q", 1), &clock);
    key.unique_key = Some("user:\0:1".into());
    invalid(&storage.enqueue(vec![key]).await, "unique key");
    let mut trace = build(builder("q", 2), &clock);
    trace.trace =
        Some(TraceContext::from_stored("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00 a=\0".into()));
    invalid(&storage.enqueue(vec![trace]).await, "trace context");
    assert_eq!(stats(&storage).await.queues.len(), 0, "nothing was stored");

    let id = enqueue_all(&storage, vec![build(builder("q", 3), &clock)]).await[0];
    let got = storage.claim(&request(&["q"], 1, "worker\0")).await;
    assert!(matches!(&got, Err(Error::InvalidInput { what: "worker", .. })), "{got:?}");
    assert_eq!(get(&storage, id).await.state, State::Pending, "a refused claim takes nothing");

    let bid = Election {
        role: "maintenance".into(),
        token: LeaseToken::new(),
        holder: "host\0".into(),
        ttl: Duration::from_secs(10),
    };
    // The capabilities' names, where the backend has them.
    if let Some(roles) = storage.capabilities().roles {
        let won = roles.elect(&bid).await;
        assert!(matches!(&won, Err(Error::InvalidInput { what: "holder", .. })), "{won:?}");
        assert!(roles.leaders().await.expect("leaders").is_empty());
    }

    let fire = jq_core::periodic::Fire {
        name: "nightly".into(),
        queue: super::support::queue("q"),
        spec: "0 3 * * *\0".into(),
        zone: "UTC".into(),
        expected: None,
        expected_trigger: None,
        cursor: clock.now(),
        jobs: Vec::new(),
        missed: 0,
        last_missed: None,
    };
    if let Some(periodic) = storage.capabilities().periodic {
        let fired = periodic.fire(&fire).await;
        assert!(matches!(&fired, Err(Error::InvalidInput { what: "periodic job spec", .. })), "{fired:?}");
        assert!(periodic.periodic().await.expect("periodic jobs").is_empty());
    }
}
