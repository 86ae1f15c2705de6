//! Named roles ([`RoleStorage::elect`], [`RoleStorage::resign`],
//! [`RoleStorage::leaders`]): one holder at a time, renewals, takeover only
//! after expiry by the storage's clock.
//!
//! [`RoleStorage::elect`]: jq_core::storage::RoleStorage::elect
//! [`RoleStorage::resign`]: jq_core::storage::RoleStorage::resign
//! [`RoleStorage::leaders`]: jq_core::storage::RoleStorage::leaders

use std::sync::Arc;
use std::time::Duration;

use jq_core::Error;
use jq_core::storage::add;
use jq_core::storage::{Election, Leader, LeaseToken, Storage, StorageExt};
use tokio::sync::Barrier;

use super::support::{MICRO, manual_clock};
use crate::Harness;

const TTL: Duration = Duration::from_secs(20);

fn bid(role: &str, holder: &str) -> Election {
    Election { role: role.to_owned(), token: LeaseToken::new(), holder: holder.to_owned(), ttl: TTL }
}

async fn elect<S: Storage>(storage: &S, election: &Election) -> bool {
    storage.require_roles().expect("roles").elect(election).await.unwrap_or_else(|e| panic!("elect {election:?}: {e}"))
}

async fn leaders<S: Storage>(storage: &S) -> Vec<Leader> {
    storage.require_roles().expect("roles").leaders().await.expect("leaders")
}

/// 8 contenders on 8 connections bid for a free role at once: exactly one
/// wins, and only it may renew. Another role is independent.
pub async fn election_exclusive_under_concurrent_contenders<H: Harness>(h: &H) {
    const CONTENDERS: usize = 8;
    let clock = manual_clock();
    let barrier = Arc::new(Barrier::new(CONTENDERS));
    let mut tasks = Vec::new();
    for c in 0..CONTENDERS {
        let conn = h.connect(clock.clock()).await;
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let election = bid("maintenance", &format!("pool-{c}"));
            barrier.wait().await;
            let won = elect(&conn, &election).await;
            (election, won)
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.expect("contender"));
    }
    let winners: Vec<&Election> = results.iter().filter(|(_, won)| *won).map(|(e, _)| e).collect();
    assert_eq!(winners.len(), 1, "exactly one contender wins: {results:?}");
    let storage = h.connect(clock.clock()).await;
    for (election, _) in &results {
        assert_eq!(elect(&storage, election).await, election == winners[0], "only the holder renews");
    }
    let metrics = bid("metrics", "sampler");
    assert!(elect(&storage, &metrics).await, "another role is free");
    let expected = vec![
        Leader { role: "maintenance".into(), holder: winners[0].holder.clone(), expires_at: add(clock.now(), TTL) },
        Leader { role: "metrics".into(), holder: "sampler".into(), expires_at: add(clock.now(), TTL) },
    ];
    assert_eq!(leaders(&storage).await, expected);
}

/// The holder renews with its token: the expiry moves to now + ttl, even
/// after it passed (nobody took the role meanwhile).
pub async fn election_renews_with_its_token<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    assert!(leaders(&storage).await.is_empty(), "no role is held at first");
    let holder = bid("maintenance", "a");
    assert!(elect(&storage, &holder).await);
    clock.advance(TTL / 2);
    assert!(elect(&storage, &holder).await);
    assert_eq!(leaders(&storage).await[0].expires_at, add(clock.now(), TTL));
    clock.advance(TTL * 2);
    assert!(elect(&storage, &holder).await, "an expired role nobody took is renewed");
    assert_eq!(leaders(&storage).await[0].expires_at, add(clock.now(), TTL));
}

/// Another token takes the role at exactly its expiry, not a microsecond
/// before, and holds it for its own ttl from then.
pub async fn election_takeover_only_after_expiry<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let other = h.connect(clock.clock()).await;
    let old = bid("maintenance", "old");
    let new = bid("maintenance", "new");
    assert!(elect(&storage, &old).await);
    let expires_at = add(clock.now(), TTL);
    clock.advance(TTL - MICRO);
    assert!(!elect(&other, &new).await, "the role is held until its expiry");
    assert_eq!(leaders(&other).await[0].holder, "old");
    clock.advance(MICRO);
    assert!(elect(&other, &new).await, "expired at expires_at: taken over");
    assert_eq!(
        leaders(&other).await[0],
        Leader { role: "maintenance".into(), holder: "new".into(), expires_at: add(expires_at, TTL) }
    );
}

/// A holder that stopped renewing (a paused process) and was taken over
/// cannot renew when it wakes up, and its resign frees nothing.
pub async fn stale_holder_cannot_renew_after_takeover<H: Harness>(h: &H) {
    let clock = manual_clock();
    let stale = h.connect(clock.clock()).await;
    let storage = h.connect(clock.clock()).await;
    let old = bid("maintenance", "old");
    let new = bid("maintenance", "new");
    assert!(elect(&stale, &old).await);
    clock.advance(TTL);
    assert!(elect(&storage, &new).await);
    assert!(!elect(&stale, &old).await, "a stale holder cannot renew after a takeover");
    stale.require_roles().expect("roles").resign("maintenance", old.token).await.expect("resign");
    assert_eq!(leaders(&storage).await[0].holder, "new", "a stale holder's resign frees nothing");
    clock.advance(TTL - MICRO);
    assert!(!elect(&stale, &old).await, "still held by the new holder");
    assert!(elect(&storage, &new).await, "the new holder renews");
}

/// resign frees the role at once for another token; resigning a role one
/// does not hold, or nobody holds, does nothing. Bad roles and a zero ttl
/// are invalid input.
pub async fn resign_frees_the_role_at_once<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let a = bid("maintenance", "a");
    let b = bid("maintenance", "b");
    storage
        .require_roles()
        .expect("roles")
        .resign("maintenance", a.token)
        .await
        .expect("resigning a free role does nothing");
    assert!(elect(&storage, &a).await);
    assert!(!elect(&storage, &b).await);
    storage.require_roles().expect("roles").resign("maintenance", b.token).await.expect("resign");
    assert_eq!(leaders(&storage).await[0].holder, "a", "only the holder's token resigns");
    storage.require_roles().expect("roles").resign("maintenance", a.token).await.expect("resign");
    assert!(leaders(&storage).await.is_empty(), "a resigned role has no holder");
    assert!(elect(&storage, &b).await, "free at once, long before the expiry");
    assert!(!elect(&storage, &a).await, "the resigned holder is an ordinary contender");

    for role in ["", "a b", "{x}"] {
        let err = storage.require_roles().expect("roles").elect(&bid(role, "a")).await.expect_err("bad role");
        assert!(matches!(err, Error::InvalidInput { .. }), "{role:?}: {err:?}");
    }
    let err = storage.require_roles().expect("roles").resign("a b", a.token).await.expect_err("bad role");
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    let err = storage
        .require_roles()
        .expect("roles")
        .elect(&Election { ttl: Duration::ZERO, ..bid("r", "a") })
        .await
        .expect_err("zero ttl");
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
}
