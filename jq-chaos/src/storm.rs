//! Drains under connection trouble: a *storm* (every jq connection ended
//! every 100 ms: `pg_terminate_backend`, Redis `CLIENT KILL`) and a
//! *starve* (other clients take every connection slot the server has,
//! hold them, then free them), each during a drain by worker processes,
//! then the checker. The attacker's own connections carry names of their
//! own (`jq-chaos-*`) and are never attacked; everything else on the
//! private server is jq's (the workers', the producer's).

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use jq_core::{JobType, State};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};

use crate::audit::{Trail, now_us};
use crate::checker::{self, Facts, Report};
use crate::scenario::{Env, Workers, chaos_jobs, enqueue_surely};
use crate::{AnyStorage, Backend, Target, soak};

/// The `application_name` of the attacker's PostgreSQL connections, and
/// the Redis client name of its connections: never attacked.
pub const ATTACKER_NAME: &str = "jq-chaos-attacker";

/// What a drain is put through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attack {
    /// Nothing: the baseline.
    None,
    /// From `after` for `lasting`, every `every`: end every jq connection.
    Storm {
        /// When the storm begins, from the start of the run.
        after: Duration,
        /// How long it lasts.
        lasting: Duration,
        /// Between two rounds of kills.
        every: Duration,
    },
    /// At `after`, take every connection slot the server has (ending jq's
    /// connections so that jq needs new ones), hold them for `hold` (taking
    /// each slot that frees, ending any connection jq gets), then free them.
    Starve {
        /// When the slots are taken, from the start of the run.
        after: Duration,
        /// How long they are held.
        hold: Duration,
    },
}

impl Attack {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Attack::None => "none",
            Attack::Storm { .. } => "storm",
            Attack::Starve { .. } => "starve",
        }
    }

    /// The connection storm of the scenario: a minute, every 100 ms
    /// (`JQ_CHAOS_STORM_SECS` changes its length).
    pub fn storm() -> Attack {
        let secs = std::env::var("JQ_CHAOS_STORM_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
        Attack::Storm {
            after: Duration::from_secs(2),
            lasting: Duration::from_secs(secs),
            every: Duration::from_millis(100),
        }
    }

    /// The starve of the scenario: every slot taken 5 s into the drain,
    /// held 8 s (longer than jq-postgres's acquire timeout of 5 s, so that
    /// calls time out too, and longer than the workers' 2 s leases).
    pub fn starve() -> Attack {
        Attack::Starve { after: Duration::from_secs(5), hold: Duration::from_secs(8) }
    }
}

/// The drain an attack meets.
#[derive(Clone, Debug)]
pub struct DrainPlan {
    /// Jobs enqueued in all.
    pub jobs: usize,
    /// Jobs per enqueue call.
    pub batch: usize,
    /// Enqueueing is spread over this long (zero: every job before the
    /// workers start, so the drain runs as fast as the workers can).
    pub produce_for: Duration,
    /// Worker processes.
    pub workers: usize,
    /// Jobs each worker runs at once.
    pub concurrency: usize,
    /// Longest random work per job, in milliseconds.
    pub work_max_ms: u64,
    /// Most time given to finishing every job after the producer is done.
    pub settle_timeout: Duration,
}

impl DrainPlan {
    /// The drain of the storm scenario: 3,000 jobs over 55 s (a minute of
    /// storm meets all of it), 2 workers of 8. `JQ_CHAOS_UPFRONT=1`
    /// enqueues them all first (the drain then runs as fast as it can);
    /// `JQ_CHAOS_SOAK=1` makes it 10 times longer.
    pub fn for_storm(attack: Attack) -> DrainPlan {
        let span = match attack {
            Attack::Storm { lasting, .. } => lasting.saturating_sub(Duration::from_secs(5)),
            _ => Duration::from_secs(55),
        };
        let scale = if soak() { 10 } else { 1 };
        DrainPlan {
            jobs: (span.as_secs() as usize * 55).max(500) * scale,
            batch: 20,
            produce_for: if upfront() { Duration::ZERO } else { span * scale as u32 },
            workers: 2,
            concurrency: 8,
            work_max_ms: 20,
            settle_timeout: Duration::from_secs(60),
        }
    }

    /// The drain of the starve scenario: 1,500 jobs over 15 s, 2 workers
    /// of 8 (`JQ_CHAOS_UPFRONT=1`: all enqueued first).
    pub fn for_starve() -> DrainPlan {
        DrainPlan {
            jobs: 1_500,
            batch: 20,
            produce_for: if upfront() { Duration::ZERO } else { Duration::from_secs(15) },
            workers: 2,
            concurrency: 8,
            work_max_ms: 20,
            settle_timeout: Duration::from_secs(60),
        }
    }
}

fn upfront() -> bool {
    std::env::var("JQ_CHAOS_UPFRONT").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// What the attacker did and saw.
#[derive(Clone, Debug, Default)]
pub struct AttackLog {
    /// Rounds of kills.
    pub rounds: u64,
    /// jq connections ended.
    pub ended: u64,
    /// Starve: the server's connection limit.
    pub server_limit: Option<u64>,
    /// Starve: slots held when the hold began (and at most during it).
    pub slots_taken: usize,
    /// Starve: completed jobs counted when the hold began and when it ended.
    pub completed_at_hold: Option<(u64, u64)>,
    /// Starve: from freeing the slots to the first job completed after.
    pub free_to_first_ack: Option<Duration>,
    /// The attack's span, microseconds since the epoch (for the checker).
    pub span: Option<(i64, i64)>,
    /// Errors of the attacker itself (it goes on after them).
    pub errors: Vec<String>,
}

/// Everything a drain measured.
#[derive(Clone, Debug)]
pub struct DrainOutcome {
    /// Which backend.
    pub backend: Backend,
    /// What it met.
    pub attack: Attack,
    /// The checker's verdict.
    pub report: Report,
    /// What the attacker did.
    pub log: AttackLog,
    /// Enqueue calls that failed and were sent again.
    pub enqueue_retries: usize,
    /// Workers that died (none may).
    pub crashed: Vec<(u32, String)>,
    /// Workers that had to be SIGKILLed at the end.
    pub forced_stops: usize,
    /// From the first enqueue until every job was Completed.
    pub drain: Duration,
    /// From the last enqueue until every job was Completed.
    pub tail: Duration,
    /// Warning lines of the workers' logs, counted by their message.
    pub warnings: Vec<(String, usize)>,
    /// The producer's enqueue calls (retries included): median and slowest.
    pub enqueue_calls: Option<(Duration, Duration)>,
}

impl DrainOutcome {
    /// Everything that makes the run fail.
    pub fn problems(&self) -> Vec<String> {
        let mut p = self.report.problems();
        if !self.crashed.is_empty() {
            p.push(format!("workers died: {:?}", self.crashed));
        }
        match self.attack {
            Attack::Storm { .. } if self.log.ended == 0 => {
                p.push("the storm ended no connection: it did not find jq's connections".into())
            }
            Attack::Starve { .. } => {
                if self.log.slots_taken == 0 {
                    p.push("the starve took no connection slot".into());
                }
                if self.log.free_to_first_ack.is_none() {
                    p.push("no job was completed after the slots were freed".into());
                }
                if !self.warned_no_connection() {
                    p.push(format!(
                        "no worker warned that the server has no connection left; warnings: {:?}",
                        self.warnings
                    ));
                }
            }
            _ => {}
        }
        p
    }

    /// True when a worker's warning says the server had no connection left.
    pub fn warned_no_connection(&self) -> bool {
        self.warnings.iter().any(|(line, _)| line.contains("no connection left"))
    }
}

impl fmt::Display for DrainOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "drain {} under {:?}:", self.backend.name(), self.attack)?;
        write!(f, "{}", self.report)?;
        writeln!(f, "  drained in:        {:.1?} ({:.1?} after the last enqueue)", self.drain, self.tail)?;
        writeln!(f, "  enqueue retries:   {}", self.enqueue_retries)?;
        if let Some((median, max)) = self.enqueue_calls {
            writeln!(f, "  enqueue calls:     median {median:.1?}, slowest {max:.1?}")?;
        }
        writeln!(f, "  forced stops:      {}", self.forced_stops)?;
        if self.attack != Attack::None {
            writeln!(f, "  attack rounds:     {} ({} jq connections ended)", self.log.rounds, self.log.ended)?;
        }
        if let Attack::Starve { .. } = self.attack {
            writeln!(f, "  slots taken:       {} (server limit {:?})", self.log.slots_taken, self.log.server_limit)?;
            if let Some((from, to)) = self.log.completed_at_hold {
                writeln!(f, "  completed in hold: {} ({from} -> {to})", to.saturating_sub(from))?;
            }
            writeln!(f, "  freed -> 1st ack:  {:?}", self.log.free_to_first_ack)?;
        }
        if !self.log.errors.is_empty() {
            writeln!(f, "  attacker errors:   {} e.g. {:?}", self.log.errors.len(), self.log.errors.first())?;
        }
        writeln!(f, "  worker warnings:")?;
        for (line, n) in &self.warnings {
            writeln!(f, "    {n:>6}  {line}")?;
        }
        Ok(())
    }
}

/// The warnings of the workers' logs (`worker-*.log`), counted by message
/// (the part before the structured fields), most frequent first.
pub(crate) fn warnings(dir: &Path) -> Vec<(String, usize)> {
    let mut counts: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_log = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("worker-"));
        if !is_log {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        for line in text.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")) {
            // "<time>  WARN <target>: <message> <fields>": keep level and
            // message, with the error field, which says why.
            let level = if line.contains(" WARN ") { "WARN" } else { "ERROR" };
            let rest = line.split_once(": ").map_or(line, |(_, r)| r);
            *counts.entry(format!("{level} {}", shorten(rest))).or_default() += 1;
        }
    }
    let mut v: Vec<_> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// A log line without the ids and numbers that make every line unique.
fn shorten(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for word in line.split(' ') {
        let word = if word.starts_with("retry_in=") {
            "retry_in=…"
        } else if word.starts_with("jobs=") || word.starts_with("held=") || word.starts_with("job=") {
            continue;
        } else {
            word
        };
        out.push_str(word);
        out.push(' ');
    }
    out.truncate(out.trim_end().len().min(300));
    out
}

/// Runs `plan` on `env` with worker binary `worker`, meeting `attack`.
pub async fn run_drain(env: &mut Env, worker: &Path, plan: &DrainPlan, attack: Attack) -> Result<DrainOutcome, String> {
    let storage: AnyStorage =
        env.target.connect_patiently(Duration::from_secs(30)).await.map_err(|e| format!("connect: {e}"))?;
    let retries = Arc::new(AtomicUsize::new(0));
    let batches = plan.jobs.div_ceil(plan.batch.max(1)).max(1);
    let mut enqueued = Vec::with_capacity(plan.jobs);
    if plan.produce_for.is_zero() {
        for b in 0..batches {
            let n = plan.batch.min(plan.jobs - b * plan.batch);
            let jobs = chaos_jobs((b * plan.batch) as u64, n).map_err(|e| e.to_string())?;
            enqueued.extend(enqueue_surely(&*storage, jobs, &retries).await?);
        }
    }
    let mut workers = Workers::start(worker, env, plan.concurrency, plan.work_max_ms, plan.workers)?;
    let run_start = Instant::now();
    let producer = {
        let (storage, retries) = (storage.clone(), retries.clone());
        let (jobs, batch, span) = (plan.jobs, plan.batch.max(1), plan.produce_for);
        let upfront = span.is_zero();
        tokio::spawn(async move {
            let mut ids = Vec::new();
            if upfront {
                return Ok::<_, String>((ids, Instant::now(), Vec::new()));
            }
            let mut tick = tokio::time::interval(span / batches as u32);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut calls = Vec::with_capacity(batches);
            for b in 0..batches {
                tick.tick().await;
                let n = batch.min(jobs - b * batch);
                let batch = chaos_jobs((b * batch) as u64, n).map_err(|e| e.to_string())?;
                let sent = Instant::now();
                ids.extend(enqueue_surely(&*storage, batch, &retries).await?);
                calls.push(sent.elapsed());
            }
            Ok((ids, Instant::now(), calls))
        })
    };
    let attacker = {
        let (target, backend) = (env.target.clone(), env.backend);
        tokio::spawn(async move { attack_run(backend, &target, attack, run_start).await })
    };

    let (ids, last_enqueue, mut calls) = producer.await.map_err(|e| format!("producer panicked: {e}"))??;
    enqueued.extend(ids);
    let mut crashed = Vec::new();
    let deadline = Instant::now() + plan.settle_timeout;
    // The attack may outlast the producer: the drain is over only when
    // both are.
    loop {
        crashed.extend(workers.exited());
        let done = storage.stats().await.map(|s| s.total(State::Completed)).unwrap_or(0);
        if (done >= enqueued.len() as u64 && attacker.is_finished()) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drain = run_start.elapsed();
    let tail = last_enqueue.max(run_start).elapsed();
    let log = if attacker.is_finished() {
        attacker.await.map_err(|e| format!("attacker panicked: {e}"))?
    } else {
        attacker.abort();
        AttackLog { errors: vec!["the attack outlived the settle timeout".into()], ..AttackLog::default() }
    };
    crashed.extend(workers.exited());
    let forced_stops = tokio::task::block_in_place(|| workers.stop_all(Duration::from_secs(15)));
    let trail = Trail::read_dir(env.dir.path()).map_err(|e| format!("reading the audit trail: {e}"))?;
    let facts = Facts { enqueued, killed: workers.killed.clone(), outages: log.span.into_iter().collect() };
    let report = checker::check(&*storage, &trail, &facts).await.map_err(|e| format!("checker: {e}"))?;
    Ok(DrainOutcome {
        backend: env.backend,
        attack,
        report,
        log,
        enqueue_retries: retries.load(Ordering::Relaxed),
        crashed,
        forced_stops,
        drain,
        tail,
        warnings: warnings(env.dir.path()),
        enqueue_calls: {
            calls.sort();
            calls.last().map(|max| (calls[calls.len() / 2], *max))
        },
    })
}

/// Waits until `at` after `start`.
async fn sleep_until(start: Instant, at: Duration) {
    tokio::time::sleep_until((start + at).into()).await;
}

async fn attack_run(backend: Backend, target: &Target, attack: Attack, start: Instant) -> AttackLog {
    let mut log = AttackLog::default();
    match (attack, target) {
        (Attack::None, _) => {}
        (Attack::Storm { after, lasting, every }, _) => {
            sleep_until(start, after).await;
            let from = now_us();
            let mut killer = match Killer::open(target).await {
                Ok(k) => k,
                Err(e) => {
                    log.errors.push(e);
                    return log;
                }
            };
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while start.elapsed() < after + lasting {
                tick.tick().await;
                killer.round(&mut log).await;
            }
            log.span = Some((from, now_us()));
        }
        (Attack::Starve { after, hold }, Target::Postgres { url, schema }) => {
            sleep_until(start, after).await;
            starve_postgres(url, schema, hold, &mut log).await;
        }
        (Attack::Starve { after, hold }, Target::Redis { url, prefix }) => {
            sleep_until(start, after).await;
            starve_redis(url, prefix, hold, &mut log).await;
        }
        (Attack::Starve { .. }, Target::Sqlite { .. }) => {
            log.errors.push(format!("{} has no connections to take", backend.name()));
        }
    }
    log
}

/// The attacker's connection, which ends jq's.
enum Killer {
    Postgres(Box<PgConnectOptions>, Option<PgConnection>),
    Redis(redis::aio::MultiplexedConnection),
    None,
}

impl Killer {
    async fn open(target: &Target) -> Result<Killer, String> {
        Ok(match target {
            Target::Postgres { url, .. } => {
                let options = attacker_options(url)?;
                let conn = options.connect().await.map_err(|e| format!("attacker connect: {e}"))?;
                Killer::Postgres(Box::new(options), Some(conn))
            }
            Target::Redis { url, .. } => Killer::Redis(redis_attacker(url).await?),
            Target::Sqlite { .. } => Killer::None,
        })
    }

    /// Ends every jq connection once.
    async fn round(&mut self, log: &mut AttackLog) {
        log.rounds += 1;
        let ended = match self {
            Killer::Postgres(options, conn) => {
                if conn.is_none() {
                    *conn = options.connect().await.ok();
                }
                match conn.as_mut() {
                    Some(c) => {
                        let n = terminate_jq(c).await;
                        if n.is_err() {
                            *conn = None;
                        }
                        n
                    }
                    None => Err("attacker cannot connect".into()),
                }
            }
            Killer::Redis(conn) => kill_jq_clients(conn).await,
            Killer::None => Ok(0),
        };
        match ended {
            Ok(n) => log.ended += n,
            Err(e) => log.errors.push(e),
        }
    }
}

fn attacker_options(url: &str) -> Result<PgConnectOptions, String> {
    Ok(PgConnectOptions::from_str(url).map_err(|e| e.to_string())?.application_name(ATTACKER_NAME))
}

/// `pg_terminate_backend` on every connection named as jq names its
/// connections by default.
async fn terminate_jq(conn: &mut PgConnection) -> Result<u64, String> {
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE application_name = $1 AND pid <> pg_backend_pid()",
    )
    .bind(jq_postgres::PostgresConfig::DEFAULT_APPLICATION_NAME)
    .fetch_one(conn)
    .await
    .map_err(|e| format!("pg_terminate_backend: {e}"))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

async fn redis_attacker(url: &str) -> Result<redis::aio::MultiplexedConnection, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut conn = client.get_multiplexed_async_connection().await.map_err(|e| format!("attacker connect: {e}"))?;
    let () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(ATTACKER_NAME)
        .query_async(&mut conn)
        .await
        .map_err(|e| format!("CLIENT SETNAME: {e}"))?;
    Ok(conn)
}

/// `CLIENT KILL ID` of every client without the attacker's name: jq gives
/// its connections no name, and on the private server every other client
/// is jq's.
async fn kill_jq_clients(conn: &mut redis::aio::MultiplexedConnection) -> Result<u64, String> {
    let list: String =
        redis::cmd("CLIENT").arg("LIST").query_async(conn).await.map_err(|e| format!("CLIENT LIST: {e}"))?;
    let ids: Vec<&str> = list
        .lines()
        .filter(|l| !l.split(' ').any(|f| f == format!("name={ATTACKER_NAME}")))
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .collect();
    if ids.is_empty() {
        return Ok(0);
    }
    let mut pipe = redis::pipe();
    for id in &ids {
        pipe.cmd("CLIENT").arg("KILL").arg("ID").arg(*id);
    }
    // Each answers how many it killed; a client gone meanwhile answers
    // an error ("No such client"), which is not a failure.
    let answers: Vec<redis::Value> = pipe.query_async(conn).await.map_err(|e| format!("CLIENT KILL: {e}"))?;
    Ok(answers.iter().filter(|a| matches!(a, redis::Value::Okay | redis::Value::Int(1))).count() as u64)
}

/// Completed jobs of the chaos queue, counted by the attacker's own
/// connection (jq's may have none).
async fn completed_pg(conn: &mut PgConnection, schema: &str) -> Result<u64, String> {
    let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM {schema}.jobs WHERE state = 'completed'"
    )))
    .fetch_one(conn)
    .await
    .map_err(|e| format!("counting completed jobs: {e}"))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Opens connections until the server refuses one for want of a slot
/// (SQLSTATE 53300); returns how many it opened.
async fn grab_pg(options: &PgConnectOptions, held: &mut Vec<PgConnection>) -> Result<usize, String> {
    let mut opened = 0;
    loop {
        match options.connect().await {
            Ok(conn) => {
                held.push(conn);
                opened += 1;
            }
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("53300") => return Ok(opened),
            Err(e) => return Err(format!("taking a slot: {e}")),
        }
    }
}

/// Every connection slot of a PostgreSQL server, taken by the attacker
/// (a superuser: the reserved slots too), and its own connection, opened
/// first, that ends jq's and counts jobs. Dropping it frees the slots.
pub struct PgHog {
    options: PgConnectOptions,
    own: PgConnection,
    held: Vec<PgConnection>,
}

impl PgHog {
    /// Opens the attacker's own connection to `url`; takes nothing yet.
    pub async fn open(url: &str) -> Result<PgHog, String> {
        let options = attacker_options(url)?;
        let own = options.connect().await.map_err(|e| format!("attacker connect: {e}"))?;
        Ok(PgHog { options, own, held: Vec::new() })
    }

    /// The server's `max_connections`.
    pub async fn max_connections(&mut self) -> Option<u64> {
        let shown: String = sqlx::query_scalar("SHOW max_connections").fetch_one(&mut self.own).await.ok()?;
        shown.parse().ok()
    }

    /// Takes every free slot: opens connections until the server refuses
    /// one with SQLSTATE 53300. Returns how many it opened.
    pub async fn take_all(&mut self) -> Result<usize, String> {
        grab_pg(&self.options, &mut self.held).await
    }

    /// Slots held.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Ends every jq connection (`pg_terminate_backend`); how many.
    pub async fn end_jq(&mut self) -> Result<u64, String> {
        terminate_jq(&mut self.own).await
    }

    /// Completed jobs in `schema`.
    pub async fn completed(&mut self, schema: &str) -> Result<u64, String> {
        completed_pg(&mut self.own, schema).await
    }

    /// Frees every slot taken.
    pub async fn free(&mut self) {
        for conn in self.held.drain(..) {
            let _ = conn.close().await;
        }
    }
}

/// The starve on PostgreSQL: every slot taken, jq's connections ended so
/// that it needs new ones, each freed slot taken again for `hold`, then
/// all freed; the first job completed after is timed.
async fn starve_postgres(url: &str, schema: &str, hold: Duration, log: &mut AttackLog) {
    // The attacker's own connection, opened before the server is full.
    let mut hog = match PgHog::open(url).await {
        Ok(h) => h,
        Err(e) => {
            log.errors.push(e);
            return;
        }
    };
    log.server_limit = hog.max_connections().await;
    let from = now_us();
    let hold_start = Instant::now();
    while hold_start.elapsed() < hold {
        log.rounds += 1;
        if let Err(e) = hog.take_all().await {
            log.errors.push(e);
        }
        match hog.end_jq().await {
            Ok(n) => log.ended += n,
            Err(e) => log.errors.push(e),
        }
        if log.completed_at_hold.is_none() && log.ended > 0 {
            // Full, and jq's connections ended: jq is out from here.
            if let Ok(n) = hog.completed(schema).await {
                log.completed_at_hold = Some((n, n));
            }
        }
        log.slots_taken = log.slots_taken.max(hog.held());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = hog.completed(schema).await.unwrap_or(0);
    if let Some((from, _)) = log.completed_at_hold {
        log.completed_at_hold = Some((from, before));
    }
    let freed = Instant::now();
    hog.free().await;
    while freed.elapsed() < FIRST_ACK_PATIENCE {
        if hog.completed(schema).await.is_ok_and(|n| n > before) {
            log.free_to_first_ack = Some(freed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    log.span = Some((from, now_us()));
}

/// How long the first ack after the slots are freed is waited for.
const FIRST_ACK_PATIENCE: Duration = Duration::from_secs(30);

/// Polls `count` until it exceeds `before`, for up to
/// [`FIRST_ACK_PATIENCE`]; the time from `freed`.
async fn first_ack<F, Fut>(freed: Instant, before: u64, mut count: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u64, String>>,
{
    while freed.elapsed() < FIRST_ACK_PATIENCE {
        if count().await.is_ok_and(|n| n > before) {
            return Some(freed.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// The starve on Redis (the private server only): `maxclients` lowered
/// to the attacker's own connection, jq's clients killed so that they need
/// new connections (refused: "max number of clients reached"), killed
/// again whenever one gets in, for `hold`; then `maxclients` restored and
/// the first job completed after is timed.
async fn starve_redis(url: &str, prefix: &str, hold: Duration, log: &mut AttackLog) {
    let mut own = match redis_attacker(url).await {
        Ok(c) => c,
        Err(e) => {
            log.errors.push(e);
            return;
        }
    };
    let completed_key = format!("{}done:completed", jq_redis::Keys::new(prefix).base(crate::ChaosJob::QUEUE));
    let count = |mut conn: redis::aio::MultiplexedConnection, key: String| async move {
        redis::cmd("ZCARD").arg(key).query_async::<u64>(&mut conn).await.map_err(|e| e.to_string())
    };
    let limit: Result<Vec<String>, _> = redis::cmd("CONFIG").arg("GET").arg("maxclients").query_async(&mut own).await;
    let limit = match limit.ok().and_then(|v| v.get(1).and_then(|s| s.parse::<u64>().ok())) {
        Some(l) => l,
        None => {
            log.errors.push("CONFIG GET maxclients gave no number".into());
            return;
        }
    };
    log.server_limit = Some(limit);
    let from = now_us();
    // Only the attacker's connection fits.
    let set: redis::RedisResult<()> =
        redis::cmd("CONFIG").arg("SET").arg("maxclients").arg(1).query_async(&mut own).await;
    if let Err(e) = set {
        log.errors.push(format!("CONFIG SET maxclients: {e}"));
        return;
    }
    log.slots_taken = 1;
    let hold_start = Instant::now();
    while hold_start.elapsed() < hold {
        log.rounds += 1;
        match kill_jq_clients(&mut own).await {
            Ok(n) => log.ended += n,
            Err(e) => log.errors.push(e),
        }
        if log.completed_at_hold.is_none()
            && let Ok(n) = count(own.clone(), completed_key.clone()).await
        {
            log.completed_at_hold = Some((n, n));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = count(own.clone(), completed_key.clone()).await.unwrap_or(0);
    if let Some((from, _)) = log.completed_at_hold {
        log.completed_at_hold = Some((from, before));
    }
    let freed = Instant::now();
    let set: redis::RedisResult<()> =
        redis::cmd("CONFIG").arg("SET").arg("maxclients").arg(limit).query_async(&mut own).await;
    if let Err(e) = set {
        log.errors.push(format!("restoring maxclients: {e}"));
    }
    log.free_to_first_ack = first_ack(freed, before, || count(own.clone(), completed_key.clone())).await;
    log.span = Some((from, now_us()));
}
