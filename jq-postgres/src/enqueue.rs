//! Enqueue: one multi-row INSERT from `unnest` arrays per batch (a leaner
//! statement when no job of the batch has a unique key, and a scalar one for
//! a single such job).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use jq_core::{Error, JobId, NewJob, Result, State};
use sqlx::Row;
use uuid::Uuid;

use crate::Inner;
use crate::error::{BACKEND, map_sqlx};

/// Stores `jobs` on `executor` in one statement, which may be a caller's
/// transaction that commits later: the claim positions are pinned before
/// the jobs ([`crate::hints::Hints::pin`]). See `sql/enqueue.sql`,
/// `sql/enqueue_one.sql` and `sql/enqueue_keyed.sql`.
pub(crate) async fn enqueue<'e, E: sqlx::PgExecutor<'e>>(
    inner: &Inner,
    executor: E,
    jobs: Vec<NewJob>,
) -> Result<Vec<JobId>> {
    let (ids, arrivals) = enqueue_unannounced(inner, executor, jobs).await?;
    if let Some(arrivals) = arrivals {
        arrivals.uncommitted(inner);
    }
    Ok(ids)
}

/// Stores `jobs` on `executor` in one statement and leaves it to the caller
/// to tell the claim positions (after its commit) with the answer.
pub(crate) async fn enqueue_unannounced<'e, E: sqlx::PgExecutor<'e>>(
    inner: &Inner,
    executor: E,
    jobs: Vec<NewJob>,
) -> Result<(Vec<JobId>, Option<Arrivals>)> {
    if crate::rules::any(&jobs) {
        // Several statements: on the pool or in a caller's transaction
        // (`PostgresStorage::enqueue_tx`), not on an executor of one.
        return Err(Error::invalid(
            "unique rule",
            "a debounce, period or replace takes several statements: enqueue it on the storage or with enqueue_tx",
        ));
    }
    let tally = jq_core::observe::EnqueueTally::of(&jobs);
    let Some(batch) = Batch::new(inner, jobs)? else { return Ok((Vec::new(), None)) };
    let ids = batch.run(inner, executor).await.map_err(map_sqlx)??;
    tally.record();
    Ok((ids, Some(Arrivals(batch))))
}

/// Where a stored batch's jobs are, to tell the claim positions.
pub(crate) struct Arrivals(Batch);

impl Arrivals {
    /// The jobs' transaction has committed.
    pub(crate) fn committed(&self, inner: &Inner) {
        inner.hints.arrived(self.keys());
    }

    /// The jobs' transaction commits later, or rolls back (moving a position
    /// back is always safe).
    fn uncommitted(&self, inner: &Inner) {
        inner.hints.pin(self.keys(), std::time::Instant::now() + crate::hints::UNCOMMITTED_PIN);
    }

    fn keys(&self) -> impl Iterator<Item = (&str, i16, DateTime<Utc>)> + Clone {
        let c = &self.0.cols;
        c.queues.iter().zip(&c.priorities).zip(&c.run_ats).map(|((q, p), r)| (q.as_str(), *p, *r))
    }
}

/// [`enqueue`] on the pool. The one race the statement cannot arbitrate, a
/// concurrent insert of the same id as a job with a unique key, fails with a
/// unique violation on the primary key; a second statement (a new snapshot)
/// then finds the stored id.
pub(crate) async fn enqueue_pool(inner: &Inner, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
    if crate::rules::any(&jobs) {
        return crate::rules::enqueue_pool(inner, jobs).await;
    }
    let tally = jq_core::observe::EnqueueTally::of(&jobs);
    let Some(batch) = Batch::new(inner, jobs)? else { return Ok(Vec::new()) };
    let ids = match batch.run_pool(inner).await {
        Err(e) if is_violation_of(&e, "jobs_pkey") => batch.run_pool(inner).await.map_err(map_sqlx)??,
        other => other.map_err(map_sqlx)??,
    };
    Arrivals(batch).committed(inner);
    tally.record();
    Ok(ids)
}

/// True when `e` is a unique violation of the index `name`.
pub(crate) fn is_violation_of(e: &sqlx::Error, name: &str) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505") && db.constraint() == Some(name))
}

/// A checked batch as sent: one array per column, and how each job of the
/// caller's batch maps to a sent one.
struct Batch {
    now: DateTime<Utc>,
    cols: Columns,
    /// Per job of the caller's batch: the index of the earlier job it repeats
    /// (same id, or same queue and unique key), if any.
    alias: Vec<Option<usize>>,
    keyed: bool,
}

impl Batch {
    /// Checks every job before anything is written; None for an empty batch.
    fn new(inner: &Inner, jobs: Vec<NewJob>) -> Result<Option<Self>> {
        for job in &jobs {
            if let Some(key) = &job.key {
                jq_core::storage::check_key(key)?;
            }
            job.check_payload(inner.max_payload_bytes)?;
            if i32::try_from(job.max_attempts).is_err() {
                return Err(Error::invalid("max attempts", format!("{} is over {}", job.max_attempts, i32::MAX)));
            }
        }
        if jobs.is_empty() {
            return Ok(None);
        }
        let now = inner.clock.now();
        let n = jobs.len();
        // A later job with the id of an earlier one is the same job sent
        // twice; a later job with the (queue, unique key) of an earlier one
        // resolves to whatever the earlier one resolves to. Neither is sent:
        // one statement must not insert or lock a row twice.
        let mut first_of_id: HashMap<Uuid, usize> = HashMap::new();
        let mut first_of_key: HashMap<(String, String), usize> = HashMap::new();
        let mut alias: Vec<Option<usize>> = vec![None; n];
        let mut cols = Columns::with_capacity(n);
        for (i, job) in jobs.into_iter().enumerate() {
            if let Some(&first) = first_of_id.get(&job.id.0) {
                alias[i] = Some(first);
                continue;
            }
            if let Some(key) = &job.unique_key {
                match first_of_key.entry((job.queue.as_str().to_owned(), key.clone())) {
                    Entry::Occupied(e) => {
                        alias[i] = Some(*e.get());
                        continue;
                    }
                    Entry::Vacant(e) => {
                        e.insert(i);
                    }
                }
            }
            first_of_id.insert(job.id.0, i);
            cols.push(job, now);
        }
        let keyed = !first_of_key.is_empty();
        Ok(Some(Batch { now, cols, alias, keyed }))
    }

    /// [`Batch::run`] on the pool: in a transaction of its own behind a
    /// transaction pooler (`pooler.rs`).
    async fn run_pool(&self, inner: &Inner) -> Result<Result<Vec<JobId>>, sqlx::Error> {
        if inner.pooled.is_none() {
            return self.run(inner, &inner.pool).await;
        }
        let mut tx = inner.db().begin().await?;
        // Committed whatever the reply, as the statement alone would be.
        let ids = self.run(inner, &mut *tx).await?;
        tx.commit().await?;
        Ok(ids)
    }

    /// Sends the batch; the outer error is the driver's, the inner one a
    /// reply that does not account for every job.
    async fn run<'e, E: sqlx::PgExecutor<'e>>(
        &self,
        inner: &Inner,
        executor: E,
    ) -> Result<Result<Vec<JobId>>, sqlx::Error> {
        let cols = &self.cols;
        if !self.keyed {
            // Every job resolves to its own id: inserted now, or stored before.
            if cols.ids.len() == 1 {
                // The common single-job call: scalar binds, a cheaper statement.
                inner
                    .sql
                    .enqueue_one
                    .query()
                    .bind(cols.ids[0])
                    .bind(&cols.queues[0])
                    .bind(&cols.kinds[0])
                    .bind(&cols.payloads[0])
                    .bind(cols.priorities[0])
                    .bind(cols.states[0])
                    .bind(cols.max_attempts[0])
                    .bind(cols.run_ats[0])
                    .bind(&cols.traces[0])
                    .bind(self.now)
                    .bind(&inner.channel)
                    .bind(cols.timeouts[0])
                    .bind(&cols.keys[0])
                    .fetch_one(executor)
                    .await?;
            } else {
                cols.bind_arrays(inner.sql.enqueue.query())
                    .bind(self.now)
                    .bind(&inner.channel)
                    .bind(&cols.timeouts)
                    .bind(&cols.keys)
                    .fetch_one(executor)
                    .await?;
            }
            let mut sent = cols.ids.iter();
            let mut out: Vec<JobId> = Vec::with_capacity(self.alias.len());
            for first in &self.alias {
                let id = match *first {
                    Some(first) => out[first],
                    None => match sent.next() {
                        Some(id) => JobId(*id),
                        None => return Ok(Err(lost("a job of the batch"))),
                    },
                };
                out.push(id);
            }
            return Ok(Ok(out));
        }
        let rows = cols
            .bind_arrays(inner.sql.enqueue_keyed.query())
            .bind(&cols.unique_keys)
            .bind(self.now)
            .bind(&inner.channel)
            .bind(&cols.timeouts)
            .bind(&cols.keys)
            .fetch_all(executor)
            .await?;
        let mut stored: HashSet<Uuid> = HashSet::with_capacity(rows.len());
        let mut by_key: HashMap<(String, String), Uuid> = HashMap::new();
        for row in &rows {
            let source: i16 = row.try_get(0)?;
            if source == 3 {
                continue;
            }
            let id: Uuid = row.try_get(1)?;
            let key: Option<String> = row.try_get(3)?;
            match (source, key) {
                (1 | 2, Some(key)) => {
                    let queue: String = row.try_get(2)?;
                    by_key.insert((queue, key), id);
                }
                _ => {
                    stored.insert(id);
                }
            }
        }
        let mut sent = cols.ids.iter().zip(cols.queues.iter().zip(&cols.unique_keys));
        let mut out: Vec<JobId> = Vec::with_capacity(self.alias.len());
        for first in &self.alias {
            let id = match *first {
                Some(first) => out[first],
                None => {
                    let Some((id, (queue, key))) = sent.next() else {
                        return Ok(Err(lost("a job of the batch")));
                    };
                    if stored.contains(id) {
                        JobId(*id)
                    } else if let Some(key) = key
                        && let Some(existing) = by_key.get(&(queue.clone(), key.clone()))
                    {
                        JobId(*existing)
                    } else {
                        return Ok(Err(lost("a job")));
                    }
                }
            };
            out.push(id);
        }
        Ok(Ok(out))
    }
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
    traces: Vec<Option<String>>,
    unique_keys: Vec<Option<String>>,
    /// Per-job timeouts in whole milliseconds.
    timeouts: Vec<Option<i64>>,
    /// The jobs' keys (capability keys; not unique keys).
    keys: Vec<Option<String>>,
}

impl Columns {
    /// Binds the nine per-job arrays that `enqueue.sql` and
    /// `enqueue_keyed.sql` both take as `$1`..`$9`, in their order.
    fn bind_arrays<'q>(
        &'q self,
        query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        query
            .bind(&self.ids)
            .bind(&self.queues)
            .bind(&self.kinds)
            .bind(&self.payloads)
            .bind(&self.priorities)
            .bind(&self.states)
            .bind(&self.max_attempts)
            .bind(&self.run_ats)
            .bind(&self.traces)
    }
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
            traces: Vec::with_capacity(n),
            unique_keys: Vec::with_capacity(n),
            timeouts: Vec::with_capacity(n),
            keys: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, job: NewJob, now: DateTime<Utc>) {
        let run_at = job.run_at.unwrap_or(now);
        let state = if run_at <= now { State::Pending } else { State::Scheduled };
        self.timeouts.push(job.timeout_ms());
        self.ids.push(job.id.0);
        self.queues.push(job.queue.as_str().to_owned());
        self.kinds.push(job.kind);
        self.payloads.push(job.payload.as_str().to_owned());
        self.priorities.push(job.priority.as_i16());
        self.states.push(state.as_str());
        // Checked by the caller to fit.
        self.max_attempts.push(i32::try_from(job.max_attempts).unwrap_or(i32::MAX));
        self.run_ats.push(run_at);
        self.traces.push(job.trace.map(|t| t.as_stored().to_owned()));
        self.unique_keys.push(job.unique_key);
        self.keys.push(job.key);
    }
}
