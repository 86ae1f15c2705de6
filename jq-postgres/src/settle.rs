//! Settle (ack, nack, bury, release, cancel) and heartbeat: one guarded UPDATE
//! per batch, from `unnest` arrays. A batch one of whose rows the server
//! refuses is applied item by item, so the bad item fails alone.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use jq_core::storage::{Beat, LeaseRef, Outcome, Settled, Settlement, add, storable_message, truncate_micros};
use jq_core::{Error, JobId, Result, State};
use sqlx::Row;
use uuid::Uuid;

use crate::Inner;
use crate::error::{is_row_specific, map_sqlx};
use crate::row::{decode_state, rfc3339};

/// Applies `batch`; one round trip unless the batch names a job twice.
///
/// Items of one job apply in batch order: the first that holds the current
/// token applies and clears the lease, so any later item of that job is
/// stale. A batch that names a job twice is therefore sent in rounds, each
/// with at most one item per job.
pub(crate) async fn settle(inner: &Inner, batch: Vec<Settlement>) -> Result<Vec<Settled>> {
    let mut results: Vec<Option<Settled>> = (0..batch.len()).map(|_| None).collect();
    let mut todo: Vec<usize> = (0..batch.len()).collect();
    let mut applied: HashSet<JobId> = HashSet::new();
    while !todo.is_empty() {
        let mut seen: HashSet<JobId> = HashSet::new();
        let mut round = Vec::new();
        let mut later = Vec::new();
        for i in todo {
            let id = batch[i].lease.id;
            if applied.contains(&id) {
                results[i] = Some(Err(Error::LeaseLost { id }));
            } else if seen.insert(id) {
                round.push(i);
            } else {
                later.push(i);
            }
        }
        let states = match apply(inner, &batch, &round).await {
            Ok(states) => states,
            Err(Failed::Store(e)) => return Err(e),
            Err(Failed::Row(e)) if round.len() == 1 => {
                refused(&batch, round[0], e, &mut results);
                HashMap::new()
            }
            Err(Failed::Row(e)) => {
                // One row refused the statement (a value PostgreSQL cannot
                // store, an operator's constraint): sent again whole, the
                // batch would fail forever. Apply the items one by one, so
                // only the bad one fails, at its place.
                tracing::warn!(error = %e, items = round.len(), "a batch of outcomes was refused; applying them one by one");
                let mut states = HashMap::with_capacity(round.len());
                for &i in &round {
                    match apply(inner, &batch, &[i]).await {
                        Ok(one) => states.extend(one),
                        Err(Failed::Store(e)) => return Err(e),
                        Err(Failed::Row(e)) => refused(&batch, i, e, &mut results),
                    }
                }
                states
            }
        };
        for i in round {
            if results[i].is_some() {
                continue;
            }
            let id = batch[i].lease.id;
            results[i] = Some(match states.get(&id.0) {
                Some(state) => {
                    applied.insert(id);
                    Ok(*state)
                }
                None => Err(Error::LeaseLost { id }),
            });
        }
        todo = later;
    }
    Ok(results.into_iter().map(|r| r.unwrap_or_else(|| Err(Error::invalid("settlement", "not processed")))).collect())
}

/// Item `i`'s row refused its outcome: the item gets the error, logged.
fn refused(batch: &[Settlement], i: usize, e: sqlx::Error, results: &mut [Option<Settled>]) {
    let id = batch[i].lease.id;
    tracing::error!(job = %id, error = %e, "outcome not recorded: the job's row refused it");
    results[i] = Some(Err(map_sqlx(e)));
}

/// Why a statement of [`apply`] failed.
enum Failed {
    /// The server refused the statement for one of its rows' sake
    /// ([`is_row_specific`]): nothing changed, and the items apart may apply.
    Row(sqlx::Error),
    /// Anything else: the call fails.
    Store(Error),
}

impl From<Error> for Failed {
    fn from(e: Error) -> Self {
        Failed::Store(e)
    }
}

/// One statement for the items `round` of `batch` (distinct jobs); returns
/// the new state of each job it changed.
async fn apply(
    inner: &Inner,
    batch: &[Settlement],
    round: &[usize],
) -> std::result::Result<HashMap<Uuid, State>, Failed> {
    if round.is_empty() {
        return Ok(HashMap::new());
    }
    // Rows are locked in the order of the input arrays: sorted by id here
    // and in the heartbeat, a settle and a heartbeat over the same jobs
    // lock them in the same order and cannot deadlock (they did, seen in
    // the fan-in benchmark, each losing a round to `deadlock detected`).
    let mut sorted = round.to_vec();
    sorted.sort_unstable_by_key(|&i| batch[i].lease.id.0);
    let round = sorted.as_slice();
    let now = inner.clock.now();
    let n = round.len();
    let mut ids = Vec::with_capacity(n);
    let mut tokens = Vec::with_capacity(n);
    let mut ops: Vec<i16> = Vec::with_capacity(n);
    let mut errors: Vec<Option<Cow<'_, str>>> = Vec::with_capacity(n);
    let mut run_ats: Vec<DateTime<Utc>> = Vec::with_capacity(n);
    let mut requeue: Vec<&'static str> = Vec::with_capacity(n);
    for &i in round {
        let c = &batch[i];
        ids.push(c.lease.id.0);
        tokens.push(c.lease.token.0);
        let (op, error, delay) = match &c.outcome {
            // An AckWith's result goes in the results array below.
            Outcome::Ack | Outcome::AckWith { .. } => (0, None, Duration::ZERO),
            Outcome::Nack { error, delay } => (1, Some(storable_message(error)), *delay),
            Outcome::Bury { error } => (2, Some(storable_message(error)), Duration::ZERO),
            Outcome::Release { delay } => (3, None, *delay),
            Outcome::Cancel => (4, None, Duration::ZERO),
        };
        ops.push(op);
        errors.push(error);
        run_ats.push(truncate_micros(add(now, delay)));
        requeue.push(if delay.is_zero() { State::Pending.as_str() } else { State::Scheduled.as_str() });
    }
    let errors: Vec<Option<&str>> = errors.iter().map(|e| e.as_deref()).collect();
    // Batches without a result run the plain statement, unchanged.
    let stored = crate::workflow::results_of(batch, round);
    let sql = if stored.is_some() { &inner.sql.settle_results } else { &inner.sql.settle };
    let statement = sql
        .query()
        .bind(&ids)
        .bind(&tokens)
        .bind(&ops)
        .bind(&errors)
        .bind(&run_ats)
        .bind(&requeue)
        .bind(now)
        .bind(rfc3339(now))
        .bind(&inner.channel);
    let statement = match &stored {
        Some(stored) => statement.bind(stored),
        None => statement,
    };
    let rows = inner
        .db()
        .fetch_all(statement)
        .await
        .map_err(|e| if is_row_specific(&e) { Failed::Row(e) } else { Failed::Store(map_sqlx(e)) })?;
    let mut states = HashMap::with_capacity(rows.len());
    let mut requeued: Vec<(String, i16, DateTime<Utc>)> = Vec::new();
    for row in &rows {
        let id: Uuid = row.try_get(0).map_err(map_sqlx)?;
        let state: String = row.try_get(1).map_err(map_sqlx)?;
        let state = decode_state(JobId(id), &state)?;
        if state == State::Pending {
            requeued.push((
                row.try_get(2).map_err(map_sqlx)?,
                row.try_get(3).map_err(map_sqlx)?,
                row.try_get(4).map_err(map_sqlx)?,
            ));
        }
        states.insert(id, state);
    }
    // Pending again at now, a key a claim may already have passed.
    if !requeued.is_empty() {
        inner.hints.arrived(requeued.iter().map(|(q, p, r)| (q.as_str(), *p, *r)));
    }
    Ok(states)
}

/// Extends the leases still held; returns the ids of the others, and of
/// those holding a cancel request.
pub(crate) async fn heartbeat(inner: &Inner, leases: &[LeaseRef], lease: Duration) -> Result<Beat> {
    if leases.is_empty() {
        return Ok(Beat::default());
    }
    let now = inner.clock.now();
    // In id order, as the settle: see `apply`.
    let mut sorted: Vec<&LeaseRef> = leases.iter().collect();
    sorted.sort_unstable_by_key(|l| l.id.0);
    let ids: Vec<Uuid> = sorted.iter().map(|l| l.id.0).collect();
    let tokens: Vec<Uuid> = sorted.iter().map(|l| l.token.0).collect();
    let statement = inner.sql.heartbeat.query().bind(&ids).bind(&tokens).bind(truncate_micros(add(now, lease)));
    let rows = inner.db().fetch_all(statement).await.map_err(map_sqlx)?;
    let mut held: HashSet<(Uuid, Uuid)> = HashSet::with_capacity(rows.len());
    let mut cancel = Vec::new();
    for row in &rows {
        let id: Uuid = row.try_get(0).map_err(map_sqlx)?;
        held.insert((id, row.try_get(1).map_err(map_sqlx)?));
        if row.try_get::<bool, _>(2).map_err(map_sqlx)? {
            cancel.push(JobId(id));
        }
    }
    let lost = leases.iter().filter(|l| !held.contains(&(l.id.0, l.token.0))).map(|l| l.id).collect();
    Ok(Beat { lost, cancel })
}
