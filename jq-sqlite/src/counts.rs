//! The counts of finished jobs (`job_counts`) and of each workflow's
//! steps (`workflow_counts`), kept by the
//! writer: each call that moves jobs into or out of a finished state, or
//! moves a step of a workflow, adds up what its statements changed (they
//! return the jobs' queues, and whether each is a step) and writes one sum
//! per queue and state, and per workflow and state, before it returns, in
//! its own transaction, so the counts commit or roll back with the jobs.
//! `stats` and `queues` read them instead of every finished job, and
//! `workflow(id)` instead of every step.

use std::collections::{BTreeMap, HashMap};

use jq_core::{Job, JobId, Result, State};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::db;

const ADD: &str = include_str!("sql/counts_add.sql");
const ADD_STEPS: &str = include_str!("sql/workflow_counts_add.sql");
const WORKFLOW_OF: &str = "SELECT workflow FROM job_nodes WHERE id = ?1";

/// A workflow's id as stored (`workflows.id`, `job_nodes.workflow`).
pub(crate) type WorkflowKey = Vec<u8>;

/// Changes to the counts, per (queue, finished state), and per (workflow,
/// state) of steps. The queue is the stored value as it is: a corrupt one
/// is counted under what it holds, as `stats` would have grouped it.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Few entries (one per queue and state a call touched): a list.
    jobs: Vec<(Value, State, i64)>,
    /// Possibly one per step of a batch (a promote, an ack batch of steps
    /// of many workflows): a map, written in key order. Empty, and never
    /// allocated, in a call that moved no step.
    steps: BTreeMap<(WorkflowKey, State), i64>,
}

impl Tally {
    /// `n` more (or fewer) jobs of `queue` in the finished `state`.
    pub(crate) fn add(&mut self, queue: Value, state: State, n: i64) {
        match self.jobs.iter_mut().find(|(q, s, _)| *s == state && *q == queue) {
            Some(entry) => entry.2 += n,
            None => self.jobs.push((queue, state, n)),
        }
    }

    /// `n` more (or fewer) steps of `workflow` in `state`.
    pub(crate) fn add_steps(&mut self, workflow: &[u8], state: State, n: i64) {
        *self.steps.entry((workflow.to_vec(), state)).or_default() += n;
    }

    /// One step of `workflow` went from state `from` to state `to`.
    pub(crate) fn step_moved(&mut self, workflow: &[u8], from: State, to: State) {
        if from != to {
            self.add_steps(workflow, from, -1);
            self.add_steps(workflow, to, 1);
        }
    }

    /// Writes the sums; call it before the command's work is answered, on
    /// the connection (and so in the transaction) that changed the jobs.
    pub(crate) fn apply(self, conn: &Connection) -> Result<()> {
        if self.jobs.iter().any(|(_, _, n)| *n != 0) {
            let mut add = conn.prepare_cached(ADD).map_err(db)?;
            for (queue, state, n) in self.jobs {
                if n != 0 {
                    add.execute(params![queue, state.as_str(), n]).map_err(db)?;
                }
            }
        }
        if self.steps.values().any(|n| *n != 0) {
            let mut add = conn.prepare_cached(ADD_STEPS).map_err(db)?;
            for ((workflow, state), n) in self.steps {
                if n != 0 {
                    add.execute(params![workflow, state.as_str(), n]).map_err(db)?;
                }
            }
        }
        Ok(())
    }
}

/// The workflow of step `id` (a job's id as stored), read from its node:
/// called only for jobs whose `flow` says they are steps, or on rare paths
/// (a corrupt job, a release this writer did not claim). `None` for a job
/// that is not a step.
pub(crate) fn workflow_of(conn: &Connection, id: &[u8]) -> Result<Option<WorkflowKey>> {
    conn.prepare_cached(WORKFLOW_OF).map_err(db)?.query_row(params![id], |r| r.get(0)).optional().map_err(db)
}

/// The queue and `flow` of each job this writer claimed, and the workflow
/// of a step, so that an ack can count its job (and its workflow's step),
/// and know whether it has children to release, without reading the row
/// again: a point `SELECT queue` per acked job
/// (`sql/settle_queue.sql`) was a third more work in the writer's settle,
/// and a measurable share of the drain. A job's
/// queue never changes, nor does whether it has children, nor its workflow
/// (a workflow is stored whole, `workflow.rs`), and an ack always follows this writer's
/// own claim (it needs the claim's token), so an entry is never wrong, only
/// absent (a claim by another process or handle, a map just cleared): then
/// the row is read.
#[derive(Debug, Default)]
pub(crate) struct ClaimedQueues(HashMap<JobId, Claimed>);

/// What [`ClaimedQueues`] remembers of one claimed job.
#[derive(Debug)]
pub(crate) struct Claimed {
    /// Its queue, as stored.
    pub(crate) queue: Value,
    /// Its `flow` bits (`001_schema.sql`).
    pub(crate) flow: i64,
    /// Its workflow, when it is a step; `None` for a plain job.
    pub(crate) workflow: Option<WorkflowKey>,
}

/// Entries kept at most: jobs claimed and never settled here (lost
/// leases, a pool that stopped) must not grow the map forever.
const MAX_CLAIMED: usize = 100_000;

impl ClaimedQueues {
    /// Remembers the queue, flow and workflow of a job just claimed.
    pub(crate) fn claimed(&mut self, job: &Job, flow: i64, workflow: Option<WorkflowKey>) {
        if self.0.len() >= MAX_CLAIMED {
            self.0.clear();
        }
        self.0.insert(job.id, Claimed { queue: Value::Text(job.queue.as_str().to_owned()), flow, workflow });
    }

    /// What was remembered of `id` when it was claimed here, forgetting it.
    pub(crate) fn settled(&mut self, id: JobId) -> Option<Claimed> {
        self.0.remove(&id)
    }
}
