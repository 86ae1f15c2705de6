//! Workflows on SQLite: steps stored in one writer transaction (or the
//! caller's), results in `job_results`, and the release or cancellation
//! of a finished job's children in the transaction of the statement that
//! finished it (the tables of `sql/001_schema.sql`).
//!
//! Only jobs whose `flow` says they have children reach [`finished`], so
//! the ack of a job without any costs no statement more.

use std::collections::BTreeMap;

use jq_core::workflow::{
    JobLinks, OnFailure, ParentLink, ParentResult, StepInfo, WorkflowId, WorkflowInfo, WorkflowPlan,
};
use jq_core::{Error, JobId, Payload, Result, State, StateCounts, Timestamp};
use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use rusqlite::{Connection, OptionalExtension, params};
use uuid::Uuid;

use crate::counts::{Tally, WorkflowKey};
use crate::error::db;
use crate::row::{blob, parse_state};

/// `flow` bit: the job has children.
pub(crate) const HAS_CHILDREN: i64 = 1;
/// `flow` bit: the job is a step of a workflow.
pub(crate) const IN_WORKFLOW: i64 = 2;
/// `flow` bit: the job has a stored result.
pub(crate) const HAS_RESULT: i64 = 4;

/// Rows of `jobs`, `job_nodes` or `job_deps` that one INSERT of an
/// enqueued workflow stores: one statement per step and per edge cost the
/// enqueue of a workflow more than its rows' b-tree inserts (a statement's
/// reset, cursors and halt each time). A last partial chunk goes row by
/// row, so that only two texts of each statement are ever prepared. No
/// row can conflict (every step's id was looked for first, and nodes and
/// edges are keyed by them), and a failing statement fails the whole
/// enqueue, in its transaction.
const ROWS_PER_INSERT: usize = 64;
const INSERT_JOBS_HEAD: &str = "INSERT INTO jobs (id, queue, kind, payload, priority, state, attempts, max_attempts, \
     run_at, created_at, unique_key, trace, flow, timeout_ms, key, keyed_wait) VALUES ";
const JOB_VALUES: &str = "(?, ?, ?, ?, ?, ?, 0, ?, ?, ?, NULL, ?, ?, ?, ?, ?)";
const JOB_PARAMS: usize = 14;
const INSERT_NODES_HEAD: &str =
    "INSERT INTO job_nodes (id, workflow, position, step, unfinished, cancelled_by) VALUES ";
const NODE_VALUES: &str = "(?, ?, ?, ?, ?, NULL)";
const NODE_PARAMS: usize = 5;
const INSERT_DEPS_HEAD: &str = "INSERT INTO job_deps (parent, child, position, on_failure, released) VALUES ";
const DEP_VALUES: &str = "(?, ?, ?, ?, 0)";
const DEP_PARAMS: usize = 4;
/// A child's edges not yet released, with what deciding needs (and the
/// child's workflow, for its counts).
const OPEN_CHILDREN: &str = "SELECT d.child, d.on_failure, j.state, j.queue, j.run_at, j.flow, n.workflow \
     FROM job_deps d JOIN jobs j ON j.id = d.child LEFT JOIN job_nodes n ON n.id = d.child \
     WHERE d.parent = ?1 AND d.released = 0";
const RELEASE_EDGE: &str = "UPDATE job_deps SET released = 1 WHERE parent = ?1 AND child = ?2";
/// The children of parent ?1, one row per edge not released before: a
/// probe of the primary key, read for each parent that one settle call
/// completed (one statement per parent and no write: binding the batch's
/// ids as one JSON array cost more, in its parse and the IN list's
/// temporary index, than a statement per parent).
///
/// A completed parent's edges are released by its state: `released` is
/// written only for a parent that failed under run-anyway (it may be
/// retried and complete later, and must not count twice), never by an
/// ack. Writing it per edge cost a fan-in's member acks as much as
/// the acks themselves, and a Completed job never leaves Completed (purge
/// removes it), so "released = 1 or the parent is Completed" is the edge's
/// release, read by no statement but this one's caller: the others look at
/// the edges of parents that are not Completed.
const OPEN_OF_COMPLETED: &str = "SELECT child FROM job_deps WHERE parent = ?1 AND released = 0";
/// Child ?1's count of unfinished parents goes down by ?2: the edges of it
/// one batch released. Its workflow comes with it, for its counts.
const COUNT_DOWN_BY: &str =
    "UPDATE job_nodes SET unfinished = unfinished - ?2 WHERE id = ?1 RETURNING unfinished, workflow";
/// WAKE, answering the woken child's queue and new state (nothing when it
/// was not Waiting).
/// A woken keyed child waits with its marker (`keyed_wait`) set.
const WAKE_RETURNING: &str = "UPDATE jobs SET state = CASE WHEN run_at <= ?2 THEN 'pending' ELSE 'scheduled' END, \
     run_at = max(run_at, ?2), keyed_wait = key \
     WHERE id = ?1 AND state = 'waiting' RETURNING queue, state";
const COUNT_DOWN: &str = "UPDATE job_nodes SET unfinished = unfinished - 1 WHERE id = ?1 RETURNING unfinished";
const WAKE: &str = "UPDATE jobs SET state = CASE WHEN run_at <= ?2 THEN 'pending' ELSE 'scheduled' END, \
     run_at = max(run_at, ?2), keyed_wait = key \
     WHERE id = ?1 AND state = 'waiting'";
const CASCADE_CANCEL: &str =
    "UPDATE jobs SET state = 'cancelled', finished_at = ?2 WHERE id = ?1 AND state = 'waiting'";
const CANCELLED_BY: &str = "UPDATE job_nodes SET cancelled_by = ?2 WHERE id = ?1";
/// Children a failure cancelled (`cancelled_by` marks them), for an
/// operator's retry.
const CANCELLED_CHILDREN: &str = "SELECT d.child, j.queue, j.flow, n.workflow FROM job_deps d \
     JOIN job_nodes n ON n.id = d.child JOIN jobs j ON j.id = d.child \
     WHERE d.parent = ?1 AND j.state = 'cancelled' AND n.cancelled_by IS NOT NULL";
/// Child ?1's first parent in step order that failed under `cancel` with
/// its edge unreleased: the one a cascade-cancelled job reports.
const FIRST_FAILED: &str = "SELECT d.parent FROM job_deps d JOIN jobs p ON p.id = d.parent \
     WHERE d.child = ?1 AND d.released = 0 AND d.on_failure = 'cancel' \
     AND (p.state = 'dead' OR p.state = 'cancelled') ORDER BY d.position LIMIT 1";
const RESTORE: &str = "UPDATE jobs SET state = 'waiting', finished_at = NULL WHERE id = ?1 AND state = 'cancelled'";
const STORE_RESULT: &str = "INSERT INTO job_results (id, result) VALUES (?1, ?2) \
     ON CONFLICT (id) DO UPDATE SET result = excluded.result";
const MARK_RESULT: &str = "UPDATE jobs SET flow = flow | 4 WHERE id = ?1";

fn uuid(bytes: &[u8]) -> Result<Uuid> {
    Uuid::from_slice(bytes)
        .map_err(|_| Error::Corrupt { id: None, reason: "a workflow row holds an id that is not a UUID".into() })
}

fn job_id(v: Vec<u8>) -> Result<JobId> {
    uuid(&v).map(JobId)
}

fn state_of(s: &str) -> Result<State> {
    parse_state(s).ok_or_else(|| Error::Corrupt { id: None, reason: format!("unknown state {s:?} in a workflow") })
}

/// Stores `plan` on `conn` inside a transaction the caller owns; returns
/// the ids and whether anything was stored (a resend stores nothing).
pub(crate) fn enqueue<'a>(conn: &Connection, plan: &'a WorkflowPlan, now: Timestamp) -> Result<(Vec<JobId>, bool)> {
    let wid = blob(&plan.id.0);
    let known: bool =
        conn.prepare_cached("SELECT 1 FROM workflows WHERE id = ?1").map_err(db)?.exists(params![wid]).map_err(db)?;
    if known {
        return Ok((stored_ids(conn, plan.id)?, false));
    }
    let now_us = now.timestamp_micros();
    let ids = plan.ids();
    let children = plan.children();
    let mut exists = conn.prepare_cached("SELECT 1 FROM jobs WHERE id = ?1").map_err(db)?;
    for step in &plan.steps {
        if exists.exists(params![blob(&step.job.id.0)]).map_err(db)? {
            return Err(Error::invalid(
                "workflow step",
                format!("job {} of step {:?} is stored already", step.job.id, step.name),
            ));
        }
    }
    conn.prepare_cached("INSERT INTO workflows (id, created_at) VALUES (?1, ?2)")
        .map_err(db)?
        .execute(params![wid, now_us])
        .map_err(db)?;
    let mut jobs = RowInserter::new(INSERT_JOBS_HEAD, JOB_VALUES, JOB_PARAMS);
    let mut nodes = RowInserter::new(INSERT_NODES_HEAD, NODE_VALUES, NODE_PARAMS);
    let mut deps = RowInserter::new(INSERT_DEPS_HEAD, DEP_VALUES, DEP_PARAMS);
    let mut tally = Tally::default();
    for (i, step) in plan.steps.iter().enumerate() {
        let job = &step.job;
        let run_at = job.run_at.map_or(now_us, |t| t.timestamp_micros());
        let state = if !step.parents.is_empty() {
            State::Waiting
        } else if run_at <= now_us {
            State::Pending
        } else {
            State::Scheduled
        };
        let flow = IN_WORKFLOW | if children[i].is_empty() { 0 } else { HAS_CHILDREN };
        let null_or_text = |t: Option<&'a str>| t.map_or(ValueRef::Null, |t| ValueRef::Text(t.as_bytes()));
        jobs.push(
            conn,
            [
                ValueRef::Blob(blob(&job.id.0)),
                ValueRef::Text(job.queue.as_str().as_bytes()),
                ValueRef::Text(job.kind.as_bytes()),
                ValueRef::Text(job.payload.as_str().as_bytes()),
                ValueRef::Integer(i64::from(job.priority.as_i16())),
                ValueRef::Text(state.as_str().as_bytes()),
                ValueRef::Integer(i64::from(job.max_attempts)),
                ValueRef::Integer(run_at),
                ValueRef::Integer(now_us),
                null_or_text(job.trace.as_ref().map(|t| t.as_stored())),
                ValueRef::Integer(flow),
                job.timeout_ms().map_or(ValueRef::Null, ValueRef::Integer),
                null_or_text(job.key.as_deref()),
                // A keyed step that waits to run (not Waiting) carries the
                // marker `keyed_wait`, its key (001_schema.sql).
                if state == State::Waiting { ValueRef::Null } else { null_or_text(job.key.as_deref()) },
            ],
        )?;
        if state == State::Waiting {
            tally.add(Value::Text(job.queue.as_str().to_owned()), State::Waiting, 1);
        }
        tally.add_steps(wid, state, 1);
        nodes.push(
            conn,
            [
                ValueRef::Blob(blob(&job.id.0)),
                ValueRef::Blob(wid),
                ValueRef::Integer(i as i64),
                ValueRef::Text(step.name.as_bytes()),
                ValueRef::Integer(step.parents.len() as i64),
            ],
        )?;
        for &p in &step.parents {
            deps.push(
                conn,
                [
                    ValueRef::Blob(blob(&ids[p].0)),
                    ValueRef::Blob(blob(&job.id.0)),
                    ValueRef::Integer(p as i64),
                    ValueRef::Text(step.on_failure.as_str().as_bytes()),
                ],
            )?;
        }
    }
    jobs.finish(conn)?;
    nodes.finish(conn)?;
    deps.finish(conn)?;
    tally.apply(conn)?;
    Ok((ids, true))
}

/// Rows for one table, stored [`ROWS_PER_INSERT`] at a time by one
/// multi-row INSERT, the rest one by one at [`RowInserter::finish`].
struct RowInserter<'a> {
    /// The INSERT of [`ROWS_PER_INSERT`] rows.
    full: String,
    /// The INSERT of one row.
    one: String,
    /// Parameters per row.
    per_row: usize,
    /// The parameters of the rows not stored yet, row after row.
    pending: Vec<ValueRef<'a>>,
}

impl<'a> RowInserter<'a> {
    /// `head` is `INSERT INTO t (...) VALUES `, `values` one row's
    /// `(?, ...)` with `per_row` parameters.
    fn new(head: &str, values: &str, per_row: usize) -> Self {
        let mut full = String::with_capacity(head.len() + ROWS_PER_INSERT * (values.len() + 1));
        full.push_str(head);
        for i in 0..ROWS_PER_INSERT {
            if i > 0 {
                full.push(',');
            }
            full.push_str(values);
        }
        RowInserter {
            full,
            one: format!("{head}{values}"),
            per_row,
            pending: Vec::with_capacity(per_row * ROWS_PER_INSERT),
        }
    }

    /// Runs `sql` with `params`, one per placeholder in order.
    fn run(conn: &Connection, sql: &str, params: &[ValueRef<'a>]) -> Result<()> {
        let mut stmt = conn.prepare_cached(sql).map_err(db)?;
        for (i, value) in params.iter().enumerate() {
            stmt.raw_bind_parameter(i + 1, ToSqlOutput::Borrowed(*value)).map_err(db)?;
        }
        stmt.raw_execute().map_err(db)?;
        Ok(())
    }

    /// Adds one row; stores a full chunk.
    fn push<const N: usize>(&mut self, conn: &Connection, row: [ValueRef<'a>; N]) -> Result<()> {
        debug_assert_eq!(N, self.per_row);
        self.pending.extend(row);
        if self.pending.len() == self.per_row * ROWS_PER_INSERT {
            Self::run(conn, &self.full, &self.pending)?;
            self.pending.clear();
        }
        Ok(())
    }

    /// Stores the rows left, one statement each.
    fn finish(self, conn: &Connection) -> Result<()> {
        for row in self.pending.chunks(self.per_row) {
            Self::run(conn, &self.one, row)?;
        }
        Ok(())
    }
}

fn stored_ids(conn: &Connection, id: WorkflowId) -> Result<Vec<JobId>> {
    let mut stmt = conn.prepare_cached("SELECT id FROM job_nodes WHERE workflow = ?1 ORDER BY position").map_err(db)?;
    let rows = stmt.query_map(params![blob(&id.0)], |r| r.get::<_, Vec<u8>>(0)).map_err(db)?;
    rows.map(|r| r.map_err(db).and_then(job_id)).collect()
}

/// Stores `result` with job `id` (just acked, in the same transaction).
pub(crate) fn store_result(conn: &Connection, id: JobId, result: &Payload) -> Result<()> {
    conn.prepare_cached(STORE_RESULT).map_err(db)?.execute(params![blob(&id.0), result.as_str()]).map_err(db)?;
    conn.prepare_cached(MARK_RESULT).map_err(db)?.execute(params![blob(&id.0)]).map_err(db)?;
    Ok(())
}

/// An open edge from a finished parent: the child, the edge's policy, the
/// child's state, queue, run_at and flow, and its workflow (from its node).
type OpenChild = (Vec<u8>, String, String, Value, i64, i64, Option<WorkflowKey>);

/// Job `id` just became terminal in `state`: its children are released or
/// cancelled (and theirs, down), in the caller's transaction. Returns true
/// when a job became claimable.
pub(crate) fn finished(conn: &Connection, tally: &mut Tally, id: JobId, state: State, now_us: i64) -> Result<bool> {
    let mut woke = false;
    let mut stack = vec![(id, state)];
    while let Some((parent, pstate)) = stack.pop() {
        let open: Vec<OpenChild> = {
            let mut stmt = conn.prepare_cached(OPEN_CHILDREN).map_err(db)?;
            let rows = stmt
                .query_map(params![blob(&parent.0)], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
                })
                .map_err(db)?;
            rows.collect::<rusqlite::Result<_>>().map_err(db)?
        };
        for (child, policy, cstate, queue, run_at, flow, workflow) in open {
            let policy = OnFailure::parse(&policy).unwrap_or_default();
            let cstate = state_of(&cstate)?;
            if pstate == State::Completed || policy == OnFailure::RunAnyway {
                conn.prepare_cached(RELEASE_EDGE).map_err(db)?.execute(params![blob(&parent.0), child]).map_err(db)?;
                let left: i64 =
                    conn.prepare_cached(COUNT_DOWN).map_err(db)?.query_row(params![child], |r| r.get(0)).map_err(db)?;
                if left == 0 && cstate == State::Waiting {
                    conn.prepare_cached(WAKE).map_err(db)?.execute(params![child, now_us]).map_err(db)?;
                    tally.add(queue, State::Waiting, -1);
                    // WAKE's own choice, from the run_at read above.
                    let to = if run_at <= now_us { State::Pending } else { State::Scheduled };
                    if let Some(workflow) = &workflow {
                        tally.step_moved(workflow, State::Waiting, to);
                    }
                    woke |= run_at <= now_us;
                }
            } else if cstate == State::Waiting {
                conn.prepare_cached(CASCADE_CANCEL).map_err(db)?.execute(params![child, now_us]).map_err(db)?;
                conn.prepare_cached(CANCELLED_BY).map_err(db)?.execute(params![child, blob(&parent.0)]).map_err(db)?;
                tally.add(queue.clone(), State::Waiting, -1);
                tally.add(queue, State::Cancelled, 1);
                if let Some(workflow) = &workflow {
                    tally.step_moved(workflow, State::Waiting, State::Cancelled);
                }
                if flow & HAS_CHILDREN != 0 {
                    stack.push((job_id(child)?, State::Cancelled));
                }
            }
        }
    }
    Ok(woke)
}

/// Jobs `ids`, each with children, just became Completed in the caller's
/// transaction (one settle batch): every edge from them not released yet
/// is released (by their state, see [`OPEN_OF_COMPLETED`]) and each
/// child's count of unfinished parents goes down by the number of its
/// edges released here, once per child and batch; a child whose count
/// reaches zero while Waiting wakes. The same end state as [`finished`]
/// per parent: an ack releases every open edge whatever the
/// policy, and the order of releases within one transaction does not
/// matter (a count reaches zero only once every parent released). Returns
/// true when a job became claimable.
pub(crate) fn completed(conn: &Connection, tally: &mut Tally, ids: &[JobId], now_us: i64) -> Result<bool> {
    // Children in id order, with how many of their edges this released.
    let mut released: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
    {
        let mut stmt = conn.prepare_cached(OPEN_OF_COMPLETED).map_err(db)?;
        for id in ids {
            let mut rows = stmt.query(params![blob(&id.0)]).map_err(db)?;
            while let Some(r) = rows.next().map_err(db)? {
                *released.entry(r.get::<_, Vec<u8>>(0).map_err(db)?).or_default() += 1;
            }
        }
    }
    let mut woke = false;
    for (child, n) in released {
        let (left, workflow): (i64, WorkflowKey) = conn
            .prepare_cached(COUNT_DOWN_BY)
            .map_err(db)?
            .query_row(params![child, n], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(db)?;
        if left != 0 {
            continue;
        }
        let wake: Option<(Value, String)> = conn
            .prepare_cached(WAKE_RETURNING)
            .map_err(db)?
            .query_row(params![child, now_us], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(db)?;
        if let Some((queue, state)) = wake {
            tally.add(queue, State::Waiting, -1);
            let to = if state == State::Pending.as_str() { State::Pending } else { State::Scheduled };
            tally.step_moved(&workflow, State::Waiting, to);
            woke |= to == State::Pending;
        }
    }
    Ok(woke)
}

/// Job `id`, Dead until now, was retried: the dependents its failure
/// cancelled come back to Waiting, and theirs, down, unless another failed
/// parent still cancels them (it is then named instead).
pub(crate) fn retried(conn: &Connection, tally: &mut Tally, id: JobId) -> Result<()> {
    let mut stack = vec![id];
    while let Some(parent) = stack.pop() {
        let cancelled: Vec<(Vec<u8>, Value, i64, WorkflowKey)> = {
            let mut stmt = conn.prepare_cached(CANCELLED_CHILDREN).map_err(db)?;
            let rows = stmt
                .query_map(params![blob(&parent.0)], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .map_err(db)?;
            rows.collect::<rusqlite::Result<_>>().map_err(db)?
        };
        for (child, queue, flow, workflow) in cancelled {
            if first_failed(conn, &child)?.is_some() {
                continue;
            }
            conn.prepare_cached(RESTORE).map_err(db)?.execute(params![child]).map_err(db)?;
            conn.prepare_cached(CANCELLED_BY).map_err(db)?.execute(params![child, Value::Null]).map_err(db)?;
            tally.add(queue.clone(), State::Cancelled, -1);
            tally.add(queue, State::Waiting, 1);
            tally.step_moved(&workflow, State::Cancelled, State::Waiting);
            if flow & HAS_CHILDREN != 0 {
                stack.push(job_id(child)?);
            }
        }
    }
    Ok(())
}

fn first_failed(conn: &Connection, child: &[u8]) -> Result<Option<Vec<u8>>> {
    conn.prepare_cached(FIRST_FAILED).map_err(db)?.query_row(params![child], |r| r.get(0)).optional().map_err(db)
}

/// A purged job's node and result go with it; returns the workflow of a
/// step (from its node), whose counts it leaves.
pub(crate) fn purged(conn: &Connection, id: &[u8]) -> Result<Option<WorkflowKey>> {
    conn.prepare_cached("DELETE FROM job_results WHERE id = ?1").map_err(db)?.execute(params![id]).map_err(db)?;
    conn.prepare_cached("DELETE FROM job_nodes WHERE id = ?1 RETURNING workflow")
        .map_err(db)?
        .query_row(params![id], |r| r.get(0))
        .optional()
        .map_err(db)
}

fn require_job(conn: &Connection, id: JobId) -> Result<()> {
    let found = conn
        .prepare_cached("SELECT 1 FROM jobs WHERE id = ?1")
        .map_err(db)?
        .exists(params![blob(&id.0)])
        .map_err(db)?;
    if found { Ok(()) } else { Err(Error::NotFound { id }) }
}

/// The result of job `id`.
pub(crate) fn result(conn: &Connection, id: JobId) -> Result<Option<Payload>> {
    require_job(conn, id)?;
    let text: Option<String> = conn
        .prepare_cached("SELECT result FROM job_results WHERE id = ?1")
        .map_err(db)?
        .query_row(params![blob(&id.0)], |r| r.get(0))
        .optional()
        .map_err(db)?;
    Ok(text.map(Payload::from_stored))
}

/// A `job_nodes` row: workflow, step, unfinished parents, cancelled by.
type NodeRow = (Vec<u8>, String, i64, Option<Vec<u8>>);

/// Job `id`'s place in its workflow.
pub(crate) fn links(conn: &Connection, id: JobId) -> Result<JobLinks> {
    require_job(conn, id)?;
    let node: Option<NodeRow> = conn
        .prepare_cached("SELECT workflow, step, unfinished, cancelled_by FROM job_nodes WHERE id = ?1")
        .map_err(db)?
        .query_row(params![blob(&id.0)], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .optional()
        .map_err(db)?;
    let Some((workflow, step, unfinished, cancelled_by)) = node else { return Ok(JobLinks::default()) };
    // A cascade-cancelled job names its first failed parent in step order,
    // whatever order the failures came in.
    let cancelled: bool = conn
        .prepare_cached("SELECT state = 'cancelled' FROM jobs WHERE id = ?1")
        .map_err(db)?
        .query_row(params![blob(&id.0)], |r| r.get(0))
        .map_err(db)?;
    let cancelled_by = match cancelled_by {
        Some(_) if cancelled => first_failed(conn, blob(&id.0))?,
        _ => None,
    };
    let parents = {
        let mut stmt = conn
            .prepare_cached("SELECT parent, on_failure FROM job_deps WHERE child = ?1 ORDER BY position")
            .map_err(db)?;
        let rows = stmt
            .query_map(params![blob(&id.0)], |r| Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, String>(1)?)))
            .map_err(db)?;
        let mut parents = Vec::new();
        for r in rows {
            let (p, policy) = r.map_err(db)?;
            parents.push(ParentLink { id: job_id(p)?, on_failure: OnFailure::parse(&policy).unwrap_or_default() });
        }
        parents
    };
    let children = {
        let mut stmt = conn
            .prepare_cached(
                "SELECT d.child FROM job_deps d JOIN job_nodes n ON n.id = d.child WHERE d.parent = ?1 ORDER BY n.position",
            )
            .map_err(db)?;
        let rows = stmt.query_map(params![blob(&id.0)], |r| r.get::<_, Vec<u8>>(0)).map_err(db)?;
        rows.map(|r| r.map_err(db).and_then(job_id)).collect::<Result<Vec<_>>>()?
    };
    Ok(JobLinks {
        workflow: Some(WorkflowId(uuid(&workflow)?)),
        step: Some(step),
        parents,
        children,
        unfinished_parents: u32::try_from(unfinished).unwrap_or(0),
        cancelled_by: cancelled_by.map(job_id).transpose()?,
    })
}

/// Each parent's step, state and result.
pub(crate) fn parent_results(conn: &Connection, id: JobId) -> Result<Vec<ParentResult>> {
    require_job(conn, id)?;
    let mut stmt = conn
        .prepare_cached(
            "SELECT d.parent, coalesce(n.step, ''), j.state, r.result FROM job_deps d \
             JOIN jobs j ON j.id = d.parent LEFT JOIN job_nodes n ON n.id = d.parent \
             LEFT JOIN job_results r ON r.id = d.parent WHERE d.child = ?1 ORDER BY d.position",
        )
        .map_err(db)?;
    let rows = stmt
        .query_map(params![blob(&id.0)], |r| {
            Ok((
                r.get::<_, Vec<u8>>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
            ))
        })
        .map_err(db)?;
    let mut out = Vec::new();
    for r in rows {
        let (p, step, state, result) = r.map_err(db)?;
        out.push(ParentResult {
            id: job_id(p)?,
            step,
            state: state_of(&state)?,
            result: result.map(Payload::from_stored),
        });
    }
    Ok(out)
}

fn require_workflow(conn: &Connection, id: WorkflowId) -> Result<()> {
    let found = conn
        .prepare_cached("SELECT 1 FROM workflows WHERE id = ?1")
        .map_err(db)?
        .exists(params![blob(&id.0)])
        .map_err(db)?;
    if found { Ok(()) } else { Err(jq_core::storage::workflow_not_found(id)) }
}

/// The workflow's counts per state: its summary rows (`workflow_counts`,
/// one range of the primary key), never its steps.
pub(crate) fn workflow(conn: &Connection, id: WorkflowId) -> Result<WorkflowInfo> {
    require_workflow(conn, id)?;
    let mut stmt = conn.prepare_cached("SELECT state, n FROM workflow_counts WHERE workflow = ?1").map_err(db)?;
    let rows =
        stmt.query_map(params![blob(&id.0)], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))).map_err(db)?;
    let mut counts = StateCounts::default();
    for r in rows {
        let (state, n) = r.map_err(db)?;
        let state = state_of(&state)?;
        if n < 0 {
            tracing::error!(
                workflow = %id,
                %state,
                count = n,
                "workflow: its count of steps went below zero (jobs changed outside jq?); counted as 0"
            );
        }
        counts.add(state, u64::try_from(n).unwrap_or(0));
    }
    Ok(WorkflowInfo { id, counts })
}

/// Every step of the workflow, in step order.
pub(crate) fn workflow_steps(conn: &Connection, id: WorkflowId) -> Result<Vec<StepInfo>> {
    require_workflow(conn, id)?;
    let mut parents: BTreeMap<Vec<u8>, Vec<JobId>> = BTreeMap::new();
    {
        let mut stmt = conn
            .prepare_cached(
                "SELECT d.child, d.parent FROM job_nodes n JOIN job_deps d ON d.child = n.id \
                 WHERE n.workflow = ?1 ORDER BY d.child, d.position",
            )
            .map_err(db)?;
        let rows = stmt
            .query_map(params![blob(&id.0)], |r| Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, Vec<u8>>(1)?)))
            .map_err(db)?;
        for r in rows {
            let (child, parent) = r.map_err(db)?;
            parents.entry(child).or_default().push(job_id(parent)?);
        }
    }
    let mut stmt = conn
        .prepare_cached(
            "SELECT n.id, n.step, j.kind, j.state FROM job_nodes n JOIN jobs j ON j.id = n.id \
             WHERE n.workflow = ?1 ORDER BY n.position",
        )
        .map_err(db)?;
    let rows = stmt
        .query_map(params![blob(&id.0)], |r| {
            Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?))
        })
        .map_err(db)?;
    let mut steps = Vec::new();
    for r in rows {
        let (raw, name, kind, state) = r.map_err(db)?;
        let ps = parents.remove(&raw).unwrap_or_default();
        steps.push(StepInfo { id: job_id(raw)?, name, kind, state: state_of(&state)?, parents: ps });
    }
    Ok(steps)
}
