//! Enqueue of jobs with a unique rule (debounce, unique for a period,
//! replace; the contract's "Unique rules"): per job of the batch, in one
//! transaction, an advisory lock on the (queue, unique key), a read of its
//! holders, jq's own decision ([`decide`]), then one update or insert. A
//! batch without a rule never comes here (`enqueue.rs`): the plain path is
//! one statement, as before.

use std::time::Instant;

use chrono::{DateTime, Utc};
use jq_core::storage::{Decision, Holder, decide, sub};
use jq_core::{Error, JobId, NewJob, Result, State, UniqueRule};
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use crate::Inner;
use crate::error::{BACKEND, map_sqlx};

/// How often one job's decision is taken again when a concurrent claim or
/// plain enqueue changed its key's holders between the read and the write
/// (each retry reads what that writer committed).
const ATTEMPTS: usize = 16;

/// Where a stored or changed job now waits, for the claim positions.
type Arrival = (String, i16, DateTime<Utc>);

/// True when a job of the batch has a unique rule.
pub(crate) fn any(jobs: &[NewJob]) -> bool {
    jobs.iter().any(|j| j.unique_rule.is_some())
}

/// Checks every job before anything is written, as the plain path does.
fn check(inner: &Inner, jobs: &[NewJob]) -> Result<()> {
    for job in jobs {
        job.check_payload(inner.max_payload_bytes)?;
        if i32::try_from(job.max_attempts).is_err() {
            return Err(Error::invalid("max attempts", format!("{} is over {}", job.max_attempts, i32::MAX)));
        }
    }
    Ok(())
}

/// The batch on the pool, in a transaction of its own.
pub(crate) async fn enqueue_pool(inner: &Inner, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
    check(inner, &jobs)?;
    let tally = jq_core::observe::EnqueueTally::of(&jobs);
    let mut tx = inner.db().begin().await.map_err(map_sqlx)?;
    let (ids, arrived) = enqueue_on(inner, &mut tx, jobs).await?;
    tx.commit().await.map_err(map_sqlx)?;
    inner.hints.arrived(arrived.iter().map(|(q, p, r)| (q.as_str(), *p, *r)));
    tally.record();
    Ok(ids)
}

/// The batch inside the caller's transaction; its jobs exist if it commits.
pub(crate) async fn enqueue_tx(inner: &Inner, conn: &mut PgConnection, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
    check(inner, &jobs)?;
    let tally = jq_core::observe::EnqueueTally::of(&jobs);
    let (ids, arrived) = enqueue_on(inner, conn, jobs).await?;
    let until = Instant::now() + crate::hints::UNCOMMITTED_PIN;
    inner.hints.pin(arrived.iter().map(|(q, p, r)| (q.as_str(), *p, *r)), until);
    tally.record();
    Ok(ids)
}

/// Every job in batch order on `conn`, inside a transaction: a job without
/// a rule through the plain statement, one with a rule as the module says.
async fn enqueue_on(inner: &Inner, conn: &mut PgConnection, jobs: Vec<NewJob>) -> Result<(Vec<JobId>, Vec<Arrival>)> {
    let mut ids = Vec::with_capacity(jobs.len());
    let mut arrived = Vec::new();
    for job in jobs {
        let now = inner.clock.now();
        match (job.unique_key.clone(), job.unique_rule) {
            (Some(key), Some(rule)) => {
                let (id, arrival) = one(inner, conn, job, &key, rule, now).await?;
                ids.push(id);
                arrived.extend(arrival);
            }
            _ => {
                arrived.push((job.queue.as_str().to_owned(), job.priority.as_i16(), job.run_at.unwrap_or(now)));
                let (got, _) = crate::enqueue::enqueue_unannounced(inner, &mut *conn, vec![job]).await?;
                ids.extend(got);
            }
        }
    }
    Ok((ids, arrived))
}

/// One job with a rule: its id, and where it (or the holder it changed)
/// now waits.
async fn one(
    inner: &Inner,
    conn: &mut PgConnection,
    job: NewJob,
    key: &str,
    rule: UniqueRule,
    now: DateTime<Utc>,
) -> Result<(JobId, Option<Arrival>)> {
    let queue = job.queue.as_str().to_owned();
    let sql = &inner.sql;
    let found: bool = sql
        .enqueue_exists
        .query()
        .bind(job.id.0)
        .fetch_one(&mut *conn)
        .await
        .and_then(|r| r.try_get(0))
        .map_err(map_sqlx)?;
    if found {
        return Ok((job.id, None));
    }
    sql.enqueue_rule_lock.query().bind(&queue).bind(key).execute(&mut *conn).await.map_err(map_sqlx)?;
    let since = match rule {
        UniqueRule::Period(period) => Some(sub(now, period)),
        _ => None,
    };
    for _ in 0..ATTEMPTS {
        let rows = sql
            .enqueue_holders
            .query()
            .bind(&queue)
            .bind(key)
            .bind(since)
            .fetch_all(&mut *conn)
            .await
            .map_err(map_sqlx)?;
        let mut holders = Vec::with_capacity(rows.len());
        let mut priorities = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: Uuid = row.try_get(0).map_err(map_sqlx)?;
            let state: String = row.try_get(1).map_err(map_sqlx)?;
            let state = State::ALL
                .into_iter()
                .find(|s| s.as_str() == state)
                .ok_or_else(|| Error::Corrupt { id: Some(JobId(id)), reason: format!("state {state:?}") })?;
            holders.push(Holder { id: JobId(id), state, created_at: row.try_get(2).map_err(map_sqlx)? });
            priorities.push((JobId(id), row.try_get::<i16, _>(3).map_err(map_sqlx)?));
        }
        match decide(rule, job.run_at, &holders, now) {
            Decision::Answer(id) => return Ok((id, None)),
            Decision::Update { id, run_at } => {
                let state = if run_at <= now { State::Pending } else { State::Scheduled };
                let row = sql
                    .enqueue_update
                    .query()
                    .bind(id.0)
                    .bind(job.payload.as_str())
                    .bind(run_at)
                    .bind(state.as_str())
                    .bind(&inner.channel)
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(map_sqlx)?;
                let changed: i64 = row.try_get(0).map_err(map_sqlx)?;
                if changed == 1 {
                    let priority = priorities.iter().find(|(h, _)| *h == id).map_or(0, |(_, p)| *p);
                    return Ok((id, Some((queue, priority, run_at))));
                }
            }
            Decision::Store { run_at, beside } => {
                let run_at = run_at.unwrap_or(now);
                let state = if run_at <= now { State::Pending } else { State::Scheduled };
                let slot = if beside { job.id.0 } else { Uuid::nil() };
                let row = sql
                    .enqueue_rule_insert
                    .query()
                    .bind(job.id.0)
                    .bind(&queue)
                    .bind(&job.kind)
                    .bind(job.payload.as_str())
                    .bind(job.priority.as_i16())
                    .bind(state.as_str())
                    .bind(i32::try_from(job.max_attempts).unwrap_or(i32::MAX))
                    .bind(run_at)
                    .bind(job.trace.as_ref().map(|t| t.as_stored()))
                    .bind(now)
                    .bind(key)
                    .bind(job.timeout_ms())
                    .bind(slot)
                    .bind(&inner.channel)
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(map_sqlx)?;
                let inserted: i64 = row.try_get(0).map_err(map_sqlx)?;
                if inserted == 1 {
                    return Ok((job.id, Some((queue, job.priority.as_i16(), run_at))));
                }
            }
        }
    }
    Err(Error::Backend {
        backend: BACKEND,
        source: format!("enqueue: the holders of unique key {key:?} kept changing under {ATTEMPTS} decisions").into(),
    })
}
