//! [`WorkerPool`]: the builder of a pool, and the guide for handler
//! authors (it renders on the type).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

use super::config::*;
use super::durable::{self, DurableContext, DurableSlot};
use super::handle::{self, WorkerHandle};
use super::handler::{self, ErasedHandler, HandlerResult, JobContext};
use super::periodic::PeriodicRunner;
use super::retention::Retention;
use crate::backoff::{Backoff, ExponentialBackoff};
use crate::error::{Error, Result};
use crate::job::{Job, JobType, QueueName};
use crate::periodic::Periodic;
use crate::storage::Storage;

/// A pool of workers over a storage `S`, configured with builder methods,
/// then [`WorkerPool::start`]ed: it claims jobs, runs the handler
/// registered for each job's kind, and records each outcome.
///
/// # Writing a handler
///
/// A handler is an async function of the job's typed payload and a
/// [`JobContext`]. Return `Ok(())` to ack; `?` on any error retries after
/// the pool's backoff; [`HandlerError`](crate::HandlerError) has the other outcomes.
///
/// ```no_run
/// use std::time::Duration;
/// use jq_core::{HandlerError, HandlerResult, JobContext, WorkerPool};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct SendEmail { to: String }
/// impl jq_core::JobType for SendEmail {
///     const KIND: &'static str = "send_email";
///     const QUEUE: &'static str = "mail";
/// }
///
/// async fn send_email(job: SendEmail, ctx: JobContext) -> HandlerResult {
///     if job.to.is_empty() {
///         return Err(HandlerError::bury("no recipient")); // Dead now, never retried
///     }
///     if ctx.attempt() == 1 && job.to.ends_with(".invalid") {
///         return Err(HandlerError::release(Duration::from_secs(60))); // later, attempt not counted
///     }
///     let _address: std::net::Ipv4Addr = "127.0.0.1".parse()?; // any std error: retry with backoff
///     Ok(())
/// }
///
/// # async fn run(storage: impl jq_core::storage::Storage) -> jq_core::Result<()> {
/// let pool = WorkerPool::new(storage).concurrency(32).register::<SendEmail, _, _>(send_email);
/// // Runs until ctrl-c, then shuts down gracefully.
/// pool.run_until(async { tokio::signal::ctrl_c().await.ok(); }).await
/// # }
/// ```
///
/// What the pool does with each outcome:
///
/// | handler | stored outcome |
/// |---|---|
/// | `Ok(())` | Ack: Completed |
/// | `Err(e)` from `?`, [`HandlerError::nack`](crate::HandlerError::nack) | Nack: another attempt after `backoff.delay(attempt)`; Dead when no attempt is left |
/// | [`HandlerError::nack_after`](crate::HandlerError::nack_after) | Nack with the given delay |
/// | [`HandlerError::bury`](crate::HandlerError::bury) | Bury: Dead now |
/// | [`HandlerError::release`](crate::HandlerError::release) | Release after the delay: the attempt is given back, no error recorded |
/// | panic | Nack with "handler panicked: ..." |
/// | ran longer than the job timeout | Nack with "timed out after ..." |
/// | payload does not deserialize into `T` | Bury with the serde error: it never will |
/// | no handler registered for the kind | Bury with "no handler registered for kind ..."; see [`WorkerPool::nack_unknown_kinds`] |
///
/// Handlers must tolerate running more than once for the same job (at
/// least once delivery): a worker that dies after the work but before its
/// ack is recorded leaves the job to be recovered and run again.
///
/// ## What a handler may do
///
/// A handler runs as part of an executor task on your tokio runtime, so it
/// must not block its thread: a synchronous call (`std::thread::sleep`, a
/// blocking HTTP or database client, a long computation) belongs in
/// [`tokio::task::spawn_blocking`] (or `block_in_place` on a multi-thread
/// runtime), awaited from the handler.
///
/// ```no_run
/// # use jq_core::{HandlerResult, JobContext};
/// # fn render(_: &str) -> std::io::Result<()> { Ok(()) }
/// async fn report(name: String, _ctx: JobContext) -> HandlerResult {
///     tokio::task::spawn_blocking(move || render(&name)).await??; // JoinError, then io::Error
///     Ok(())
/// }
/// ```
///
/// A handler that blocks anyway does not lose its job: the leases are kept
/// alive by a heartbeat on a thread of its own, with connections of its
/// own ([`Storage::independent`]), so a second pool never runs the job
/// while the first one still holds it. But everything else scheduled on
/// that runtime thread waits: other handlers, the claims and settlements
/// of this pool, its maintenance, and the rest of your program. The job
/// timeout and a lost lease's cancellation take effect only at the
/// handler's next `.await`, and a shutdown cannot interrupt a blocked
/// handler either (it leaves it behind after its flush budget; the job's
/// lease then expires and another pool runs it again).
///
///
/// # Fatal errors
///
/// Storage errors are retried with a bounded backoff, except the fatal
/// ones ([`Error::is_fatal`]: a schema that was never migrated, a dead
/// SQLite writer): no retry can help, so the pool logs the error once at
/// error level (its message says what to do), shuts itself down
/// gracefully, and [`WorkerHandle::wait`] / [`WorkerHandle::shutdown`]
/// return it. [`WorkerHandle::shutdown_token`] is cancelled at that moment,
/// so a program waiting for a signal can wait for it too.
///
/// # Defaults, and why
///
///
/// - concurrency 16: handlers are async, so 16 overlaps plenty of I/O on a
///   small machine, while staying under a typical application's database
///   connection pool (each handler often holds one connection). Raise it for
///   I/O-bound work that does not share a bounded resource.
/// - prefetch about 10 ms of work (or two claim round trips, when a claim
///   takes longer) at the rate the executors take jobs, at least as many as the concurrency and
///   at most 256: a claim is a database round trip (a commit on the SQL
///   backends) with a fixed cost per batch, so short jobs would otherwise
///   wait on claims (a no-op drain on PostgreSQL ran more than twice as
///   fast with 240 waiting as with 16). Waiting jobs are leased, so a
///   buffer measured in time, not in jobs, keeps a queue shared by many
///   workers split evenly when its jobs are slow.
/// - lease 30 s, heartbeat every lease / 3 but at least every second: a
///   crashed worker's jobs come back within about 30 s plus the recover
///   interval, many heartbeats may fail before a lease is at risk, and a
///   cancel request reaches a running job's handler within a second (the
///   heartbeat's answer carries it; one call per second per pool holding
///   jobs, whatever their number).
/// - stop grace 5 s: a handler told to stop (cancel, timeout) that does not
///   return is dropped after it.
/// - poll interval 100 ms, jittered ±25 %: the fallback when the storage's
///   wake-up signal misses (another process enqueued, a delayed job became
///   due). Short on purpose: the poll interval is the latency of delayed
///   jobs and of work from processes whose enqueues the backend cannot
///   signal. An empty claim is one cheap indexed query.
/// - job timeout 5 min: a hung handler would otherwise hold its slot (and,
///   heartbeat after heartbeat, its lease) forever. Longer jobs set
///   [`WorkerPool::job_timeout`] (or `None`).
/// - shutdown grace 20 s: under a typical orchestrator's 30 s kill timeout,
///   leaving time to release what did not finish.
/// - retention ([`Retention::DEFAULT`]): completed and cancelled jobs are
///   kept a day after they finish, dead ones seven days, then the
///   maintaining pool purges them in bounded batches every purge interval.
///   A store nobody purges grows for as long as it runs; a week leaves time
///   to read and retry a failure after a weekend.
///   [`WorkerPool::keep_forever`] keeps everything until an operator purges.
pub struct WorkerPool<S: Storage> {
    storage: S,
    config: Config,
    handlers: HashMap<String, ErasedHandler>,
    fallback: Option<ErasedHandler>,
    typed_queues: Vec<String>,
    /// Shared by the durable handlers, filled at start; `None` until one
    /// is registered (a pool without one checks nothing more).
    durable: Option<DurableSlot>,
}

impl<S: Storage> WorkerPool<S> {
    /// A pool over `storage` with the defaults; register handlers next.
    pub fn new(storage: S) -> Self {
        WorkerPool {
            storage,
            config: Config {
                queues: Vec::new(),
                concurrency: DEFAULT_CONCURRENCY,
                prefetch: None,
                lease: DEFAULT_LEASE,
                heartbeat_interval: None,
                poll_interval: DEFAULT_POLL_INTERVAL,
                job_timeout: Some(DEFAULT_JOB_TIMEOUT),
                kind_timeouts: HashMap::new(),
                stop_grace: DEFAULT_STOP_GRACE,
                backoff: Arc::new(ExponentialBackoff::default()),
                shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
                maintenance: true,
                maintenance_lease: DEFAULT_MAINTENANCE_LEASE,
                promote_interval: DEFAULT_PROMOTE_INTERVAL,
                recover_interval: DEFAULT_RECOVER_INTERVAL,
                purge_interval: DEFAULT_PURGE_INTERVAL,
                retention: Retention::DEFAULT,
                worker_name: default_worker_name(),
                nack_unknown_kinds: false,
                periodic: Vec::new(),
                periodic_interval: DEFAULT_PERIODIC_INTERVAL,
                observe: true,
                sample_interval: DEFAULT_SAMPLE_INTERVAL,
                max_result_bytes: crate::workflow::DEFAULT_MAX_RESULT_BYTES,
            },
            handlers: HashMap::new(),
            fallback: None,
            typed_queues: Vec::new(),
            durable: None,
        }
    }

    /// Runs `handler` for jobs of kind `T::KIND`, with the payload decoded
    /// into `T`. Unless [`WorkerPool::queues`] is given, the pool takes jobs
    /// from the queues of its registered types (`T::QUEUE`).
    ///
    /// Registering a kind twice keeps the last handler.
    pub fn register<T, F, Fut>(mut self, handler: F) -> Self
    where
        T: JobType,
        F: Fn(T, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.handlers.insert(T::KIND.to_owned(), handler::typed::<T, F, Fut>(handler));
        match T::TIMEOUT {
            Some(limit) => self.config.kind_timeouts.insert(T::KIND.to_owned(), limit),
            None => self.config.kind_timeouts.remove(T::KIND),
        };
        if !self.typed_queues.iter().any(|q| q == T::QUEUE) {
            self.typed_queues.push(T::QUEUE.to_owned());
        }
        self
    }

    /// Runs the durable `handler` for jobs of kind `T::KIND`: like
    /// [`WorkerPool::register`], but it gets a [`DurableContext`] whose
    /// steps, sleeps and waits are recorded with the job and replayed on
    /// every later run (the repository's `docs/durable.md`). Needs a storage
    /// with [`Capability::Durable`](crate::storage::Capability::Durable):
    /// [`WorkerPool::start`] refuses the pool otherwise.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use jq_core::{DurableContext, HandlerResult, Waited, WorkerPool};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Order { id: u64 }
    /// impl jq_core::JobType for Order {
    ///     const KIND: &'static str = "order";
    ///     const QUEUE: &'static str = "orders";
    /// }
    ///
    /// async fn order(order: Order, ctx: DurableContext) -> HandlerResult {
    ///     let charge: String = ctx.step("charge", async { Ok::<_, std::io::Error>(format!("ch_{}", order.id)) }).await?;
    ///     match ctx.wait_for::<bool>("approved", Duration::from_secs(86_400)).await? {
    ///         Waited::Signal(true) => ctx.step("ship", async { Ok::<_, std::io::Error>(charge) }).await.map(drop),
    ///         Waited::Signal(false) | Waited::TimedOut => Ok(()),
    ///     }
    /// }
    ///
    /// # fn pool(storage: impl jq_core::storage::Storage) -> WorkerPool<impl jq_core::storage::Storage> {
    /// WorkerPool::new(storage).register_durable::<Order, _, _>(order)
    /// # }
    /// ```
    pub fn register_durable<T, F, Fut>(mut self, handler: F) -> Self
    where
        T: JobType,
        F: Fn(T, DurableContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let slot = self.durable.get_or_insert_with(DurableSlot::default).clone();
        self.handlers.insert(T::KIND.to_owned(), durable::typed::<T, F, Fut>(slot, handler));
        match T::TIMEOUT {
            Some(limit) => self.config.kind_timeouts.insert(T::KIND.to_owned(), limit),
            None => self.config.kind_timeouts.remove(T::KIND),
        };
        if !self.typed_queues.iter().any(|q| q == T::QUEUE) {
            self.typed_queues.push(T::QUEUE.to_owned());
        }
        self
    }

    /// Runs `handler` for jobs of `kind`, given the raw [`Job`] (payload as
    /// JSON text in `job.payload`). For handlers that forward the payload
    /// elsewhere (the CLI's exec worker). Name the queues with
    /// [`WorkerPool::queues`].
    pub fn register_raw<F, Fut>(mut self, kind: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Job, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.handlers.insert(kind.into(), handler::raw(handler));
        self
    }

    /// Runs `handler` for every job whose kind has no handler of its own,
    /// given the raw [`Job`]. For workers that forward any job elsewhere
    /// (the CLI's exec worker); without one, unknown kinds follow
    /// [`WorkerPool::nack_unknown_kinds`].
    pub fn register_fallback<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Job, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.fallback = Some(handler::raw(handler));
        self
    }

    /// The queues to take jobs from (replacing any given before). Checked by
    /// [`WorkerPool::start`]. Default: the queues of the registered types.
    pub fn queues<Q: Into<String>>(mut self, queues: impl IntoIterator<Item = Q>) -> Self {
        self.config.queues = queues.into_iter().map(Into::into).collect();
        self
    }

    /// Adds one queue to take jobs from.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.config.queues.push(queue.into());
        self
    }

    /// How many jobs run at once (default 16; at least 1): the number of
    /// executor tasks.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.concurrency = n;
        self
    }

    /// How many jobs may wait claimed, beyond those running, so the next job
    /// starts without a claim round trip; a fixed number instead of the
    /// default, which holds about 10 ms of work at the observed rate (or
    /// two claim round trips' worth, when a claim takes longer), between
    /// the concurrency and 256. 0 claims only for free executors.
    /// Waiting jobs are leased and heartbeated like running ones, and are
    /// released at once on shutdown. Set 0 when jobs are long and several
    /// workers should share a short queue evenly.
    pub fn prefetch(mut self, n: usize) -> Self {
        self.config.prefetch = Some(n);
        self
    }

    /// How long a claim holds a job without a heartbeat (default 30 s).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease;
        self
    }

    /// How often held leases are extended, which is also how soon the pool
    /// hears of a cancel request for a job it runs (default lease / 3, at
    /// most 1 s; must be shorter than the lease).
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.config.heartbeat_interval = Some(interval);
        self
    }

    /// How long an idle fetcher waits before claiming again when no wake-up
    /// signal came (default 100 ms, jittered ±25 %).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.config.poll_interval = interval;
        self
    }

    /// The longest one run of a handler may take (default 5 min; `None`: no
    /// limit) when neither the job ([`JobBuilder::timeout`](crate::JobBuilder::timeout))
    /// nor its kind ([`JobType::TIMEOUT`]) sets one. At the limit the
    /// handler's [`JobContext::cancellation`] fires; if it has not returned
    /// after the [stop grace](WorkerPool::stop_grace) its future is dropped.
    /// Either way, unless it returned `Ok`, the attempt is a failed one
    /// ("timed out after ..."), retried by the backoff policy.
    pub fn job_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.config.job_timeout = timeout;
        self
    }

    /// How long a handler told to stop, by a cancel request or its timeout,
    /// has to return before the pool drops its future (default 5 s). A
    /// drop is logged and counted in `jq_jobs_dropped_total`. The
    /// `jqctl worker --exec` command gets SIGTERM at the stop and SIGKILL
    /// at the end of this grace.
    pub fn stop_grace(mut self, grace: Duration) -> Self {
        self.config.stop_grace = grace;
        self
    }

    /// The retry delay policy (default [`ExponentialBackoff::default`]).
    pub fn backoff(mut self, backoff: impl Backoff) -> Self {
        self.config.backoff = Arc::new(backoff);
        self
    }

    /// How long running jobs get to finish after shutdown is asked for
    /// (default 20 s). Then they are cancelled and released to Pending with
    /// their attempt given back.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.config.shutdown_grace = grace;
        self
    }

    /// Turns the maintenance task (promote, recover, retention) on or off
    /// (default on). Run it in at least one process per storage: without
    /// recovery, a crashed worker's jobs stay Running forever.
    ///
    /// Of all the pools on one store with maintenance on, one at a time
    /// does the work: the one holding the "maintenance" role
    /// ([`RoleStorage::elect`](crate::storage::RoleStorage::elect)); the others only campaign for it. Off, the
    /// pool does not campaign either.
    pub fn maintenance(mut self, enabled: bool) -> Self {
        self.config.maintenance = enabled;
        self
    }

    /// How soon another pool takes over maintenance when the maintaining
    /// pool dies without resigning (default 30 s). The maintainer holds the
    /// role for three quarters of this and renews it every quarter, so two
    /// renewals may fail before it loses the role; the other pools
    /// campaign every quarter too. A pool that shuts down gracefully
    /// resigns, and another takes over within a quarter.
    pub fn maintenance_lease(mut self, lease: Duration) -> Self {
        self.config.maintenance_lease = lease;
        self
    }

    /// Interval between promotions of due Scheduled jobs (default 1 s).
    pub fn promote_interval(mut self, interval: Duration) -> Self {
        self.config.promote_interval = interval;
        self
    }

    /// Interval between recoveries of expired leases (default 10 s).
    pub fn recover_interval(mut self, interval: Duration) -> Self {
        self.config.recover_interval = interval;
        self
    }

    /// Interval between retention purges (default 60 s).
    pub fn purge_interval(mut self, interval: Duration) -> Self {
        self.config.purge_interval = interval;
        self
    }

    /// How long finished jobs are kept before the maintaining pool purges
    /// them, per terminal state (default [`Retention::DEFAULT`]: completed
    /// and cancelled jobs a day, dead ones seven days; see
    /// [`DEFAULT_KEEP_COMPLETED`](crate::DEFAULT_KEEP_COMPLETED), [`DEFAULT_KEEP_CANCELLED`](crate::DEFAULT_KEEP_CANCELLED),
    /// [`DEFAULT_KEEP_DEAD`](crate::DEFAULT_KEEP_DEAD)). Purges run every
    /// [`WorkerPool::purge_interval`], on the pool holding the maintenance
    /// role, through [`Storage::purge`], which deletes in bounded batches.
    /// Only pools with maintenance on apply it: give every such pool of a
    /// store the same retention, as whichever holds the role applies its
    /// own.
    pub fn retention(mut self, retention: Retention) -> Self {
        self.config.retention = retention;
        self
    }

    /// Keeps every finished job until an operator purges it
    /// ([`Retention::FOREVER`]).
    pub fn keep_forever(self) -> Self {
        self.retention(Retention::FOREVER)
    }

    /// The name recorded in the leases this pool takes (default
    /// `hostname-pid-random`). Operators read it; fencing never uses it.
    pub fn worker_name(mut self, name: impl Into<String>) -> Self {
        self.config.worker_name = name.into();
        self
    }

    /// What to do with a job whose kind has no handler here. `false` (the
    /// default): bury it, so it goes to Dead at once with "no handler
    /// registered for kind ..." where an operator sees it and can retry it
    /// once a worker that knows the kind runs. `true`: nack it (another
    /// attempt after the backoff), kinder during a rolling deploy where old
    /// and new workers share a queue, but a typo then burns every attempt
    /// over about a day before anyone sees it. Prefer a new queue for a new
    /// kind.
    pub fn nack_unknown_kinds(mut self, nack: bool) -> Self {
        self.config.nack_unknown_kinds = nack;
        self
    }

    /// The largest result a handler may set with
    /// [`JobContext::set_result`], in bytes of JSON (default
    /// [`DEFAULT_MAX_RESULT_BYTES`](crate::workflow::DEFAULT_MAX_RESULT_BYTES));
    /// a larger one is refused there with
    /// [`Error::ResultTooLarge`](crate::Error::ResultTooLarge).
    pub fn max_result_bytes(mut self, bytes: usize) -> Self {
        self.config.max_result_bytes = bytes;
        self
    }

    /// Declares a periodic job ([`Periodic`]): this pool stores the jobs of
    /// its ticks, sharing the work with every other pool that declares it,
    /// one job per tick whatever their number (see [`crate::periodic`]). The
    /// pool need not run the jobs' queue.
    pub fn periodic(mut self, periodic: Periodic) -> Self {
        self.config.periodic.push(periodic);
        self
    }

    /// How often the declared periodic jobs are looked at (default 1 s, jittered
    /// ±10 %): the most a tick's job waits to be stored.
    pub fn periodic_interval(mut self, interval: Duration) -> Self {
        self.config.periodic_interval = interval;
        self
    }

    /// Turns the pool's spans and metrics on or off (default on): a
    /// `jq.job` span per run (info level, with the job's id, kind, queue,
    /// attempt and the worker; its outcome and duration recorded when it
    /// closes; linked to the enqueuing span's trace context), the per-job
    /// counters and histograms of [`crate::observe`], and, on the pool that
    /// holds the maintenance role, the store's gauges. Off, a run costs no
    /// span and no metric; for a measurement of what observation costs.
    pub fn observe(mut self, enabled: bool) -> Self {
        self.config.observe = enabled;
        self
    }

    /// How often the maintaining pool samples the store's gauges
    /// ([`crate::observe::JOBS`], [`crate::observe::OLDEST_PENDING_AGE`]):
    /// one `stats` call and one one-job `list` per queue with Pending jobs
    /// (default 15 s, a typical scrape interval). The first sample comes one
    /// interval after the pool takes the maintenance role, not at once.
    pub fn sample_interval(mut self, interval: Duration) -> Self {
        self.config.sample_interval = interval;
        self
    }

    /// Checks the settings and starts the pool's tasks on the current tokio
    /// runtime.
    ///
    /// Errors: [`Error::InvalidQueue`] for a bad queue name;
    /// [`Error::InvalidInput`] for no queue, concurrency 0, a zero lease or
    /// maintenance lease, a heartbeat interval not shorter than the lease,
    /// a zero purge interval with a retention, two periodic jobs of one name or a
    /// zero periodic job interval; [`Error::Unsupported`] for periodic jobs or
    /// a durable handler on a storage without the capability.
    pub fn start(self) -> Result<WorkerHandle> {
        let WorkerPool { storage, mut config, handlers, fallback, typed_queues, durable } = self;
        if config.queues.is_empty() {
            config.queues = typed_queues;
        }
        let queues = config.queues.iter().map(|q| QueueName::new(q.as_str())).collect::<Result<Vec<_>>>()?;
        if queues.is_empty() {
            return Err(Error::invalid("queues", "none given: register a typed handler or call .queues([...])"));
        }
        if config.concurrency == 0 {
            return Err(Error::invalid("concurrency", "0: at least 1 job must be able to run"));
        }
        if config.lease.is_zero() {
            return Err(Error::invalid("lease", "0 s: a lease must last long enough to heartbeat"));
        }
        let heartbeat = config.heartbeat_interval.unwrap_or((config.lease / 3).min(MAX_DEFAULT_HEARTBEAT));
        if heartbeat.is_zero() || heartbeat >= config.lease {
            return Err(Error::invalid(
                "heartbeat interval",
                format!("{heartbeat:?}: it must be above zero and shorter than the lease ({:?})", config.lease),
            ));
        }
        config.heartbeat_interval = Some(heartbeat);
        if config.maintenance_lease < Duration::from_millis(4) {
            return Err(Error::invalid(
                "maintenance lease",
                format!("{:?}: it must be at least 4 ms (it is renewed every quarter)", config.maintenance_lease),
            ));
        }
        if config.sample_interval.is_zero() {
            return Err(Error::invalid("sample interval", "0 s: the store's gauges would be sampled without pause"));
        }
        if config.purge_interval.is_zero() && !config.retention.is_forever() {
            return Err(Error::invalid("purge interval", "0 s: finished jobs would be purged without pause"));
        }
        if config.periodic_interval.is_zero() {
            return Err(Error::invalid("periodic interval", "0 s: periodic jobs are looked at every interval"));
        }
        // Refused at start, not at the first round: a backend without the
        // capability would otherwise fail every second in the log.
        if !config.periodic.is_empty() && storage.capabilities().periodic.is_none() {
            return Err(crate::storage::unsupported(crate::storage::Capability::Periodic));
        }
        if durable.is_some() && storage.capabilities().durable.is_none() {
            return Err(crate::storage::unsupported(crate::storage::Capability::Durable));
        }
        let runner = PeriodicRunner::new(std::mem::take(&mut config.periodic))?;
        Ok(handle::start(storage, config, queues, handlers, fallback, runner, durable))
    }

    /// Starts the pool, runs until `until` completes (or a fatal storage
    /// error stops the pool), then shuts down gracefully and returns once
    /// every outcome is recorded: `Err` with the fatal error, if one
    /// stopped it.
    pub async fn run_until(self, until: impl Future<Output = ()>) -> Result<()> {
        let handle = self.start()?;
        let stopped = handle.shutdown_token();
        tokio::select! {
            _ = until => {}
            _ = stopped.cancelled() => {}
        }
        handle.shutdown().await
    }
}

/// `hostname-pid-random`: unique per process, readable by an operator.
fn default_worker_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    let suffix: u16 = rand::rng().random();
    format!("{host}-{}-{suffix:04x}", std::process::id())
}
