//! Operator operations: get, list, stats, retry, cancel.

use jq_core::{Error, Job, JobFilter, JobId, Result, State, Stats};
use sqlx::Row;

use crate::Inner;
use crate::enqueue::is_violation_of;
use crate::error::map_sqlx;
use crate::row::{decode_job, decode_state};

/// One job, or NotFound.
pub(crate) async fn get(inner: &Inner, id: JobId) -> Result<Job> {
    let row = sqlx::query(inner.sql.get.q()).bind(id.0).fetch_optional(&inner.pool).await.map_err(map_sqlx)?;
    match row {
        Some(row) => decode_job(&row),
        None => Err(Error::NotFound { id }),
    }
}

/// One page by ascending id.
pub(crate) async fn list(inner: &Inner, filter: &JobFilter) -> Result<Vec<Job>> {
    let limit = i64::try_from(filter.page_size()).unwrap_or(i64::MAX);
    let rows = sqlx::query(inner.sql.list.q())
        .bind(filter.queue.as_ref().map(|q| q.as_str()))
        .bind(filter.state.map(State::as_str))
        .bind(filter.kind.as_deref())
        .bind(filter.after.map(|a| a.0))
        .bind(limit)
        .fetch_all(&inner.pool)
        .await
        .map_err(map_sqlx)?;
    rows.iter().map(decode_job).collect()
}

/// Counts by queue and state.
pub(crate) async fn stats(inner: &Inner) -> Result<Stats> {
    let rows = sqlx::query(inner.sql.stats.q()).fetch_all(&inner.pool).await.map_err(map_sqlx)?;
    let mut stats = Stats::default();
    for row in &rows {
        let queue: String = row.try_get(0).map_err(map_sqlx)?;
        let state: String = row.try_get(1).map_err(map_sqlx)?;
        let count: i64 = row.try_get(2).map_err(map_sqlx)?;
        let state: State = state
            .parse()
            .map_err(|e: Error| Error::Corrupt { id: None, reason: format!("queue {queue}: column state: {e}") })?;
        stats.queues.entry(queue).or_default().add(state, u64::try_from(count).unwrap_or(0));
    }
    Ok(stats)
}

/// Dead -> Pending with one more attempt.
pub(crate) async fn retry(inner: &Inner, id: JobId) -> Result<()> {
    let now = inner.clock.now();
    let run = || sqlx::query(inner.sql.retry.q()).bind(id.0).bind(now).bind(&inner.channel).fetch_optional(&inner.pool);
    // A concurrent enqueue of the job's unique key, committed after the
    // statement's snapshot, makes it fail on jobs_unique; the second run
    // sees that job and gives this one a slot of its own.
    let row = match run().await {
        Err(e) if is_violation_of(&e, "jobs_unique") => run().await,
        other => other,
    }
    .map_err(map_sqlx)?;
    match row {
        Some(_) => Ok(()),
        None => Err(refused(inner, id, "retry").await),
    }
}

/// Scheduled or Pending -> Cancelled.
pub(crate) async fn cancel(inner: &Inner, id: JobId) -> Result<()> {
    let now = inner.clock.now();
    let row =
        sqlx::query(inner.sql.cancel.q()).bind(id.0).bind(now).fetch_optional(&inner.pool).await.map_err(map_sqlx)?;
    match row {
        Some(_) => Ok(()),
        None => Err(refused(inner, id, "cancel").await),
    }
}

/// Why a guarded admin update matched nothing: NotFound or InvalidState.
async fn refused(inner: &Inner, id: JobId, operation: &'static str) -> Error {
    let state: Option<String> =
        match sqlx::query_scalar(inner.sql.state.q()).bind(id.0).fetch_optional(&inner.pool).await {
            Ok(state) => state,
            Err(e) => return map_sqlx(e),
        };
    match state {
        None => Error::NotFound { id },
        Some(state) => match decode_state(id, &state) {
            Ok(state) => Error::InvalidState { id, state, operation },
            Err(e) => e,
        },
    }
}
