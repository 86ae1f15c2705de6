//! Queue controls ([`ControlStorage::set_paused`](jq_core::storage::ControlStorage::set_paused),
//! `set_limits`, `queues`): rows in `queue_controls`.
//!
//! A claim over queues without a row keeps its one statement
//! (`sql/claim.sql`), which checks the table by primary key and, when an
//! asked queue is controlled, takes nothing and names it. Such a claim then
//! runs in a transaction: lock the asked queues' controls
//! (`sql/control_lock.sql`), then one statement that computes each queue's
//! allowance from what earlier claims committed and claims within it
//! (`sql/claim_controlled.sql`). A storage remembers which queues it last
//! found controlled and goes to the transaction at once for them (and
//! which it found keyed, for `sql/claim_keyed.sql`: `keyed.rs`).

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use jq_core::storage::ClaimRequest;
use jq_core::{QueueInfo, QueueLimits, QueueName, Rate, Result, Seen, Timestamp};
use sqlx::Row;
use sqlx::postgres::PgRow;

use crate::Inner;
use crate::error::map_sqlx;

/// The queues this storage last found controlled, and those it last found
/// holding keyed jobs (`keyed.rs`): claims over them take the locked paths.
#[derive(Debug, Default)]
pub(crate) struct Controlled(Mutex<Marks>);

/// What the last claims found, per queue.
#[derive(Debug, Default)]
struct Marks {
    controlled: HashSet<String>,
    keyed: HashSet<String>,
}

/// Where a claim goes, from what the last claims over its queues found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// `sql/claim.sql`: no asked queue was controlled or keyed.
    Plain,
    /// `sql/claim_keyed.sql`: one was keyed, none controlled.
    Keyed,
    /// This module's transaction: one was controlled.
    Controlled,
}

impl Controlled {
    /// The path of a claim over `queues`.
    pub(crate) fn path(&self, queues: &[&str]) -> Path {
        let Ok(marks) = self.0.lock() else { return Path::Plain };
        if !marks.controlled.is_empty() && queues.iter().any(|q| marks.controlled.contains(*q)) {
            Path::Controlled
        } else if !marks.keyed.is_empty() && queues.iter().any(|q| marks.keyed.contains(*q)) {
            Path::Keyed
        } else {
            Path::Plain
        }
    }

    /// Records what a claim over `asked` found: `controlled` of them are,
    /// and `keyed` of them hold keyed jobs.
    pub(crate) fn found(&self, asked: &[&str], controlled: &[String], keyed: &[String]) {
        if let Ok(mut marks) = self.0.lock() {
            for q in asked {
                marks.controlled.remove(*q);
                marks.keyed.remove(*q);
            }
            marks.controlled.extend(controlled.iter().cloned());
            marks.keyed.extend(keyed.iter().cloned());
        }
    }
}

/// Claims over queues one of which is controlled or holds keyed jobs:
/// lock the controls, then the keyed queues (`sql/control_lock.sql`), then
/// claim, in one transaction. Returns the claimed rows (committed), the
/// asked queues found controlled, and those found keyed.
pub(crate) async fn claim_rows(
    inner: &Inner,
    request: &ClaimRequest,
    queues: &[&str],
    now: Timestamp,
    expires_at: Timestamp,
) -> Result<(Vec<PgRow>, Vec<String>, Vec<String>)> {
    let limit = i32::try_from(request.limit).unwrap_or(i32::MAX);
    // On the claims' own connections, as the plain claim: a keyed claim's
    // functions are compiled and planned once per connection, and these
    // few stay warm. Generic plans (pooler.rs), as there.
    let mut tx = inner.claims_db().begin_generic().await.map_err(map_sqlx)?;
    // The controls, then the queues with keyed jobs, each under its key
    // lock (keyed.rs), in one statement.
    let locked = inner.sql.control_lock.query().bind(queues).fetch_all(&mut *tx).await.map_err(map_sqlx)?;
    let mut controlled: Vec<String> = Vec::new();
    let mut keyed: Vec<String> = Vec::new();
    for row in &locked {
        let queue: String = row.try_get(0).map_err(map_sqlx)?;
        if row.try_get::<bool, _>(1).map_err(map_sqlx)? { keyed.push(queue) } else { controlled.push(queue) }
    }
    let rows = inner
        .sql
        .claim_controlled
        .query()
        .bind(queues)
        .bind(limit)
        .bind(now)
        .bind(&request.worker)
        .bind(expires_at)
        .bind(request.token.0)
        .bind(jq_core::storage::seen_forgotten_at(now))
        .bind(&keyed)
        .fetch_all(&mut *tx)
        .await
        .map_err(map_sqlx)?;
    tx.commit().await.map_err(map_sqlx)?;
    Ok((rows, controlled, keyed))
}

/// Pauses or resumes `queue`; a resume wakes idle workers (NOTIFY).
pub(crate) async fn set_paused(inner: &Inner, queue: &QueueName, paused: bool) -> Result<()> {
    let at = paused.then(|| inner.clock.now());
    let write = inner.sql.control_pause.query().bind(queue.as_str()).bind(at).bind(&inner.channel);
    write_control(inner, queue, write).await
}

/// Replaces `queue`'s limits and wakes idle workers.
pub(crate) async fn set_limits(inner: &Inner, queue: &QueueName, limits: &QueueLimits) -> Result<()> {
    limits.check()?;
    let concurrency = limits.concurrency.map(|n| i32::try_from(n).unwrap_or(i32::MAX));
    let rate_limit = limits.rate.map(|r| i32::try_from(r.limit).unwrap_or(i32::MAX));
    let rate_period = limits.rate.map(|r| r.period_micros());
    let write = inner
        .sql
        .control_limits
        .query()
        .bind(queue.as_str())
        .bind(concurrency)
        .bind(rate_limit)
        .bind(rate_period)
        .bind(&inner.channel);
    write_control(inner, queue, write).await
}

/// Runs one write of `queue`'s control row, then drops the row if it no
/// longer controls anything, in one transaction.
async fn write_control(
    inner: &Inner,
    queue: &QueueName,
    write: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
) -> Result<()> {
    let mut tx = inner.db().begin().await.map_err(map_sqlx)?;
    write.execute(&mut *tx).await.map_err(map_sqlx)?;
    inner.sql.control_tidy.query().bind(queue.as_str()).execute(&mut *tx).await.map_err(map_sqlx)?;
    tx.commit().await.map_err(map_sqlx)
}

/// Every queue with a job or a control, by name.
pub(crate) async fn queues(inner: &Inner) -> Result<Vec<QueueInfo>> {
    let forgotten = jq_core::storage::seen_forgotten_at(inner.clock.now());
    let seen_rows = inner.db().fetch_all(inner.sql.control_seen.query().bind(forgotten)).await.map_err(map_sqlx)?;
    let mut seen: BTreeMap<String, Vec<Seen>> = BTreeMap::new();
    for r in &seen_rows {
        let queue: String = r.try_get(0).map_err(map_sqlx)?;
        let entry = Seen {
            worker: r.try_get(1).map_err(map_sqlx)?,
            at: r.try_get(2).map_err(map_sqlx)?,
            paused: r.try_get(3).map_err(map_sqlx)?,
        };
        seen.entry(queue).or_default().push(entry);
    }
    let rows = inner.db().fetch_all(inner.sql.control_list.query()).await.map_err(map_sqlx)?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let name: String = r.try_get(0).map_err(map_sqlx)?;
        let Ok(queue) = QueueName::new(&name) else {
            tracing::error!(queue = %name, "queues skips a queue name jq cannot read (a corrupt row)");
            continue;
        };
        let concurrency: Option<i32> = r.try_get(2).map_err(map_sqlx)?;
        let rate_limit: Option<i32> = r.try_get(3).map_err(map_sqlx)?;
        let rate_period: Option<i64> = r.try_get(4).map_err(map_sqlx)?;
        let limits = QueueLimits {
            concurrency: concurrency.and_then(|n| u32::try_from(n).ok()),
            rate: rate_limit.zip(rate_period).and_then(|(n, p)| {
                Some(Rate::new(u32::try_from(n).ok()?, Duration::from_micros(u64::try_from(p).ok()?)))
            }),
        };
        out.push(QueueInfo {
            paused_at: r.try_get(1).map_err(map_sqlx)?,
            limits,
            seen: seen.remove(&name).unwrap_or_default(),
            queue,
        });
    }
    Ok(out)
}
