//! Queue controls ([`ControlStorage::set_paused`](jq_core::storage::ControlStorage::set_paused),
//! `set_limits`, `queues`): rows in `queue_controls`, read by every claim
//! on the writer, inside its transaction, so a pause or a limit is checked
//! in the claim's atomic step and holds across every process sharing the
//! file.

use std::collections::BTreeMap;
use std::time::Duration;

use jq_core::storage::from_micros;
use jq_core::storage::{Limited, allowance, held_by};
use jq_core::{Priority, QueueInfo, QueueLimits, QueueName, Rate, Result, Seen, Timestamp};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, params};

use crate::error::{db, is_decoding};

const GET: &str = include_str!("sql/control_get.sql");
const RUNNING: &str = include_str!("sql/control_running.sql");
const STARTED: &str = include_str!("sql/control_started.sql");
const FORGET: &str = include_str!("sql/control_forget.sql");
const START: &str = include_str!("sql/control_start.sql");
const SEEN: &str = include_str!("sql/control_seen.sql");
const PAUSE: &str = include_str!("sql/control_pause.sql");
const LIMITS: &str = include_str!("sql/control_limits.sql");
const TIDY: &str = include_str!("sql/control_tidy.sql");
const LIST: &str = include_str!("sql/control_list.sql");
const SEEN_LIST: &str = include_str!("sql/control_seen_list.sql");
const SEEN_FORGET: &str = include_str!("sql/control_seen_forget.sql");

/// A queue's stored control.
#[derive(Clone, Copy, Debug, Default)]
struct Stored {
    paused_at: Option<i64>,
    limits: QueueLimits,
}

/// Limits as stored (NULL: no such limit; a value out of range reads as
/// none, as a corrupt row must not stop the queue). Key limits are stored
/// the same way (keyed.rs).
pub(crate) fn limits(concurrency: Option<i64>, rate_limit: Option<i64>, rate_period: Option<i64>) -> QueueLimits {
    QueueLimits {
        concurrency: concurrency.and_then(|n| u32::try_from(n).ok()),
        rate: rate_limit
            .zip(rate_period)
            .and_then(|(n, p)| Some(Rate::new(u32::try_from(n).ok()?, Duration::from_micros(u64::try_from(p).ok()?)))),
    }
}

/// `queue`'s stored control, if any, and the highest priority at which it
/// holds a keyed job waiting to run (control_get.sql: one statement).
fn stored(conn: &Connection, queue: &str) -> Result<(Option<Stored>, Option<Priority>)> {
    conn.prepare_cached(GET)
        .map_err(db)?
        .query_row(params![queue], |r| {
            let control = match r.get::<_, bool>(0)? {
                true => Some(Stored { paused_at: r.get(1)?, limits: limits(r.get(2)?, r.get(3)?, r.get(4)?) }),
                false => None,
            };
            // A value no priority has (a corrupt row) reads as the
            // highest: the rotation then walks every priority.
            let keyed = match r.get_ref(5)? {
                ValueRef::Null => None,
                p => Some(
                    p.as_i64()
                        .ok()
                        .and_then(|p| Priority::ALL.into_iter().find(|q| i64::from(q.as_i16()) == p))
                        .unwrap_or(Priority::Critical),
                ),
            };
            Ok((control, keyed))
        })
        .map_err(db)
}

/// What one claim may take from one queue.
pub(crate) struct Allowance {
    /// Jobs it may take.
    pub(crate) allow: usize,
    /// True when starts are to be recorded (a rate limit).
    rated: bool,
    /// The queue's limits, its Running jobs and its starts in the window
    /// before this claim, and the oldest of those starts: what
    /// [`Allowance::held_after`] reads. `None` without a control or while
    /// paused (a pause holds nothing back: resume wakes the claimers).
    load: Option<(QueueLimits, u64, u64, Option<i64>)>,
    /// The highest priority at which the queue holds a keyed job waiting
    /// to run, `None` when it holds none: read with the control, so the
    /// claim knows whether it needs a rotation (rotation.rs) without a
    /// statement of its own.
    pub(crate) keyed: Option<Priority>,
}

/// The allowance of `queue` for a claim of `want` jobs by `worker` at
/// `now`, recording that the worker met the control. On the writer,
/// inside the claim's transaction. A queue with no control costs one
/// primary-key lookup.
pub(crate) fn allowance_of(
    conn: &Connection,
    queue: &QueueName,
    worker: &str,
    want: usize,
    now: Timestamp,
) -> Result<Allowance> {
    let (control, keyed) = stored(conn, queue.as_str())?;
    let Some(control) = control else {
        return Ok(Allowance { allow: want, rated: false, keyed, load: None });
    };
    let now_us = now.timestamp_micros();
    let paused = control.paused_at.is_some();
    conn.prepare_cached(SEEN).map_err(db)?.execute(params![queue.as_str(), worker, now_us, paused]).map_err(db)?;
    let forgotten = jq_core::storage::seen_forgotten_at(now).timestamp_micros();
    conn.prepare_cached(SEEN_FORGET).map_err(db)?.execute(params![queue.as_str(), forgotten, worker]).map_err(db)?;
    let running: i64 = match control.limits.concurrency {
        Some(_) if !paused => {
            conn.prepare_cached(RUNNING).map_err(db)?.query_row(params![queue.as_str()], |r| r.get(0)).map_err(db)?
        }
        _ => 0,
    };
    let (started, oldest): (i64, Option<i64>) = match control.limits.rate {
        Some(rate) if !paused => {
            let after = rate.window_after(now).timestamp_micros();
            conn.prepare_cached(FORGET).map_err(db)?.execute(params![queue.as_str(), after]).map_err(db)?;
            conn.prepare_cached(STARTED)
                .map_err(db)?
                .query_row(params![queue.as_str(), after], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(db)?
        }
        _ => (0, None),
    };
    let (running, started) = (running.max(0) as u64, started.max(0) as u64);
    let allow = allowance(paused, &control.limits, running, started, want);
    let load = (!paused).then_some((control.limits, running, started, oldest));
    Ok(Allowance { allow, rated: control.limits.rate.is_some(), keyed, load })
}

impl Allowance {
    /// What the queue's own limits hold back after a claim that took
    /// `taken` of its jobs at `now_us` ([`held_by`]); `None` without a
    /// control, while paused, or when they allow one more.
    pub(crate) fn held_after(&self, taken: usize, now_us: i64) -> Option<Limited> {
        let (limits, running, started, oldest) = self.load?;
        let taken = taken as u64;
        let started = if self.rated { started + taken } else { started };
        let oldest = oldest.or((taken > 0).then_some(now_us));
        held_by(&limits, running + taken, started, oldest.map(from_micros))
    }
}

/// Records `n` starts of `queue` at `now` when it is rate limited.
pub(crate) fn started(
    conn: &Connection,
    queue: &QueueName,
    allowance: &Allowance,
    n: usize,
    now: Timestamp,
) -> Result<()> {
    if allowance.rated && n > 0 {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        conn.prepare_cached(START)
            .map_err(db)?
            .execute(params![queue.as_str(), now.timestamp_micros(), n])
            .map_err(db)?;
    }
    Ok(())
}

/// Pauses or resumes `queue`. On the writer.
pub(crate) fn set_paused(conn: &Connection, queue: &QueueName, paused: bool, now: Timestamp) -> Result<()> {
    let at = paused.then(|| now.timestamp_micros());
    conn.prepare_cached(PAUSE).map_err(db)?.execute(params![queue.as_str(), at]).map_err(db)?;
    conn.prepare_cached(TIDY).map_err(db)?.execute(params![queue.as_str()]).map_err(db)?;
    Ok(())
}

/// Replaces `queue`'s limits (checked by the caller). On the writer.
pub(crate) fn set_limits(conn: &Connection, queue: &QueueName, limits: &QueueLimits) -> Result<()> {
    let rate_limit = limits.rate.map(|r| i64::from(r.limit));
    let rate_period = limits.rate.map(|r| r.period_micros());
    let concurrency = limits.concurrency.map(i64::from);
    conn.prepare_cached(LIMITS)
        .map_err(db)?
        .execute(params![queue.as_str(), concurrency, rate_limit, rate_period])
        .map_err(db)?;
    conn.prepare_cached(TIDY).map_err(db)?.execute(params![queue.as_str()]).map_err(db)?;
    Ok(())
}

/// Every queue with a job or a control, by name, at `now`.
pub(crate) fn queues(conn: &Connection, now: Timestamp) -> Result<Vec<QueueInfo>> {
    let mut seen: BTreeMap<String, Vec<Seen>> = BTreeMap::new();
    {
        let mut stmt = conn.prepare_cached(SEEN_LIST).map_err(db)?;
        let forgotten = jq_core::storage::seen_forgotten_at(now).timestamp_micros();
        let mut rows = stmt.query(params![forgotten]).map_err(db)?;
        while let Some(r) = rows.next().map_err(db)? {
            let entry = (|| {
                let queue: String = r.get(0)?;
                Ok((queue, Seen { worker: r.get(1)?, at: from_micros(r.get(2)?), paused: r.get(3)? }))
            })();
            match entry {
                Ok((queue, entry)) => seen.entry(queue).or_default().push(entry),
                Err(error) if is_decoding(&error) => {
                    tracing::error!(%error, "queues skips a claimer row that cannot be decoded")
                }
                Err(error) => return Err(db(error)),
            }
        }
    }
    let mut stmt = conn.prepare_cached(LIST).map_err(db)?;
    let mut rows = stmt.query([]).map_err(db)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next().map_err(db)? {
        let name: String = r.get(0).map_err(db)?;
        let Ok(queue) = QueueName::new(&name) else {
            tracing::error!(queue = %name, "queues skips a queue name jq cannot read (a corrupt row)");
            continue;
        };
        let control = (|| Ok((r.get::<_, Option<i64>>(1)?, limits(r.get(2)?, r.get(3)?, r.get(4)?))))();
        let (paused_at, limits) = match control {
            Ok(control) => control,
            Err(error) if is_decoding(&error) => {
                tracing::error!(queue = %name, %error, "queues skips a queue whose control row cannot be decoded");
                continue;
            }
            Err(error) => return Err(db(error)),
        };
        out.push(QueueInfo {
            paused_at: paused_at.map(from_micros),
            limits,
            seen: seen.remove(&name).unwrap_or_default(),
            queue,
        });
    }
    Ok(out)
}
