//! Key limits ([`KeyStorage::set_key_limits`](jq_core::storage::KeyStorage::set_key_limits),
//! `clear_key_limits`, `keys`): rows in `key_limits`,
//! written on the writer and read by every claim that meets a keyed job,
//! inside its transaction, like the queue controls of control.rs. The
//! rotation itself is rotation.rs's.

use jq_core::{KeyInfo, KeyLimit, KeyReport, QueueLimits, QueueName, Result};
use rusqlite::{Connection, OptionalExtension, params};

use crate::control::limits as limits_of;
use crate::error::{db, is_decoding};

const GET: &str = include_str!("sql/keys_limits_get.sql");
const PUT: &str = include_str!("sql/keys_limits_put.sql");
const CLEAR: &str = include_str!("sql/keys_limits_clear.sql");
const LIST: &str = include_str!("sql/keys_limits_list.sql");
const TIDY_STARTS: &str = include_str!("sql/keys_starts_tidy.sql");
const BUSIEST: &str = include_str!("sql/keys_busiest.sql");

/// The key under which a queue's default is stored: a real key is 1 to
/// 255 bytes, never empty.
pub(crate) const DEFAULT_KEY: &str = "";

/// The limits stored for `queue` and `key` ([`DEFAULT_KEY`]: the
/// default); `None` when no row.
pub(crate) fn stored(conn: &Connection, queue: &str, key: &str) -> Result<Option<QueueLimits>> {
    conn.prepare_cached(GET)
        .map_err(db)?
        .query_row(params![queue, key], |r| Ok(limits_of(r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()
        .map_err(db)
}

/// Sets `queue`'s default (`key` `None`) or `key`'s override (checked by
/// the caller). On the writer.
pub(crate) fn set(conn: &Connection, queue: &QueueName, key: Option<&str>, limits: &QueueLimits) -> Result<()> {
    let rate_limit = limits.rate.map(|r| i64::from(r.limit));
    let rate_period = limits.rate.map(|r| r.period_micros());
    let concurrency = limits.concurrency.map(i64::from);
    conn.prepare_cached(PUT)
        .map_err(db)?
        .execute(params![queue.as_str(), key.unwrap_or(DEFAULT_KEY), concurrency, rate_limit, rate_period])
        .map_err(db)?;
    tidy_starts(conn, queue)
}

/// Removes `key`'s override; true when there was one. On the writer.
pub(crate) fn clear(conn: &Connection, queue: &QueueName, key: &str) -> Result<bool> {
    let removed = conn.prepare_cached(CLEAR).map_err(db)?.execute(params![queue.as_str(), key]).map_err(db)? > 0;
    if removed {
        tidy_starts(conn, queue)?;
    }
    Ok(removed)
}

/// Drops the start logs of `queue`'s keys left without a rate: a log is
/// kept only while its key's limits have one (the contract's "Keyed
/// jobs"), so that a rate set again later starts from an empty window.
fn tidy_starts(conn: &Connection, queue: &QueueName) -> Result<()> {
    conn.prepare_cached(TIDY_STARTS).map_err(db)?.execute(params![queue.as_str()]).map_err(db)?;
    Ok(())
}

/// `queue`'s default, overrides and `top` busiest keys. A read.
pub(crate) fn report(conn: &Connection, queue: &QueueName, top: usize) -> Result<KeyReport> {
    let mut default = QueueLimits::none();
    let mut overrides = Vec::new();
    {
        let mut stmt = conn.prepare_cached(LIST).map_err(db)?;
        let mut rows = stmt.query(params![queue.as_str()]).map_err(db)?;
        while let Some(r) = rows.next().map_err(db)? {
            let row = (|| Ok((r.get::<_, String>(0)?, limits_of(r.get(1)?, r.get(2)?, r.get(3)?))))();
            match row {
                Ok((key, limits)) if key == DEFAULT_KEY => default = limits,
                Ok((key, limits)) => overrides.push(KeyLimit { key, limits }),
                Err(error) if is_decoding(&error) => {
                    tracing::error!(queue = %queue, %error, "keys skips a key limit row that cannot be decoded")
                }
                Err(error) => return Err(db(error)),
            }
        }
    }
    let mut busiest = Vec::new();
    if top > 0 {
        let mut stmt = conn.prepare_cached(BUSIEST).map_err(db)?;
        let top = i64::try_from(top).unwrap_or(i64::MAX);
        let mut rows = stmt.query(params![queue.as_str(), top]).map_err(db)?;
        while let Some(r) = rows.next().map_err(db)? {
            let row = (|| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)))();
            match row {
                Ok((key, running, pending)) => {
                    // Overrides are sorted by key (bytes, as `String` orders).
                    let limits = overrides
                        .binary_search_by(|o| o.key.as_str().cmp(key.as_str()))
                        .map_or(default, |i| overrides[i].limits);
                    busiest.push(KeyInfo {
                        key,
                        running: running.max(0) as u64,
                        pending: pending.max(0) as u64,
                        limits,
                    });
                }
                Err(error) if is_decoding(&error) => {
                    tracing::error!(queue = %queue, %error, "keys skips a key that cannot be decoded")
                }
                Err(error) => return Err(db(error)),
            }
        }
    }
    Ok(KeyReport { queue: queue.clone(), default, overrides, busiest })
}
