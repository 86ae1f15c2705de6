//! Claim: on the writer, in one transaction. Candidates come from partial
//! indexes walked in claim order, each walk stopping at the limit: the
//! Pending jobs of each asked queue (one walk), and its due Scheduled jobs
//! (one range scan per priority). They are merged here, so nothing is ever
//! sorted in bulk, and each is then taken with the claim's token.
//!
//! Those walks read plain jobs only. A queue that also holds
//! keyed jobs (its control's statement tells, control_get.sql) gets a rotation
//! (rotation.rs), and the claim then takes its jobs one at a time, the
//! smallest of the plain jobs' next and each rotation's next ([`merge`]),
//! as the contract's "Keyed jobs" says. A claim over queues without keyed
//! jobs takes the plain candidates as before.
//!
//! A resend first looks for the Running jobs its token holds (an earlier
//! attempt whose answer was lost) and returns those instead.
//!
//! A claim that comes back short says which limit held back the claimable
//! jobs it left ([`ClaimAnswer::limited`]): a controlled queue whose own
//! limits are full and that still holds a claimable job (claim_left.sql,
//! run only then), and each key a rotation passed over for its limits.

use std::cmp::Reverse;

use jq_core::storage::{ClaimAnswer, ClaimRequest, Limited, add, from_micros};
use jq_core::{Job, Lease, Priority, QueueName, Result, State, Timestamp};
use rusqlite::types::{Value, ValueRef};
use rusqlite::{CachedStatement, Connection, OptionalExtension, Rows, params};

use crate::control;
use crate::counts::{ClaimedQueues, Tally, WorkflowKey, workflow_of};
use crate::error::db;
use crate::rotation::Rotation;
use crate::row::{self, blob};
use crate::workflow::IN_WORKFLOW;

const PENDING: &str = include_str!("sql/claim_pending.sql");
const DUE: &str = include_str!("sql/claim_due.sql");
const TAKE: &str = include_str!("sql/claim_take.sql");
const TAKE_KEYED: &str = include_str!("sql/keys_take.sql");
const ROW: &str = include_str!("sql/claim_row.sql");
const BURY: &str = include_str!("sql/bury.sql");
const EARLIER: &str = include_str!("sql/claim_earlier.sql");
const LEFT: &str = include_str!("sql/claim_left.sql");

struct Candidate {
    /// Index of its queue in the claim's sorted queue list.
    queue: usize,
    /// Pending or Scheduled: the walk that found it, for the counts of
    /// its workflow when it is a step.
    from: State,
    seq: i64,
    id: [u8; 16],
    priority: i64,
    run_at: i64,
    /// The row as the Pending walk read it (the job before its take, or
    /// why it does not decode) and its flow; `None` from a due walk, whose
    /// winners are read after their take (claim_row.sql).
    read: Option<(Result<Job>, Option<i64>)>,
    /// A step's workflow, when the walk read it with the row.
    workflow: Option<WorkflowKey>,
    /// From a rotation: taken by keys_take.sql, which clears its marker.
    keyed: bool,
}

/// Where a walk's rows hold what a candidate needs.
struct Layout {
    seq: usize,
    id: usize,
    priority: usize,
    run_at: usize,
    /// The rows are whole jobs in row.rs's order, then flow (at
    /// `row::COLUMN_COUNT`), then seq.
    whole: bool,
    /// Where a step's workflow is (NULL for a plain job).
    workflow: Option<usize>,
}

/// claim_pending.sql: whole rows.
const PENDING_ROWS: Layout = Layout {
    seq: row::COLUMN_COUNT + 1,
    id: 0,
    priority: 4,
    run_at: 8,
    whole: true,
    workflow: Some(row::COLUMN_COUNT + 2),
};
/// claim_due.sql: seq, id, priority, run_at.
const DUE_ROWS: Layout = Layout { seq: 0, id: 1, priority: 2, run_at: 3, whole: false, workflow: None };

/// Reads at most `limit` candidates, all in state `from`, from `rows`.
fn collect(
    mut rows: Rows<'_>,
    layout: &Layout,
    limit: usize,
    queue: usize,
    from: State,
    into: &mut Vec<Candidate>,
) -> Result<()> {
    let mut taken = 0;
    while taken < limit
        && let Some(r) = rows.next().map_err(db)?
    {
        taken += 1;
        // Lenient on purpose: a corrupt row must not stop the queue; it is
        // buried when taken.
        let mut id = [0u8; 16];
        if let Ok(ValueRef::Blob(b)) = r.get_ref(layout.id) {
            let n = b.len().min(16);
            id[..n].copy_from_slice(&b[..n]);
        }
        let int = |i| r.get_ref(i).ok().and_then(|v| v.as_i64().ok()).unwrap_or(0);
        let read = layout.whole.then(|| (row::decode(r), r.get::<_, i64>(row::COLUMN_COUNT).ok()));
        let workflow = match layout.workflow {
            Some(i) => r.get::<_, Option<WorkflowKey>>(i).ok().flatten(),
            None => None,
        };
        into.push(Candidate {
            queue,
            from,
            seq: r.get(layout.seq).map_err(db)?,
            id,
            priority: int(layout.priority),
            run_at: int(layout.run_at),
            read,
            workflow,
            keyed: false,
        });
    }
    Ok(())
}

/// The job `read` before its take, as the take left it (claim_take.sql:
/// Running, one more attempt, the claim's lease), so the row needs no
/// second read.
fn taken(mut job: Job, request: &ClaimRequest, expires_at: i64) -> Job {
    job.state = State::Running;
    job.attempts = job.attempts.saturating_add(1);
    job.lease =
        Some(Lease { token: request.token, worker: request.worker.clone(), expires_at: from_micros(expires_at) });
    job
}

/// Claim order: priority high to low, then run_at, then id.
fn sort(candidates: &mut [Candidate]) {
    candidates.sort_unstable_by(|a, b| b.priority.cmp(&a.priority).then(a.run_at.cmp(&b.run_at)).then(a.id.cmp(&b.id)));
}

/// Moves up to `request.limit` claimable jobs to Running and returns them.
/// Must run inside a write transaction (`BEGIN IMMEDIATE`).
pub(crate) fn claim(
    conn: &Connection,
    request: &ClaimRequest,
    now: Timestamp,
    claimed: &mut ClaimedQueues,
) -> Result<ClaimAnswer> {
    if request.limit == 0 || request.queues.is_empty() {
        return Ok(ClaimAnswer::default());
    }
    if request.resend {
        let earlier = earlier(conn, request)?;
        if !earlier.is_empty() {
            return Ok(ClaimAnswer::jobs(earlier));
        }
    }
    let now_us = now.timestamp_micros();
    let expires_at = add(now, request.lease).timestamp_micros();
    let mut queues: Vec<&QueueName> = request.queues.iter().collect();
    queues.sort();
    queues.dedup();

    // Each queue's pause and limits, checked in this transaction: what a
    // queue without a control costs is one primary-key lookup.
    let mut allowed = Vec::with_capacity(queues.len());
    for queue in &queues {
        allowed.push(control::allowance_of(conn, queue, &request.worker, request.limit, now)?);
    }
    // A queue that may give jobs and holds keyed ones (its control's
    // statement said so) gets a rotation, from the highest priority it
    // holds keyed jobs at.
    let mut rotations: Vec<Option<Rotation<'_>>> = Vec::with_capacity(queues.len());
    for (q, queue) in queues.iter().enumerate() {
        let top = allowed[q].keyed.filter(|_| allowed[q].allow > 0);
        rotations.push(top.map(|top| Rotation::new(queue, top, allowed[q].allow.min(request.limit))));
    }
    let keyed = rotations.iter().any(Option::is_some);
    let mut candidates = Vec::new();
    {
        let mut pending = conn.prepare_cached(PENDING).map_err(db)?;
        let mut due = conn.prepare_cached(DUE).map_err(db)?;
        for (q, queue) in queues.iter().enumerate() {
            let limit = allowed[q].allow;
            if limit == 0 {
                continue;
            }
            let from = candidates.len();
            let rows = pending.query(params![queue.as_str()]).map_err(db)?;
            collect(rows, &PENDING_ROWS, limit, q, State::Pending, &mut candidates)?;
            for priority in Priority::ALL.iter().rev() {
                let rows = due.query(params![queue.as_str(), priority.as_i16(), now_us]).map_err(db)?;
                collect(rows, &DUE_ROWS, limit, q, State::Scheduled, &mut candidates)?;
            }
            if limit < request.limit {
                // A limited queue gives at most its allowance: its best.
                sort(&mut candidates[from..]);
                candidates.truncate(from + limit);
            }
        }
    }
    sort(&mut candidates);
    let mut taker = Taker::new(conn, request, queues.len(), now_us, expires_at)?;
    // What held back keys passed over (the rotations know).
    let mut limited = None;
    if keyed {
        merge(conn, request, &mut taker, candidates, &mut rotations, &allowed, now_us, claimed)?;
        for rotation in rotations.into_iter().flatten() {
            limited = Limited::merge(limited, rotation.held());
            rotation.finish(conn, now_us)?;
        }
    } else {
        candidates.truncate(request.limit);
        for c in candidates {
            taker.take(c, claimed)?;
        }
    }
    let Taker { jobs, tally, taken_per_queue, .. } = taker;
    tally.apply(conn)?;
    for (q, queue) in queues.iter().enumerate() {
        control::started(conn, queue, &allowed[q], taken_per_queue[q], now)?;
    }
    if jobs.len() >= request.limit {
        return Ok(ClaimAnswer::jobs(jobs));
    }
    // Short: a queue whose own limits are full holds back what it has left.
    for (q, queue) in queues.iter().enumerate() {
        let Some(held) = allowed[q].held_after(taken_per_queue[q], now_us) else { continue };
        let left: bool = conn
            .prepare_cached(LEFT)
            .map_err(db)?
            .query_row(params![queue.as_str(), now_us], |r| r.get(0))
            .map_err(db)?;
        if left {
            limited = Limited::merge(limited, Some(held));
        }
    }
    Ok(ClaimAnswer { jobs, limited })
}

/// The claim over queues where keyed jobs wait (the contract's "Keyed
/// jobs"): takes, one at a time, the smallest of the plain jobs' next
/// (`plain`, in claim order) and each queue's rotation's next, by
/// (priority desc, effective run_at, plain before keyed, queue name),
/// within each queue's allowance, until `request.limit` jobs are taken.
/// Each job is taken as it is chosen, so the rotations' next pages no
/// longer find it.
#[allow(clippy::too_many_arguments)]
fn merge<'c>(
    conn: &'c Connection,
    request: &ClaimRequest,
    taker: &mut Taker<'_, '_>,
    plain: Vec<Candidate>,
    rotations: &mut [Option<Rotation<'c>>],
    allowed: &[control::Allowance],
    now_us: i64,
    claimed: &mut ClaimedQueues,
) -> Result<()> {
    let mut left: Vec<usize> = allowed.iter().map(|a| a.allow).collect();
    let mut plain = plain.into_iter().peekable();
    let mut picked = 0;
    while picked < request.limit {
        while plain.peek().is_some_and(|c| left[c.queue] == 0) {
            plain.next();
        }
        // (priority desc, effective run_at, keyed, queue index): queues are
        // sorted by name, so their index orders as their name.
        let mut best: Option<(Reverse<i64>, i64, bool, usize)> =
            plain.peek().map(|c| (Reverse(c.priority), c.run_at, false, c.queue));
        for (q, rotation) in rotations.iter_mut().enumerate() {
            let Some(rotation) = rotation.as_mut().filter(|_| left[q] > 0) else { continue };
            let Some((head, run_at)) = rotation.peek(conn, now_us)? else { continue };
            let next = (Reverse(i64::from(head.priority.as_i16())), run_at, true, q);
            if best.is_none_or(|b| next < b) {
                best = Some(next);
            }
        }
        let Some((_, _, is_keyed, q)) = best else { break };
        if is_keyed {
            let Some(head) = rotations[q].as_mut().and_then(Rotation::served) else { break };
            let c = Candidate {
                queue: q,
                from: head.from,
                seq: head.seq,
                id: head.id,
                priority: i64::from(head.priority.as_i16()),
                run_at: head.run_at,
                read: head.read,
                workflow: head.workflow,
                keyed: true,
            };
            if !taker.take(c, claimed)? {
                if let Some(rotation) = rotations[q].as_mut() {
                    rotation.stop();
                }
                continue;
            }
        } else {
            let Some(c) = plain.next() else { break };
            if !taker.take(c, claimed)? {
                continue;
            }
        }
        left[q] = left[q].saturating_sub(1);
        picked += 1;
    }
    Ok(())
}

/// Takes chosen candidates with the claim's lease, in the order given, and
/// keeps what the claim answers and counts.
struct Taker<'c, 'r> {
    conn: &'c Connection,
    request: &'r ClaimRequest,
    take: CachedStatement<'c>,
    /// keys_take.sql, prepared at the first keyed candidate: a claim of
    /// plain jobs never looks it up.
    take_keyed: Option<CachedStatement<'c>>,
    read: CachedStatement<'c>,
    token: [u8; 16],
    now_us: i64,
    expires_at: i64,
    jobs: Vec<Job>,
    /// The claimed steps' moves (and a corrupt job's burial); nothing,
    /// and no statement, for plain jobs.
    tally: Tally,
    taken_per_queue: Vec<usize>,
}

impl<'c, 'r> Taker<'c, 'r> {
    fn new(
        conn: &'c Connection,
        request: &'r ClaimRequest,
        queues: usize,
        now_us: i64,
        expires_at: i64,
    ) -> Result<Self> {
        Ok(Taker {
            conn,
            request,
            take: conn.prepare_cached(TAKE).map_err(db)?,
            take_keyed: None,
            read: conn.prepare_cached(ROW).map_err(db)?,
            token: *blob(&request.token.0),
            now_us,
            expires_at,
            jobs: Vec::new(),
            tally: Tally::default(),
            taken_per_queue: vec![0; queues],
        })
    }

    /// Takes `c`; false when its row changed nothing (no longer claimable).
    fn take(&mut self, c: Candidate, claimed: &mut ClaimedQueues) -> Result<bool> {
        let (conn, request, expires_at, now_us) = (self.conn, self.request, self.expires_at, self.now_us);
        let take = if c.keyed {
            match &mut self.take_keyed {
                Some(take) => take,
                None => self.take_keyed.insert(conn.prepare_cached(TAKE_KEYED).map_err(db)?),
            }
        } else {
            &mut self.take
        };
        if take.execute(params![c.seq, self.token, request.worker, expires_at]).map_err(db)? == 0 {
            return Ok(false);
        }
        self.taken_per_queue[c.queue] += 1;
        let row = match c.read {
            Some((job, flow)) => Some((job.map(|job| taken(job, request, expires_at)), flow)),
            None => self
                .read
                .query_row(params![c.seq], |r| Ok((row::decode(r), r.get::<_, i64>(row::COLUMN_COUNT).ok())))
                .optional()
                .map_err(db)?,
        };
        match row {
            None => {}
            Some((Ok(job), flow)) => {
                if let Some(flow) = flow {
                    // Only a step looks up its workflow (its `flow` says it is one).
                    let workflow = match c.workflow {
                        Some(workflow) => Some(workflow),
                        None if flow & IN_WORKFLOW != 0 => workflow_of(conn, &c.id)?,
                        None => None,
                    };
                    if let Some(workflow) = &workflow {
                        self.tally.step_moved(workflow, c.from, State::Running);
                    }
                    claimed.claimed(&job, flow, workflow);
                }
                self.jobs.push(job);
            }
            Some((Err(e), flow)) => {
                tracing::error!(error = %e, "claimed a job that cannot be decoded; it goes to Dead");
                // Its flow may be what is corrupt: then its node says
                // whether it is a step.
                let workflow =
                    if flow.is_none_or(|flow| flow & IN_WORKFLOW != 0) { workflow_of(conn, &c.id)? } else { None };
                let buried = conn
                    .prepare_cached(BURY)
                    .and_then(|mut bury| {
                        bury.query_row(params![c.seq, now_us, e.to_string()], |r| r.get::<_, Value>(0)).optional()
                    })
                    .map_err(db);
                let now_in = match buried {
                    Ok(Some(queue)) => {
                        self.tally.add(queue, State::Dead, 1);
                        State::Dead
                    }
                    Ok(None) => State::Running,
                    Err(bury_error) => {
                        // The others are claimed: keep them. This one stays
                        // Running until recover buries it.
                        tracing::error!(error = %bury_error, "could not move the corrupt job to Dead; recover will");
                        State::Running
                    }
                };
                if let Some(workflow) = &workflow {
                    self.tally.step_moved(workflow, c.from, now_in);
                }
            }
        }
        Ok(true)
    }
}

/// The Running jobs `request.token` holds, in claim order: what an earlier
/// attempt of this claim took. A row that does not decode is left for
/// recover (the attempt that took it tried to bury it).
fn earlier(conn: &Connection, request: &ClaimRequest) -> Result<Vec<Job>> {
    let seqs: Vec<i64> = conn
        .prepare_cached(EARLIER)
        .map_err(db)?
        .query_map(params![blob(&request.token.0)], |r| r.get(0))
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)?;
    let mut read = conn.prepare_cached(ROW).map_err(db)?;
    let mut jobs = Vec::with_capacity(seqs.len());
    for seq in seqs {
        if let Some(Ok(job)) = read.query_row(params![seq], |r| Ok(row::decode(r))).optional().map_err(db)? {
            jobs.push(job);
        }
    }
    jobs.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.run_at.cmp(&b.run_at)).then(a.id.cmp(&b.id)));
    if !jobs.is_empty() {
        tracing::info!(jobs = jobs.len(), "a resent claim returns what its first attempt took");
    }
    Ok(jobs)
}
