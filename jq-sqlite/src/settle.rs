//! Settle (ack, nack, bury, release) and heartbeat: one fenced UPDATE per
//! item, all items of a call in the writer's transaction.

use std::time::Duration;

use jq_core::storage::{Beat, LeaseRef, Outcome, Settled, Settlement, add, storable_message};
use jq_core::{Error, Result, State, Timestamp};
use rusqlite::types::Value;
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};

use crate::counts::{Claimed, ClaimedQueues, Tally, workflow_of};
use crate::error::db;
use crate::row::{blob, parse_state};
use crate::workflow::{self, IN_WORKFLOW};

const ACK: &str = include_str!("sql/settle_ack.sql");
const NACK: &str = include_str!("sql/settle_nack.sql");
const BURY: &str = include_str!("sql/settle_bury.sql");
const RELEASE: &str = include_str!("sql/settle_release.sql");
const CANCEL: &str = include_str!("sql/settle_cancel.sql");
const QUEUE: &str = include_str!("sql/settle_queue.sql");
const HEARTBEAT: &str = include_str!("sql/heartbeat.sql");

/// Applies each settlement on its own fence; returns the per-item results
/// and whether any job became claimable again (for the work signal).
pub(crate) fn settle(
    conn: &Connection,
    batch: Vec<Settlement>,
    now: Timestamp,
    claimed: &mut ClaimedQueues,
) -> Result<(Vec<Settled>, bool)> {
    let now_us = now.timestamp_micros();
    let mut results = Vec::with_capacity(batch.len());
    let mut handed_back = false;
    let mut tally = Tally::default();
    // Completed parents release their children once per batch (see
    // workflow::completed); failed ones one by one, as their policies
    // differ per edge. Empty, and never allocated, for plain jobs.
    let mut completed = Vec::new();
    for Settlement { lease, outcome } in batch {
        let cached = claimed.settled(lease.id);
        match apply(conn, lease, outcome, now, now_us, &mut tally, cached) {
            Ok(Some((state, flow))) => {
                handed_back |= matches!(state, State::Pending | State::Scheduled);
                // Only a job with children looks for them (its
                // `flow` says so): the drain of plain jobs runs no statement more.
                if state == State::Completed && flow & workflow::HAS_CHILDREN != 0 {
                    completed.push(lease.id);
                } else if state.is_terminal() && flow & workflow::HAS_CHILDREN != 0 {
                    // Children are steps of their parent's workflow; the
                    // statements that move them read it from their nodes.
                    match workflow::finished(conn, &mut tally, lease.id, state, now_us) {
                        Ok(woke) => handed_back |= woke,
                        Err(e) => return Err(e),
                    }
                }
                results.push(Ok(state));
            }
            Ok(None) => results.push(Err(Error::LeaseLost { id: lease.id })),
            // One row the statement cannot update (an error history that
            // is not JSON) must not fail its batch: the pool would send the
            // same batch forever. SQLite undid that statement alone; the
            // job stays Running for recover, which buries such a row.
            Err(ItemError::Row(e)) => {
                tracing::error!(job = %lease.id, error = %e, "outcome not recorded: the job's row refused it");
                results.push(Err(db(e)));
            }
            Err(ItemError::Batch(e)) => return Err(e),
        }
    }
    if !completed.is_empty() {
        handed_back |= workflow::completed(conn, &mut tally, &completed, now_us)?;
    }
    tally.apply(conn)?;
    Ok((results, handed_back))
}

/// Why one item was not applied.
enum ItemError {
    /// The row refused the statement ([`is_row_specific`]); the others may
    /// still apply.
    Row(rusqlite::Error),
    /// The store failed; the call fails as a whole.
    Batch(Error),
}

impl From<Error> for ItemError {
    fn from(e: Error) -> Self {
        ItemError::Batch(e)
    }
}

/// Applies one outcome; `None` when its lease is not held, else the new
/// state and the job's `flow`. A job it finishes is added to `tally`, and
/// so is the move of a step (Running to its new state) in its workflow;
/// `cached` is what this writer remembered of the job when it claimed it
/// (else an ack reads its queue and flow, and a step its workflow).
fn apply(
    conn: &Connection,
    lease: LeaseRef,
    outcome: Outcome,
    now: Timestamp,
    now_us: i64,
    tally: &mut Tally,
    cached: Option<Claimed>,
) -> std::result::Result<Option<(State, i64)>, ItemError> {
    let row = |e: rusqlite::Error| if is_row_specific(&e) { ItemError::Row(e) } else { ItemError::Batch(db(e)) };
    let (cached, workflow) = match cached {
        Some(Claimed { queue, flow, workflow }) => (Some((queue, flow)), workflow),
        None => (None, None),
    };
    let changed = apply_outcome(conn, lease, outcome, now, now_us, tally, cached, row)?;
    if let Some((state, flow)) = changed
        && flow & IN_WORKFLOW != 0
    {
        // Only a step: the workflow its claim remembered, else its node's.
        let workflow = match workflow {
            Some(workflow) => Some(workflow),
            None => workflow_of(conn, blob(&lease.id.0))?,
        };
        if let Some(workflow) = workflow {
            tally.step_moved(&workflow, State::Running, state);
        }
    }
    Ok(changed)
}

/// Runs one outcome's statement and counts the job it finishes; [`apply`]
/// counts the move of a step in its workflow.
#[allow(clippy::too_many_arguments)]
fn apply_outcome(
    conn: &Connection,
    lease: LeaseRef,
    outcome: Outcome,
    now: Timestamp,
    now_us: i64,
    tally: &mut Tally,
    cached: Option<(Value, i64)>,
    row: impl Fn(rusqlite::Error) -> ItemError,
) -> std::result::Result<Option<(State, i64)>, ItemError> {
    let id = blob(&lease.id.0);
    let token = blob(&lease.token.0);
    Ok(match outcome {
        Outcome::Ack | Outcome::AckWith { .. } => {
            let n = conn.prepare_cached(ACK).map_err(db)?.execute(params![id, token, now_us]).map_err(row)?;
            if n != 1 {
                return Ok(None);
            }
            let (queue, flow): (Value, i64) = match cached {
                Some(cached) => cached,
                None => conn
                    .prepare_cached(QUEUE)
                    .map_err(db)?
                    .query_row(params![id], |r| Ok((r.get(0)?, r.get(1)?)))
                    .map_err(db)?,
            };
            tally.add(queue, State::Completed, 1);
            if let Outcome::AckWith { result } = &outcome {
                workflow::store_result(conn, lease.id, result)?;
            }
            Some((State::Completed, flow))
        }
        Outcome::Nack { error, delay } => {
            let run_at = add(now, delay).timestamp_micros();
            let error = storable_message(&error);
            let changed: Option<(String, Value, i64)> = conn
                .prepare_cached(NACK)
                .map_err(db)?
                .query_row(params![id, token, now_us, error, run_at, delay.is_zero()], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()
                .map_err(row)?;
            match changed {
                None => None,
                Some((s, queue, flow)) => {
                    let state = parse_state(&s).ok_or_else(|| Error::Corrupt {
                        id: Some(lease.id),
                        reason: format!("state {s:?} after retry"),
                    })?;
                    if state == State::Dead {
                        tally.add(queue, State::Dead, 1);
                    }
                    Some((state, flow))
                }
            }
        }
        Outcome::Bury { error } => {
            let error = storable_message(&error);
            let queue: Option<(Value, i64)> = conn
                .prepare_cached(BURY)
                .map_err(db)?
                .query_row(params![id, token, now_us, error], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
                .map_err(row)?;
            queue.map(|(queue, flow)| {
                tally.add(queue, State::Dead, 1);
                (State::Dead, flow)
            })
        }
        Outcome::Release { delay } => {
            let run_at = add(now, delay).timestamp_micros();
            let n = conn
                .prepare_cached(RELEASE)
                .map_err(db)?
                .execute(params![id, token, run_at, delay.is_zero()])
                .map_err(row)?;
            if n != 1 {
                return Ok(None);
            }
            // No RETURNING on a plain job's release: its flow is what the
            // claim remembered. Else (a job another process or handle
            // claimed, a rare case) it is taken for a step, and [`apply`]
            // looks for its node, which only a step has.
            let flow = match cached {
                Some((_, flow)) => flow,
                None => IN_WORKFLOW,
            };
            Some((if delay.is_zero() { State::Pending } else { State::Scheduled }, flow))
        }
        Outcome::Cancel => {
            // A cancelled job fails its dependents like a dead one: the
            // caller applies their policies (workflow::finished).
            let queue: Option<(Value, i64)> = conn
                .prepare_cached(CANCEL)
                .map_err(db)?
                .query_row(params![id, token, now_us], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
                .map_err(row)?;
            queue.map(|(queue, flow)| {
                tally.add(queue, State::Cancelled, 1);
                (State::Cancelled, flow)
            })
        }
    })
}

/// True for an error one row causes and another would not: a function
/// that refuses the row's value (`json_insert` of an error history that is
/// not JSON), a constraint, a type or size. Not for a busy, full or broken
/// store, nor a missing table.
fn is_row_specific(e: &rusqlite::Error) -> bool {
    match e {
        rusqlite::Error::SqliteFailure(f, message) => match f.code {
            ErrorCode::ConstraintViolation | ErrorCode::TypeMismatch | ErrorCode::TooBig => true,
            ErrorCode::Unknown => !message.as_deref().is_some_and(|m| m.starts_with("no such")),
            _ => false,
        },
        _ => false,
    }
}

/// Extends every lease still held with its token; returns the lost ones
/// and those holding a cancel request.
pub(crate) fn heartbeat(conn: &Connection, leases: &[LeaseRef], lease: Duration, now: Timestamp) -> Result<Beat> {
    let expires_at = add(now, lease).timestamp_micros();
    let mut stmt = conn.prepare_cached(HEARTBEAT).map_err(db)?;
    let mut beat = Beat::default();
    for l in leases {
        let cancel: Option<bool> = stmt
            .query_row(params![blob(&l.id.0), blob(&l.token.0), expires_at], |r| r.get(0))
            .optional()
            .map_err(db)?;
        match cancel {
            None => beat.lost.push(l.id),
            Some(true) => beat.cancel.push(l.id),
            Some(false) => {}
        }
    }
    Ok(beat)
}
