//! Recurring periodic jobs ([`PeriodicStorage::fire`](jq_core::storage::PeriodicStorage::fire)): one row
//! per periodic job in `periodic_jobs`. A step is one transaction:
//! the compare-and-set on the cursor first (it locks the row, so a racing
//! step waits and then finds the cursor moved), then the jobs' insert, then
//! the last job id; a step that loses rolls back having written nothing.

use jq_core::periodic::{Fire, FireOutcome, PeriodicInfo};
use jq_core::{Error, JobId, Result, Timestamp};
use sqlx::Row;
use uuid::Uuid;

use crate::error::map_sqlx;
use crate::{Inner, enqueue};

/// One step.
pub(crate) async fn fire(inner: &Inner, fire: &Fire) -> Result<FireOutcome> {
    fire.check()?;
    for job in &fire.jobs {
        job.check_payload(inner.max_payload_bytes)?;
    }
    let now = inner.clock.now();
    let missed = i64::try_from(fire.missed).unwrap_or(i64::MAX);
    let mut tx = inner.db().begin().await.map_err(map_sqlx)?;
    let sql = match fire.expected {
        None => &inner.sql.periodic_create,
        Some(_) => &inner.sql.periodic_advance,
    };
    let mut step = sql
        .query()
        .bind(&fire.name)
        .bind(fire.queue.as_str())
        .bind(&fire.spec)
        .bind(&fire.zone)
        .bind(fire.cursor)
        .bind(now)
        .bind(missed)
        .bind(fire.last_missed);
    if let Some(expected) = fire.expected {
        step = step.bind(expected).bind(fire.expected_trigger);
    }
    if step.fetch_optional(&mut *tx).await.map_err(map_sqlx)?.is_none() {
        tx.rollback().await.map_err(map_sqlx)?;
        return Ok(FireOutcome::Moved);
    }
    let (ids, arrivals) = enqueue::enqueue_unannounced(inner, &mut *tx, fire.jobs.clone()).await?;
    if let Some(last) = ids.last() {
        inner.sql.periodic_last_job.query().bind(&fire.name).bind(last.0).execute(&mut *tx).await.map_err(map_sqlx)?;
    }
    tx.commit().await.map_err(map_sqlx)?;
    // Only now: a claim before the commit could not see the jobs.
    if let Some(arrivals) = arrivals {
        arrivals.committed(inner);
    }
    Ok(FireOutcome::Fired(ids))
}

/// Every periodic job row.
pub(crate) async fn list(inner: &Inner) -> Result<Vec<PeriodicInfo>> {
    let rows = inner.db().fetch_all(inner.sql.periodic_list.query()).await.map_err(map_sqlx)?;
    rows.iter()
        .map(|row| {
            let missed: i64 = row.try_get(6)?;
            let last_job: Option<Uuid> = row.try_get(5)?;
            Ok(PeriodicInfo {
                name: row.try_get(0)?,
                queue: row.try_get(1)?,
                spec: row.try_get(2)?,
                zone: row.try_get(3)?,
                cursor: row.try_get::<Timestamp, _>(4)?,
                last_job: last_job.map(JobId),
                missed: u64::try_from(missed).unwrap_or(0),
                last_missed: row.try_get(7)?,
                declared_at: row.try_get(8)?,
                triggered_at: row.try_get(9)?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()
        .map_err(map_sqlx)
}

/// Sets the trigger of `name`.
pub(crate) async fn trigger(inner: &Inner, name: &str) -> Result<()> {
    jq_core::periodic::check_name(name)?;
    let statement = inner.sql.periodic_trigger.query().bind(name).bind(inner.clock.now());
    let found = inner.db().fetch_optional(statement).await.map_err(map_sqlx)?;
    if found.is_none() {
        return Err(Error::PeriodicNotFound { name: name.to_owned() });
    }
    Ok(())
}
