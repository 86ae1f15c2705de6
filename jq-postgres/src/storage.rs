//! [`PostgresStorage`]: the [`Storage`] implementation, and the handle's
//! connections and settings every operation is given ([`Inner`]).

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use jq_core::durable::{Journal, Record, Suspend, Suspended};
use jq_core::periodic::{Fire, FireOutcome, PeriodicInfo};
use jq_core::storage::{
    Beat, CancelAnswer, CancelStorage, Capabilities, ClaimRequest, ControlStorage, DurableStorage, Election,
    KeyStorage, Leader, LeaseRef, LeaseToken, PeriodicStorage, ProgressReport, RoleStorage, Settled, Settlement,
    Storage, ThroughputStorage, WorkSignal,
};
use jq_core::workflow::WorkflowPlan;
use jq_core::{
    Clock, Job, JobFilter, JobId, NewJob, QueueInfo, QueueLimits, QueueName, Result, State, Stats, Throughput,
    Timestamp,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool, Postgres, Transaction};

use crate::{
    PostgresConfig, PostgresError, admin, cancel, claim, control, durable, election, enqueue, failover, headroom,
    hints, keyed, liveness, maintenance, periodic, pooler, schema, settle, wake, workflow,
};

/// jq's storage in a PostgreSQL schema. Cheap to clone: clones share the
/// pool and the wake-up listener.
#[derive(Clone, Debug)]
pub struct PostgresStorage {
    inner: Arc<Inner>,
}

/// What every operation needs.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) pool: PgPool,
    /// The claim statement's own connections (`claim::claim_pool`).
    pub(crate) claims: PgPool,
    pub(crate) clock: Clock,
    pub(crate) max_payload_bytes: usize,
    pub(crate) schema: String,
    pub(crate) channel: String,
    pub(crate) sql: schema::Sql,
    pub(crate) wake: wake::Wake,
    /// Where the next claim starts in each band of the claim index.
    pub(crate) hints: hints::Hints,
    /// Where the next recover starts in the lease index.
    pub(crate) recover_start: hints::RecoverStart,
    /// The queues this storage last found controlled (claims over them go
    /// straight to the locked path).
    pub(crate) controlled: control::Controlled,
    /// When calls were last cut short (`liveness.rs`).
    pub(crate) cuts: Arc<liveness::Cuts>,
    /// The bound of every storage call ([`PostgresConfig::response_timeout`]).
    pub(crate) response_timeout: Duration,
    /// What [`Storage::independent`] needs to open a pool of its own.
    pub(crate) acquire_timeout: Duration,
    /// Behind a transaction pooler: how each transaction starts
    /// (`pooler.rs`).
    pub(crate) pooled: Option<pooler::Pooled>,
    /// Where the wake-up listener connects.
    pub(crate) listen: wake::Listen,
    /// Whether the server has connection slots left (`headroom.rs`).
    pub(crate) headroom: Arc<headroom::Headroom>,
    /// The URL's hosts and the one the pools connect to (`failover.rs`).
    pub(crate) hosts: Arc<failover::Hosts>,
    /// The [`failover::Hosts::generation`] the pools were last pointed at.
    followed: AtomicUsize,
}

impl Inner {
    /// Runs one storage call within the response timeout (`liveness.rs`),
    /// looking at the server's connection slots when it is slow
    /// (`headroom.rs`).
    ///
    /// A failed call may be the sign of a failover (`failover.rs`): one
    /// that met a read-only server drops every connection opened before
    /// it; one that met a read-only server or one that is gone starts a
    /// search for the primary among the URL's hosts.
    pub(crate) async fn timed<T>(&self, call: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        self.follow();
        let answer = self.headroom.watch(self.cuts.timed(self.response_timeout, call)).await;
        if let Err(error) = &answer {
            self.failed(error);
        }
        answer
    }

    /// Points the pools at the current host when another handle's search
    /// moved it.
    fn follow(&self) {
        // Two loads on every call; a store only when the host moved.
        let generation = self.hosts.generation();
        if self.followed.load(Ordering::Relaxed) != generation {
            self.followed.store(generation, Ordering::Relaxed);
            self.hosts.follow(&self.pool);
            self.hosts.follow(&self.claims);
        }
    }

    /// After a call failed with `error`: what its sign asks for.
    fn failed(&self, error: &jq_core::Error) {
        let Some(sign) = failover::sign(error) else { return };
        if sign == failover::Sign::ReadOnly {
            // Its pings succeed, so the pool would keep it: drop it, and
            // every connection opened before it (to the same server).
            self.cuts.cut();
            tracing::warn!(
                %error,
                "PostgreSQL answered read-only (a standby, or the old primary after a failover): jq drops its \
                 connections and reconnects"
            );
        }
        if !self.hosts.several() {
            return;
        }
        self.hosts.search(
            (*self.pool.connect_options()).clone(),
            vec![self.pool.clone(), self.claims.clone()],
            self.cuts.clone(),
        );
    }

    /// Single statements and jq's own transactions on the pool.
    pub(crate) fn db(&self) -> pooler::Db<'_> {
        pooler::Db { pool: &self.pool, pooled: self.pooled.as_ref() }
    }

    /// The claim statement on the claims' own connections.
    pub(crate) fn claims_db(&self) -> pooler::Db<'_> {
        pooler::Db { pool: &self.claims, pooled: self.pooled.as_ref() }
    }
}

impl PostgresStorage {
    /// Connects to the configured URL with a pool of
    /// [`PostgresConfig::max_connections`]. Fails at once, with a message
    /// that says so, when the server cannot be reached. Does not migrate:
    /// call [`PostgresStorage::migrate`] once per deployment.
    pub async fn connect(config: PostgresConfig) -> Result<Self, PostgresError> {
        config.check()?;
        let split = failover::split(&config.url)?;
        let per_host = split
            .urls
            .iter()
            .map(|url| PgConnectOptions::from_str(url).map_err(PostgresError::InvalidUrl))
            .collect::<Result<Vec<_>, _>>()?;
        let hosts = failover::Hosts::new(&per_host, split.read_write, config.response_timeout);
        let Some(first) = per_host.into_iter().next() else {
            return Err(PostgresError::InvalidUrl(sqlx::Error::Configuration("the URL names no host".into())));
        };
        let mut options = named(first, &config);
        if config.transaction_pooler {
            // Nothing a pooler refuses at startup; the statement timeout
            // rides each BEGIN instead (`pooler.rs`).
            options = pooler_safe(options);
        } else if let Some(timeout) = config.statement_timeout {
            options = options.options([("statement_timeout", format!("{}ms", timeout.as_millis().max(1)))]);
        }
        let target =
            format!("{}:{}/{}", options.get_host(), options.get_port(), options.get_database().unwrap_or_default());
        // One direct connection first: the pool would retry a refused
        // connection until its acquire timeout and then report only a
        // timeout; this says what is wrong, at once. Bounded: a server that
        // accepts and never answers must not hang the connect.
        let silent = |target: String| PostgresError::Connect {
            target,
            source: sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {:?} (response_timeout)", config.response_timeout),
            )),
        };
        let probe = if hosts.several() {
            // The first host in order that answers (and takes writes,
            // with target_session_attrs=read-write) becomes the pools'.
            let found = hosts.find(&options).await;
            found.ok_or_else(|| PostgresError::NoPrimary { hosts: hosts.names() })?
        } else {
            let mut probe = tokio::time::timeout(config.response_timeout, options.connect())
                .await
                .map_err(|_| silent(target.clone()))?
                .map_err(|source| PostgresError::connect(target.clone(), source))?;
            if hosts.read_write() {
                let writable = tokio::time::timeout(config.response_timeout, failover::Hosts::writable(&mut probe))
                    .await
                    .map_err(|_| silent(target.clone()))?
                    .map_err(|source| PostgresError::Connect { target: target.clone(), source })?;
                if !writable {
                    return Err(PostgresError::NoPrimary { hosts: hosts.names() });
                }
            }
            probe
        };
        tokio::time::timeout(config.response_timeout, probe.close())
            .await
            .map_err(|_| silent(target.clone()))?
            .map_err(|source| PostgresError::Connect { target, source })?;
        let options = hosts.aim(&options);
        let cuts = liveness::Cuts::new();
        let pool = failover::checked(&hosts, cuts.guard(PgPoolOptions::new()), &options)
            .max_connections(config.max_connections)
            .acquire_timeout(config.acquire_timeout)
            // A ping before every acquire would double the round trips of
            // every operation; a dead connection fails its statement with
            // a retryable error instead and is dropped from the pool.
            .test_before_acquire(false)
            .connect_lazy_with(options);
        let listen = listen(&config)?;
        Self::build(pool, config, cuts, listen, hosts)
    }

    /// Uses an existing pool (shared with the application, say). Only the
    /// schema, clock, payload limit, claim connections, acquire timeout and
    /// response timeout of `config` apply; the URL and pool settings are
    /// the pool's own. A call that times out cannot make such a pool drop
    /// its connection: sqlx checks a connection handed back mid-statement
    /// with a ping that has no deadline, so on a silent connection that
    /// slot is held until TCP gives up; prefer
    /// [`PostgresStorage::connect`] where the network can go silent. The
    /// claims open their own connections with the pool's connect options,
    /// without its `after_connect` hooks (see
    /// [`PostgresConfig::claim_connections`]). Behind a transaction pooler
    /// ([`PostgresConfig::transaction_pooler`]), open `pool` with
    /// `extra_float_digits(None)` (or have the pooler ignore it), and apply
    /// a statement timeout through `config`, not the pool's options.
    pub fn from_pool(pool: PgPool, config: PostgresConfig) -> Result<Self, PostgresError> {
        let listen = listen(&config)?;
        let hosts = failover::Hosts::new(&[(*pool.connect_options()).clone()], false, config.response_timeout);
        Self::build(pool, config, liveness::Cuts::new(), listen, hosts)
    }

    fn build(
        pool: PgPool,
        config: PostgresConfig,
        cuts: Arc<liveness::Cuts>,
        listen: wake::Listen,
        hosts: Arc<failover::Hosts>,
    ) -> Result<Self, PostgresError> {
        config.check()?;
        let pooled = config.transaction_pooler.then(|| pooler::Pooled::new(config.statement_timeout));
        let sql = schema::Sql::new(&config.schema, pooled.is_none());
        let claim_options = match pooled {
            Some(_) => pooler_safe((*pool.connect_options()).clone()),
            None => (*pool.connect_options()).clone(),
        };
        let claims = claim::claim_pool(
            &claim_options,
            config.claim_connections,
            config.acquire_timeout,
            &sql.claim,
            &cuts,
            pooled.is_some(),
            &hosts,
        );
        let headroom = headroom::Headroom::new(pool.connect_options(), hosts.clone());
        let inner = Inner {
            headroom,
            followed: AtomicUsize::new(hosts.generation()),
            hosts,
            pool,
            claims,
            clock: config.clock,
            max_payload_bytes: config.max_payload_bytes,
            channel: schema::channel(&config.schema),
            sql,
            schema: config.schema,
            wake: wake::Wake::default(),
            hints: hints::Hints::default(),
            recover_start: hints::RecoverStart::default(),
            controlled: control::Controlled::default(),
            cuts,
            response_timeout: config.response_timeout,
            acquire_timeout: config.acquire_timeout,
            pooled,
            listen,
        };
        Ok(PostgresStorage { inner: Arc::new(inner) })
    }

    /// Enqueues `jobs` on `executor`: a `&mut PgConnection`, `&mut *tx` of
    /// a caller's transaction, or `&PgPool`. In a transaction, the jobs
    /// exist (and their wake-up is delivered) only if the caller commits.
    ///
    /// One statement, so it also works on an executor that runs only one.
    /// Same semantics as [`Storage::enqueue`], but a job with a unique rule
    /// (several statements) is refused with `InvalidInput`: use
    /// [`PostgresStorage::enqueue_tx`] or the storage for it.
    pub async fn enqueue_in<'e, E: sqlx::PgExecutor<'e>>(&self, executor: E, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        enqueue::enqueue(&self.inner, executor, jobs).await
    }

    /// Enqueues `jobs` inside the caller's transaction; see
    /// [`PostgresStorage::enqueue_in`].
    ///
    /// A job with a unique rule (debounce, period, replace) takes several
    /// statements here, at the default READ COMMITTED isolation.
    pub async fn enqueue_tx(&self, tx: &mut Transaction<'_, Postgres>, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        if crate::rules::any(&jobs) {
            return crate::rules::enqueue_tx(&self.inner, &mut *tx, jobs).await;
        }
        enqueue::enqueue(&self.inner, &mut **tx, jobs).await
    }

    /// Stores a workflow ([`WorkflowStorage::enqueue_workflow`](jq_core::storage::WorkflowStorage::enqueue_workflow))
    /// inside the caller's transaction: its steps exist if and only if the
    /// caller commits. One statement.
    pub async fn enqueue_workflow_tx(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        plan: &WorkflowPlan,
    ) -> Result<Vec<JobId>> {
        workflow::enqueue_in(&self.inner, &mut **tx, plan).await
    }

    /// The pool, for the application's own queries.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The claims' own connections ([`PostgresConfig::claim_connections`]),
    /// to watch their use beside [`PostgresStorage::pool`]'s; run nothing
    /// of your own there: they are set to plan every statement generically.
    pub fn claim_pool(&self) -> &PgPool {
        &self.inner.claims
    }

    /// The schema holding the jobs.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// The NOTIFY channel of this schema.
    pub fn channel(&self) -> &str {
        &self.inner.channel
    }

    /// Closes the pools (and stops the wake-up listener): waits for the
    /// connections in use to be returned.
    pub async fn close(&self) {
        self.inner.wake.stop();
        self.inner.claims.close().await;
        self.inner.pool.close().await;
    }
}

/// `options` without what a pooler refuses at startup, and without named
/// statements to cache (`pooler.rs`).
fn pooler_safe(options: PgConnectOptions) -> PgConnectOptions {
    options.extra_float_digits(None).statement_cache_capacity(0)
}

/// `options` with `config`'s application name, unless they carry one
/// already (from the URL or `PGAPPNAME`).
fn named(options: PgConnectOptions, config: &PostgresConfig) -> PgConnectOptions {
    if options.get_application_name().is_some() || config.application_name.is_empty() {
        options
    } else {
        options.application_name(&config.application_name)
    }
}

/// Where `config`'s wake-up listener connects.
fn listen(config: &PostgresConfig) -> Result<wake::Listen, PostgresError> {
    Ok(match (&config.listen_url, config.transaction_pooler) {
        (Some(url), _) => wake::Listen::Direct(Arc::new(named(
            PgConnectOptions::from_str(url).map_err(PostgresError::InvalidUrl)?,
            config,
        ))),
        (None, false) => wake::Listen::Pool,
        (None, true) => wake::Listen::Off,
    })
}

#[async_trait]
impl Storage for PostgresStorage {
    /// Creates the schema, applies the migrations it lacks and installs
    /// this build's functions when the schema's are an older generation, in
    /// one transaction under an advisory lock (concurrent calls are safe;
    /// the later ones find nothing to do). Returns how many migrations were
    /// applied. A schema newer than this build (its migrations or its
    /// functions) is [`PostgresError::TooNew`], one whose recorded
    /// migration or functions differ from this build's texts
    /// [`PostgresError::MigrationChanged`] or
    /// [`PostgresError::FunctionsChanged`]; each changes nothing.
    async fn migrate(&self) -> Result<usize> {
        Ok(schema::migrate(&self.inner.pool, &self.inner.schema, self.inner.pooled.is_none()).await?)
    }
    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        self.inner.timed(enqueue::enqueue_pool(&self.inner, jobs)).await
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<jq_core::storage::ClaimAnswer> {
        self.inner.timed(claim::claim(&self.inner, request)).await
    }

    async fn settle(&self, batch: Vec<Settlement>) -> Result<Vec<Settled>> {
        self.inner.timed(settle::settle(&self.inner, batch)).await
    }

    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<Beat> {
        self.inner.timed(settle::heartbeat(&self.inner, leases, lease)).await
    }

    async fn promote(&self) -> Result<u64> {
        self.inner.timed(maintenance::promote(&self.inner)).await
    }

    async fn recover(&self) -> Result<u64> {
        self.inner.timed(maintenance::recover(&self.inner)).await
    }

    async fn get(&self, id: JobId) -> Result<Job> {
        self.inner.timed(admin::get(&self.inner, id)).await
    }

    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        self.inner.timed(admin::list(&self.inner, filter)).await
    }

    async fn stats(&self) -> Result<Stats> {
        self.inner.timed(admin::stats(&self.inner)).await
    }

    async fn retry(&self, id: JobId) -> Result<()> {
        self.inner.timed(admin::retry(&self.inner, id)).await
    }

    async fn cancel(&self, id: JobId) -> Result<()> {
        self.inner.timed(admin::cancel(&self.inner, id)).await
    }

    async fn purge(&self, state: State, older_than: Timestamp) -> Result<u64> {
        self.inner.timed(maintenance::purge(&self.inner, state, older_than)).await
    }

    fn subscribe(&self) -> Option<WorkSignal> {
        wake::subscribe(&self.inner)
    }

    /// A handle with pools of its own (two connections, one for claims,
    /// opened on first use), sharing this one's settings.
    async fn independent(&self) -> Option<Self> {
        let inner = &self.inner;
        let config = PostgresConfig::new("")
            .schema(inner.schema.as_str())
            .clock(inner.clock.clone())
            .max_payload_bytes(inner.max_payload_bytes)
            .claim_connections(1)
            .acquire_timeout(inner.acquire_timeout)
            .response_timeout(inner.response_timeout)
            .transaction_pooler(inner.pooled.is_some());
        // Behind a pooler the statement timeout rides each BEGIN; on a
        // direct connection it is in the connect options copied below.
        let config = match inner.pooled.as_ref().and_then(|p| p.statement_timeout) {
            Some(timeout) => config.statement_timeout(timeout),
            None => config,
        };
        let options = inner.hosts.aim(&inner.pool.connect_options());
        let pool = failover::checked(&inner.hosts, inner.cuts.guard(PgPoolOptions::new()), &options)
            .max_connections(2)
            .acquire_timeout(inner.acquire_timeout)
            .test_before_acquire(false)
            .connect_lazy_with(options);
        Self::build(pool, config, inner.cuts.clone(), inner.listen.clone(), inner.hosts.clone()).ok()
    }

    fn clock(&self) -> Clock {
        self.inner.clock.clone()
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
impl KeyStorage for PostgresStorage {
    async fn set_key_limits(&self, queue: &QueueName, key: Option<&str>, limits: &QueueLimits) -> Result<()> {
        self.inner.timed(keyed::set_limits(&self.inner, queue, key, limits)).await
    }

    async fn clear_key_limits(&self, queue: &QueueName, key: &str) -> Result<()> {
        self.inner.timed(keyed::clear_limits(&self.inner, queue, key)).await
    }

    async fn keys(&self, queue: &QueueName, top: usize) -> Result<jq_core::KeyReport> {
        self.inner.timed(keyed::report(&self.inner, queue, top)).await
    }
}

#[async_trait]
impl jq_core::storage::WorkflowStorage for PostgresStorage {
    async fn enqueue_workflow(&self, plan: &WorkflowPlan) -> Result<Vec<JobId>> {
        workflow::enqueue_pool(&self.inner, plan).await
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

#[async_trait]
impl RoleStorage for PostgresStorage {
    async fn elect(&self, election: &Election) -> Result<bool> {
        self.inner.timed(election::elect(&self.inner, election)).await
    }

    async fn resign(&self, role: &str, token: LeaseToken) -> Result<()> {
        self.inner.timed(election::resign(&self.inner, role, token)).await
    }

    async fn leaders(&self) -> Result<Vec<Leader>> {
        self.inner.timed(election::leaders(&self.inner)).await
    }
}

#[async_trait]
impl PeriodicStorage for PostgresStorage {
    async fn fire(&self, fire: &Fire) -> Result<FireOutcome> {
        self.inner.timed(periodic::fire(&self.inner, fire)).await
    }

    async fn periodic(&self) -> Result<Vec<PeriodicInfo>> {
        self.inner.timed(periodic::list(&self.inner)).await
    }

    async fn trigger(&self, name: &str) -> Result<()> {
        self.inner.timed(periodic::trigger(&self.inner, name)).await
    }
}

#[async_trait]
impl ControlStorage for PostgresStorage {
    async fn set_paused(&self, queue: &QueueName, paused: bool) -> Result<()> {
        self.inner.timed(control::set_paused(&self.inner, queue, paused)).await
    }

    async fn set_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<()> {
        self.inner.timed(control::set_limits(&self.inner, queue, limits)).await
    }

    async fn queues(&self) -> Result<Vec<QueueInfo>> {
        self.inner.timed(control::queues(&self.inner)).await
    }
}

#[async_trait]
impl DurableStorage for PostgresStorage {
    async fn checkpoint(&self, lease: LeaseRef, record: &Record) -> Result<()> {
        self.inner.timed(durable::checkpoint(&self.inner, lease, record)).await
    }

    async fn suspend(&self, lease: LeaseRef, suspend: &Suspend) -> Result<Suspended> {
        self.inner.timed(durable::suspend(&self.inner, lease, suspend)).await
    }

    async fn signal(&self, id: JobId, name: &str, payload: &jq_core::Payload) -> Result<()> {
        self.inner.timed(durable::signal(&self.inner, id, name, payload)).await
    }

    async fn journal(&self, id: JobId) -> Result<Journal> {
        self.inner.timed(durable::journal(&self.inner, id)).await
    }
}

#[async_trait]
impl CancelStorage for PostgresStorage {
    async fn request_cancel(&self, id: JobId, reason: &str) -> Result<CancelAnswer> {
        self.inner.timed(cancel::request(&self.inner, id, reason)).await
    }

    async fn progress(&self, reports: &[ProgressReport]) -> Result<Vec<JobId>> {
        self.inner.timed(cancel::progress(&self.inner, reports)).await
    }
}

#[async_trait]
impl ThroughputStorage for PostgresStorage {
    async fn throughput(&self, since: Timestamp) -> Result<Vec<Throughput>> {
        self.inner.timed(admin::throughput(&self.inner, since)).await
    }
}
