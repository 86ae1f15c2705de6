//! Periodic jobs in the pool: [`PeriodicRunner`], one round over every
//! declared periodic job (the step the pool repeats, and tests call under
//! a manual clock), and the task that repeats it every periodic interval,
//! one per pool (none without periodic jobs), until the pool stops.
//!
//! Every pool that declares periodic jobs runs it; no election is involved:
//! [`PeriodicStorage::fire`](crate::storage::PeriodicStorage::fire) lets exactly one pool store each tick's job.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::failure::Failure;
use super::pace::{ErrorBackoff, jitter};
use crate::error::{Error, Result};
use crate::periodic::{Fire, FireOutcome, Periodic, plan};
use crate::storage::{Storage, StorageExt};

/// The periodic jobs one pool declares.
#[derive(Clone, Debug, Default)]
pub struct PeriodicRunner {
    periodic: Vec<Periodic>,
}

/// What one [`PeriodicRunner::run_once`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Round {
    /// Steps stored ([`FireOutcome::Fired`]).
    pub fired: usize,
    /// Jobs stored by them.
    pub jobs: usize,
    /// Steps another pool had taken first ([`FireOutcome::Moved`]).
    pub moved: usize,
    /// Steps that failed (logged; the next round tries again).
    pub failed: usize,
}

impl PeriodicRunner {
    /// The runner of `periodic`; [`Error::InvalidInput`] when two share
    /// a name.
    pub fn new(periodic: Vec<Periodic>) -> Result<Self> {
        let mut names = HashSet::new();
        if let Some(dup) = periodic.iter().find(|p| !names.insert(p.name())) {
            return Err(Error::invalid("periodic job", format!("{:?} is declared twice", dup.name())));
        }
        Ok(PeriodicRunner { periodic })
    }

    /// The declared periodic jobs.
    pub fn periodic(&self) -> &[Periodic] {
        &self.periodic
    }

    /// Reads the stored rows once, then takes each periodic job's step
    /// ([`plan()`]) with one [`PeriodicStorage::fire`](crate::storage::PeriodicStorage::fire). A step another pool took
    /// first changes nothing and is counted in [`Round::moved`]: its ticks
    /// were stored by that pool. A failing step is logged and retried next
    /// round from what is stored then; `Err` when the rows cannot be read
    /// or an error is fatal.
    pub async fn run_once<S: Storage + ?Sized>(&self, storage: &S) -> Result<Round> {
        let mut round = Round::default();
        if self.periodic.is_empty() {
            return Ok(round);
        }
        let periodic = storage.require_periodic()?;
        let rows = periodic.periodic().await?;
        let now = storage.clock().now();
        for periodic_job in &self.periodic {
            let row = rows.iter().find(|r| r.name == periodic_job.name());
            let Some(plan) = plan(periodic_job, row, now) else { continue };
            let jobs = plan
                .ticks
                .iter()
                .chain(plan.trigger.iter())
                .map(|&tick| periodic_job.build(tick, now))
                .collect::<Result<Vec<_>>>();
            let jobs = match jobs {
                Ok(jobs) => jobs,
                Err(error) => {
                    tracing::error!(periodic = periodic_job.name(), %error, "the periodic job's job cannot be built; its ticks wait");
                    round.failed += 1;
                    continue;
                }
            };
            let fire = Fire {
                name: periodic_job.name().to_owned(),
                queue: periodic_job.queue().clone(),
                spec: periodic_job.spec().text(),
                zone: periodic_job.zone().name().to_owned(),
                expected: plan.expected,
                expected_trigger: plan.expected_trigger,
                cursor: plan.cursor,
                jobs,
                missed: plan.missed,
                last_missed: plan.last_missed,
            };
            match periodic.fire(&fire).await {
                Ok(FireOutcome::Fired(ids)) => {
                    round.fired += 1;
                    round.jobs += ids.len();
                    if plan.missed > 0 {
                        tracing::warn!(
                            periodic = periodic_job.name(),
                            missed = plan.missed,
                            "ticks passed while no pool ran the periodic job; skipped by its missed policy"
                        );
                    }
                    if !ids.is_empty() {
                        tracing::debug!(periodic = periodic_job.name(), jobs = ids.len(), cursor = %plan.cursor, "periodic job fired");
                    }
                }
                Ok(FireOutcome::Moved) => round.moved += 1,
                Err(error) if error.is_fatal() => return Err(error),
                Err(error) => {
                    tracing::warn!(periodic = periodic_job.name(), %error, "storing the periodic job's step failed; retrying next round");
                    round.failed += 1;
                }
            }
        }
        Ok(round)
    }
}

/// What the periodic job task needs.
pub(crate) struct PeriodicTask<S> {
    pub(crate) storage: Arc<S>,
    pub(crate) runner: PeriodicRunner,
    /// See `WorkerPool::periodic_interval`.
    pub(crate) interval: Duration,
    pub(crate) stop: CancellationToken,
    pub(crate) failure: Arc<Failure>,
}

impl<S: Storage> PeriodicTask<S> {
    /// Rounds until `stop`. A round is never dropped halfway by the stop:
    /// each step is one atomic call, so dropping between steps is safe, and
    /// the loop checks `stop` only between rounds.
    pub(crate) async fn run(self) {
        let mut backoff = ErrorBackoff::default();
        while !self.stop.is_cancelled() {
            let wait = match self.runner.run_once(&*self.storage).await {
                Ok(_) => {
                    backoff.reset();
                    jitter(self.interval, 0.1)
                }
                Err(error) if error.is_fatal() => {
                    self.failure.report("periodic jobs", error);
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, "reading the periodic jobs failed; retrying");
                    backoff.next_delay()
                }
            };
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}
