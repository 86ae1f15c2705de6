//! Starting the pool's tasks, the [`WorkerHandle`], and the graceful
//! shutdown sequence.
//!
//! Shutdown, once asked for (by [`WorkerHandle::shutdown`], by cancelling
//! [`WorkerHandle::shutdown_token`], or by dropping the handle):
//!
//! 1. the fetcher stops claiming, maintenance stops;
//! 2. jobs claimed but not started are released at once (Pending, attempt
//!    given back);
//! 3. running jobs get the grace period to finish; then their tokens fire,
//!    their handlers are dropped and the jobs released;
//! 4. the settler flushes every outcome (given up to one more grace
//!    period, at least 1 s, if the storage fails, then each lost outcome is
//!    logged);
//! 5. the heartbeat stops, and the handle's wait returns.
//!
//! Every step is bounded whatever the storage does (a connection gone
//! silent, a server that does not answer): the shutdown returns within
//! the grace, plus one more grace (at least 1 s), plus about 2 s. A task
//! still busy at its deadline is aborted and what it had not recorded is
//! left for recover, as after a crash: a job whose outcome was lost runs
//! again once its lease expires.
//!
//! A fatal storage error ([`crate::Error::is_fatal`]) starts the same sequence;
//! the handle's wait then returns that error.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::CancellationToken;

use super::config::{Config, MAX_DEFAULT_HEARTBEAT};
use super::executor::Executor;
use super::failure::Failure;
use super::fetcher::{Claimed, Fetcher};
use super::handler::ErasedHandler;
use super::heartbeat::{Heartbeat, Inflight};
use super::maintenance::Maintenance;
use super::periodic::{PeriodicRunner, PeriodicTask};
use super::prefetch::Prefetch;
use super::settler::{self, Finished};
use crate::error::Result;
use crate::job::QueueName;
use crate::storage::{ClaimRequest, Outcome, Storage};

/// A running pool. Shut it down with [`WorkerHandle::shutdown`]; dropping
/// the handle also starts a graceful shutdown, in the background.
#[derive(Debug)]
#[must_use = "dropping the handle shuts the pool down"]
pub struct WorkerHandle {
    stop: CancellationToken,
    done: Option<JoinHandle<()>>,
    worker_name: String,
    inflight: Arc<Inflight>,
    failure: Arc<Failure>,
}

impl WorkerHandle {
    /// The name in this pool's leases.
    pub fn worker_name(&self) -> &str {
        &self.worker_name
    }

    /// Cancelling this token asks for a graceful shutdown (from a signal
    /// handler, another task, ...); [`WorkerHandle::wait`] then returns once
    /// it is done. The pool cancels it itself when a fatal storage error
    /// stops it, so `token.cancelled()` also waits for that.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// How many jobs this pool holds a lease on right now (claimed, running,
    /// or finished with the outcome not yet recorded).
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Asks for a graceful shutdown and waits until it is complete: running
    /// jobs finished or released, every outcome recorded. `Err` with the
    /// fatal storage error ([`crate::Error::is_fatal`]) that stopped the pool, if
    /// one did.
    ///
    /// The sequence: the pool stops claiming and maintenance stops; jobs
    /// claimed but not started are released at once (attempt given back);
    /// running jobs get the shutdown grace to finish, then are cancelled
    /// and released; every outcome is flushed; the heartbeat stops.
    /// Returns within the shutdown grace, plus one more grace (at least
    /// 1 s), plus about 2 s, whatever the storage does; outcomes it could
    /// not record by then are logged and their jobs recovered once their
    /// leases expire.
    pub async fn shutdown(self) -> Result<()> {
        self.stop.cancel();
        self.wait().await
    }

    /// Waits until the pool has shut down (someone cancelled
    /// [`WorkerHandle::shutdown_token`], or a fatal storage error stopped
    /// it: then `Err` with that error). Dropping this future before then
    /// shuts the pool down in the background.
    pub async fn wait(mut self) -> Result<()> {
        if let Some(done) = self.done.take()
            && let Err(error) = done.await
        {
            tracing::error!(%error, "worker pool shutdown task failed");
        }
        self.failure.take().map_or(Ok(()), Err)
    }

    /// True when a fatal storage error stopped (or is stopping) the pool;
    /// [`WorkerHandle::wait`] returns it.
    pub fn has_failed(&self) -> bool {
        self.failure.happened()
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Spawns every task of the pool; called by `WorkerPool::start` with checked
/// settings.
pub(crate) fn start<S: Storage>(
    storage: S,
    config: Config,
    queues: Vec<QueueName>,
    handlers: HashMap<String, ErasedHandler>,
    fallback: Option<ErasedHandler>,
    runner: PeriodicRunner,
    durable: Option<super::durable::DurableSlot>,
) -> WorkerHandle {
    let storage = Arc::new(storage);
    if let Some(slot) = &durable {
        super::durable::fill(slot, &storage);
    }
    let stop = CancellationToken::new();
    let abort = CancellationToken::new();
    let halt = CancellationToken::new();
    let give_up = CancellationToken::new();
    let failure = Arc::new(Failure::new(stop.clone()));
    let inflight = Arc::new(Inflight::default());
    // A slot is a job claimed and not yet finished: running, or waiting in
    // the channel (prefetched). Only `concurrency` executors run them.
    let prefetch = match config.prefetch {
        Some(n) => Prefetch::fixed(n),
        None => Prefetch::adaptive(config.concurrency),
    };
    let slot_count = config.concurrency + prefetch.cap();
    let slots = Arc::new(Semaphore::new(slot_count));
    let (jobs_tx, jobs_rx) = async_channel::bounded::<Claimed>(slot_count);
    let (finished_tx, finished_rx) = mpsc::channel::<Finished>(settler::backlog(config.concurrency));
    // The settler counts the batches it wrote: a fetcher whose claim a
    // limit cut short claims again when one of its own jobs left Running.
    let (settled_tx, settled_rx) = watch::channel(0u64);
    tracing::info!(worker = %config.worker_name, queues = ?queues, concurrency = config.concurrency, "worker pool starting");

    let fetcher = tokio::spawn(
        Fetcher {
            storage: storage.clone(),
            request: ClaimRequest::new(queues, 0, config.lease, config.worker_name.clone()),
            poll_interval: config.poll_interval,
            settled: settled_rx,
            slots,
            prefetch,
            inflight: inflight.clone(),
            jobs: jobs_tx,
            stop: stop.clone(),
            abort: abort.clone(),
            failure: failure.clone(),
        }
        .run(),
    );
    let executor = Arc::new(Executor {
        handlers: Arc::new(handlers),
        fallback,
        backoff: config.backoff.clone(),
        job_timeout: config.job_timeout,
        kind_timeouts: Arc::new(config.kind_timeouts.clone()),
        stop_grace: config.stop_grace,
        nack_unknown_kinds: config.nack_unknown_kinds,
        jobs: jobs_rx.clone(),
        finished: finished_tx.clone(),
        inflight: inflight.clone(),
        stop: stop.clone(),
        abort: abort.clone(),
        observe: config.observe,
        worker: config.worker_name.as_str().into(),
        clock: storage.clock(),
        workflows: workflow_access(&storage, config.max_result_bytes),
    });
    let executors: Vec<JoinHandle<()>> =
        (0..config.concurrency).map(|_| tokio::spawn(executor.clone().run())).collect();
    drop(executor); // the tasks hold the only copies: the outcome channel closes when they end
    let settler = tokio::spawn(settler::run(
        storage.clone(),
        finished_rx,
        inflight.clone(),
        settled_tx,
        give_up.clone(),
        failure.clone(),
    ));
    let heartbeat = Heartbeat {
        storage: storage.clone(),
        inflight: inflight.clone(),
        interval: config.heartbeat_interval.unwrap_or((config.lease / 3).min(MAX_DEFAULT_HEARTBEAT)),
        lease: config.lease,
        halt: halt.clone(),
        failure: failure.clone(),
    }
    .start();
    let maintenance = config.maintenance.then(|| {
        tokio::spawn(
            Maintenance {
                storage: storage.clone(),
                holder: config.worker_name.clone(),
                lease: config.maintenance_lease,
                promote_interval: config.promote_interval,
                recover_interval: config.recover_interval,
                purge_interval: config.purge_interval,
                retention: config.retention,
                sample_interval: config.observe.then_some(config.sample_interval),
                stop: stop.clone(),
                failure: failure.clone(),
            }
            .run(),
        )
    });
    let periodic = (!runner.periodic().is_empty()).then(|| {
        tokio::spawn(
            PeriodicTask {
                storage: storage.clone(),
                runner,
                interval: config.periodic_interval,
                stop: stop.clone(),
                failure: failure.clone(),
            }
            .run(),
        )
    });
    let sequence = Shutdown {
        stop: stop.clone(),
        abort,
        halt,
        give_up,
        grace: config.shutdown_grace,
        fetcher,
        executors,
        settler,
        heartbeat,
        maintenance,
        periodic,
        jobs: jobs_rx,
        finished: finished_tx,
    };
    let done = tokio::spawn(sequence.run());
    WorkerHandle { stop, done: Some(done), worker_name: config.worker_name, inflight, failure }
}

/// The tasks and tokens the shutdown sequence winds down, in order.
struct Shutdown {
    stop: CancellationToken,
    abort: CancellationToken,
    halt: CancellationToken,
    give_up: CancellationToken,
    grace: Duration,
    fetcher: JoinHandle<()>,
    executors: Vec<JoinHandle<()>>,
    settler: JoinHandle<()>,
    heartbeat: oneshot::Receiver<()>,
    maintenance: Option<JoinHandle<()>>,
    periodic: Option<JoinHandle<()>>,
    jobs: async_channel::Receiver<Claimed>,
    finished: mpsc::Sender<Finished>,
}

/// How long the last steps of a shutdown wait for a task that is not
/// done by its deadline (the settler after `give_up`, the heartbeat
/// after `halt`) before leaving it behind.
const STRAGGLER: Duration = Duration::from_secs(1);

impl Shutdown {
    /// Every wait is bounded, whatever the storage does (a silent
    /// connection, a server gone): the fetcher's last claim and the running
    /// jobs share the grace; releasing, the executors' last outcomes,
    /// maintenance and the settler's flush share one more grace (at
    /// least 1 s); the settler and the heartbeat then get
    /// [`STRAGGLER`] each. A task still busy then is aborted (a handler
    /// blocking its thread ends when it returns); what it had not recorded
    /// is left to recover, as after a crash.
    async fn run(self) {
        self.stop.cancelled().await;
        tracing::info!("worker pool shutting down: claiming stopped");
        let run_until = Instant::now() + self.grace;
        let flush_until = run_until + self.grace.max(Duration::from_secs(1));
        // The fetcher finishes the claim it is in (dropping it could leave
        // jobs Running with nobody holding them), then stops.
        bounded("fetcher", self.fetcher, run_until).await;
        if let Ok(released) = timeout_at(flush_until, release_unstarted(&self.jobs, &self.finished)).await
            && released > 0
        {
            tracing::info!(released, "claimed jobs not yet started released");
        }

        let aborts: Vec<_> = self.executors.iter().map(JoinHandle::abort_handle).collect();
        let mut executors = futures::future::join_all(self.executors);
        if timeout_at(run_until, &mut executors).await.is_err() {
            tracing::warn!(grace = ?self.grace, "shutdown grace over: cancelling the jobs still running and releasing them");
            self.abort.cancel();
            if timeout_at(flush_until, &mut executors).await.is_err() {
                tracing::error!(
                    "executors still busy after the shutdown's flush budget (a handler blocking its thread, or a \
                     storage that does not answer): leaving them; their jobs are recovered once their leases expire"
                );
                aborts.iter().for_each(tokio::task::AbortHandle::abort);
            }
        }
        // An executor that took a job just as shutdown began has run it by
        // now; nothing is left in the channel but to be safe, release it.
        let _ = timeout_at(flush_until, release_unstarted(&self.jobs, &self.finished)).await;

        if let Some(maintenance) = self.maintenance {
            bounded("maintenance", maintenance, flush_until).await;
        }
        if let Some(periodic) = self.periodic {
            bounded("periodic jobs", periodic, flush_until).await;
        }
        // Executors are gone; dropping the last sender lets the settler
        // end once it has flushed everything.
        drop(self.finished);
        let mut settler = self.settler;
        if timeout_at(flush_until, &mut settler).await.is_err() {
            self.give_up.cancel();
            bounded("settler", settler, Instant::now() + STRAGGLER).await;
        }
        self.halt.cancel();
        if tokio::time::timeout(STRAGGLER, self.heartbeat).await.is_err() {
            tracing::warn!("the heartbeat did not stop in time; leaving its thread to end by itself");
        }
        tracing::info!("worker pool stopped");
    }
}

/// Awaits a task until `deadline`, then aborts it; logs a panic.
async fn bounded(role: &str, mut task: JoinHandle<()>, deadline: Instant) {
    match timeout_at(deadline, &mut task).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::error!(%error, role, "worker pool task failed"),
        Err(_) => {
            tracing::warn!(role, "worker pool task still busy at its shutdown deadline; aborting it");
            task.abort();
        }
    }
}

/// Hands every claimed-but-unstarted job back to Pending at once.
async fn release_unstarted(jobs: &async_channel::Receiver<Claimed>, finished: &mpsc::Sender<Finished>) -> usize {
    let mut released = 0;
    while let Ok(Claimed { job, permit, .. }) = jobs.try_recv() {
        let Some(lease) = job.lease_ref() else { continue };
        let outcome = Outcome::Release { delay: Duration::ZERO };
        // The settler outlives this call: its receiver ends only after
        // `self.finished` is dropped below.
        let _ = finished.send(Finished { lease, outcome, metrics: None }).await;
        drop(permit);
        released += 1;
    }
    released
}

/// What handlers reach of the storage's workflows, when it has them.
fn workflow_access<S: Storage>(
    storage: &Arc<S>,
    max_result_bytes: usize,
) -> Option<Arc<super::handler::WorkflowAccess>> {
    storage.capabilities().workflows?;
    let storage = storage.clone();
    let parents: super::handler::ParentReader = Arc::new(move |id| {
        let storage = storage.clone();
        Box::pin(async move {
            use crate::storage::StorageExt;
            storage.require_workflows()?.parent_results(id).await
        })
    });
    Some(Arc::new(super::handler::WorkflowAccess { max_result_bytes, parents }))
}
