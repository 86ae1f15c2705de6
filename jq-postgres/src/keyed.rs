//! Keyed jobs ([`KeyStorage`](jq_core::storage::KeyStorage)): per-key
//! limits in `key_limits`, the rotation's cursors in `key_cursors`, the
//! starts of rate-limited keys in `key_starts`.
//!
//! A claim over queues without keyed waiting jobs keeps its one statement
//! (`sql/claim.sql`), which probes `jobs_keyed` once per asked queue. When
//! one has keyed jobs and none is controlled, the claim is one autocommit
//! statement too (`sql/claim_keyed.sql`, on the claims' own connections),
//! calling `jq_claim_keyed_take` (`src/functions/`): it takes an advisory
//! lock per keyed queue, hands the choice to `jq_claim_keyed` (a few
//! statements per keyed queue and claim; `jq_key_turns` reads `jobs_keyed`
//! from the cursor a page of keys at a time), then moves the picks to
//! Running: the model's rotation and limits, in the claim's atomic step.
//! The common claim is one statement after the locks (one queue whose
//! waiting jobs are all keyed, default limits without a rate, no
//! override): round one of the rotation, locked and updated together; any
//! other claim, or one that statement cannot finish alone, still goes
//! through `jq_claim_keyed`. With a controlled queue among them, the claim
//! runs in the controls' transaction (`control.rs`): the same locks
//! (`sql/control_lock.sql`) and `jq_claim_keyed` through
//! `sql/claim_controlled.sql`.

use std::time::Duration;

use jq_core::storage::check_key;
use jq_core::{KeyInfo, KeyLimit, KeyReport, QueueLimits, QueueName, Rate, Result};
use sqlx::Row;

use crate::Inner;
use crate::error::map_sqlx;

/// The stored key of a queue's default limits: no job key is empty.
const DEFAULT: &str = "";

/// Sets the default (`None`) or `key`'s override, and wakes idle workers.
pub(crate) async fn set_limits(
    inner: &Inner,
    queue: &QueueName,
    key: Option<&str>,
    limits: &QueueLimits,
) -> Result<()> {
    limits.check()?;
    if let Some(key) = key {
        check_key(key)?;
    }
    let concurrency = limits.concurrency.map(|n| i32::try_from(n).unwrap_or(i32::MAX));
    let rate_limit = limits.rate.map(|r| i32::try_from(r.limit).unwrap_or(i32::MAX));
    let rate_period = limits.rate.map(|r| r.period_micros());
    let statement = inner
        .sql
        .key_limits_set
        .query()
        .bind(queue.as_str())
        .bind(key.unwrap_or(DEFAULT))
        .bind(concurrency)
        .bind(rate_limit)
        .bind(rate_period)
        .bind(&inner.channel);
    inner.db().execute(statement).await.map_err(map_sqlx)?;
    Ok(())
}

/// Removes `key`'s override (wakes idle workers when there was one).
pub(crate) async fn clear_limits(inner: &Inner, queue: &QueueName, key: &str) -> Result<()> {
    check_key(key)?;
    let statement = inner.sql.key_limits_clear.query().bind(queue.as_str()).bind(key).bind(&inner.channel);
    inner.db().execute(statement).await.map_err(map_sqlx)?;
    Ok(())
}

/// `queue`'s default, overrides and `top` busiest keys.
pub(crate) async fn report(inner: &Inner, queue: &QueueName, top: usize) -> Result<KeyReport> {
    let rows = inner.db().fetch_all(inner.sql.key_limits_list.query().bind(queue.as_str())).await.map_err(map_sqlx)?;
    let mut default = QueueLimits::none();
    let mut overrides = Vec::new();
    for row in &rows {
        let key: String = row.try_get(0).map_err(map_sqlx)?;
        let concurrency: Option<i32> = row.try_get(1).map_err(map_sqlx)?;
        let rate_limit: Option<i32> = row.try_get(2).map_err(map_sqlx)?;
        let rate_period: Option<i64> = row.try_get(3).map_err(map_sqlx)?;
        let limits = QueueLimits {
            concurrency: concurrency.and_then(|n| u32::try_from(n).ok()),
            rate: rate_limit.zip(rate_period).and_then(|(n, p)| {
                Some(Rate::new(u32::try_from(n).ok()?, Duration::from_micros(u64::try_from(p).ok()?)))
            }),
        };
        if key == DEFAULT {
            default = limits;
        } else {
            overrides.push(KeyLimit { key, limits });
        }
    }
    let top_i64 = i64::try_from(top).unwrap_or(i64::MAX);
    let rows = inner
        .db()
        .fetch_all(inner.sql.key_busiest.query().bind(queue.as_str()).bind(top_i64))
        .await
        .map_err(map_sqlx)?;
    let mut busiest = Vec::with_capacity(rows.len());
    for row in &rows {
        let key: String = row.try_get(0).map_err(map_sqlx)?;
        let running: i64 = row.try_get(1).map_err(map_sqlx)?;
        let pending: i64 = row.try_get(2).map_err(map_sqlx)?;
        // `overrides` is in key order (the statement's ORDER BY, bytes).
        let limits = overrides
            .binary_search_by(|o: &KeyLimit| o.key.as_bytes().cmp(key.as_bytes()))
            .map_or(default, |i| overrides[i].limits);
        busiest.push(KeyInfo {
            key,
            running: u64::try_from(running).unwrap_or(0),
            pending: u64::try_from(pending).unwrap_or(0),
            limits,
        });
    }
    Ok(KeyReport { queue: queue.clone(), default, overrides, busiest })
}
