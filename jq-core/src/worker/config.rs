//! The settings of a pool ([`Config`]) and their defaults; the
//! [`WorkerPool`](super::WorkerPool) builder sets them, the tasks read them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::retention::Retention;
use crate::backoff::Backoff;
use crate::periodic::Periodic;

/// Default number of jobs run at once by one pool.
pub(crate) const DEFAULT_CONCURRENCY: usize = 16;
/// Default lease: a job whose worker stops heartbeating is recovered after this.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Default idle poll interval (jittered), the fallback when the storage gives no signal.
pub(crate) const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Default per-job timeout.
pub(crate) const DEFAULT_JOB_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Longest default heartbeat interval: the pool hears of a cancel request
/// from the heartbeat's answer, so this bounds how long a cancel of a
/// running job waits to reach its handler (docs/CONTRACT.md: within 2 s).
pub(crate) const MAX_DEFAULT_HEARTBEAT: Duration = Duration::from_secs(1);
/// Default time a handler told to stop (cancel request, timeout) gets to
/// return before its future is dropped.
pub(crate) const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(5);
/// Default time running jobs get to finish after a shutdown is asked for.
pub(crate) const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
/// Default interval between promotions of due Scheduled jobs.
pub(crate) const DEFAULT_PROMOTE_INTERVAL: Duration = Duration::from_secs(1);
/// Default interval between recoveries of expired leases.
pub(crate) const DEFAULT_RECOVER_INTERVAL: Duration = Duration::from_secs(10);
/// Default interval between retention purges.
pub(crate) const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(60);
/// Default interval between rounds of the declared periodic jobs.
pub(crate) const DEFAULT_PERIODIC_INTERVAL: Duration = Duration::from_secs(1);
/// Default maintenance lease: when the pool that maintains a store dies,
/// another takes over within this long.
pub(crate) const DEFAULT_MAINTENANCE_LEASE: Duration = Duration::from_secs(30);

/// Default interval between samples of the store's gauges (jobs per queue
/// and state, oldest pending age) by the maintaining pool.
pub(crate) const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_secs(15);

/// The settings of a pool; see the [`WorkerPool`](super::WorkerPool) builder methods for each
/// one's meaning and default.
pub(crate) struct Config {
    pub(crate) queues: Vec<String>,
    pub(crate) concurrency: usize,
    /// Claimed jobs allowed to wait beyond the running ones; `None`: the
    /// adaptive default of [`prefetch`](super::prefetch).
    pub(crate) prefetch: Option<usize>,
    pub(crate) lease: Duration,
    pub(crate) heartbeat_interval: Option<Duration>,
    pub(crate) poll_interval: Duration,
    pub(crate) job_timeout: Option<Duration>,
    pub(crate) kind_timeouts: HashMap<String, Duration>,
    pub(crate) stop_grace: Duration,
    pub(crate) backoff: Arc<dyn Backoff>,
    pub(crate) shutdown_grace: Duration,
    pub(crate) maintenance: bool,
    pub(crate) maintenance_lease: Duration,
    pub(crate) promote_interval: Duration,
    pub(crate) recover_interval: Duration,
    pub(crate) purge_interval: Duration,
    pub(crate) retention: Retention,
    pub(crate) worker_name: String,
    pub(crate) nack_unknown_kinds: bool,
    pub(crate) periodic: Vec<Periodic>,
    pub(crate) periodic_interval: Duration,
    pub(crate) observe: bool,
    pub(crate) sample_interval: Duration,
    pub(crate) max_result_bytes: usize,
}
