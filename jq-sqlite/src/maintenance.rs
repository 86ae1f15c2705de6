//! Promote, recover and purge: each one guarded statement on the writer;
//! and the WAL checkpoint that keeps the log from growing without bound.

use std::path::Path;

use jq_core::{Result, State, Timestamp};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params};

use crate::counts::{Tally, WorkflowKey, workflow_of};
use crate::error::db;
use crate::row;

const PROMOTE: &str = include_str!("sql/promote.sql");
const PROMOTE_STEPS: &str = include_str!("sql/promote_steps.sql");
/// Whether any workflow has a Scheduled step (`workflow_counts_scheduled`).
const ANY_STEP_SCHEDULED: &str =
    "SELECT 1 FROM workflow_counts INDEXED BY workflow_counts_scheduled WHERE state = 'scheduled' AND n > 0";
const RECOVER: &str = include_str!("sql/recover.sql");
const RECOVER_CORRUPT: &str = include_str!("sql/recover_corrupt.sql");
const BURY: &str = include_str!("sql/bury.sql");
const PURGE: &str = include_str!("sql/purge.sql");

/// Scheduled jobs due at `now` become Pending; returns how many. The
/// steps among them move in their workflows' counts.
pub(crate) fn promote(conn: &Connection, now: Timestamp) -> Result<u64> {
    let now_us = now.timestamp_micros();
    let mut tally = Tally::default();
    // Only a store with Scheduled steps reads them (one probe of a partial
    // index): plain jobs promote as before.
    let steps_scheduled = conn.prepare_cached(ANY_STEP_SCHEDULED).map_err(db)?.exists([]).map_err(db)?;
    if steps_scheduled {
        let mut stmt = conn.prepare_cached(PROMOTE_STEPS).map_err(db)?;
        let mut rows = stmt.query(params![now_us]).map_err(db)?;
        while let Some(r) = rows.next().map_err(db)? {
            let workflow: WorkflowKey = r.get(0).map_err(db)?;
            let n: i64 = r.get(1).map_err(db)?;
            tally.add_steps(&workflow, State::Scheduled, -n);
            tally.add_steps(&workflow, State::Pending, n);
        }
    }
    let n = conn.prepare_cached(PROMOTE).map_err(db)?.execute(params![now_us]).map_err(db)?;
    tally.apply(conn)?;
    Ok(n as u64)
}

/// Running jobs whose lease expired by `now` go back to Pending or to Dead,
/// in one guarded statement; returns how many. Runs inside the writer's
/// transaction, so the statement and the burials below apply together.
pub(crate) fn recover(conn: &Connection, now: Timestamp) -> Result<u64> {
    let now_us = now.timestamp_micros();
    let mut tally = Tally::default();
    let mut n = 0;
    let mut failed_parents: Vec<(Vec<u8>, State)> = Vec::new();
    // Steps among the recovered jobs, with their new state: their
    // workflows' counts move once the statement is done.
    let mut steps: Vec<(Vec<u8>, State)> = Vec::new();
    {
        let mut stmt = conn.prepare_cached(RECOVER).map_err(db)?;
        let mut rows = stmt.query(params![now_us]).map_err(db)?;
        while let Some(r) = rows.next().map_err(db)? {
            n += 1;
            // Dead (no attempt left) or Cancelled (a cancel was
            // requested): both finished, so counted, and both fail their
            // dependents (workflow::finished applies each one's policy).
            let state = r.get_ref(1).map_err(db)?.as_str().ok().and_then(row::parse_state);
            let flow: i64 = r.get(3).map_err(db)?;
            if let Some(state @ (State::Dead | State::Cancelled)) = state {
                tally.add(r.get(0).map_err(db)?, state, 1);
                if flow & crate::workflow::HAS_CHILDREN != 0 {
                    failed_parents.push((r.get::<_, Vec<u8>>(2).map_err(db)?, state));
                }
            }
            if let Some(state) = state
                && flow & crate::workflow::IN_WORKFLOW != 0
            {
                steps.push((r.get::<_, Vec<u8>>(2).map_err(db)?, state));
            }
        }
    }
    for (id, state) in steps {
        if let Some(workflow) = workflow_of(conn, &id)? {
            tally.step_moved(&workflow, State::Running, state);
        }
    }
    // A parent dead or cancelled by recover cancels (or releases) its
    // children in the same transaction, as a bury does.
    for (raw, state) in failed_parents {
        if let Ok(id) = uuid::Uuid::from_slice(&raw) {
            crate::workflow::finished(conn, &mut tally, jq_core::JobId(id), state, now_us)?;
        }
    }
    let buried = bury_corrupt(conn, now_us, &mut tally)?;
    tally.apply(conn)?;
    Ok(n + buried)
}

/// Moves the expired Running jobs that recover.sql left alone (their row is
/// corrupt) to Dead with the reason, as a claim does with a corrupt job:
/// otherwise they would stay Running, and in the lease index, forever.
/// Returns how many.
fn bury_corrupt(conn: &Connection, now_us: i64, tally: &mut Tally) -> Result<u64> {
    let found: Vec<(i64, String)> = {
        let mut stmt = conn.prepare_cached(RECOVER_CORRUPT).map_err(db)?;
        let rows = stmt
            .query_map(params![now_us], |r| {
                let reason = match row::decode(r) {
                    Err(e) => e.to_string(),
                    // Not expected: every row recover.sql refuses fails to
                    // decode too. It is still not a row recover can update.
                    Ok(job) => format!("job {} is corrupt in storage: recover cannot update its row", job.id),
                };
                Ok((r.get::<_, i64>(row::COLUMN_COUNT)?, reason))
            })
            .map_err(db)?;
        rows.collect::<rusqlite::Result<_>>().map_err(db)?
    };
    let mut bury = conn.prepare_cached(BURY).map_err(db)?;
    let mut buried = 0;
    for (seq, reason) in found {
        tracing::error!(%reason, "recover found an expired job that cannot be decoded: moving it to Dead");
        let message = format!("{reason} (its lease expired)");
        let changed: Option<(Value, Value)> =
            bury.query_row(params![seq, now_us, message], |r| Ok((r.get(0)?, r.get(1)?))).optional().map_err(db)?;
        if let Some((queue, id)) = changed {
            tally.add(queue, State::Dead, 1);
            buried += 1;
            // Its flow may be what is corrupt: its node says whether it is
            // a step (a rare path: one probe per corrupt job).
            if let Value::Blob(id) = id
                && let Some(workflow) = workflow_of(conn, &id)?
            {
                tally.step_moved(&workflow, State::Running, State::Dead);
            }
        }
    }
    Ok(buried)
}

/// Deletes at most `limit` jobs in terminal `state` finished before
/// `older_than`; returns how many.
pub(crate) fn purge_batch(conn: &Connection, state: State, older_than: Timestamp, limit: usize) -> Result<u64> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut tally = Tally::default();
    let mut n = 0;
    let mut gone: Vec<Vec<u8>> = Vec::new();
    // Jobs with a journal (flow bit 8): none for plain jobs, never allocated.
    let mut journals: Vec<Vec<u8>> = Vec::new();
    {
        let mut stmt = conn.prepare_cached(PURGE).map_err(db)?;
        let mut rows = stmt.query(params![state.as_str(), older_than.timestamp_micros(), limit]).map_err(db)?;
        while let Some(r) = rows.next().map_err(db)? {
            n += 1;
            tally.add(r.get(0).map_err(db)?, state, -1);
            let flow: i64 = r.get(3).map_err(db)?;
            if flow & (crate::workflow::IN_WORKFLOW | crate::workflow::HAS_RESULT) != 0 {
                gone.push(r.get::<_, Vec<u8>>(2).map_err(db)?);
            }
            if flow & crate::durable::DURABLE != 0 {
                journals.push(r.get::<_, Vec<u8>>(2).map_err(db)?);
            }
        }
    }
    for id in gone {
        // A purged step leaves its workflow's counts; the workflow stays
        // known (docs/CONTRACT.md, "Workflows").
        if let Some(workflow) = crate::workflow::purged(conn, &id)? {
            tally.add_steps(&workflow, state, -1);
        }
    }
    for id in journals {
        crate::durable::purged(conn, &id)?;
    }
    tally.apply(conn)?;
    Ok(n)
}

/// Runs `PRAGMA wal_checkpoint(TRUNCATE)` when the WAL of `db_path` is over
/// `max_bytes`. Readers that never pause can starve SQLite's automatic
/// checkpoints (a queue's WAL grew to 850 MiB that way); this resets it.
pub(crate) fn checkpoint_if_large(conn: &Connection, db_path: &Path, max_bytes: u64) {
    let mut wal = db_path.as_os_str().to_owned();
    wal.push("-wal");
    let Ok(size) = std::fs::metadata(&wal).map(|m| m.len()) else { return };
    if size <= max_bytes {
        return;
    }
    let result = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
    });
    match result {
        Ok((busy, log, done)) => {
            tracing::info!(wal_bytes = size, busy, log_frames = log, checkpointed = done, "checkpointed the SQLite WAL")
        }
        Err(e) => tracing::warn!(wal_bytes = size, error = %e, "SQLite WAL checkpoint failed"),
    }
}
