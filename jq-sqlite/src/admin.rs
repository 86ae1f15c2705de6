//! Operator operations: get, list and stats (read connections), retry and
//! cancel (writer).

use jq_core::{Error, Job, JobFilter, JobId, Result, State, Stats, Timestamp};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

use crate::error::db;
use crate::row::{self, COLUMNS, blob, parse_state};

const GET: &str = include_str!("sql/get.sql");
const STATS: &str = include_str!("sql/stats.sql");
const RETRY: &str = include_str!("sql/admin_retry.sql");
const CANCEL: &str = include_str!("sql/admin_cancel.sql");
const STATE: &str = include_str!("sql/admin_state.sql");

/// One job, or [`Error::NotFound`].
pub(crate) fn get(conn: &Connection, id: JobId) -> Result<Job> {
    let mut stmt = conn.prepare_cached(GET).map_err(db)?;
    stmt.query_row(params![blob(&id.0)], |r| Ok(row::decode(r)))
        .optional()
        .map_err(db)?
        .ok_or(Error::NotFound { id })?
}

/// One page of jobs matching `filter`, by ascending id.
pub(crate) fn list(conn: &Connection, filter: &JobFilter) -> Result<Vec<Job>> {
    // Only the filters given are in the SQL, so SQLite can pick an index;
    // prepare_cached keys on the text, so each shape is prepared once.
    let mut sql = format!("SELECT {COLUMNS} FROM jobs WHERE 1 = 1");
    let mut args: Vec<Value> = Vec::new();
    if let Some(queue) = &filter.queue {
        sql.push_str(" AND queue = ?");
        args.push(Value::Text(queue.as_str().to_owned()));
    }
    if let Some(state) = filter.state {
        sql.push_str(" AND state = ?");
        args.push(Value::Text(state.as_str().to_owned()));
    }
    if let Some(kind) = &filter.kind {
        sql.push_str(" AND kind = ?");
        args.push(Value::Text(kind.clone()));
    }
    if let Some(after) = filter.after {
        sql.push_str(" AND id > ?");
        args.push(Value::Blob(after.0.as_bytes().to_vec()));
    }
    sql.push_str(" ORDER BY id LIMIT ?");
    args.push(Value::Integer(i64::try_from(filter.page_size()).unwrap_or(i64::MAX)));
    let mut stmt = conn.prepare_cached(&sql).map_err(db)?;
    let rows = stmt.query_map(params_from_iter(args), |r| Ok(row::decode(r))).map_err(db)?;
    let mut jobs = Vec::new();
    for job in rows {
        jobs.push(job.map_err(db)??);
    }
    Ok(jobs)
}

/// Counts by queue and state.
pub(crate) fn stats(conn: &Connection) -> Result<Stats> {
    let mut stmt = conn.prepare_cached(STATS).map_err(db)?;
    let mut rows = stmt.query([]).map_err(db)?;
    let mut stats = Stats::default();
    while let Some(r) = rows.next().map_err(db)? {
        let queue: String = r.get(0).map_err(db)?;
        let state: String = r.get(1).map_err(db)?;
        let n: i64 = r.get(2).map_err(db)?;
        let state = parse_state(&state).ok_or_else(|| Error::Corrupt {
            id: None,
            reason: format!("a job of queue {queue:?} has state {state:?}"),
        })?;
        stats.queues.entry(queue).or_default().add(state, n.max(0) as u64);
    }
    Ok(stats)
}

/// Dead -> Pending with one more attempt.
pub(crate) fn retry(conn: &Connection, id: JobId, now: Timestamp) -> Result<()> {
    let n =
        conn.prepare_cached(RETRY).map_err(db)?.execute(params![blob(&id.0), now.timestamp_micros()]).map_err(db)?;
    if n == 1 { Ok(()) } else { Err(refusal(conn, id, "retry")?) }
}

/// Scheduled or Pending -> Cancelled.
pub(crate) fn cancel(conn: &Connection, id: JobId, now: Timestamp) -> Result<()> {
    let n =
        conn.prepare_cached(CANCEL).map_err(db)?.execute(params![blob(&id.0), now.timestamp_micros()]).map_err(db)?;
    if n == 1 { Ok(()) } else { Err(refusal(conn, id, "cancel")?) }
}

/// Why a guarded admin update changed nothing: NotFound or InvalidState.
fn refusal(conn: &Connection, id: JobId, operation: &'static str) -> Result<Error> {
    let state: Option<String> =
        conn.prepare_cached(STATE).map_err(db)?.query_row(params![blob(&id.0)], |r| r.get(0)).optional().map_err(db)?;
    Ok(match state {
        None => Error::NotFound { id },
        Some(s) => match parse_state(&s) {
            Some(state) => Error::InvalidState { id, state, operation },
            None => Error::Corrupt { id: Some(id), reason: format!("column state: unknown {s:?}") },
        },
    })
}

/// Refuses a purge of a state that is not terminal.
pub(crate) fn check_purge_state(state: State) -> Result<()> {
    if state.is_terminal() {
        Ok(())
    } else {
        Err(Error::invalid("purge state", format!("{state} is not terminal: purge completed, dead or cancelled jobs")))
    }
}
