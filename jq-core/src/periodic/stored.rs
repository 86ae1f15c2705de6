//! A periodic job as the store keeps it ([`PeriodicInfo`]), and the one
//! step that moves it ([`Fire`], [`FireOutcome`]).

use super::declared::{ORPHAN_AFTER, check_name};
use super::ticks::{self, Spec};
use crate::clock::{Timestamp, add};
use crate::error::{Error, Result};
use crate::id::JobId;
use crate::job::{NewJob, QueueName};

/// A periodic job as the store keeps it ([`PeriodicStorage::periodic`](crate::storage::PeriodicStorage::periodic)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeriodicInfo {
    /// The name.
    pub name: String,
    /// The queue its jobs go to.
    pub queue: String,
    /// The cron expression or interval the last pool to fire it declared.
    pub spec: String,
    /// The zone, an IANA name.
    pub zone: String,
    /// The last tick handled (run or skipped); the next tick is the first
    /// one after it. A new periodic job starts at the instant it was stored.
    pub cursor: Timestamp,
    /// The job of the most recent run.
    pub last_job: Option<JobId>,
    /// Ticks that passed without a job ([`MissedPolicy`](super::MissedPolicy)), in all.
    pub missed: u64,
    /// The most recent of them.
    pub last_missed: Option<Timestamp>,
    /// When a pool last declared it (refreshed every [`DECLARE_REFRESH`](super::DECLARE_REFRESH)).
    pub declared_at: Timestamp,
    /// When an operator triggered it (`jqctl periodic trigger`), until a
    /// pool that declares the periodic job has stored it.
    pub triggered_at: Option<Timestamp>,
}

impl PeriodicInfo {
    /// True when no pool has declared it for [`ORPHAN_AFTER`]: every pool
    /// that knew it is gone or was deployed without it, and nothing fires it.
    pub fn is_orphaned(&self, now: Timestamp) -> bool {
        add(self.declared_at, ORPHAN_AFTER) <= now
    }

    /// The next tick after the cursor by the stored expression and zone;
    /// `None` when the stored text no longer parses (written by a newer jq)
    /// or the expression has no later tick.
    pub fn next_tick(&self) -> Option<Timestamp> {
        let spec = Spec::parse(&self.spec).ok()?;
        spec.next_after(self.cursor, ticks::zone(&self.zone).ok()?)
    }
}

/// One compare-and-set step of a periodic job, for [`PeriodicStorage::fire`](crate::storage::PeriodicStorage::fire).
#[derive(Clone, Debug)]
pub struct Fire {
    /// The periodic job.
    pub name: String,
    /// Its queue; every job of `jobs` must be of it.
    pub queue: QueueName,
    /// Its expression text, stored for operators.
    pub spec: String,
    /// Its zone name, stored for operators.
    pub zone: String,
    /// The cursor read; `None`: the periodic job has no row yet, create it.
    pub expected: Option<Timestamp>,
    /// The trigger read ([`PeriodicInfo::triggered_at`]); part of the
    /// comparison, and cleared by the step.
    pub expected_trigger: Option<Timestamp>,
    /// The new cursor.
    pub cursor: Timestamp,
    /// The jobs to store with it, in tick order.
    pub jobs: Vec<NewJob>,
    /// Missed ticks to add to the count.
    pub missed: u64,
    /// The most recent of those, if any.
    pub last_missed: Option<Timestamp>,
}

impl Fire {
    /// Checks the name, that the spec and zone texts hold no NUL (which
    /// PostgreSQL cannot store; the contract's "Text from outside"), and that every job
    /// is of the periodic job's queue.
    pub fn check(&self) -> Result<()> {
        check_name(&self.name)?;
        crate::text::check_no_nul("periodic job spec", &self.spec)?;
        crate::text::check_no_nul("periodic job zone", &self.zone)?;
        if let Some(job) = self.jobs.iter().find(|j| j.queue != self.queue) {
            return Err(Error::invalid(
                "periodic job",
                format!("a job of queue {} in a step of periodic job {} on queue {}", job.queue, self.name, self.queue),
            ));
        }
        Ok(())
    }

    /// The row a successful step leaves, given the row before it (`None`
    /// for a new periodic job), `now` and the ids stored: what every backend
    /// writes.
    pub fn applied(&self, before: Option<&PeriodicInfo>, now: Timestamp, ids: &[JobId]) -> PeriodicInfo {
        PeriodicInfo {
            name: self.name.clone(),
            queue: self.queue.as_str().to_owned(),
            spec: self.spec.clone(),
            zone: self.zone.clone(),
            cursor: self.cursor,
            last_job: ids.last().copied().or(before.and_then(|b| b.last_job)),
            missed: before.map_or(0, |b| b.missed).saturating_add(self.missed),
            last_missed: self.last_missed.or(before.and_then(|b| b.last_missed)),
            declared_at: now,
            triggered_at: None,
        }
    }

    /// True when a stored row is the one this step expects.
    pub fn matches(&self, stored: Option<&PeriodicInfo>) -> bool {
        match (self.expected, stored) {
            (None, None) => true,
            (Some(cursor), Some(row)) => row.cursor == cursor && row.triggered_at == self.expected_trigger,
            _ => false,
        }
    }
}

/// What [`PeriodicStorage::fire`](crate::storage::PeriodicStorage::fire) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FireOutcome {
    /// The cursor moved and the jobs were stored: their ids, in order (an
    /// existing job's id where a unique key or a stored id matched).
    Fired(Vec<JobId>),
    /// The stored row was not the one expected (another pool fired, an
    /// operator asked for a run, or the row exists already): nothing changed.
    Moved,
}
