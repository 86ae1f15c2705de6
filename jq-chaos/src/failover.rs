//! Failover: a drain by worker processes while the PostgreSQL primary
//! crashes and its streaming replica is promoted, as a failover manager
//! (Patroni, a cloud's) does when a primary dies.
//!
//! The pair is private: a primary started by `initdb` and a hot standby
//! made by `pg_basebackup -R`, each on a free port. jq (the workers, the
//! producer, the checker) connects with one multi-host URL,
//! `postgres://...@127.0.0.1:P1,127.0.0.1:P2/postgres?target_session_attrs=read-write`.
//! In the middle of the drain the standby stops receiving WAL (the
//! primary's WAL sender is stopped: a lag, as behind a slow link), then
//! the primary is crashed (SIGQUIT: an immediate shutdown, no checkpoint;
//! its stopped WAL sender killed with what it held back), the standby's
//! jobs are read (what the failover keeps), then it is promoted
//! (`pg_promote`). Or ([`Fall::Demote`]) the primary is made read-only
//! with jq's connections open and stays up. After the drain the old
//! primary is read (a crashed one started again on its own), so the jobs
//! a failover undid are counted exactly:
//!
//! - *enqueues undone*: jobs stored on the old primary and absent from the
//!   standby at promotion;
//! - *acks undone*: jobs Completed on the old primary and not on the
//!   standby at promotion (they run again after their lease expires);
//! - *lost*: jobs whose enqueue the store acknowledged to the producer
//!   and that are not Completed at the end.
//!
//! With synchronous replication every commit acknowledged to jq is on the
//! standby before the acknowledgement, so lost is 0, and what was undone
//! can only be commits whose acknowledgement the crash cut off (their
//! callers saw the connection break and sent them again). With
//! asynchronous replication the last instants before the crash may be
//! undone, acknowledged or not: the figures say how many.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use jq_core::{JobId, State};
use nix::sys::signal::Signal;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, PgConnection};

use crate::audit::{Trail, now_us};
use crate::checker::{self, Facts, Report};
use crate::scenario::{Env, Workers, chaos_jobs, enqueue_surely};
use crate::servers::{PgServer, Server, signal};
use crate::storm::{ATTACKER_NAME, warnings};
use crate::{AnyStorage, Backend, Target};

/// The schema of the jobs.
const SCHEMA: &str = "chaos";

/// How the standby follows the primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replication {
    /// Every commit waits until the standby has flushed it
    /// (`synchronous_standby_names = '*'`, `synchronous_commit = on`).
    Synchronous,
    /// Commits return at once; the standby streams behind.
    Asynchronous,
}

impl Replication {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Replication::Synchronous => "sync",
            Replication::Asynchronous => "async",
        }
    }
}

/// What happens to the old primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fall {
    /// It crashes (SIGQUIT: immediate shutdown), then the standby is
    /// promoted: an unplanned failover. jq's connections break.
    Crash,
    /// It is made read-only and stays up with jq's connections open
    /// (`default_transaction_read_only = on`, reloaded), then the standby
    /// is promoted: the old primary of an Aurora or Patroni failover that
    /// keeps answering, every write refused with SQLSTATE 25006.
    Demote,
}

impl Fall {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Fall::Crash => "crash",
            Fall::Demote => "demote",
        }
    }
}

/// How jq reaches the primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// One multi-host URL naming both servers, with
    /// `target_session_attrs=read-write`: jq finds the primary.
    Hosts,
    /// One address, a TCP proxy, that the operator moves to the new
    /// primary once it is promoted (a virtual IP, an HAProxy behind
    /// Patroni's health checks, a cloud's cluster endpoint). The open
    /// connections stay with the old primary.
    Proxy,
}

impl Route {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Route::Hosts => "multi-host URL",
            Route::Proxy => "one address, moved",
        }
    }
}

/// The drain the failover meets.
#[derive(Clone, Debug)]
pub struct FailoverPlan {
    /// Jobs enqueued in all.
    pub jobs: usize,
    /// Jobs per enqueue call.
    pub batch: usize,
    /// Enqueueing is spread over this long.
    pub produce_for: Duration,
    /// Worker processes.
    pub workers: usize,
    /// Jobs each worker runs at once.
    pub concurrency: usize,
    /// Longest random work per job, in milliseconds.
    pub work_max_ms: u64,
    /// When the primary crashes, from the start of the drain.
    pub crash_after: Duration,
    /// How long before the crash the standby stops receiving WAL (its
    /// sender is stopped): the replication lag the crash meets. What the
    /// primary committed in that time is what an asynchronous failover
    /// undoes; a synchronous primary commits nothing in it.
    pub lag: Duration,
    /// How long the standby waits, after the crash, to be promoted (the
    /// failover manager's detection time).
    pub promote_after: Duration,
    /// Most time given to finishing every job after the producer is done.
    pub settle_timeout: Duration,
}

impl FailoverPlan {
    /// CI's drain: 840 jobs over 7 s (120 a second) by 2 workers of 8,
    /// the primary crashed 3 s in with its standby 300 ms behind, the
    /// standby promoted half a second later.
    /// `JQ_CHAOS_FAILOVER_JOBS` sets how many jobs the 7 s bring (more
    /// make the last instants before the crash busier).
    pub fn ci() -> FailoverPlan {
        let jobs = std::env::var("JQ_CHAOS_FAILOVER_JOBS").ok().and_then(|n| n.parse().ok()).unwrap_or(840);
        FailoverPlan {
            jobs,
            batch: 20,
            produce_for: Duration::from_secs(7),
            workers: 2,
            concurrency: 8,
            work_max_ms: 20,
            crash_after: Duration::from_secs(3),
            lag: Duration::from_millis(300),
            promote_after: Duration::from_millis(500),
            settle_timeout: Duration::from_secs(60),
        }
    }
}

/// Everything a failover drain measured.
#[derive(Clone, Debug)]
pub struct FailoverOutcome {
    /// The replication mode.
    pub replication: Replication,
    /// What happened to the old primary.
    pub fall: Fall,
    /// How jq reached the primary.
    pub route: Route,
    /// The checker's verdict (on the new primary).
    pub report: Report,
    /// From the crash (or the demotion) until `pg_promote` returned.
    pub crash_to_promoted: Duration,
    /// From the promotion until the first job Completed on the new
    /// primary.
    pub promoted_to_first_ack: Option<Duration>,
    /// Jobs on the old primary missing from the standby at promotion.
    pub enqueues_undone: Vec<JobId>,
    /// Jobs Completed on the old primary and not on the standby at
    /// promotion.
    pub acks_undone: Vec<JobId>,
    /// Jobs whose state on the old primary differs from the standby's at
    /// promotion (claims, acks, enqueues undone).
    pub rewound: Vec<JobId>,
    /// Jobs on the old primary, and Completed there, at the end (a crashed
    /// one: when it crashed).
    pub old_primary: (usize, usize),
    /// Enqueue calls that failed and were sent again.
    pub enqueue_retries: usize,
    /// Workers that died (none may).
    pub crashed: Vec<(u32, String)>,
    /// Workers that had to be SIGKILLed at the end.
    pub forced_stops: usize,
    /// From the first enqueue until every job was Completed.
    pub drain: Duration,
    /// Warning lines of the workers' logs, counted by their message.
    pub warnings: Vec<(String, usize)>,
}

impl FailoverOutcome {
    /// Acknowledged enqueues that did not end Completed: lost.
    pub fn lost(&self) -> usize {
        self.report.lost.len()
    }

    /// Everything that makes the run fail. Synchronous: anything the
    /// checker finds, a lost job above all. Asynchronous: the jobs whose
    /// enqueue the failover undid are lost and their runs unknown to the
    /// new primary, as the docs say; anything else fails the run.
    pub fn problems(&self) -> Vec<String> {
        let mut p = match self.replication {
            Replication::Synchronous => self.report.problems(),
            Replication::Asynchronous => {
                let undone: HashSet<JobId> = self.enqueues_undone.iter().copied().collect();
                let mut report = self.report.clone();
                report.lost.retain(|(id, _)| !undone.contains(id));
                report.unexplained.retain(|line| !line.starts_with("runs of jobs the store does not know"));
                // A job whose claim or ack was undone runs again without a
                // lease expiry in its record: the failover explains it.
                let rewound: HashSet<String> = self.rewound.iter().map(|id| format!("job {id}:")).collect();
                report.unexplained.retain(|line| !rewound.iter().any(|prefix| line.starts_with(prefix)));
                report.problems()
            }
        };
        if !self.crashed.is_empty() {
            p.push(format!("workers died: {:?}", self.crashed));
        }
        if self.promoted_to_first_ack.is_none() {
            p.push("no job was completed on the new primary after the promotion".into());
        }
        p
    }
}

impl fmt::Display for FailoverOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "failover drain, {} replication, old primary: {}, jq through: {}:",
            self.replication.name(),
            self.fall.name(),
            self.route.name()
        )?;
        write!(f, "{}", self.report)?;
        writeln!(f, "  LOST (acked enqueues not completed): {}", self.lost())?;
        writeln!(f, "  old primary:       {} jobs, {} completed", self.old_primary.0, self.old_primary.1)?;
        writeln!(f, "  enqueues undone:   {} (on the old primary, not on the standby)", self.enqueues_undone.len())?;
        writeln!(
            f,
            "  acks undone:       {} (completed on the old primary, not on the standby)",
            self.acks_undone.len()
        )?;
        writeln!(
            f,
            "  jobs rewound:      {} (another state on the old primary than on the standby)",
            self.rewound.len()
        )?;
        writeln!(f, "  {} -> promoted: {:.1?}", self.fall.name(), self.crash_to_promoted)?;
        writeln!(f, "  promoted -> 1st ack on the new primary: {:.1?}", self.promoted_to_first_ack)?;
        writeln!(f, "  drained in:        {:.1?}", self.drain)?;
        writeln!(f, "  enqueue retries:   {}", self.enqueue_retries)?;
        writeln!(f, "  forced stops:      {}", self.forced_stops)?;
        writeln!(f, "  worker warnings:")?;
        for (line, n) in &self.warnings {
            writeln!(f, "    {n:>6}  {line}")?;
        }
        Ok(())
    }
}

/// A primary and its streaming replica, private.
#[derive(Debug)]
pub struct PgPair {
    /// The primary (crashed by the run).
    pub primary: PgServer,
    /// The hot standby (promoted by the run).
    pub replica: PgServer,
    /// The replication mode.
    pub replication: Replication,
}

impl PgPair {
    /// Starts the primary, makes the replica and waits until it streams
    /// (and, synchronous, is the synchronous standby).
    pub async fn start(replication: Replication) -> Result<PgPair, String> {
        let synchronous = replication == Replication::Synchronous;
        let primary = tokio::task::block_in_place(|| PgServer::start_primary(synchronous))?;
        let replica = tokio::task::block_in_place(|| PgServer::replica_of(&primary))?;
        let pair = PgPair { primary, replica, replication };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if pair.streaming().await.unwrap_or(false) {
                return Ok(pair);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the replica does not stream: see {} and {}",
                    pair.primary.log_path().display(),
                    pair.replica.log_path().display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn streaming(&self) -> Result<bool, String> {
        let mut conn = connect(self.primary.port()).await?;
        let wanted = if self.replication == Replication::Synchronous { "sync" } else { "async" };
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = $1",
        )
        .bind(wanted)
        .fetch_one(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
        Ok(n == 1)
    }

    /// The multi-host URL jq connects with: the primary first, then the
    /// replica, and only a server that takes writes will do.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
            self.primary.port(),
            self.replica.port()
        )
    }
}

/// The harness's own connection to the private server on `port`, named so
/// that no attack takes it for jq's.
async fn connect(port: u16) -> Result<PgConnection, String> {
    let options = PgConnectOptions::from_str(&format!("postgres://postgres@127.0.0.1:{port}/postgres"))
        .map_err(|e| e.to_string())?
        .application_name(ATTACKER_NAME);
    options.connect().await.map_err(|e| format!("connect to 127.0.0.1:{port}: {e}"))
}

/// Stops (SIGSTOP) the primary's WAL sender: from now on the standby
/// receives nothing, as behind a slow link; with synchronous replication
/// the primary's commits wait. Returns its pid.
async fn stop_wal_sender(port: u16) -> Result<u32, String> {
    let mut conn = connect(port).await?;
    let pid: i32 = sqlx::query_scalar("SELECT pid FROM pg_stat_replication LIMIT 1")
        .fetch_one(&mut conn)
        .await
        .map_err(|e| format!("finding the WAL sender: {e}"))?;
    let pid = u32::try_from(pid).map_err(|e| e.to_string())?;
    signal(pid, Signal::SIGSTOP);
    Ok(pid)
}

/// Waits until the standby of `conn` has replayed all the WAL it received
/// (a synchronous commit waits for the flush, not the replay), so that
/// what it shows is what it keeps.
async fn caught_up(conn: &mut PgConnection) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let done: Option<bool> = sqlx::query_scalar("SELECT pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn()")
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| format!("reading the standby's replay: {e}"))?;
        if done.unwrap_or(true) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("the standby did not replay what it received within 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Every job of the schema on the server of `conn`: id and state.
async fn jobs_on(conn: &mut PgConnection) -> Result<BTreeMap<String, String>, String> {
    let rows: Vec<(String, String)> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT id::text, state::text FROM {SCHEMA}.jobs")))
            .fetch_all(conn)
            .await
            .map_err(|e| format!("reading the jobs: {e}"))?;
    Ok(rows.into_iter().collect())
}

fn completed(jobs: &BTreeMap<String, String>) -> usize {
    jobs.values().filter(|s| s.as_str() == "completed").count()
}

/// Runs `plan` against `pair` with the worker binary `worker`: the drain,
/// the crash and the promotion, the checker, then the old primary's count.
pub async fn run_failover(
    pair: &mut PgPair,
    fall: Fall,
    route: Route,
    dir: tempfile::TempDir,
    worker: &Path,
    plan: &FailoverPlan,
) -> Result<(Env, FailoverOutcome), String> {
    let local = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let proxy = match route {
        Route::Hosts => None,
        Route::Proxy => Some(
            jq_testkit::proxy::Proxy::start(local(pair.primary.port()))
                .await
                .map_err(|e| format!("starting the proxy: {e}"))?,
        ),
    };
    let url = match &proxy {
        Some(proxy) => format!("postgres://postgres@{}/postgres", proxy.addr()),
        None => pair.url(),
    };
    let target = Target::Postgres { url, schema: SCHEMA.into() };
    target.migrate().await.map_err(|e| format!("migrate: {e}"))?;
    let env = Env { backend: Backend::Postgres, dir, server: Server::None, target };
    let storage: AnyStorage =
        env.target.connect_patiently(Duration::from_secs(30)).await.map_err(|e| format!("connect: {e}"))?;
    let retries = Arc::new(AtomicUsize::new(0));
    let mut workers = Workers::start(worker, &env, plan.concurrency, plan.work_max_ms, plan.workers)?;
    let start = Instant::now();
    let producer = {
        let (storage, retries) = (storage.clone(), retries.clone());
        let (jobs, batch, span) = (plan.jobs, plan.batch.max(1), plan.produce_for);
        let batches = jobs.div_ceil(batch).max(1);
        tokio::spawn(async move {
            let mut ids = Vec::with_capacity(jobs);
            let mut tick = tokio::time::interval(span / batches as u32);
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

    // The failover: (a lag,) crash, what the standby kept, promotion.
    let lagging = match fall {
        Fall::Crash if !plan.lag.is_zero() => {
            tokio::time::sleep_until((start + plan.crash_after - plan.lag).into()).await;
            Some(stop_wal_sender(pair.primary.port()).await?)
        }
        _ => None,
    };
    tokio::time::sleep_until((start + plan.crash_after).into()).await;
    let crashed_at = Instant::now();
    let outage_from = now_us();
    match fall {
        Fall::Crash => {
            if let Some(sender) = lagging {
                // Killed stopped, it sends nothing of what it held back
                // (the postmaster goes down at once after).
                signal(sender, Signal::SIGKILL);
            }
            tokio::task::block_in_place(|| pair.primary.crash())
        }
        Fall::Demote => {
            let mut old = connect(pair.primary.port()).await?;
            sqlx::query("ALTER SYSTEM SET default_transaction_read_only = on")
                .execute(&mut old)
                .await
                .map_err(|e| format!("demoting the old primary: {e}"))?;
            sqlx::query("SELECT pg_reload_conf()")
                .execute(&mut old)
                .await
                .map_err(|e| format!("demoting the old primary: {e}"))?;
        }
    }
    tokio::time::sleep(plan.promote_after).await;
    let mut standby = connect(pair.replica.port()).await?;
    caught_up(&mut standby).await?;
    let kept = jobs_on(&mut standby).await?;
    let promoted: bool = sqlx::query_scalar("SELECT pg_promote(true, 60)")
        .fetch_one(&mut standby)
        .await
        .map_err(|e| format!("pg_promote: {e}"))?;
    if !promoted {
        return Err("pg_promote did not promote the standby within 60 s".into());
    }
    let promoted_at = Instant::now();
    if let Some(proxy) = &proxy {
        // The operator's address moves to the new primary.
        proxy.retarget(local(pair.replica.port()));
    }
    let before = completed(&kept);
    let mut promoted_to_first_ack = None;
    while promoted_at.elapsed() < Duration::from_secs(30) {
        let done: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {SCHEMA}.jobs WHERE state = 'completed'"
        )))
        .fetch_one(&mut standby)
        .await
        .map_err(|e| format!("counting on the new primary: {e}"))?;
        if usize::try_from(done).unwrap_or(0) > before {
            promoted_to_first_ack = Some(promoted_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let outage_to = now_us();

    let enqueued = producer.await.map_err(|e| format!("producer panicked: {e}"))??;
    let mut crashed = Vec::new();
    let deadline = Instant::now() + plan.settle_timeout;
    loop {
        crashed.extend(workers.exited());
        // Jobs whose enqueue the failover undid never complete: the drain
        // is over when every job the new primary has is.
        let (done, total) = match storage.stats().await {
            Ok(s) => (s.total(State::Completed), State::ALL.iter().map(|st| s.total(*st)).sum::<u64>()),
            Err(_) => (0, 0),
        };
        if (total > 0 && done >= total) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drain = start.elapsed();
    crashed.extend(workers.exited());
    let forced_stops = tokio::task::block_in_place(|| workers.stop_all(Duration::from_secs(15)));
    let trail = Trail::read_dir(env.dir.path()).map_err(|e| format!("reading the audit trail: {e}"))?;
    let facts = Facts { enqueued, killed: HashSet::new(), outages: vec![(outage_from, outage_to)] };
    let report = checker::check(&*storage, &trail, &facts).await.map_err(|e| format!("checker: {e}"))?;
    drop(storage);
    drop(standby);

    // What the old primary had committed: a crashed one started again on
    // its own, with nothing of jq's running any more.
    if fall == Fall::Crash {
        tokio::task::block_in_place(|| pair.primary.start_again())?;
    }
    let old = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match connect(pair.primary.port()).await {
                Ok(mut conn) => break jobs_on(&mut conn).await?,
                Err(e) if Instant::now() > deadline => return Err(format!("the old primary: {e}")),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    };
    tokio::task::block_in_place(|| pair.primary.crash());
    let parse = |id: &String| uuid::Uuid::parse_str(id).ok().map(JobId);
    let enqueues_undone = old.keys().filter(|id| !kept.contains_key(*id)).filter_map(parse).collect();
    let acks_undone = old
        .iter()
        .filter(|(id, state)| state.as_str() == "completed" && kept.get(*id).is_none_or(|s| s != "completed"))
        .filter_map(|(id, _)| parse(id))
        .collect();
    let rewound =
        old.iter().filter(|(id, state)| kept.get(*id) != Some(*state)).filter_map(|(id, _)| parse(id)).collect();
    let outcome = FailoverOutcome {
        rewound,
        replication: pair.replication,
        fall,
        route,
        report,
        crash_to_promoted: promoted_at - crashed_at,
        promoted_to_first_ack,
        enqueues_undone,
        acks_undone,
        old_primary: (old.len(), completed(&old)),
        enqueue_retries: retries.load(Ordering::Relaxed),
        crashed,
        forced_stops,
        drain,
        warnings: warnings(env.dir.path()),
    };
    Ok((env, outcome))
}
