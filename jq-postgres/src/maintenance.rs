//! Maintenance: promote, recover and purge, each in bounded batches of
//! guarded statements.

use jq_core::{Result, State, Timestamp};

use sqlx::Row;

use crate::Inner;
use crate::error::map_sqlx;
use crate::row::rfc3339;

/// Rows per statement: large enough to be quick, small enough that no
/// statement holds many locks or builds a huge transaction.
pub(crate) const BATCH: i64 = 10_000;

/// Due Scheduled -> Pending.
pub(crate) async fn promote(inner: &Inner) -> Result<u64> {
    let now = inner.clock.now();
    let mut total = 0;
    loop {
        let statement = inner.sql.promote.query().bind(now).bind(BATCH as i32);
        let rows = inner.db().fetch_all(statement).await.map_err(map_sqlx)?;
        let mut earliest = Vec::with_capacity(rows.len());
        for row in &rows {
            let (queue, priority, run_at): (String, i16, Timestamp) = (
                row.try_get(1).map_err(map_sqlx)?,
                row.try_get(2).map_err(map_sqlx)?,
                row.try_get(3).map_err(map_sqlx)?,
            );
            earliest.push((queue, priority, run_at));
        }
        inner.hints.arrived(earliest.iter().map(|(q, p, r)| (q.as_str(), *p, *r)));
        let moved = match rows.first() {
            Some(row) => u64::try_from(row.try_get::<i64, _>(0).map_err(map_sqlx)?).unwrap_or(0),
            None => 0,
        };
        total += moved;
        if moved < BATCH as u64 {
            return Ok(total);
        }
    }
}

/// Expired leases -> Pending (or Dead without attempts left).
pub(crate) async fn recover(inner: &Inner) -> Result<u64> {
    let now = inner.clock.now();
    let text = rfc3339(now);
    let after = inner.recover_start.begin(now);
    let mut total = 0;
    loop {
        let statement =
            inner.sql.recover.query().bind(now).bind(BATCH as i32).bind(&text).bind(after).bind(&inner.channel);
        let rows = inner.db().fetch_all(statement).await.map_err(map_sqlx)?;
        // Pending again at now: a key a claim of this storage may have
        // passed already.
        let mut earliest = Vec::with_capacity(rows.len());
        for row in &rows {
            let key: (Option<String>, Option<i16>, Option<Timestamp>) = (
                row.try_get(1).map_err(map_sqlx)?,
                row.try_get(2).map_err(map_sqlx)?,
                row.try_get(3).map_err(map_sqlx)?,
            );
            if let (Some(queue), Some(priority), Some(run_at)) = key {
                earliest.push((queue, priority, run_at));
            }
        }
        inner.hints.arrived(earliest.iter().map(|(q, p, r)| (q.as_str(), *p, *r)));
        let moved = match rows.first() {
            Some(row) => u64::try_from(row.try_get::<i64, _>(0).map_err(map_sqlx)?).unwrap_or(0),
            None => 0,
        };
        total += moved;
        if moved < BATCH as u64 {
            inner.recover_start.finish(now);
            if total > 0 {
                tracing::info!(schema = inner.schema, recovered = total, "recovered jobs with expired leases");
            }
            return Ok(total);
        }
    }
}

/// Deletes jobs in terminal `state` finished before `older_than`.
pub(crate) async fn purge(inner: &Inner, state: State, older_than: Timestamp) -> Result<u64> {
    jq_core::storage::check_purge_state(state)?;
    let mut total = 0;
    loop {
        let statement = inner.sql.purge.query().bind(state.as_str()).bind(older_than).bind(BATCH);
        let row = inner.db().fetch_optional(statement).await.map_err(map_sqlx)?;
        let deleted: i64 = match row {
            Some(row) => row.try_get(0).map_err(map_sqlx)?,
            None => 0,
        };
        let deleted = u64::try_from(deleted).unwrap_or(0);
        total += deleted;
        if deleted < BATCH as u64 {
            return Ok(total);
        }
    }
}
