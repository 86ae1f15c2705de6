//! Complete (ack, retry, fail, release) and heartbeat: one fenced UPDATE per
//! item, all items of a call in the writer's transaction.

use std::time::Duration;

use jq_core::clock::add;
use jq_core::{Error, JobId, LeaseRef, Outcome, Result, Settled, Settlement, State, Timestamp};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::db;
use crate::row::{blob, parse_state};

const ACK: &str = include_str!("sql/settle_ack.sql");
const NACK: &str = include_str!("sql/settle_nack.sql");
const BURY: &str = include_str!("sql/settle_bury.sql");
const RELEASE: &str = include_str!("sql/settle_release.sql");
const HEARTBEAT: &str = include_str!("sql/heartbeat.sql");

/// Applies each settlement on its own fence; returns the per-item results
/// and whether any job became claimable again (for the work signal).
pub(crate) fn settle(conn: &Connection, batch: Vec<Settlement>, now: Timestamp) -> Result<(Vec<Settled>, bool)> {
    let now_us = now.timestamp_micros();
    let mut results = Vec::with_capacity(batch.len());
    let mut handed_back = false;
    for Settlement { lease, outcome } in batch {
        let id = blob(&lease.id.0);
        let token = blob(&lease.token.0);
        let applied = match outcome {
            Outcome::Ack => {
                let n = conn.prepare_cached(ACK).map_err(db)?.execute(params![id, token, now_us]).map_err(db)?;
                (n == 1).then_some(State::Completed)
            }
            Outcome::Nack { error, delay } => {
                let run_at = add(now, delay).timestamp_micros();
                let state: Option<String> = conn
                    .prepare_cached(NACK)
                    .map_err(db)?
                    .query_row(params![id, token, now_us, error, run_at, delay.is_zero()], |r| r.get(0))
                    .optional()
                    .map_err(db)?;
                match state {
                    None => None,
                    Some(s) => Some(parse_state(&s).ok_or_else(|| Error::Corrupt {
                        id: Some(lease.id),
                        reason: format!("state {s:?} after retry"),
                    })?),
                }
            }
            Outcome::Bury { error } => {
                let n =
                    conn.prepare_cached(BURY).map_err(db)?.execute(params![id, token, now_us, error]).map_err(db)?;
                (n == 1).then_some(State::Dead)
            }
            Outcome::Release { delay } => {
                let run_at = add(now, delay).timestamp_micros();
                let n = conn
                    .prepare_cached(RELEASE)
                    .map_err(db)?
                    .execute(params![id, token, run_at, delay.is_zero()])
                    .map_err(db)?;
                (n == 1).then_some(if delay.is_zero() { State::Pending } else { State::Scheduled })
            }
        };
        match applied {
            Some(state) => {
                handed_back |= matches!(state, State::Pending | State::Scheduled);
                results.push(Ok(state));
            }
            None => results.push(Err(Error::LeaseLost { id: lease.id })),
        }
    }
    Ok((results, handed_back))
}

/// Extends every lease still held with its token; returns the lost ones.
pub(crate) fn heartbeat(conn: &Connection, leases: &[LeaseRef], lease: Duration, now: Timestamp) -> Result<Vec<JobId>> {
    let expires_at = add(now, lease).timestamp_micros();
    let mut stmt = conn.prepare_cached(HEARTBEAT).map_err(db)?;
    let mut lost = Vec::new();
    for l in leases {
        if stmt.execute(params![blob(&l.id.0), blob(&l.token.0), expires_at]).map_err(db)? == 0 {
            lost.push(l.id);
        }
    }
    Ok(lost)
}
