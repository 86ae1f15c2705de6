//! Periodic jobs: periodic jobs declared in code, one job per (periodic job, tick)
//! enforced by the store.
//!
//! A [`Periodic`] names a cron expression ([`Spec::cron`], 5 or 6 fields)
//! or a fixed interval ([`Spec::every`]), an IANA time zone, a
//! [`MissedPolicy`], and the job to enqueue for each tick, built from the
//! tick's instant. Give periodic jobs to the pool
//! ([`WorkerPool::periodic`](crate::WorkerPool::periodic)); every pool that
//! declares a periodic job takes part, and no pool is special:
//!
//! - The store keeps one row (a hash on Redis) per periodic job with its
//!   *cursor*: the last tick handled. A pool reads the rows
//!   ([`PeriodicStorage::periodic`](crate::storage::PeriodicStorage::periodic)), works out the due
//!   ticks from the cursor and its clock ([`plan()`]), builds their jobs, and
//!   calls [`PeriodicStorage::fire`](crate::storage::PeriodicStorage::fire): one atomic step that
//!   moves the cursor from the value read to the new tick *and* stores the
//!   jobs, or does nothing when the cursor is no longer the value read
//!   (another pool fired first). So any number of pools, started and
//!   stopped at any time, store each tick's job once.
//! - The cursor is a tick instant, never a wall-clock reading: pools whose
//!   clocks differ by seconds compute the same ticks, and the one with the
//!   clock ahead merely fires a tick a little earlier.
//! - Daylight-saving time: a cron expression is read on its zone's wall
//!   clock; a local time that does not exist runs once, at the first
//!   instant after the gap, and one that occurs twice runs once, at its
//!   first occurrence (the repository's `docs/periodic.md` has examples).
//!
//! [`PeriodicRunner`] is the step the pool runs every second;
//! tests call [`PeriodicRunner::run_once`] under a [`ManualClock`](crate::ManualClock).

mod plan;
mod runner;
mod ticks;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;

pub use plan::{Plan, plan};
pub use runner::{PeriodicRunner, Round};
pub use ticks::{Spec, local, ticks_between, to_instant, zone};

use crate::clock::{Timestamp, add};
use crate::error::{Error, Result};
use crate::job::{JobBuilder, JobId, JobType, NewJob, QueueName};

/// A tick older than this when a pool first sees it due is *missed*: its
/// periodic job's [`MissedPolicy`] decides whether it runs. Quartz's misfire
/// threshold has the same default.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);
/// At most this many ticks are handled per periodic job per round; a longer
/// backlog (every pool down for days under a per-second periodic job) is
/// counted as skipped over several rounds.
pub const MAX_TICKS_PER_ROUND: usize = 100_000;
/// A pool rewrites a periodic job's `declared_at` when it is older than this,
/// so operators can tell a periodic job still declared from an orphan.
pub const DECLARE_REFRESH: Duration = Duration::from_secs(60);
/// A periodic job no pool has declared for this long is shown as orphaned.
pub const ORPHAN_AFTER: Duration = Duration::from_secs(5 * 60);

/// What a periodic job does with ticks that passed while no pool ran it
/// (older than its grace, [`DEFAULT_GRACE`], when first seen due).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MissedPolicy {
    /// None runs: wait for the next tick.
    Skip,
    /// One job, for the most recent missed tick. The default.
    #[default]
    Latest,
    /// One job per missed tick, the most recent `cap` of them.
    All {
        /// The most missed ticks that run at once.
        cap: usize,
    },
}

impl fmt::Display for MissedPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MissedPolicy::Skip => f.write_str("skip"),
            MissedPolicy::Latest => f.write_str("latest"),
            MissedPolicy::All { cap } => write!(f, "all:{cap}"),
        }
    }
}

type Build = Arc<dyn Fn(Timestamp) -> JobBuilder + Send + Sync>;

/// A periodic job, declared in code: see the [module docs](self).
///
/// ```
/// use jq_core::periodic::{MissedPolicy, Periodic};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Report { day: String }
/// # impl jq_core::JobType for Report { const KIND: &'static str = "report"; const QUEUE: &'static str = "reports"; }
/// let nightly = Periodic::cron("nightly-report", "30 2 * * *")?
///     .zone("Europe/Berlin")?
///     .missed(MissedPolicy::Latest)
///     .job(|tick| Report { day: tick.date_naive().to_string() })?;
/// assert_eq!(nightly.queue().as_str(), "reports");
/// # Ok::<(), jq_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Periodic {
    name: String,
    spec: Spec,
    zone: Tz,
    missed: MissedPolicy,
    grace: Duration,
    queue: QueueName,
    build: Build,
}

impl fmt::Debug for Periodic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Periodic")
            .field("name", &self.name)
            .field("spec", &self.spec.text())
            .field("zone", &self.zone)
            .field("missed", &self.missed)
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

/// A periodic job without its job yet; finish it with [`PeriodicBuilder::job`]
/// or [`PeriodicBuilder::job_with`].
#[derive(Clone, Debug)]
pub struct PeriodicBuilder {
    name: String,
    spec: Spec,
    zone: Tz,
    missed: MissedPolicy,
    grace: Duration,
}

impl Periodic {
    /// A periodic job on a cron expression of 5 or 6 fields, in UTC unless
    /// [`PeriodicBuilder::zone`] says otherwise. The name follows the
    /// queue-name rules.
    pub fn cron(name: impl Into<String>, expression: &str) -> Result<PeriodicBuilder> {
        PeriodicBuilder::new(name.into(), Spec::cron(expression)?)
    }

    /// A periodic job every `interval` (at least 1 s), at multiples of it since
    /// the Unix epoch.
    pub fn every(name: impl Into<String>, interval: Duration) -> Result<PeriodicBuilder> {
        PeriodicBuilder::new(name.into(), Spec::every(interval)?)
    }

    /// The name: unique among the periodic jobs of a store.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cron expression or interval.
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The zone cron expressions are read in.
    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// What happens to missed ticks.
    pub fn missed(&self) -> MissedPolicy {
        self.missed
    }

    /// How late a tick may be seen due and still count as on time.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// The queue every job of this periodic job goes to.
    pub fn queue(&self) -> &QueueName {
        &self.queue
    }

    /// The job for `tick`, created at `now`. A panic of the code that
    /// builds it (the closure given to [`PeriodicBuilder::job`] or
    /// [`PeriodicBuilder::job_with`], the payload's `Serialize`) is caught
    /// and returned as [`Error::InvalidInput`] with its message, like any
    /// job that cannot be built: the tick waits and the other periodic jobs go
    /// on. *A panic used to end the pool's schedule task, silently stopping
    /// every schedule of the pool.*
    pub fn build(&self, tick: Timestamp, now: Timestamp) -> Result<NewJob> {
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.build)(tick)));
        match built {
            Ok(builder) => builder.queue(self.queue.as_str()).build_at(now),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic without a message".to_owned());
                Err(Error::invalid("schedule job", format!("the job builder of {:?} panicked: {message}", self.name)))
            }
        }
    }
}

impl PeriodicBuilder {
    fn new(name: String, spec: Spec) -> Result<Self> {
        check_name(&name)?;
        Ok(PeriodicBuilder { name, spec, zone: Tz::UTC, missed: MissedPolicy::default(), grace: DEFAULT_GRACE })
    }

    /// The IANA zone the cron expression is read in (default `UTC`);
    /// [`Error::InvalidInput`] for an unknown name.
    pub fn zone(mut self, zone: &str) -> Result<Self> {
        self.zone = ticks::zone(zone)?;
        Ok(self)
    }

    /// What happens to missed ticks (default [`MissedPolicy::Latest`]).
    pub fn missed(mut self, policy: MissedPolicy) -> Self {
        self.missed = policy;
        self
    }

    /// How late a tick may be first seen due and still run as on time
    /// (default [`DEFAULT_GRACE`]); later ones follow the missed policy.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Each tick enqueues the job type's value `make(tick)` with its
    /// defaults, on `T::QUEUE` ([`Error::InvalidQueue`] when that name is bad).
    pub fn job<T, F>(self, make: F) -> Result<Periodic>
    where
        T: JobType,
        F: Fn(Timestamp) -> T + Send + Sync + 'static,
    {
        let queue = QueueName::new(T::QUEUE)?;
        Ok(self.finish(queue, Arc::new(move |tick| NewJob::typed(&make(tick)))))
    }

    /// Each tick enqueues the job `make(tick)` builds (any kind, priority,
    /// payload), on `queue` whatever the builder says: a periodic job's jobs
    /// share its queue, so the Redis backend can store the job and move the
    /// cursor in one script. [`Error::InvalidQueue`] for a bad name.
    pub fn job_with<F>(self, queue: &str, make: F) -> Result<Periodic>
    where
        F: Fn(Timestamp) -> JobBuilder + Send + Sync + 'static,
    {
        Ok(self.finish(QueueName::new(queue)?, Arc::new(make)))
    }

    fn finish(self, queue: QueueName, build: Build) -> Periodic {
        let PeriodicBuilder { name, spec, zone, missed, grace } = self;
        Periodic { name, spec, zone, missed, grace, queue, build }
    }
}

/// Checks a periodic job name (the rules of a queue name, without a hash
/// tag).
pub fn check_name(name: &str) -> Result<()> {
    if crate::job::is_plain_name(name) {
        Ok(())
    } else {
        Err(Error::invalid("schedule name", format!("{name:?}: use 1 to 128 bytes of letters, digits and _ - . :")))
    }
}

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
    /// Ticks that passed without a job ([`MissedPolicy`]), in all.
    pub missed: u64,
    /// The most recent of them.
    pub last_missed: Option<Timestamp>,
    /// When a pool last declared it (refreshed every [`DECLARE_REFRESH`]).
    pub declared_at: Timestamp,
    /// When an operator asked for one run now (`jqctl periodic trigger`), until a
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
        crate::text::check_no_nul("schedule spec", &self.spec)?;
        crate::text::check_no_nul("schedule zone", &self.zone)?;
        if let Some(job) = self.jobs.iter().find(|j| j.queue != self.queue) {
            return Err(Error::invalid(
                "schedule job",
                format!("a job of queue {} in a step of schedule {} on queue {}", job.queue, self.name, self.queue),
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

impl FromStr for MissedPolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "skip" => Ok(MissedPolicy::Skip),
            "latest" => Ok(MissedPolicy::Latest),
            _ => s
                .strip_prefix("all:")
                .and_then(|cap| cap.parse().ok())
                .map(|cap| MissedPolicy::All { cap })
                .ok_or_else(|| Error::invalid("missed policy", format!("{s:?}: use skip, latest or all:N"))),
        }
    }
}
