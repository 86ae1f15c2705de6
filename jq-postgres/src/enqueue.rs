//! Enqueue: one multi-row INSERT from `unnest` arrays per batch.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use jq_core::{Error, JobId, NewJob, Result, State};
use sqlx::Row;
use uuid::Uuid;

use crate::Inner;
use crate::error::{BACKEND, map_sqlx};

/// Stores `jobs` on `executor` in one statement; see `sql/enqueue.sql`.
pub(crate) async fn enqueue<'e, E: sqlx::PgExecutor<'e>>(
    inner: &Inner,
    executor: E,
    jobs: Vec<NewJob>,
) -> Result<Vec<JobId>> {
    // Check everything before writing anything.
    for job in &jobs {
        job.check_payload(inner.max_payload_bytes)?;
        if i32::try_from(job.max_attempts).is_err() {
            return Err(Error::invalid("max attempts", format!("{} is over {}", job.max_attempts, i32::MAX)));
        }
    }
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let now = inner.clock.now();
    let n = jobs.len();

    // A later job of the batch with the same (queue, unique key) as an
    // earlier one resolves to whatever the earlier one resolves to, and is
    // not sent (ON CONFLICT DO UPDATE cannot touch a row twice).
    let mut first_of_key: HashMap<(String, String), usize> = HashMap::new();
    let mut alias: Vec<Option<usize>> = vec![None; n];
    let mut cols = Columns::with_capacity(n);
    for (i, job) in jobs.into_iter().enumerate() {
        if let Some(key) = &job.unique_key {
            match first_of_key.entry((job.queue.as_str().to_owned(), key.clone())) {
                std::collections::hash_map::Entry::Occupied(e) => {
                    alias[i] = Some(*e.get());
                    continue;
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(i);
                }
            }
        }
        cols.push(job, now);
    }

    let rows = sqlx::query(inner.sql.enqueue.q())
        .bind(&cols.ids)
        .bind(&cols.queues)
        .bind(&cols.kinds)
        .bind(&cols.payloads)
        .bind(&cols.priorities)
        .bind(&cols.states)
        .bind(&cols.max_attempts)
        .bind(&cols.run_ats)
        .bind(&cols.unique_keys)
        .bind(now)
        .bind(&inner.channel)
        .fetch_all(executor)
        .await
        .map_err(map_sqlx)?;

    let mut inserted: HashSet<Uuid> = HashSet::with_capacity(rows.len());
    let mut by_key: HashMap<(String, String), Uuid> = HashMap::new();
    for row in &rows {
        let id: Uuid = row.try_get(0).map_err(map_sqlx)?;
        let key: Option<String> = row.try_get(2).map_err(map_sqlx)?;
        match key {
            Some(key) => {
                let queue: String = row.try_get(1).map_err(map_sqlx)?;
                by_key.insert((queue, key), id);
            }
            None => {
                inserted.insert(id);
            }
        }
    }

    let mut sent = cols.ids.iter().zip(cols.queues.iter().zip(&cols.unique_keys));
    let mut out: Vec<JobId> = Vec::with_capacity(n);
    for first in &alias {
        let id = match *first {
            Some(first) => out[first],
            None => {
                let (id, (queue, key)) = sent.next().ok_or_else(|| lost("a job of the batch"))?;
                match key {
                    Some(key) => JobId(
                        *by_key.get(&(queue.clone(), key.clone())).ok_or_else(|| lost("a job with a unique key"))?,
                    ),
                    None if inserted.contains(id) => JobId(*id),
                    None => return Err(lost("a job")),
                }
            }
        };
        out.push(id);
    }
    Ok(out)
}

fn lost(what: &str) -> Error {
    Error::Backend { backend: BACKEND, source: format!("enqueue: the server returned no row for {what}").into() }
}

/// The batch as one array per column, for `unnest`.
struct Columns {
    ids: Vec<Uuid>,
    queues: Vec<String>,
    kinds: Vec<String>,
    payloads: Vec<String>,
    priorities: Vec<i16>,
    states: Vec<&'static str>,
    max_attempts: Vec<i32>,
    run_ats: Vec<DateTime<Utc>>,
    unique_keys: Vec<Option<String>>,
}

impl Columns {
    fn with_capacity(n: usize) -> Self {
        Columns {
            ids: Vec::with_capacity(n),
            queues: Vec::with_capacity(n),
            kinds: Vec::with_capacity(n),
            payloads: Vec::with_capacity(n),
            priorities: Vec::with_capacity(n),
            states: Vec::with_capacity(n),
            max_attempts: Vec::with_capacity(n),
            run_ats: Vec::with_capacity(n),
            unique_keys: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, job: NewJob, now: DateTime<Utc>) {
        let run_at = job.run_at.unwrap_or(now);
        let state = if run_at <= now { State::Pending } else { State::Scheduled };
        self.ids.push(job.id.0);
        self.queues.push(job.queue.as_str().to_owned());
        self.kinds.push(job.kind);
        self.payloads.push(job.payload.as_str().to_owned());
        self.priorities.push(job.priority.as_i16());
        self.states.push(state.as_str());
        // Checked by the caller to fit.
        self.max_attempts.push(i32::try_from(job.max_attempts).unwrap_or(i32::MAX));
        self.run_ats.push(run_at);
        self.unique_keys.push(job.unique_key);
    }
}
