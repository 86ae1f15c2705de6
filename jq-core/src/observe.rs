//! Metrics through the [`metrics`] facade: names, labels and the few calls
//! that record them.
//!
//! Nothing is exported unless the application installs a recorder (for
//! Prometheus, `metrics_exporter_prometheus::PrometheusBuilder`) before it
//! starts its pools: handles registered before that stay no-ops. Every
//! series is labelled by `queue` and, for per-job series, `kind`; the
//! repository's docs/observability.md lists them for dashboards.
//!
//! The worker pool registers one set of handles per (queue, kind) and
//! executor task, so a run costs a few atomic adds and no allocation.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Histogram};

use crate::clock::Timestamp;
use crate::error::Result;
use crate::job::{NewJob, QueueName};
use crate::read::{JobFilter, Stats};
use crate::state::State;
use crate::storage::{Outcome, Storage};

/// Counter: jobs accepted by an enqueue call of a jq backend (a job that
/// deduplicated to a stored one included), by `queue` and `kind`.
pub const ENQUEUED: &str = "jq_jobs_enqueued_total";
/// Counter: runs started by a worker pool, by `queue` and `kind`.
pub const STARTED: &str = "jq_jobs_started_total";
/// Counter: runs recorded as Completed, by `queue` and `kind`.
pub const COMPLETED: &str = "jq_jobs_completed_total";
/// Counter: nacks the store recorded (failed runs; those with no attempt
/// left also count in [`DEAD`]), by `queue` and `kind`.
pub const NACKED: &str = "jq_jobs_nacked_total";
/// Counter: runs recorded as Dead (buried, or nacked with no attempt left), by
/// `queue` and `kind`.
pub const DEAD: &str = "jq_jobs_dead_total";
/// Counter: jobs cancelled, by `queue` and `kind`: before they started,
/// through `jq::Client::cancel`, or while running, by the pool that
/// stopped them.
pub const CANCELLED: &str = "jq_jobs_cancelled_total";
/// Counter: handler futures the pool dropped because they did not return
/// within the grace after being told to stop, by `queue`, `kind` and
/// `reason` (`cancel`: a cancel request, `timeout`: the attempt's limit,
/// `shutdown`: the pool's shutdown grace). A handler that ignores its
/// [`JobContext::cancellation`](crate::JobContext::cancellation) shows here.
pub const DROPPED: &str = "jq_jobs_dropped_total";
/// Histogram, seconds: how long handlers ran, by `queue` and `kind`.
pub const RUN_DURATION: &str = "jq_job_run_duration_seconds";
/// Histogram, seconds: from a job's due time (`run_at`) to the start of its
/// run, by `queue` and `kind`.
pub const QUEUE_LAG: &str = "jq_job_queue_lag_seconds";
/// Gauge: jobs in the store by `queue` and `state`, sampled by the pool
/// that holds the maintenance role.
pub const JOBS: &str = "jq_jobs";
/// Gauge, seconds: age of the oldest Pending job of a `queue` (the earliest
/// enqueued one, since its `run_at`), 0 when none; sampled with [`JOBS`].
pub const OLDEST_PENDING_AGE: &str = "jq_oldest_pending_age_seconds";

/// Counts one run dropped after its grace into [`DROPPED`].
pub(crate) fn dropped(queue: &str, kind: &str, reason: &'static str) {
    metrics::counter!(DROPPED, "queue" => queue.to_owned(), "kind" => kind.to_owned(), "reason" => reason).increment(1);
}

/// The jobs of an enqueue batch by queue and kind, counted into
/// [`ENQUEUED`] once the batch is stored. Backends take it before the batch
/// moves into the write and record it after the write succeeded.
#[derive(Debug, Default)]
pub struct EnqueueTally {
    groups: Vec<(String, String, u64)>,
}

impl EnqueueTally {
    /// Groups `jobs` (a batch has few kinds: a linear scan is enough).
    pub fn of(jobs: &[NewJob]) -> Self {
        let mut groups: Vec<(String, String, u64)> = Vec::new();
        for job in jobs {
            match groups.iter_mut().find(|(q, k, _)| q == job.queue.as_str() && *k == job.kind) {
                Some(group) => group.2 += 1,
                None => groups.push((job.queue.as_str().to_owned(), job.kind.clone(), 1)),
            }
        }
        EnqueueTally { groups }
    }

    /// Adds the batch to the counters.
    pub fn record(self) {
        for (queue, kind, n) in self.groups {
            metrics::counter!(ENQUEUED, "queue" => queue, "kind" => kind).increment(n);
        }
    }
}

/// Counts one cancelled job.
pub fn cancelled(queue: &QueueName, kind: &str) {
    metrics::counter!(CANCELLED, "queue" => queue.as_str().to_owned(), "kind" => kind.to_owned()).increment(1);
}

/// Sets the [`JOBS`] gauges of every queue in `stats`, every state
/// included (a state with no job reads 0, not a stale value).
pub fn store_gauges(stats: &Stats) {
    for (queue, counts) in &stats.queues {
        for state in State::ALL {
            metrics::gauge!(JOBS, "queue" => queue.clone(), "state" => state.as_str()).set(counts.get(state) as f64);
        }
    }
}

/// Sets the [`OLDEST_PENDING_AGE`] gauge of `queue`.
pub fn oldest_pending_age(queue: &str, age: Duration) {
    metrics::gauge!(OLDEST_PENDING_AGE, "queue" => queue.to_owned()).set(age.as_secs_f64());
}

/// Sets the store's gauges from one `stats` call and, per queue with
/// Pending jobs, a one-job `list` of its earliest enqueued Pending job.
/// The maintaining pool calls it every `WorkerPool::sample_interval`;
/// `jqctl metrics` calls it for each scrape interval.
pub async fn sample_store<S: Storage + ?Sized>(storage: &S) -> Result<()> {
    let stats = storage.stats().await?;
    store_gauges(&stats);
    let now = storage.clock().now();
    for (queue, counts) in &stats.queues {
        let age = if counts.get(State::Pending) == 0 {
            Duration::ZERO
        } else {
            oldest_pending(storage, &QueueName::new(queue.as_str())?)
                .await?
                .and_then(|since| now.signed_duration_since(since).to_std().ok())
                .unwrap_or_default()
        };
        oldest_pending_age(queue, age);
    }
    Ok(())
}

/// Since when the earliest enqueued Pending job of `queue` has been
/// runnable (its due time); `None` when nothing is pending. One one-job
/// `list`: the earliest enqueued, which is the longest waiting unless a
/// later job was due earlier.
pub async fn oldest_pending<S: Storage + ?Sized>(storage: &S, queue: &QueueName) -> Result<Option<Timestamp>> {
    let filter =
        JobFilter { queue: Some(queue.clone()), state: Some(State::Pending), limit: 1, ..JobFilter::default() };
    Ok(storage.list(&filter).await?.first().map(|job| job.run_at))
}

/// The handles of one (queue, kind).
#[derive(Debug)]
pub(crate) struct JobMetrics {
    pub(crate) queue: String,
    pub(crate) kind: String,
    pub(crate) started: Counter,
    pub(crate) completed: Counter,
    pub(crate) nacked: Counter,
    pub(crate) dead: Counter,
    pub(crate) cancelled: Counter,
    pub(crate) duration: Histogram,
    pub(crate) lag: Histogram,
}

impl JobMetrics {
    fn register(queue: &str, kind: &str) -> Self {
        let labels = [("queue", queue.to_owned()), ("kind", kind.to_owned())];
        JobMetrics {
            queue: queue.to_owned(),
            kind: kind.to_owned(),
            started: metrics::counter!(STARTED, &labels),
            completed: metrics::counter!(COMPLETED, &labels),
            nacked: metrics::counter!(NACKED, &labels),
            dead: metrics::counter!(DEAD, &labels),
            cancelled: metrics::counter!(CANCELLED, &labels),
            duration: metrics::histogram!(RUN_DURATION, &labels),
            lag: metrics::histogram!(QUEUE_LAG, &labels),
        }
    }

    /// Counts what a settlement recorded: the state the store answered
    /// for the outcome sent.
    pub(crate) fn recorded(&self, outcome: &Outcome, state: State) {
        if matches!(outcome, Outcome::Nack { .. }) {
            self.nacked.increment(1);
        }
        match state {
            State::Completed => self.completed.increment(1),
            State::Dead => self.dead.increment(1),
            State::Cancelled => self.cancelled.increment(1),
            // A release (by the handler, at shutdown) is not a failure.
            _ => {}
        }
    }
}

/// One executor task's handles, by queue then kind: looked up with the
/// job's own strings, registered once.
#[derive(Default)]
pub(crate) struct MetricsCache {
    by_queue: HashMap<String, HashMap<String, Arc<JobMetrics>>>,
    /// The handles last looked up: a claim's jobs mostly share their
    /// (queue, kind), and comparing two short strings is cheaper than
    /// hashing them.
    last: Option<Arc<JobMetrics>>,
}

impl MetricsCache {
    pub(crate) fn get(&mut self, queue: &QueueName, kind: &str) -> Arc<JobMetrics> {
        if let Some(last) = &self.last
            && last.queue == queue.as_str()
            && last.kind == kind
        {
            return last.clone();
        }
        let found = match self.by_queue.get(queue.as_str()).and_then(|kinds| kinds.get(kind)) {
            Some(found) => found.clone(),
            None => {
                let made = Arc::new(JobMetrics::register(queue.as_str(), kind));
                self.by_queue.entry(queue.as_str().to_owned()).or_default().insert(kind.to_owned(), made.clone());
                made
            }
        };
        self.last = Some(found.clone());
        found
    }
}
