//! The counts of finished jobs (`job_counts`, schema version 7), kept by
//! the writer: each call that moves jobs into or out of a finished state
//! adds up what its statements changed (they return the jobs' queues) and
//! writes one sum per queue and state before it returns, in its own
//! transaction, so the counts commit or roll back with the jobs. `stats`
//! and `queues` read them instead of every finished job.

use std::collections::HashMap;

use jq_core::{Job, JobId, Result, State};
use rusqlite::types::Value;
use rusqlite::{Connection, params};

use crate::error::db;

const ADD: &str = include_str!("sql/counts_add.sql");

/// Changes to the counts, per (queue, finished state). The queue is the
/// stored value as it is: a corrupt one is counted under what it holds,
/// as `stats` would have grouped it.
#[derive(Debug, Default)]
pub(crate) struct Tally(Vec<(Value, State, i64)>);

impl Tally {
    /// `n` more (or fewer) jobs of `queue` in the finished `state`.
    pub(crate) fn add(&mut self, queue: Value, state: State, n: i64) {
        match self.0.iter_mut().find(|(q, s, _)| *s == state && *q == queue) {
            Some(entry) => entry.2 += n,
            None => self.0.push((queue, state, n)),
        }
    }

    /// Writes the sums; call it before the command's work is answered, on
    /// the connection (and so in the transaction) that changed the jobs.
    pub(crate) fn apply(self, conn: &Connection) -> Result<()> {
        if self.0.iter().all(|(_, _, n)| *n == 0) {
            return Ok(());
        }
        let mut add = conn.prepare_cached(ADD).map_err(db)?;
        for (queue, state, n) in self.0 {
            if n != 0 {
                add.execute(params![queue, state.as_str(), n]).map_err(db)?;
            }
        }
        Ok(())
    }
}

/// The queue and `flow` of each job this writer claimed, so that an ack
/// can count its job, and know whether it has children to release, without
/// reading the row again: a point `SELECT queue` per acked job
/// (`sql/settle_queue.sql`) was a third more work in the writer's settle,
/// and 8% of the 20,000-job drain (BENCHMARKS.md, session 15). A job's
/// queue never changes, nor does whether it has children (its workflow is
/// stored whole, `workflow.rs`), and an ack always follows this writer's
/// own claim (it needs the claim's token), so an entry is never wrong, only
/// absent (a claim by another process or handle, a map just cleared): then
/// the row is read.
#[derive(Debug, Default)]
pub(crate) struct ClaimedQueues(HashMap<JobId, (Value, i64)>);

/// Entries kept at most: jobs claimed and never settled here (lost
/// leases, a pool that stopped) must not grow the map forever.
const MAX_CLAIMED: usize = 100_000;

impl ClaimedQueues {
    /// Remembers the queue and flow of a job just claimed.
    pub(crate) fn claimed(&mut self, job: &Job, flow: i64) {
        if self.0.len() >= MAX_CLAIMED {
            self.0.clear();
        }
        self.0.insert(job.id, (Value::Text(job.queue.as_str().to_owned()), flow));
    }

    /// The queue and flow of `id` when it was claimed here, forgetting it.
    pub(crate) fn settled(&mut self, id: JobId) -> Option<(Value, i64)> {
        self.0.remove(&id)
    }
}
