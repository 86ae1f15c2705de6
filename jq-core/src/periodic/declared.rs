//! A periodic job as declared in code: [`Periodic`], made with
//! [`PeriodicBuilder`], and what happens to its missed ticks
//! ([`MissedPolicy`]).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;

use super::ticks::{self, Spec};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::job::{JobBuilder, JobType, NewJob, QueueName};

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

type Build = Arc<dyn Fn(Timestamp) -> JobBuilder + Send + Sync>;

/// A periodic job, declared in code: see the [module docs](crate::periodic).
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
    /// on. *A panic used to end the pool's periodic task, silently stopping
    /// every periodic job of the pool.*
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
                Err(Error::invalid("periodic job", format!("the job builder of {:?} panicked: {message}", self.name)))
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
        Err(Error::invalid("periodic job name", format!("{name:?}: use 1 to 128 bytes of letters, digits and _ - . :")))
    }
}
