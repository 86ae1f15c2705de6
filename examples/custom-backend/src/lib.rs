//! Two jq storage backends written from scratch, as you would start one for
//! a database jq does not support: implement [`jq::storage::Storage`], then
//! run `jq_testkit::conformance!` and `jq_testkit::properties!` on it until
//! they pass. Once they do, everything in jq works on it:
//! `jq::Client::new(storage)`, the worker pool, your tests.
//!
//! - [`MinimalStorage`] (`minimal.rs`, `tests/minimal.rs`): the core only,
//!   a map of jobs behind a mutex. Start here; copy it.
//! - [`IndexedStorage`] (this file, `index.rs`, `tests/conformance.rs`):
//!   every capability (roles, periodic jobs, queue controls, throughput)
//!   and the indexes a real backend keeps so that claims, promote and
//!   recover do not scan every job.
//!
//! The full one's "database" is in-process: one table of rows and the indexes a
//! real backend would keep beside it (`index.rs`), each operation one
//! critical section under a mutex, standing for one transaction. Mapped onto
//! your database:
//!
//! | here | a SQL database | a key-value store |
//! |---|---|---|
//! | `Tables::rows` | the jobs table, primary key id | a hash per job |
//! | `waiting` (per queue, claim order) | a partial index on (queue, priority desc, run_at, id) of waiting jobs | a sorted set per queue |
//! | `scheduled` (by run_at) | a partial index on run_at of Scheduled jobs | a sorted set |
//! | `running` (by lease expiry) | a partial index on lease expiry of Running jobs | a sorted set |
//! | `finished` (by state, finish time) | an index on (state, finished_at) | a sorted set per state |
//! | `unique` | a unique partial index on (queue, unique_key) of live jobs | a hash |
//! | `roles` | a table of named roles (role, token, holder, expires_at) | a hash per role |
//! | `periodic_jobs` | a table of periodic jobs (name, cursor, ...); `fire` is an `UPDATE ... WHERE cursor = expected` and the jobs' insert in one transaction | a hash per periodic job in its queue's slot, compared and written by the script that stores the jobs |
//! | `controls` (pause, limits, starts, seen) | a controls table keyed by queue, a table of start instants indexed by (queue, at) | a hash per queue, a sorted set of starts |
//! | the mutex | a transaction (`SELECT ... FOR UPDATE SKIP LOCKED` for claims) | a script or a `MULTI` |
//!
//! What each method must do is in the rustdoc of [`jq::storage::Storage`] and in the
//! repository's `docs/CONTRACT.md`; the suites check every clause.

mod index;
mod minimal;
mod workflow;

pub use minimal::MinimalStorage;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use jq::periodic::{Fire, FireOutcome, PeriodicInfo};
use jq::storage::{
    Beat, CancelAnswer, CancelStorage, Capabilities, ClaimAnswer, ClaimRequest, ControlStorage, Election, Leader,
    LeaseRef, LeaseToken, Limited, Outcome, PeriodicStorage, ProgressReport, RoleStorage, Settled, Settlement, Storage,
    ThroughputStorage, WorkSignal, async_trait,
};
use jq::storage::{Decision, Holder, add, decide, storable_message};
use jq::{
    AttemptError, CancelRequest, Clock, DEFAULT_MAX_PAYLOAD_BYTES, Error, Job, JobFilter, JobId, Lease, NewJob,
    QueueInfo, QueueLimits, QueueName, Result, State, Stats, Throughput, Timestamp,
};
use tokio::sync::watch;

use crate::index::Tables;

/// A handle on an in-process job store. Clones share the store; so do the
/// handles of [`IndexedStorage::connect`], each with its own clock (what a
/// new connection to a shared database would be).
#[derive(Clone, Debug)]
pub struct IndexedStorage {
    tables: Arc<Mutex<Tables>>,
    /// Bumped when work may have become claimable, for the pool's fetcher.
    wake: Arc<watch::Sender<u64>>,
    clock: Clock,
    max_payload_bytes: usize,
}

impl Default for IndexedStorage {
    fn default() -> Self {
        Self::new(Clock::system())
    }
}

impl IndexedStorage {
    /// An empty store taking "now" from `clock`.
    pub fn new(clock: Clock) -> Self {
        IndexedStorage {
            tables: Arc::default(),
            wake: Arc::new(watch::Sender::new(0)),
            clock,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
        }
    }

    /// Another handle on the same store, with its own clock.
    pub fn connect(&self, clock: Clock) -> Self {
        IndexedStorage { clock, ..self.clone() }
    }

    /// Refuses payloads over `bytes` of JSON (default 1 MiB).
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = bytes;
        self
    }

    /// One "transaction". Every operation leaves the tables consistent
    /// before anything that could panic, so a poisoned lock still guards
    /// valid data.
    fn begin(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn wake(&self) {
        self.wake.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// Stores new jobs as `enqueue` does (payloads already checked): their
/// ids (an existing job's where one matched) and whether any row is new.
fn store(t: &mut Tables, jobs: Vec<NewJob>, now: Timestamp) -> (Vec<JobId>, bool) {
    let mut ids = Vec::with_capacity(jobs.len());
    let mut stored = false;
    for mut job in jobs {
        if t.rows.contains_key(&job.id) {
            ids.push(job.id); // sent again after a lost answer: stored once
            continue;
        }
        if let (Some(key), Some(rule)) = (&job.unique_key, job.unique_rule) {
            // The contract's "Unique rules", decided by jq's own function.
            // A period counts finished jobs too, which no index here holds:
            // this scans the rows (a store would index (queue, key, created_at)).
            let holders: Vec<Holder> = (t.rows.values())
                .filter(|j| j.queue == job.queue && j.unique_key.as_ref() == Some(key))
                .map(|j| Holder { id: j.id, state: j.state, created_at: j.created_at })
                .collect();
            match decide(rule, job.run_at, &holders, now) {
                Decision::Answer(id) => {
                    ids.push(id);
                    continue;
                }
                Decision::Update { id, run_at } => {
                    t.update(id, |held| {
                        held.payload = job.payload;
                        held.run_at = run_at;
                        held.state = if run_at <= now { State::Pending } else { State::Scheduled };
                    });
                    ids.push(id);
                    stored = true;
                    continue;
                }
                Decision::Store { run_at, .. } => job.run_at = run_at,
            }
        } else if let Some(holder) = job.unique_key.as_ref().and_then(|key| t.live_holder(&job.queue, key)) {
            ids.push(holder);
            continue;
        }
        ids.push(job.id);
        stored = true;
        t.insert(job.stored_at(now));
    }
    (ids, stored)
}

/// The error recover records for the attempt whose lease expired: the same
/// text on every backend (the property suite compares it).
fn lease_expired(worker: &str) -> String {
    format!("lease expired (worker {worker} did not finish or heartbeat in time)")
}

#[async_trait]
impl Storage for IndexedStorage {
    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        // Every job is checked before anything is written: all or none. A
        // keyed job is refused (no per-key limits here) rather than stored
        // without its key's limits.
        jq::storage::refuse_keys(&jobs)?;
        for job in &jobs {
            job.check_payload(self.max_payload_bytes)?;
        }
        let now = self.clock.now();
        let (ids, stored) = store(&mut self.begin(), jobs, now);
        if stored {
            self.wake();
        }
        Ok(ids)
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimAnswer> {
        request.check()?;
        if request.limit == 0 || request.queues.is_empty() {
            return Ok(ClaimAnswer::default());
        }
        let now = self.clock.now();
        let expires_at = add(now, request.lease);
        let mut t = self.begin();
        if request.resend {
            // The first attempt's answer was lost: hand over what it took.
            let earlier = t.held_by(request.token);
            if !earlier.is_empty() {
                return Ok(ClaimAnswer::jobs(earlier));
            }
        }
        // Each queue's pause and limits, in the same "transaction".
        let allowed: Vec<(jq::QueueName, usize)> =
            (request.queues.iter()).map(|q| (q.clone(), t.allowance(q, &request.worker, request.limit, now))).collect();
        let picked = t.claimable(&allowed, request.limit, now);
        let mut claimed = Vec::with_capacity(picked.len());
        for id in picked {
            let job = t.update(id, |job| {
                job.state = State::Running;
                job.attempts += 1;
                // Every job of one claim carries the claim's token; fencing
                // is by id and token together.
                job.lease = Some(Lease { token: request.token, worker: request.worker.clone(), expires_at });
            });
            claimed.extend(job.cloned());
        }
        for job in &claimed {
            t.started(&job.queue, now);
        }
        // A short claim says whether a queue's limits held jobs back (the
        // pool then claims again when a slot frees), not drained queues.
        let limited = if claimed.len() < request.limit {
            request.queues.iter().fold(None, |held, q| Limited::merge(held, t.held_back(q, now)))
        } else {
            None
        };
        Ok(ClaimAnswer { jobs: claimed, limited })
    }

    async fn settle(&self, batch: Vec<Settlement>) -> Result<Vec<Settled>> {
        let now = self.clock.now();
        let mut results = Vec::with_capacity(batch.len());
        let mut handed_back = false;
        {
            let mut t = self.begin();
            // In order: a later item on the same job sees the earlier one.
            for Settlement { lease, outcome } in batch {
                if !t.holds(&lease) {
                    results.push(Err(Error::LeaseLost { id: lease.id }));
                    continue;
                }
                if let Outcome::AckWith { result } = &outcome {
                    t.graph.set_result(lease.id, result.clone());
                }
                let changed = t.update(lease.id, |job| {
                    job.lease = None;
                    match outcome {
                        Outcome::Ack | Outcome::AckWith { .. } => finish(job, State::Completed, now),
                        Outcome::Nack { error, delay } => {
                            let message = storable_message(&error).into_owned();
                            job.errors.push(AttemptError { attempt: job.attempts, at: now, message });
                            if job.attempts >= job.max_attempts {
                                finish(job, State::Dead, now);
                            } else {
                                hand_back(job, now, delay);
                            }
                        }
                        Outcome::Bury { error } => {
                            let message = storable_message(&error).into_owned();
                            job.errors.push(AttemptError { attempt: job.attempts, at: now, message });
                            finish(job, State::Dead, now);
                        }
                        Outcome::Release { delay } => {
                            job.attempts = job.attempts.saturating_sub(1); // not a failed attempt
                            hand_back(job, now, delay);
                        }
                        // stopped on a cancel request: no error, no retry
                        Outcome::Cancel => finish(job, State::Cancelled, now),
                    }
                });
                let state = changed.map(|job| job.state).ok_or(Error::LeaseLost { id: lease.id });
                handed_back |= matches!(state, Ok(State::Pending | State::Scheduled));
                if matches!(state, Ok(s) if s.is_terminal()) && t.graph.has_children(lease.id) {
                    handed_back |= workflow::finished(&mut t, lease.id, now);
                }
                results.push(state);
            }
        }
        if handed_back {
            self.wake();
        }
        Ok(results)
    }

    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<Beat> {
        let expires_at = add(self.clock.now(), lease);
        let mut t = self.begin();
        let mut beat = Beat::default();
        for held in leases {
            if t.holds(held) {
                let extended = t.update(held.id, |job| {
                    if let Some(lease) = job.lease.as_mut() {
                        lease.expires_at = expires_at;
                    }
                });
                // the pool learns of a cancel request from this answer
                if extended.is_some_and(|job| job.cancel_requested.is_some()) {
                    beat.cancel.push(held.id);
                }
            } else {
                beat.lost.push(held.id);
            }
        }
        Ok(beat)
    }

    async fn promote(&self) -> Result<u64> {
        let now = self.clock.now();
        let moved = {
            let mut t = self.begin();
            let due = t.due(now);
            for id in &due {
                t.update(*id, |job| job.state = State::Pending);
            }
            due.len() as u64
        };
        if moved > 0 {
            self.wake();
        }
        Ok(moved)
    }

    async fn recover(&self) -> Result<u64> {
        let now = self.clock.now();
        let recovered = {
            let mut t = self.begin();
            let expired = t.expired(now);
            let mut dead = Vec::new();
            for id in &expired {
                t.update(*id, |job| {
                    let worker = job.lease.take().map(|l| l.worker).unwrap_or_default();
                    if job.cancel_requested.is_some() {
                        // died while cancelling: the cancel wins, no error
                        finish(job, State::Cancelled, now);
                        return;
                    }
                    job.errors.push(AttemptError { attempt: job.attempts, at: now, message: lease_expired(&worker) });
                    if job.attempts >= job.max_attempts {
                        finish(job, State::Dead, now);
                    } else {
                        job.state = State::Pending;
                        job.run_at = now;
                    }
                });
                if t.rows.get(id).is_some_and(|j| j.state == State::Dead) {
                    dead.push(*id);
                }
            }
            for id in dead {
                workflow::finished(&mut t, id, now);
            }
            expired.len() as u64
        };
        if recovered > 0 {
            self.wake();
        }
        Ok(recovered)
    }

    async fn get(&self, id: JobId) -> Result<Job> {
        self.begin().rows.get(&id).cloned().ok_or(Error::NotFound { id })
    }

    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        let t = self.begin();
        let after = filter.after.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        Ok(t.rows
            .range((after, std::ops::Bound::Unbounded))
            .map(|(_, job)| job)
            .filter(|job| filter.matches(job))
            .take(filter.page_size())
            .cloned()
            .collect())
    }

    async fn stats(&self) -> Result<Stats> {
        let mut stats = Stats::default();
        for job in self.begin().rows.values() {
            stats.queues.entry(job.queue.as_str().to_owned()).or_default().add(job.state, 1);
        }
        Ok(stats)
    }

    async fn retry(&self, id: JobId) -> Result<()> {
        let now = self.clock.now();
        {
            let mut t = self.begin();
            let state = t.rows.get(&id).ok_or(Error::NotFound { id })?.state;
            if state != State::Dead {
                return Err(Error::InvalidState { id, state, operation: "retry" });
            }
            t.update(id, |job| {
                job.state = State::Pending;
                job.run_at = now;
                job.finished_at = None;
                job.lease = None;
                job.cancel_requested = None; // an operator's new start
                job.max_attempts = job.max_attempts.max(job.attempts + 1); // one more attempt
            });
            workflow::retried(&mut t, id);
        }
        self.wake();
        Ok(())
    }

    async fn cancel(&self, id: JobId) -> Result<()> {
        let now = self.clock.now();
        let mut t = self.begin();
        let state = t.rows.get(&id).ok_or(Error::NotFound { id })?.state;
        if !matches!(state, State::Waiting | State::Scheduled | State::Pending) {
            return Err(Error::InvalidState { id, state, operation: "cancel" });
        }
        t.update(id, |job| finish(job, State::Cancelled, now));
        if workflow::finished(&mut t, id, now) {
            drop(t);
            self.wake();
        }
        Ok(())
    }

    async fn purge(&self, state: State, older_than: Timestamp) -> Result<u64> {
        jq::storage::check_purge_state(state)?;
        let mut t = self.begin();
        let old = t.finished_before(state, older_than);
        for id in &old {
            t.remove(*id);
            t.graph.purged(*id);
        }
        Ok(old.len() as u64)
    }

    fn subscribe(&self) -> Option<WorkSignal> {
        Some(self.wake.subscribe())
    }

    fn clock(&self) -> Clock {
        self.clock.clone()
    }
    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities {
            roles: Some(self),
            periodic: Some(self),
            controls: Some(self),
            throughput: Some(self),
            cancellation: Some(self),
            workflows: Some(self),
            ..Capabilities::NONE
        }
    }
}

#[async_trait]
impl RoleStorage for IndexedStorage {
    async fn elect(&self, election: &Election) -> Result<bool> {
        election.check()?;
        let now = self.clock.now();
        let mut t = self.begin();
        let free = t.roles.get(&election.role).is_none_or(|(token, leader)| {
            // Renewing one's own role, or taking one whose holder stopped renewing.
            *token == election.token || leader.expires_at <= now
        });
        if free {
            let leader = Leader {
                role: election.role.clone(),
                holder: election.holder.clone(),
                expires_at: add(now, election.ttl),
            };
            t.roles.insert(election.role.clone(), (election.token, leader));
        }
        Ok(free)
    }

    async fn resign(&self, role: &str, token: LeaseToken) -> Result<()> {
        jq::storage::check_role(role)?;
        let mut t = self.begin();
        if t.roles.get(role).is_some_and(|(held, _)| *held == token) {
            t.roles.remove(role);
        }
        Ok(())
    }

    async fn leaders(&self) -> Result<Vec<Leader>> {
        Ok(self.begin().roles.values().map(|(_, leader)| leader.clone()).collect())
    }
}

#[async_trait]
impl PeriodicStorage for IndexedStorage {
    async fn fire(&self, fire: &Fire) -> Result<FireOutcome> {
        fire.check()?;
        jq::storage::refuse_keys(&fire.jobs)?;
        for job in &fire.jobs {
            job.check_payload(self.max_payload_bytes)?;
        }
        let now = self.clock.now();
        let (ids, stored) = {
            // The comparison, the row and the jobs in one "transaction".
            let mut t = self.begin();
            let before = t.periodic_jobs.get(&fire.name).cloned();
            if !fire.matches(before.as_ref()) {
                return Ok(FireOutcome::Moved);
            }
            let (ids, stored) = store(&mut t, fire.jobs.clone(), now);
            let row = fire.applied(before.as_ref(), now, &ids);
            t.periodic_jobs.insert(fire.name.clone(), row);
            (ids, stored)
        };
        if stored {
            self.wake();
        }
        Ok(FireOutcome::Fired(ids))
    }

    async fn periodic(&self) -> Result<Vec<PeriodicInfo>> {
        Ok(self.begin().periodic_jobs.values().cloned().collect())
    }

    async fn trigger(&self, name: &str) -> Result<()> {
        jq::periodic::check_name(name)?;
        let now = self.clock.now();
        let mut t = self.begin();
        let row = t.periodic_jobs.get_mut(name).ok_or_else(|| Error::PeriodicNotFound { name: name.to_owned() })?;
        row.triggered_at.get_or_insert(now); // requests coalesce
        Ok(())
    }
}

#[async_trait]
impl ControlStorage for IndexedStorage {
    async fn set_paused(&self, queue: &QueueName, paused: bool) -> Result<()> {
        let now = self.clock.now();
        {
            let mut t = self.begin();
            let control = t.control(queue);
            control.paused_at = if paused { control.paused_at.or(Some(now)) } else { None };
            t.tidy(queue);
        }
        if !paused {
            self.wake();
        }
        Ok(())
    }

    async fn set_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<()> {
        limits.check()?;
        {
            let mut t = self.begin();
            t.control(queue).limits = *limits;
            t.tidy(queue);
        }
        self.wake();
        Ok(())
    }

    async fn queues(&self) -> Result<Vec<QueueInfo>> {
        Ok(self.begin().queues(self.clock.now()))
    }
}

#[async_trait]
impl ThroughputStorage for IndexedStorage {
    async fn throughput(&self, since: Timestamp) -> Result<Vec<Throughput>> {
        Ok(Throughput::tally(self.begin().rows.values(), since))
    }
}

#[async_trait]
impl CancelStorage for IndexedStorage {
    async fn request_cancel(&self, id: JobId, reason: &str) -> Result<CancelAnswer> {
        let now = self.clock.now();
        let mut t = self.begin();
        let state = t.rows.get(&id).ok_or(Error::NotFound { id })?.state;
        Ok(match state {
            State::Waiting | State::Scheduled | State::Pending => {
                t.update(id, |job| finish(job, State::Cancelled, now));
                // Ended before it started, as `cancel` ends it: its
                // dependents follow by their policies.
                if workflow::finished(&mut t, id, now) {
                    drop(t);
                    self.wake();
                }
                CancelAnswer::Cancelled
            }
            State::Running => {
                let reason = jq::storage::cancel_reason(reason);
                t.update(id, |job| {
                    // a resend keeps the first request
                    job.cancel_requested.get_or_insert(CancelRequest { at: now, reason });
                });
                CancelAnswer::Requested
            }
            finished => CancelAnswer::Finished(finished),
        })
    }

    async fn progress(&self, reports: &[ProgressReport]) -> Result<Vec<JobId>> {
        for report in reports {
            jq::storage::check_progress(&report.value)?;
        }
        let mut t = self.begin();
        let mut lost = Vec::new();
        for report in reports {
            if t.holds(&report.lease) {
                t.update(report.lease.id, |job| job.progress = Some(report.value.clone()));
            } else {
                lost.push(report.lease.id);
            }
        }
        Ok(lost)
    }
}

/// To a terminal state, now.
fn finish(job: &mut Job, state: State, now: Timestamp) {
    job.state = state;
    job.finished_at = Some(now);
}

/// Back to waiting: Pending at once, or Scheduled after `delay`.
fn hand_back(job: &mut Job, now: Timestamp, delay: Duration) {
    job.run_at = add(now, delay);
    job.state = if delay.is_zero() { State::Pending } else { State::Scheduled };
}
