//! Operator operations: get, list and stats (read connections), retry and
//! cancel (writer).

use jq_core::{Error, Job, JobFilter, JobId, Result, State, Stats, Throughput, Timestamp};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

use crate::counts::Tally;
use crate::error::db;
use crate::row::{self, COLUMNS, blob, parse_state};

const GET: &str = include_str!("sql/get.sql");
const STATS: &str = include_str!("sql/stats.sql");
const THROUGHPUT: &str = include_str!("sql/throughput.sql");
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
///
/// A row that does not decode is left out and logged, and the page is
/// filled from the rows after it: a short page still means "no more", so
/// paging with `after` neither stops early nor loops on a corrupt row.
/// `get` of that row reports why.
pub(crate) fn list(conn: &Connection, filter: &JobFilter) -> Result<Vec<Job>> {
    let limit = filter.page_size();
    let mut jobs = Vec::new();
    let mut after = filter.after.map(|a| Value::Blob(a.0.as_bytes().to_vec()));
    while jobs.len() < limit {
        let want = limit - jobs.len();
        let (seen, last) = list_page(conn, filter, after, want, &mut jobs)?;
        if seen < want {
            break;
        }
        // A full page with rows skipped: go on after the last row seen,
        // corrupt or not (its raw id orders like any other).
        after = last;
    }
    Ok(jobs)
}

/// Reads up to `want` rows after `after` into `jobs`, skipping rows that do
/// not decode; returns how many rows were read and the raw id of the last.
fn list_page(
    conn: &Connection,
    filter: &JobFilter,
    after: Option<Value>,
    want: usize,
    jobs: &mut Vec<Job>,
) -> Result<(usize, Option<Value>)> {
    // Only the filters given are in the SQL, so SQLite can pick an index;
    // prepare_cached keys on the text, so each shape is prepared once.
    let mut terms = String::new();
    let mut term_args: Vec<Value> = Vec::new();
    if let Some(queue) = &filter.queue {
        terms.push_str(" AND queue = ?");
        term_args.push(Value::Text(queue.as_str().to_owned()));
    }
    if let Some(kind) = &filter.kind {
        terms.push_str(" AND kind = ?");
        term_args.push(Value::Text(kind.clone()));
    }
    if let Some(after) = after {
        terms.push_str(" AND id > ?");
        term_args.push(after);
    }
    // The state as a literal, not a parameter: SQLite uses a partial index
    // only when the query's own terms imply its WHERE, and a bound value
    // implies nothing. A queue's oldest Pending job (the dashboard's) is
    // then read from the partial indexes of Pending jobs, not found by
    // walking every older finished job in id order. Pending and Scheduled
    // jobs are in two indexes each (plain, and keyed:
    // jobs_keyed_waiting): one SELECT per index, each
    // repeating its index's WHERE. The name comes from State, never from
    // the caller's text.
    let (mut sql, mut args) = match filter.state {
        Some(state @ (State::Pending | State::Scheduled)) => {
            let state = state.as_str();
            let sql = format!(
                "SELECT * FROM (SELECT {COLUMNS} FROM jobs WHERE state = '{state}' AND key IS NULL{terms} \
                 UNION ALL SELECT {COLUMNS} FROM jobs \
                 WHERE keyed_wait IS NOT NULL AND state = '{state}'{terms})"
            );
            let mut args = term_args.clone();
            args.extend(term_args);
            (sql, args)
        }
        Some(state) => (format!("SELECT {COLUMNS} FROM jobs WHERE state = '{}'{terms}", state.as_str()), term_args),
        None => (format!("SELECT {COLUMNS} FROM jobs WHERE 1 = 1{terms}"), term_args),
    };
    sql.push_str(" ORDER BY id LIMIT ?");
    args.push(Value::Integer(i64::try_from(want).unwrap_or(i64::MAX)));
    let mut stmt = conn.prepare_cached(&sql).map_err(db)?;
    let rows = stmt.query_map(params_from_iter(args), |r| Ok((r.get::<_, Value>(0)?, row::decode(r)))).map_err(db)?;
    let (mut seen, mut last) = (0, None);
    for r in rows {
        let (id, job) = r.map_err(db)?;
        seen += 1;
        match job {
            Ok(job) => jobs.push(job),
            Err(e) => skipped(&e),
        }
        last = Some(id);
    }
    Ok((seen, last))
}

/// Logs a row that `list` leaves out because it does not decode.
fn skipped(e: &Error) {
    match e {
        Error::Corrupt { id: Some(id), reason } => {
            tracing::error!(job = %id, %reason, "list skips a job that cannot be decoded")
        }
        other => tracing::error!(error = %other, "list skips a job that cannot be decoded"),
    }
}

/// Counts by queue and state: finished states from their counters, live
/// ones from the partial indexes of live jobs (sql/stats.sql). A group
/// whose queue cannot be read is left out and logged: one bad row must not
/// hide the counts of all the others.
pub(crate) fn stats(conn: &Connection) -> Result<Stats> {
    let mut stmt = conn.prepare_cached(STATS).map_err(db)?;
    let mut rows = stmt.query([]).map_err(db)?;
    let mut stats = Stats::default();
    while let Some(r) = rows.next().map_err(db)? {
        let n: i64 = r.get(2).map_err(db)?;
        let queue = r.get::<_, Value>(0).map_err(db)?;
        let state = r.get::<_, Value>(1).map_err(db)?;
        let known = match (&queue, &state) {
            (Value::Text(queue), Value::Text(state)) => parse_state(state).map(|state| (queue, state)),
            _ => None,
        };
        match known {
            Some((queue, state)) if n < 0 => tracing::error!(
                %queue,
                %state,
                count = n,
                "stats: the counters of finished jobs went below zero (jobs deleted or changed outside jq?); \
                 counted as 0"
            ),
            Some((queue, state)) => stats.queues.entry(queue.clone()).or_default().add(state, n.max(0) as u64),
            None => tracing::error!(
                queue = %show(&queue),
                state = %show(&state),
                count = n,
                "stats skips jobs whose queue or state is not one jq knows (corrupt rows)"
            ),
        }
    }
    Ok(stats)
}

/// Completed and dead jobs per queue and minute since `since`.
pub(crate) fn throughput(conn: &Connection, since: Timestamp) -> Result<Vec<Throughput>> {
    let mut stmt = conn.prepare_cached(THROUGHPUT).map_err(db)?;
    let since = jq_core::storage::minute_of(since).timestamp_micros();
    let rows = stmt
        .query_map([since], |r| {
            let minute: i64 = r.get(1)?;
            Ok(Throughput {
                queue: r.get(0)?,
                minute: jq_core::storage::from_micros(minute * 60_000_000),
                completed: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                dead: u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
            })
        })
        .map_err(db)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(db)
}

/// A stored value for a log line: text as it is, anything else as its type.
fn show(v: &Value) -> String {
    match v {
        Value::Text(t) => t.clone(),
        other => format!("{other:?}"),
    }
}

/// Dead -> Pending with one more attempt; the dependents its failure
/// cancelled come back.
pub(crate) fn retry(conn: &Connection, id: JobId, now: Timestamp) -> Result<()> {
    let (queue, flow) = counted(conn, RETRY, id, now, "retry")?;
    let mut tally = Tally::default();
    tally.add(queue, State::Dead, -1);
    step_moved(conn, &mut tally, id, flow, State::Dead, State::Pending)?;
    if flow & crate::workflow::HAS_CHILDREN != 0 {
        crate::workflow::retried(conn, &mut tally, id)?;
    }
    tally.apply(conn)
}

/// Waiting, Scheduled or Pending -> Cancelled; its dependents follow.
/// Returns true when a dependent became claimable (run-anyway).
pub(crate) fn cancel(conn: &Connection, id: JobId, now: Timestamp) -> Result<bool> {
    let before: Option<String> =
        conn.prepare_cached(STATE).map_err(db)?.query_row(params![blob(&id.0)], |r| r.get(0)).optional().map_err(db)?;
    let (queue, flow) = counted(conn, CANCEL, id, now, "cancel")?;
    let mut tally = Tally::default();
    if before.as_deref() == Some(State::Waiting.as_str()) {
        tally.add(queue.clone(), State::Waiting, -1);
    }
    tally.add(queue, State::Cancelled, 1);
    // The guard let only these three through: `before` is one of them.
    if let Some(before) = before.as_deref().and_then(parse_state) {
        step_moved(conn, &mut tally, id, flow, before, State::Cancelled)?;
    }
    let mut woke = false;
    if flow & crate::workflow::HAS_CHILDREN != 0 {
        woke = crate::workflow::finished(conn, &mut tally, id, State::Cancelled, now.timestamp_micros())?;
    }
    tally.apply(conn)?;
    Ok(woke)
}

/// Job `id` went from `from` to `to`: when its `flow` says it is a step,
/// its workflow's counts move too.
fn step_moved(conn: &Connection, tally: &mut Tally, id: JobId, flow: i64, from: State, to: State) -> Result<()> {
    if flow & crate::workflow::IN_WORKFLOW != 0
        && let Some(workflow) = crate::counts::workflow_of(conn, blob(&id.0))?
    {
        tally.step_moved(&workflow, from, to);
    }
    Ok(())
}

/// Runs the guarded admin update `sql` on job `id` (it returns the job's
/// queue and flow when it changed it); else says why nothing changed.
fn counted(conn: &Connection, sql: &str, id: JobId, now: Timestamp, operation: &'static str) -> Result<(Value, i64)> {
    let changed: Option<(Value, i64)> = conn
        .prepare_cached(sql)
        .map_err(db)?
        .query_row(params![blob(&id.0), now.timestamp_micros()], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .map_err(db)?;
    match changed {
        Some(changed) => Ok(changed),
        None => Err(refusal(conn, id, operation)?),
    }
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
