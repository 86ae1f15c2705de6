//! The runs: chaos (producers, worker processes killed at random, a server
//! crash, then the checker) and load (producers against one worker process
//! for a fixed time, memory sampled).

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use jq_core::storage::Storage;
use jq_core::{Error, JobId, NewJob, State};
use nix::sys::signal::Signal;
use rand::Rng;
use tempfile::TempDir;

use crate::audit::{Trail, now_us};
use crate::checker::{self, Facts, Report};
use crate::memory::{MemorySampler, mib};
use crate::servers::{PgServer, RedisServer, Server, signal, wait_or_kill};
use crate::{AnyStorage, Backend, ChaosJob, Target, soak};

/// A backend ready to attack: its folder (audit trail, logs, SQLite file),
/// its private server, and where its jobs live.
#[derive(Debug)]
pub struct Env {
    /// Which backend.
    pub backend: Backend,
    /// Audit files, worker logs, the SQLite file. Kept (not deleted) when a
    /// run fails, so the evidence stays.
    pub dir: TempDir,
    /// The private server.
    pub server: Server,
    /// Where the jobs live.
    pub target: Target,
}

impl Env {
    /// Starts the backend's private server (none for SQLite) and creates the
    /// schema. Panics, saying to run scripts/start-services.sh, when the
    /// server binaries are missing.
    pub async fn start(backend: Backend) -> Result<Env, String> {
        Env::start_with(backend, PgServer::DEFAULT_MAX_CONNECTIONS).await
    }

    /// [`Env::start`], a private PostgreSQL taking at most
    /// `pg_max_connections` connections.
    pub async fn start_with(backend: Backend, pg_max_connections: u32) -> Result<Env, String> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("jq-chaos-{}", backend.name()))
            .tempdir()
            .map_err(|e| e.to_string())?;
        let (server, target) = match backend {
            Backend::Sqlite => (Server::None, Target::Sqlite { path: dir.path().join("jobs.db") }),
            Backend::Postgres => {
                let pg = tokio::task::block_in_place(|| PgServer::start_with(pg_max_connections))?;
                let target = Target::Postgres { url: pg.url(), schema: "chaos".into() };
                (Server::Postgres(pg), target)
            }
            Backend::Redis => {
                let redis = tokio::task::block_in_place(RedisServer::start)?;
                let target = Target::Redis { url: redis.url(), prefix: "chaos".into() };
                (Server::Redis(redis), target)
            }
        };
        // A fresh server may still be starting up: PostgreSQL answers on
        // its port before it accepts sessions.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match target.migrate().await {
                Ok(()) => break,
                Err(e) if Instant::now() > deadline => return Err(format!("cannot set up {backend:?}: {e}")),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        Ok(Env { backend, dir, server, target })
    }

    /// Keeps the folder on disk (for a failed run) and returns its path.
    pub fn keep(self) -> PathBuf {
        let Env { dir, server, .. } = self;
        drop(server);
        dir.keep()
    }
}

/// The worker processes of a run.
#[derive(Debug)]
pub struct Workers {
    binary: PathBuf,
    args: Vec<String>,
    dir: PathBuf,
    started: usize,
    live: Vec<Child>,
    /// Pids SIGKILLed so far.
    pub killed: HashSet<u32>,
}

impl Workers {
    /// No worker yet; `args` are given to every worker besides its audit file.
    pub fn new(binary: &Path, target: &Target, extra: &[String], dir: &Path) -> Workers {
        let mut args = target.worker_args();
        args.extend(extra.iter().cloned());
        Workers {
            binary: binary.to_owned(),
            args,
            dir: dir.to_owned(),
            started: 0,
            live: Vec::new(),
            killed: HashSet::new(),
        }
    }

    /// `count` workers of `env`'s target started with a pool of
    /// `concurrency` and jobs of up to `work_max_ms`: the chaos and storm
    /// drains' workers.
    pub fn start(
        binary: &Path,
        env: &Env,
        concurrency: usize,
        work_max_ms: u64,
        count: usize,
    ) -> Result<Workers, String> {
        let extra =
            ["--concurrency".to_owned(), concurrency.to_string(), "--work-max-ms".to_owned(), work_max_ms.to_string()];
        let mut workers = Workers::new(binary, &env.target, &extra, env.dir.path());
        for _ in 0..count {
            workers.spawn()?;
        }
        Ok(workers)
    }

    /// Starts one more worker, with its own audit file and log.
    pub fn spawn(&mut self) -> Result<u32, String> {
        self.started += 1;
        let n = self.started;
        let log = std::fs::File::create(self.dir.join(format!("worker-{n}.log"))).map_err(|e| e.to_string())?;
        let child = Command::new(&self.binary)
            .args(&self.args)
            .arg("--audit")
            .arg(self.dir.join(format!("audit-{n}.jsonl")))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.binary.display()))?;
        let pid = child.id();
        self.live.push(child);
        Ok(pid)
    }

    /// Pids of the live workers.
    pub fn pids(&self) -> Vec<u32> {
        self.live.iter().map(Child::id).collect()
    }

    /// How many were started in all.
    pub fn started(&self) -> usize {
        self.started
    }

    /// SIGKILLs the worker at `index` (modulo the live count) and returns its pid.
    pub fn kill(&mut self, index: usize) -> Option<u32> {
        if self.live.is_empty() {
            return None;
        }
        let mut child = self.live.remove(index % self.live.len());
        let pid = child.id();
        let _ = child.kill();
        let _ = child.wait();
        self.killed.insert(pid);
        Some(pid)
    }

    /// Live workers that exited on their own (crashed), with their status.
    pub fn exited(&mut self) -> Vec<(u32, String)> {
        self.live.iter_mut().filter_map(|c| Some((c.id(), c.try_wait().ok()??.to_string()))).collect()
    }

    /// SIGTERMs every worker and waits for each to shut down gracefully;
    /// returns how many had to be SIGKILLed after `patience`.
    pub fn stop_all(&mut self, patience: Duration) -> usize {
        for child in &self.live {
            signal(child.id(), Signal::SIGTERM);
        }
        let deadline = Instant::now() + patience;
        let mut forced = 0;
        for mut child in self.live.drain(..) {
            if !wait_or_kill(&mut child, deadline.saturating_duration_since(Instant::now())) {
                forced += 1;
            }
        }
        forced
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.live {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// How hard a chaos run hits.
#[derive(Clone, Debug)]
pub struct ChaosPlan {
    /// Jobs enqueued in all.
    pub jobs: usize,
    /// Jobs per enqueue call.
    pub batch: usize,
    /// Worker processes alive at any time.
    pub workers: usize,
    /// Jobs each worker runs at once.
    pub concurrency: usize,
    /// Longest random work per job in milliseconds: long enough that a kill
    /// or an outage finds jobs in flight.
    pub work_max_ms: u64,
    /// SIGKILLs of a random worker (each replaced at once).
    pub kills: usize,
    /// Server crashes (SQLite: every worker killed at once instead).
    pub restarts: usize,
    /// How long the server stays down.
    pub down: Duration,
    /// Enqueueing is spread over this long; kills and crashes happen in it.
    pub produce_for: Duration,
    /// Most time given to finishing every job afterwards.
    pub settle_timeout: Duration,
}

impl ChaosPlan {
    /// The short plan (CI), or the soak plan with `JQ_CHAOS_SOAK=1`.
    pub fn from_env() -> ChaosPlan {
        if soak() {
            ChaosPlan {
                jobs: 50_000,
                batch: 50,
                workers: 4,
                concurrency: 16,
                work_max_ms: 100,
                kills: 40,
                restarts: 3,
                down: Duration::from_secs(3),
                produce_for: Duration::from_secs(240),
                settle_timeout: Duration::from_secs(600),
            }
        } else {
            ChaosPlan {
                jobs: 2_000,
                batch: 20,
                workers: 3,
                concurrency: 16,
                work_max_ms: 100,
                kills: 5,
                restarts: 1,
                down: Duration::from_millis(2500),
                produce_for: Duration::from_secs(12),
                settle_timeout: Duration::from_secs(120),
            }
        }
    }
}

/// Everything a chaos run measured.
#[derive(Clone, Debug)]
pub struct ChaosOutcome {
    /// Which backend.
    pub backend: Backend,
    /// The checker's verdict.
    pub report: Report,
    /// Workers SIGKILLed.
    pub killed: usize,
    /// Worker processes started in all.
    pub workers_started: usize,
    /// Server crashes and restarts.
    pub server_restarts: u32,
    /// SQLite: times every worker was killed at once (its "restart").
    pub mass_kills: usize,
    /// Enqueue calls that failed and were retried (during the outage).
    pub enqueue_retries: usize,
    /// Workers that did not stop within the grace at the end.
    pub forced_stops: usize,
    /// Workers that died without being killed, with their status.
    pub crashed: Vec<(u32, String)>,
    /// Largest resident memory of any worker.
    pub peak_rss_kib: u64,
    /// Time from the first enqueue until every job was Completed.
    pub drain: Duration,
    /// Whole run.
    pub elapsed: Duration,
}

impl ChaosOutcome {
    /// Everything that makes the run fail.
    pub fn problems(&self) -> Vec<String> {
        let mut p = self.report.problems();
        if !self.crashed.is_empty() {
            p.push(format!("workers died without being killed: {:?}", self.crashed));
        }
        p
    }
}

impl fmt::Display for ChaosOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "chaos {}:", self.backend.name())?;
        write!(f, "{}", self.report)?;
        writeln!(f, "  workers killed:    {} (of {} started)", self.killed, self.workers_started)?;
        match self.backend {
            Backend::Sqlite => writeln!(
                f,
                "  server restarts:   0 (no server; every worker killed at once {} time(s))",
                self.mass_kills
            )?,
            _ => writeln!(f, "  server restarts:   {}", self.server_restarts)?,
        }
        writeln!(f, "  enqueue retries:   {}", self.enqueue_retries)?;
        writeln!(f, "  forced stops:      {}", self.forced_stops)?;
        writeln!(f, "  peak worker RSS:   {}", mib(self.peak_rss_kib))?;
        writeln!(f, "  drained in:        {:.1?} (run {:.1?})", self.drain, self.elapsed)
    }
}

/// Enqueues `jobs` and returns their ids, riding out an outage: after an
/// error the batch may or may not be stored (the answer was lost), so the
/// first job is looked up before the batch is sent again.
pub(crate) async fn enqueue_surely(
    storage: &dyn Storage,
    jobs: Vec<NewJob>,
    retries: &AtomicUsize,
) -> Result<Vec<JobId>, String> {
    let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    let Some(first) = ids.first().copied() else { return Ok(ids) };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match storage.enqueue(jobs.clone()).await {
            Ok(stored) if stored == ids => return Ok(ids),
            Ok(stored) => return Err(format!("enqueue returned other ids: {stored:?} for {ids:?}")),
            Err(e) if e.is_retryable() || matches!(e, Error::Backend { .. }) => {
                retries.fetch_add(1, Ordering::Relaxed);
                if Instant::now() > deadline {
                    return Err(format!("enqueue kept failing for 60 s: {e}"));
                }
            }
            Err(e) => return Err(format!("enqueue refused a valid batch: {e}")),
        }
        // Was it stored after all?
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            match storage.get(first).await {
                Ok(_) => return Ok(ids),
                Err(Error::NotFound { .. }) => break,
                Err(_) if Instant::now() < deadline => continue,
                Err(e) => return Err(format!("cannot tell whether a batch was stored: {e}")),
            }
        }
    }
}

pub(crate) fn chaos_jobs(from: u64, n: usize) -> Result<Vec<NewJob>, Error> {
    (0..n as u64).map(|i| NewJob::typed(&ChaosJob { seq: from + i }).build()).collect()
}

/// Waits until `storage` answers (a server just restarted).
async fn wait_answering(storage: &dyn Storage, patience: Duration) {
    let deadline = Instant::now() + patience;
    while storage.stats().await.is_err() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What happens when during a chaos run, relative to its start.
enum Event {
    Kill,
    Restart,
}

/// The chaos run on `env` with the worker binary `worker`. Needs a
/// multi-threaded tokio runtime (server restarts block a thread).
pub async fn run_chaos(env: &mut Env, worker: &Path, plan: &ChaosPlan) -> Result<ChaosOutcome, String> {
    let started = Instant::now();
    let storage: AnyStorage =
        env.target.connect_patiently(Duration::from_secs(30)).await.map_err(|e| format!("connect: {e}"))?;
    let mut workers = Workers::start(worker, env, plan.concurrency, plan.work_max_ms, plan.workers)?;

    // Producer: batches spread evenly over `produce_for`.
    let retries = Arc::new(AtomicUsize::new(0));
    let producer = {
        let storage = storage.clone();
        let retries = retries.clone();
        let (jobs, batch, span) = (plan.jobs, plan.batch.max(1), plan.produce_for);
        tokio::spawn(async move {
            let batches = jobs.div_ceil(batch).max(1);
            let pace = span / batches as u32;
            let mut ids = Vec::with_capacity(jobs);
            let mut tick = tokio::time::interval(pace);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for b in 0..batches {
                tick.tick().await;
                let n = batch.min(jobs - b * batch);
                let batch = chaos_jobs((b * batch) as u64, n).map_err(|e| e.to_string())?;
                ids.extend(enqueue_surely(&*storage, batch, &retries).await?);
            }
            Ok::<_, String>(ids)
        })
    };

    // The periodic job of kills and crashes.
    let mut events: Vec<(Duration, Event)> = Vec::new();
    {
        let mut rng = rand::rng();
        let span = plan.produce_for.as_secs_f64();
        for _ in 0..plan.kills {
            events.push((Duration::from_secs_f64(span * rng.random_range(0.05..1.0)), Event::Kill));
        }
        for r in 0..plan.restarts {
            let slot = (r as f64 + rng.random_range(0.3..0.7)) / plan.restarts as f64;
            events.push((Duration::from_secs_f64(span * slot), Event::Restart));
        }
        events.sort_by_key(|(at, _)| *at);
    }
    let mut events = events.into_iter().peekable();
    let mut memory = MemorySampler::default();
    let mut outages = Vec::new();
    let mut mass_kills = 0;
    let mut crashed = Vec::new();
    let run_start = Instant::now();
    while let Some((at, _)) = events.peek() {
        if run_start.elapsed() < *at {
            memory.sample(workers.pids());
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let Some((_, event)) = events.next() else { break };
        match event {
            Event::Kill => {
                let victim = rand::rng().random_range(0..plan.workers.max(1));
                workers.kill(victim);
                workers.spawn()?;
            }
            Event::Restart => {
                if matches!(env.server, Server::None) {
                    for _ in 0..plan.workers {
                        workers.kill(0);
                    }
                    for _ in 0..plan.workers {
                        workers.spawn()?;
                    }
                    mass_kills += 1;
                } else {
                    let from = now_us();
                    let down = plan.down;
                    tokio::task::block_in_place(|| env.server.crash_and_restart(down))?;
                    wait_answering(&*storage, Duration::from_secs(30)).await;
                    outages.push((from, now_us()));
                }
            }
        }
        crashed.extend(workers.exited());
    }
    let enqueued = producer.await.map_err(|e| format!("producer panicked: {e}"))??;

    // Settle: every job Completed, bounded.
    let deadline = Instant::now() + plan.settle_timeout;
    loop {
        memory.sample(workers.pids());
        let done = storage.stats().await.map(|s| s.total(State::Completed)).unwrap_or(0);
        if done >= enqueued.len() as u64 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let drain = run_start.elapsed();
    crashed.extend(workers.exited());
    let forced_stops = tokio::task::block_in_place(|| workers.stop_all(Duration::from_secs(15)));

    let trail = Trail::read_dir(env.dir.path()).map_err(|e| format!("reading the audit trail: {e}"))?;
    let facts = Facts { enqueued, killed: workers.killed.clone(), outages };
    let report = checker::check(&*storage, &trail, &facts).await.map_err(|e| format!("checker: {e}"))?;
    Ok(ChaosOutcome {
        backend: env.backend,
        report,
        killed: workers.killed.len(),
        workers_started: workers.started(),
        server_restarts: env.server.restarts(),
        mass_kills,
        enqueue_retries: retries.load(Ordering::Relaxed),
        forced_stops,
        crashed,
        peak_rss_kib: memory.peak_kib(),
        drain,
        elapsed: started.elapsed(),
    })
}

/// How a load run goes.
#[derive(Clone, Debug)]
pub struct LoadPlan {
    /// How long producers enqueue.
    pub duration: Duration,
    /// Concurrent producer tasks.
    pub producers: usize,
    /// Jobs per enqueue call.
    pub batch: usize,
    /// Jobs the worker runs at once.
    pub concurrency: usize,
    /// Producers pause while more than this many jobs wait or run, so the
    /// drain at the end stays short.
    pub max_backlog: u64,
    /// Most time given to the drain.
    pub drain_timeout: Duration,
}

impl LoadPlan {
    /// The short plan (CI), or the soak plan with `JQ_CHAOS_SOAK=1`.
    pub fn from_env() -> LoadPlan {
        LoadPlan {
            duration: if soak() { Duration::from_secs(300) } else { Duration::from_secs(10) },
            producers: 4,
            batch: 10,
            concurrency: 32,
            max_backlog: 2_000,
            drain_timeout: Duration::from_secs(60),
        }
    }
}

/// What a load run measured.
#[derive(Clone, Debug)]
pub struct LoadOutcome {
    /// Which backend.
    pub backend: Backend,
    /// Jobs enqueued.
    pub enqueued: u64,
    /// Completed at the end.
    pub completed: u64,
    /// Dead at the end (must be 0).
    pub dead: u64,
    /// Errors seen by producers and the monitor.
    pub errors: Vec<String>,
    /// First sample of the worker's RSS (just started).
    pub rss_first_kib: u64,
    /// The first sample after one second of load (warmed up).
    pub rss_warm_kib: u64,
    /// Last sample.
    pub rss_last_kib: u64,
    /// Largest sample.
    pub rss_peak_kib: u64,
    /// Samples taken.
    pub samples: usize,
    /// Enqueueing time.
    pub duration: Duration,
    /// Time to drain after the producers stopped.
    pub drain: Duration,
}

impl LoadOutcome {
    /// Everything that makes the run fail. Memory is only checked for gross
    /// growth (speed and memory are measured, not asserted finely).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if !self.errors.is_empty() {
            p.push(format!("{} error(s), e.g. {:?}", self.errors.len(), &self.errors[..self.errors.len().min(5)]));
        }
        if self.completed != self.enqueued {
            p.push(format!("{} enqueued but {} completed", self.enqueued, self.completed));
        }
        if self.dead > 0 {
            p.push(format!("{} job(s) dead", self.dead));
        }
        if self.samples < 2 {
            p.push("the worker's memory could not be sampled".into());
        } else if self.rss_last_kib > 2 * self.rss_warm_kib + 20 * 1024 {
            p.push(format!("worker memory grew from {} to {}", mib(self.rss_warm_kib), mib(self.rss_last_kib)));
        }
        p
    }
}

impl fmt::Display for LoadOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.duration.as_secs_f64().max(0.001);
        writeln!(f, "load {}:", self.backend.name())?;
        writeln!(
            f,
            "  enqueued:   {} in {:.1?} ({:.0} jobs/s)",
            self.enqueued,
            self.duration,
            self.enqueued as f64 / secs
        )?;
        writeln!(
            f,
            "  completed:  {} (drain after producers stopped: {:.1?}), dead: {}",
            self.completed, self.drain, self.dead
        )?;
        writeln!(f, "  errors:     {}", self.errors.len())?;
        writeln!(
            f,
            "  worker RSS: first {}, after 1 s {}, last {}, peak {} ({} samples)",
            mib(self.rss_first_kib),
            mib(self.rss_warm_kib),
            mib(self.rss_last_kib),
            mib(self.rss_peak_kib),
            self.samples
        )
    }
}

/// The load run on `env`: `plan.producers` tasks enqueue for
/// `plan.duration` while one worker process runs the jobs; its memory is
/// sampled every 250 ms.
pub async fn run_load(env: &mut Env, worker: &Path, plan: &LoadPlan) -> Result<LoadOutcome, String> {
    let storage: AnyStorage =
        env.target.connect_patiently(Duration::from_secs(30)).await.map_err(|e| format!("connect: {e}"))?;
    let extra = vec![
        "--concurrency".to_owned(),
        plan.concurrency.to_string(),
        "--work-max-ms".to_owned(),
        "2".to_owned(),
        "--lease-ms".to_owned(),
        "10000".to_owned(),
        "--heartbeat-ms".to_owned(),
        "2000".to_owned(),
    ];
    let mut workers = Workers::new(worker, &env.target, &extra, env.dir.path());
    let pid = workers.spawn()?;
    let mut memory = MemorySampler::default();

    let backlog = Arc::new(AtomicU64::new(0));
    let enqueued = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let start = Instant::now();
    let stop_at = start + plan.duration;
    let mut producers = Vec::new();
    for p in 0..plan.producers {
        let (storage, backlog, enqueued, errors) = (storage.clone(), backlog.clone(), enqueued.clone(), errors.clone());
        let (batch, max_backlog) = (plan.batch, plan.max_backlog);
        producers.push(tokio::spawn(async move {
            let mut seq = (p as u64) << 40;
            while Instant::now() < stop_at {
                if backlog.load(Ordering::Relaxed) > max_backlog {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                let result = match chaos_jobs(seq, batch) {
                    Ok(jobs) => storage.enqueue(jobs).await,
                    Err(e) => Err(e),
                };
                seq += batch as u64;
                match result {
                    Ok(ids) => {
                        enqueued.fetch_add(ids.len() as u64, Ordering::Relaxed);
                        backlog.fetch_add(ids.len() as u64, Ordering::Relaxed);
                    }
                    Err(e) => errors.lock().unwrap_or_else(|p| p.into_inner()).push(format!("enqueue: {e}")),
                }
            }
        }));
    }
    let mut warm = None;
    let mut last_stats = Instant::now();
    while Instant::now() < stop_at {
        tokio::time::sleep(Duration::from_millis(250)).await;
        memory.sample([pid]);
        if warm.is_none() && start.elapsed() >= Duration::from_secs(1) {
            warm = memory.first_last_kib(pid).map(|(_, last)| last);
        }
        if last_stats.elapsed() >= Duration::from_millis(250) {
            last_stats = Instant::now();
            match storage.stats().await {
                Ok(s) => {
                    let open = s.total(State::Pending) + s.total(State::Running) + s.total(State::Scheduled);
                    backlog.store(open, Ordering::Relaxed);
                }
                Err(e) => errors.lock().unwrap_or_else(|p| p.into_inner()).push(format!("stats: {e}")),
            }
        }
    }
    for p in producers {
        p.await.map_err(|e| format!("producer panicked: {e}"))?;
    }
    let duration = start.elapsed();
    let total = enqueued.load(Ordering::Relaxed);
    let deadline = Instant::now() + plan.drain_timeout;
    let drain_start = Instant::now();
    let (mut completed, mut dead) = (0, 0);
    while Instant::now() < deadline {
        memory.sample([pid]);
        if let Ok(s) = storage.stats().await {
            completed = s.total(State::Completed);
            dead = s.total(State::Dead);
            if completed + dead >= total {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drain = drain_start.elapsed();
    memory.sample([pid]);
    let mut errors = std::mem::take(&mut *errors.lock().unwrap_or_else(|p| p.into_inner()));
    errors.extend(workers.exited().into_iter().map(|(pid, status)| format!("worker {pid} died: {status}")));
    if tokio::task::block_in_place(|| workers.stop_all(Duration::from_secs(15))) > 0 {
        errors.push("the worker did not stop within 15 s of SIGTERM".into());
    }
    let (first, last) = memory.first_last_kib(pid).unwrap_or((0, 0));
    Ok(LoadOutcome {
        backend: env.backend,
        enqueued: total,
        completed,
        dead,
        errors,
        rss_first_kib: first,
        rss_warm_kib: warm.unwrap_or(first),
        rss_last_kib: last,
        rss_peak_kib: memory.peak_kib(),
        samples: memory.samples.get(&pid).map_or(0, Vec::len),
        duration,
        drain,
    })
}
