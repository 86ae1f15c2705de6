//! Operator operations: get, list, stats, retry, cancel.

use jq_core::{Error, Job, JobFilter, JobId, Result, State, Stats, Throughput, Timestamp};
use sqlx::Row;
use uuid::Uuid;

use crate::Inner;
use crate::enqueue::is_violation_of;
use crate::error::{corrupt, map_sqlx};
use crate::row::{decode_job, decode_state};

/// One job, or NotFound.
pub(crate) async fn get(inner: &Inner, id: JobId) -> Result<Job> {
    let row = inner.db().fetch_optional(inner.sql.get.query().bind(id.0)).await.map_err(map_sqlx)?;
    match row {
        Some(row) => decode_job(&row),
        None => Err(Error::NotFound { id }),
    }
}

/// One page by ascending id.
///
/// A row that does not decode is left out and logged, and the page is
/// filled from the rows after it: a short page still means "no more", so
/// paging with `after` neither stops early nor loops on a corrupt row.
/// `get` of that row reports why.
pub(crate) async fn list(inner: &Inner, filter: &JobFilter) -> Result<Vec<Job>> {
    let limit = filter.page_size();
    let mut jobs = Vec::new();
    let mut after = filter.after.map(|a| a.0);
    // One queue's waiting jobs: read from jobs_claim, not past every
    // older finished job in the primary key (sql/list_waiting*.sql).
    let waiting = filter.queue.is_some() && matches!(filter.state, Some(State::Pending | State::Scheduled));
    while jobs.len() < limit {
        let want = limit - jobs.len();
        let want_i64 = i64::try_from(want).unwrap_or(i64::MAX);
        let page = match (waiting, filter.kind.as_deref()) {
            (true, None) => inner
                .sql
                .list_waiting
                .query()
                .bind(filter.queue.as_ref().map(|q| q.as_str()))
                .bind(filter.state.map(State::as_str))
                .bind(after)
                .bind(want_i64),
            (waiting, kind) => {
                let sql = if waiting { &inner.sql.list_waiting_kind } else { &inner.sql.list };
                sql.query()
                    .bind(filter.queue.as_ref().map(|q| q.as_str()))
                    .bind(filter.state.map(State::as_str))
                    .bind(kind)
                    .bind(after)
                    .bind(want_i64)
            }
        };
        let rows = inner.db().fetch_all(page).await.map_err(map_sqlx)?;
        for row in &rows {
            match decode_job(row) {
                Ok(job) => jobs.push(job),
                Err(e) => skipped(&inner.schema, &e),
            }
        }
        if rows.len() < want {
            break;
        }
        // A full page with rows skipped: go on after the last row read,
        // corrupt or not (the id column is a uuid, so it always reads).
        let Some(last) = rows.last() else { break };
        after = Some(last.try_get::<Uuid, _>(0).map_err(|e| corrupt(None, format!("column id: {e}")))?);
    }
    Ok(jobs)
}

/// Logs a row that `list` leaves out because it does not decode.
fn skipped(schema: &str, e: &Error) {
    match e {
        Error::Corrupt { id: Some(id), reason } => {
            tracing::error!(schema, job = %id, %reason, "list skips a job that cannot be decoded")
        }
        other => tracing::error!(schema, error = %other, "list skips a job that cannot be decoded"),
    }
}

/// Counts by queue and state: finished states from their counters, live
/// ones from the partial indexes of live jobs (sql/stats.sql). A group
/// whose state is unknown is left out and logged: one bad row must not hide
/// the counts of all the others.
pub(crate) async fn stats(inner: &Inner) -> Result<Stats> {
    let rows = inner.db().fetch_all(inner.sql.stats.query()).await.map_err(map_sqlx)?;
    let mut stats = Stats::default();
    for row in &rows {
        let queue: String = row.try_get(0).map_err(map_sqlx)?;
        let state: String = row.try_get(1).map_err(map_sqlx)?;
        let count: i64 = row.try_get(2).map_err(map_sqlx)?;
        match state.parse::<State>() {
            Ok(state) if count < 0 => tracing::error!(
                schema = inner.schema,
                %queue,
                %state,
                count,
                "stats: the counters of finished jobs went below zero (rows deleted or changed by hand?); counted as 0"
            ),
            Ok(state) => stats.queues.entry(queue).or_default().add(state, u64::try_from(count).unwrap_or(0)),
            Err(_) => tracing::error!(
                schema = inner.schema,
                %queue,
                %state,
                count,
                "stats skips jobs whose state is not one jq knows (corrupt rows)"
            ),
        }
    }
    Ok(stats)
}

/// Completed and dead jobs per queue and minute since `since`.
pub(crate) async fn throughput(inner: &Inner, since: Timestamp) -> Result<Vec<Throughput>> {
    let since = jq_core::storage::minute_of(since);
    let rows = inner.db().fetch_all(inner.sql.throughput.query().bind(since)).await.map_err(map_sqlx)?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    let mut out = rows
        .iter()
        .map(|row| {
            Ok(Throughput {
                queue: row.try_get(0).map_err(map_sqlx)?,
                minute: row.try_get(1).map_err(map_sqlx)?,
                completed: count(row.try_get(2).map_err(map_sqlx)?),
                dead: count(row.try_get(3).map_err(map_sqlx)?),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    // Byte order of queue names, as every backend returns them; the
    // database's collation may order them otherwise.
    out.sort_by(|a, b| (&a.queue, a.minute).cmp(&(&b.queue, b.minute)));
    Ok(out)
}

/// Dead -> Pending with one more attempt.
pub(crate) async fn retry(inner: &Inner, id: JobId) -> Result<()> {
    let now = inner.clock.now();
    let run = || inner.db().fetch_optional(inner.sql.retry.query().bind(id.0).bind(now).bind(&inner.channel));
    // A concurrent enqueue of the job's unique key, committed after the
    // statement's snapshot, makes it fail on jobs_unique; the second run
    // sees that job and gives this one a slot of its own.
    let row = match run().await {
        Err(e) if is_violation_of(&e, "jobs_unique") => run().await,
        other => other,
    }
    .map_err(map_sqlx)?;
    match row {
        Some(row) => {
            // Pending again at now: claims of this storage must not start past it.
            if let (Ok(queue), Ok(priority), Ok(run_at)) =
                (row.try_get::<String, _>(1), row.try_get::<i16, _>(2), row.try_get::<Timestamp, _>(3))
            {
                inner.hints.arrived([(queue.as_str(), priority, run_at)]);
            }
            Ok(())
        }
        None => Err(refused(inner, id, "retry").await),
    }
}

/// Scheduled or Pending -> Cancelled.
pub(crate) async fn cancel(inner: &Inner, id: JobId) -> Result<()> {
    let now = inner.clock.now();
    let row = inner
        .db()
        .fetch_optional(inner.sql.cancel.query().bind(id.0).bind(now).bind(&inner.channel))
        .await
        .map_err(map_sqlx)?;
    match row {
        Some(_) => Ok(()),
        None => Err(refused(inner, id, "cancel").await),
    }
}

/// Why a guarded admin update matched nothing: NotFound or InvalidState.
async fn refused(inner: &Inner, id: JobId, operation: &'static str) -> Error {
    let state: Option<String> = match inner.db().fetch_optional(inner.sql.state.query().bind(id.0)).await {
        Ok(Some(row)) => match row.try_get(0) {
            Ok(state) => Some(state),
            Err(e) => return map_sqlx(e),
        },
        Ok(None) => None,
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
