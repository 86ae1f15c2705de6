//! [`RedisStorage`]: the [`Storage`] implementation, and what every
//! operation is given ([`Inner`]): the connection, the key names, the
//! script calls that reload the scripts after a NOSCRIPT, and the lookup
//! of a job's queue by id.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use jq_core::periodic::{Fire, FireOutcome, PeriodicInfo};
use jq_core::storage::{
    Beat, CancelAnswer, CancelStorage, Capabilities, ClaimRequest, ControlStorage, Election, Leader, LeaseRef,
    LeaseToken, PeriodicStorage, ProgressReport, RoleStorage, Settled, Settlement, Storage, ThroughputStorage,
    WorkSignal,
};
use jq_core::{
    Clock, Job, JobFilter, JobId, NewJob, QueueInfo, QueueLimits, QueueName, Result, State, Stats, Throughput,
    Timestamp,
};
use redis::aio::ConnectionManagerConfig;
use redis::{ErrorKind, FromRedisValue, ServerErrorKind};
use tokio::sync::watch;

use crate::liveness::{self, Conn};
use crate::schema::{self, Keys};
use crate::{
    RedisConfig, RedisError, admin, cancel, claim, control, election, enqueue, error, eviction, keyed, maintenance,
    owners, periodic, scripts, settle, wake, workflow,
};

/// A jq storage on Redis. Cheap to clone (clones share one multiplexed,
/// self-reconnecting connection); `Send + Sync`.
#[derive(Clone)]
pub struct RedisStorage {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStorage")
            .field("url", &self.inner.config.shown_url())
            .field("prefix", &self.inner.config.prefix)
            .finish()
    }
}

pub(crate) struct Inner {
    pub(crate) config: RedisConfig,
    pub(crate) keys: Keys,
    /// A plain client of the (first) server, for pub/sub.
    pub(crate) client: redis::Client,
    pub(crate) conn: Conn,
    /// Queue of each job this handle claimed and still holds, so
    /// settlements and heartbeats need no lookup (a bounded cache; shared
    /// with this handle's [`Storage::independent`] ones).
    pub(crate) owners: Arc<owners::Owners>,
    /// When this handle last added each queue to the registry; enqueue
    /// skips the `SADD` for a queue added within [`REGISTRY_REFRESH`].
    pub(crate) registered: Mutex<HashMap<String, Instant>>,
    pub(crate) wake: watch::Sender<u64>,
    pub(crate) listening: AtomicBool,
}

impl RedisStorage {
    /// Connects to the server of `config`, checks the prefix and its key
    /// layout ([`LAYOUT`](crate::LAYOUT); the marker is written on a new
    /// prefix) and loads the scripts.
    pub async fn connect(config: RedisConfig) -> Result<RedisStorage, RedisError> {
        if config.prefix.is_empty() {
            return Err(RedisError::InvalidPrefix { prefix: config.prefix, reason: "it is empty" });
        }
        if config.prefix.contains(['{', '}', '\n', '*', '?', '[', ']']) {
            return Err(RedisError::InvalidPrefix {
                prefix: config.prefix,
                reason: "it contains one of { } * ? [ ] or a newline",
            });
        }
        if config.cluster_nodes.is_empty() && config.url.is_empty() {
            return Err(RedisError::InvalidUrl {
                url: String::new(),
                source: redis::RedisError::from((ErrorKind::InvalidClientConfig, "no server URL given")),
            });
        }
        let client = redis::Client::open(config.url.as_str())
            .map_err(|source| RedisError::InvalidUrl { url: config.shown_url(), source })?;
        // Keepalive on every socket, the pub/sub one too (`liveness.rs`).
        let tcp = liveness::tcp_settings(client.get_connection_info().tcp_settings(), config.keepalive);
        let client = redis::Client::open(client.get_connection_info().clone().set_tcp_settings(tcp.clone()))
            .map_err(|source| RedisError::InvalidUrl { url: config.shown_url(), source })?;
        // A call that finds no connection opens one first: together they
        // take at most twice the response timeout.
        let connect_timeout = Duration::from_secs(5).min(config.response_timeout);
        let conn = if config.is_cluster() {
            let cluster = redis::cluster::ClusterClient::builder(config.cluster_nodes.clone())
                .connection_timeout(connect_timeout)
                .response_timeout(config.response_timeout)
                // A timeout is retried on the same node connection by the
                // cluster client: its retries must not multiply the bound.
                .overall_response_timeout(Some(config.response_timeout))
                .tcp_settings(tcp)
                .build()
                .map_err(|source| RedisError::InvalidUrl { url: config.shown_url(), source })?;
            Conn::open(liveness::Dial::Cluster(cluster), connect_timeout)
                .await
                .map_err(|source| RedisError::Connect { url: config.shown_url(), source })?
        } else {
            let manager_config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                .set_response_timeout(Some(config.response_timeout))
                .set_number_of_retries(3)
                .set_max_delay(Duration::from_secs(2));
            Conn::open(liveness::Dial::Single(client.clone(), manager_config), connect_timeout)
                .await
                .map_err(|source| RedisError::Connect { url: config.shown_url(), source })?
        };
        eviction::check(&conn).await?;
        let keys = Keys::new(config.prefix.clone());
        let storage = RedisStorage {
            inner: Arc::new(Inner {
                keys,
                client,
                conn,
                owners: Arc::new(owners::Owners::new(owners::DEFAULT_CAP)),
                registered: Mutex::new(HashMap::new()),
                wake: watch::Sender::new(0),
                listening: AtomicBool::new(false),
                config,
            }),
        };
        schema::check(&storage.inner.conn, &storage.inner.keys).await?;
        storage.inner.load_scripts().await.map_err(RedisError::Setup)?;
        Ok(storage)
    }

    /// The key layout of this storage.
    pub fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// How many claimed jobs this handle remembers the queue of (a cache
    /// that spares settlements and heartbeats a lookup by id). Entries go
    /// when a job stops being this handle's, and there are never more than
    /// 65,536; for monitoring.
    pub fn owned_jobs(&self) -> usize {
        self.inner.owners.len()
    }

    /// Deletes every key under this storage's prefix (jobs, indexes, the
    /// queue registry) with `SCAN MATCH` and `UNLINK`, never `FLUSHALL`;
    /// returns how many keys were deleted. Meant for tests, benchmarks and
    /// operators retiring a prefix: jobs enqueued meanwhile may survive.
    pub async fn delete_all_keys(&self) -> Result<u64> {
        let deleted = admin::delete_prefix(&self.inner).await?;
        // the registry is gone: this handle's next enqueue writes it again
        self.inner.registered.lock().unwrap_or_else(|e| e.into_inner()).clear();
        Ok(deleted)
    }
}

impl Inner {
    async fn load_scripts(&self) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        if self.conn.is_cluster() {
            // SCRIPT LOAD goes to every node; a pipeline would go to one.
            for script in scripts::all() {
                redis::cmd("SCRIPT").arg("LOAD").arg(script.code).query_async::<()>(&mut conn).await?;
            }
            Ok(())
        } else {
            let mut pipe = redis::pipe();
            for script in scripts::all() {
                pipe.cmd("SCRIPT").arg("LOAD").arg(script.code).ignore();
            }
            pipe.query_async::<()>(&mut conn).await
        }
    }

    /// True on Redis Cluster: every script call must then touch one queue.
    pub(crate) fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// Runs independent commands and returns their replies in order: one
    /// pipeline on a single server; on Cluster, where a pipeline must stay
    /// in one slot, concurrent calls.
    pub(crate) async fn query_each<T: FromRedisValue>(&self, cmds: Vec<redis::Cmd>) -> Result<Vec<T>> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        if let [cmd] = cmds.as_slice() {
            return Ok(vec![self.query(cmd).await?]);
        }
        if self.is_cluster() {
            futures::future::try_join_all(cmds.iter().map(|c| self.query::<T>(c))).await
        } else {
            let mut pipe = redis::pipe();
            for c in cmds {
                pipe.add_command(c);
            }
            self.query_pipe(&pipe).await
        }
    }

    /// Runs one command; reloads the scripts and runs it again on NOSCRIPT
    /// (the server restarted or flushed its script cache), and sends it
    /// again while the server answers BUSY ([`Inner::while_busy`]).
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let send = || {
            let mut conn = self.conn.clone();
            async move { cmd.query_async(&mut conn).await }
        };
        match self.while_busy(send).await {
            Err(e) if is_noscript(&e) => {
                self.load_scripts().await.map_err(error::map)?;
                self.while_busy(send).await.map_err(error::map)
            }
            r => r.map_err(error::map),
        }
    }

    /// [`Inner::query`] for a pipeline. Pipelines here only hold idempotent
    /// commands before their scripts, so running one again is safe.
    pub(crate) async fn query_pipe<T: FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T> {
        let send = || {
            let mut conn = self.conn.clone();
            async move { pipe.query_async(&mut conn).await }
        };
        match self.while_busy(send).await {
            Err(e) if is_noscript(&e) => {
                self.load_scripts().await.map_err(error::map)?;
                self.while_busy(send).await.map_err(error::map)
            }
            r => r.map_err(error::map),
        }
    }

    /// Sends `call()` again, after a growing pause, while the server
    /// answers BUSY to every command of it (another client's script runs:
    /// nothing of the call ran), for up to the response timeout since the
    /// first send. Redis 7 reads no command while a script runs shorter than
    /// its `busy-reply-threshold`, so the call waits in the socket; Valkey
    /// answers BUSY at once: without this a script of a few hundred
    /// milliseconds (a large enqueue) failed every other call on Valkey.
    async fn while_busy<T, F>(&self, mut call: impl FnMut() -> F) -> redis::RedisResult<T>
    where
        F: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let start = Instant::now();
        let mut pause = Duration::from_millis(2);
        loop {
            match call().await {
                Err(e) if error::is_busy(&e) && start.elapsed() + pause < self.config.response_timeout => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                r => return r,
            }
        }
    }

    /// The queues among `names` whose registry entry this handle must
    /// (re)write, or None when none. Re-adding an entry at most every
    /// [`REGISTRY_REFRESH`] rather than once keeps the registry right even
    /// after someone deleted it (`FLUSHDB`, [`RedisStorage::delete_all_keys`]),
    /// while a busy producer pays for one `SADD` a second instead of one
    /// per call.
    pub(crate) fn registry_due<'a>(&self, names: &[&'a str]) -> Option<Vec<&'a str>> {
        let registered = self.registered.lock().unwrap_or_else(|e| e.into_inner());
        let due: Vec<&str> = names
            .iter()
            .filter(|q| registered.get(**q).is_none_or(|at| at.elapsed() >= REGISTRY_REFRESH))
            .copied()
            .collect();
        if due.is_empty() { None } else { Some(due) }
    }

    /// Records that `names` were just added to the registry.
    pub(crate) fn registered(&self, names: &[&str]) {
        let now = Instant::now();
        let mut registered = self.registered.lock().unwrap_or_else(|e| e.into_inner());
        for q in names {
            registered.insert((*q).to_owned(), now);
        }
    }

    pub(crate) fn now_micros(&self) -> i64 {
        self.config.clock.now().timestamp_micros()
    }

    /// Every registered queue, sorted.
    pub(crate) async fn queues(&self) -> Result<Vec<QueueName>> {
        let names: Vec<String> = self.query(redis::cmd("SMEMBERS").arg(self.keys.registry())).await?;
        let mut queues: Vec<QueueName> = names.iter().filter_map(|n| schema::queue_name(n)).collect();
        queues.sort();
        Ok(queues)
    }

    /// The queue holding each of `ids`, from this handle's claims or else by
    /// probing every registered queue; ids found nowhere are absent.
    pub(crate) async fn locate(&self, ids: &[JobId]) -> Result<HashMap<JobId, QueueName>> {
        let (mut found, missing) = self.owners.find(ids);
        if missing.is_empty() {
            return Ok(found);
        }
        let queues = self.queues().await?;
        if queues.is_empty() {
            return Ok(found);
        }
        let mut cmds = Vec::with_capacity(missing.len() * queues.len());
        for id in &missing {
            for q in &queues {
                let mut cmd = redis::cmd("HEXISTS");
                cmd.arg(self.keys.states(q.as_str())).arg(schema::id_hex(*id));
                cmds.push(cmd);
            }
        }
        let exists: Vec<bool> = self.query_each(cmds).await?;
        for (i, id) in missing.iter().enumerate() {
            if let Some(qi) = (0..queues.len()).find(|qi| exists.get(i * queues.len() + qi).copied().unwrap_or(false)) {
                found.insert(*id, queues[qi].clone());
            }
        }
        Ok(found)
    }
}

/// How often a handle re-adds a queue it enqueues into to the registry.
const REGISTRY_REFRESH: Duration = Duration::from_secs(1);

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

/// A duration in microseconds, capped at 100 years so that `now + d` stays
/// exact in a Lua number.
pub(crate) fn duration_micros(d: Duration) -> i64 {
    const CAP: u128 = 100 * 365 * 24 * 3600 * 1_000_000;
    i64::try_from(d.as_micros().min(CAP)).unwrap_or(i64::MAX)
}

#[async_trait]
impl Storage for RedisStorage {
    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        enqueue::enqueue(&self.inner, jobs).await
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<jq_core::storage::ClaimAnswer> {
        claim::claim(&self.inner, request).await
    }

    async fn settle(&self, batch: Vec<Settlement>) -> Result<Vec<Settled>> {
        settle::settle(&self.inner, batch).await
    }

    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<Beat> {
        settle::heartbeat(&self.inner, leases, lease).await
    }

    async fn promote(&self) -> Result<u64> {
        maintenance::promote(&self.inner).await
    }

    async fn recover(&self) -> Result<u64> {
        maintenance::recover(&self.inner).await
    }

    async fn get(&self, id: JobId) -> Result<Job> {
        admin::get(&self.inner, id).await
    }

    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        admin::list(&self.inner, filter).await
    }

    async fn stats(&self) -> Result<Stats> {
        admin::stats(&self.inner).await
    }

    async fn retry(&self, id: JobId) -> Result<()> {
        admin::retry(&self.inner, id).await
    }

    async fn cancel(&self, id: JobId) -> Result<()> {
        admin::cancel(&self.inner, id).await
    }

    async fn purge(&self, state: State, older_than: Timestamp) -> Result<u64> {
        maintenance::purge(&self.inner, state, older_than).await
    }

    fn subscribe(&self) -> Option<WorkSignal> {
        wake::subscribe(&self.inner)
    }

    /// A handle with a connection of its own, opened on first use, sharing
    /// this one's settings and its cache of the queues of claimed jobs.
    async fn independent(&self) -> Option<Self> {
        let inner = &self.inner;
        Some(RedisStorage {
            inner: Arc::new(Inner {
                config: inner.config.clone(),
                keys: inner.keys.clone(),
                client: inner.client.clone(),
                conn: inner.conn.independent(),
                owners: inner.owners.clone(),
                registered: Mutex::new(HashMap::new()),
                wake: watch::Sender::new(0),
                listening: AtomicBool::new(false),
            }),
        })
    }

    fn clock(&self) -> Clock {
        self.inner.config.clock.clone()
    }
    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities {
            roles: Some(self),
            periodic: Some(self),
            controls: Some(self),
            throughput: Some(self),
            cancellation: Some(self),
            workflows: Some(self),
            keys: Some(self),
            durable: Some(self),
        }
    }
}

#[async_trait]
impl jq_core::storage::KeyStorage for RedisStorage {
    async fn set_key_limits(&self, queue: &QueueName, key: Option<&str>, limits: &QueueLimits) -> Result<()> {
        keyed::set(&self.inner, queue, key, limits).await
    }

    async fn clear_key_limits(&self, queue: &QueueName, key: &str) -> Result<()> {
        keyed::clear(&self.inner, queue, key).await
    }

    async fn keys(&self, queue: &QueueName, top: usize) -> Result<jq_core::KeyReport> {
        keyed::report(&self.inner, queue, top).await
    }
}

#[async_trait]
impl RoleStorage for RedisStorage {
    async fn elect(&self, election: &Election) -> Result<bool> {
        election::elect(&self.inner, election).await
    }

    async fn resign(&self, role: &str, token: LeaseToken) -> Result<()> {
        election::resign(&self.inner, role, token).await
    }

    async fn leaders(&self) -> Result<Vec<Leader>> {
        election::leaders(&self.inner).await
    }
}

#[async_trait]
impl PeriodicStorage for RedisStorage {
    async fn fire(&self, fire: &Fire) -> Result<FireOutcome> {
        periodic::fire(&self.inner, fire).await
    }

    async fn periodic(&self) -> Result<Vec<PeriodicInfo>> {
        periodic::list(&self.inner).await
    }

    async fn trigger(&self, name: &str) -> Result<()> {
        periodic::trigger(&self.inner, name).await
    }
}

#[async_trait]
impl ControlStorage for RedisStorage {
    async fn set_paused(&self, queue: &QueueName, paused: bool) -> Result<()> {
        control::set_paused(&self.inner, queue, paused).await
    }

    async fn set_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<()> {
        control::set_limits(&self.inner, queue, limits).await
    }

    async fn queues(&self) -> Result<Vec<QueueInfo>> {
        control::queues(&self.inner).await
    }
}

#[async_trait]
impl ThroughputStorage for RedisStorage {
    async fn throughput(&self, since: Timestamp) -> Result<Vec<Throughput>> {
        admin::throughput(&self.inner, since).await
    }
}

#[async_trait]
impl jq_core::storage::DurableStorage for RedisStorage {
    async fn checkpoint(&self, lease: LeaseRef, record: &jq_core::durable::Record) -> Result<()> {
        crate::durable::checkpoint(&self.inner, lease, record).await
    }

    async fn suspend(
        &self,
        lease: LeaseRef,
        suspend: &jq_core::durable::Suspend,
    ) -> Result<jq_core::durable::Suspended> {
        crate::durable::suspend(&self.inner, lease, suspend).await
    }

    async fn signal(&self, id: JobId, name: &str, payload: &jq_core::Payload) -> Result<()> {
        crate::durable::signal(&self.inner, id, name, payload).await
    }

    async fn journal(&self, id: JobId) -> Result<jq_core::durable::Journal> {
        crate::durable::journal(&self.inner, id).await
    }
}

#[async_trait]
impl CancelStorage for RedisStorage {
    async fn request_cancel(&self, id: JobId, reason: &str) -> Result<CancelAnswer> {
        cancel::request_cancel(&self.inner, id, reason).await
    }

    async fn progress(&self, reports: &[ProgressReport]) -> Result<Vec<JobId>> {
        cancel::progress(&self.inner, reports).await
    }
}

#[async_trait]
impl jq_core::storage::WorkflowStorage for RedisStorage {
    async fn enqueue_workflow(&self, plan: &jq_core::workflow::WorkflowPlan) -> Result<Vec<JobId>> {
        workflow::enqueue(&self.inner, plan).await
    }

    async fn result(&self, id: JobId) -> Result<Option<jq_core::Payload>> {
        workflow::result(&self.inner, id).await
    }

    async fn links(&self, id: JobId) -> Result<jq_core::workflow::JobLinks> {
        workflow::links(&self.inner, id).await
    }

    async fn parent_results(&self, id: JobId) -> Result<Vec<jq_core::workflow::ParentResult>> {
        workflow::parent_results(&self.inner, id).await
    }

    async fn workflow(&self, id: jq_core::workflow::WorkflowId) -> Result<jq_core::workflow::WorkflowInfo> {
        workflow::workflow(&self.inner, id).await
    }

    async fn workflow_steps(&self, id: jq_core::workflow::WorkflowId) -> Result<Vec<jq_core::workflow::StepInfo>> {
        workflow::workflow_steps(&self.inner, id).await
    }
}
