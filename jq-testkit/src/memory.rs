//! [`MemoryStorage`]: the reference model every backend is compared with,
//! and an in-process test double for users' own tests.
//!
//! It keeps every rule of the contract (the repository's
//! `docs/CONTRACT.md`) in the plainest possible code: one `std::sync::Mutex`
//! around a map of jobs, each operation one critical section. When a backend
//! and this model disagree, the model is the one to read first.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use jq_core::periodic::{Fire, FireOutcome, PeriodicInfo};
use jq_core::storage::{
    Beat, CancelAnswer, CancelStorage, Capabilities, ClaimAnswer, ClaimRequest, ControlStorage, Election, Leader,
    LeaseRef, LeaseToken, Limited, Outcome, PeriodicStorage, ProgressReport, RoleStorage, Settled, Settlement, Storage,
    ThroughputStorage, WorkSignal,
};
use jq_core::storage::{Decision, Holder, add, decide, held_by, storable_message};
use jq_core::{
    AttemptError, CancelRequest, Clock, DEFAULT_MAX_PAYLOAD_BYTES, Error, Job, JobFilter, JobId, Lease, NewJob,
    QueueInfo, QueueLimits, QueueName, Result, Seen, State, Stats, Throughput, Timestamp,
};
use tokio::sync::watch;

use crate::Harness;

mod durable;
mod keys;
mod workflow;

/// State shared by every handle made with [`MemoryStorage::connect`].
#[derive(Debug)]
struct Shared {
    jobs: Mutex<BTreeMap<JobId, Job>>,
    /// role -> (token, leader); see [`RoleStorage::elect`].
    roles: Mutex<BTreeMap<String, (LeaseToken, Leader)>>,
    /// name -> row; see [`PeriodicStorage::fire`]. Locked before `jobs` when both are.
    periodic: Mutex<BTreeMap<String, PeriodicInfo>>,
    /// Queue controls; locked after `jobs` when both are needed.
    controls: Mutex<BTreeMap<QueueName, Control>>,
    /// Workflows: locked after `jobs` when both are.
    graph: Mutex<workflow::Graph>,
    /// Keyed jobs' limits and rotation cursors: locked after `jobs` and `controls`.
    keys: Mutex<keys::Keys>,
    /// Durable jobs' journals: locked after `jobs`.
    journals: Mutex<durable::Journals>,
    signal: watch::Sender<u64>,
}

/// One queue's control, with what enforcing it needs.
#[derive(Debug, Default)]
struct Control {
    paused_at: Option<Timestamp>,
    limits: QueueLimits,
    /// The instant of every start still in the rate window, oldest first.
    starts: VecDeque<Timestamp>,
    /// worker -> (latest claim that met the control, paused then).
    seen: BTreeMap<String, (Timestamp, bool)>,
}

impl Control {
    fn is_set(&self) -> bool {
        self.paused_at.is_some() || !self.limits.is_none()
    }
}

/// An in-memory [`Storage`]: the reference model of the contract and a test
/// double. Cheap to clone; clones share the jobs.
///
/// ```
/// use jq_core::storage::{Storage, StorageExt};
/// use jq_core::{ManualClock, NewJob, Payload};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let clock = ManualClock::starting_now();
/// let storage = jq_testkit::MemoryStorage::new().clock(clock.clock());
/// let job = NewJob::builder("hello", Payload::from_json("{}").unwrap()).build_at(clock.now()).unwrap();
/// let id = storage.enqueue_one(job).await.unwrap();
/// assert_eq!(storage.get(id).await.unwrap().state, jq_core::State::Pending);
/// # });
/// ```
#[derive(Clone, Debug)]
pub struct MemoryStorage {
    shared: Arc<Shared>,
    clock: Clock,
    max_payload_bytes: usize,
}

impl Default for MemoryStorage {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStorage {
    /// An empty store on the system clock with the default payload limit.
    pub fn new() -> Self {
        let (signal, _) = watch::channel(0);
        MemoryStorage {
            shared: Arc::new(Shared {
                jobs: Mutex::new(BTreeMap::new()),
                roles: Mutex::new(BTreeMap::new()),
                periodic: Mutex::new(BTreeMap::new()),
                controls: Mutex::new(BTreeMap::new()),
                graph: Mutex::new(workflow::Graph::default()),
                keys: Mutex::new(keys::Keys::default()),
                journals: Mutex::new(durable::Journals::default()),
                signal,
            }),
            clock: Clock::system(),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
        }
    }

    /// Takes "now" from `clock`.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Refuses payloads over `bytes` (default
    /// [`jq_core::DEFAULT_MAX_PAYLOAD_BYTES`]).
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = bytes;
        self
    }

    /// Another handle on the same jobs, with its own clock (a second
    /// "connection", a restarted worker).
    pub fn connect(&self, clock: Clock) -> Self {
        MemoryStorage { shared: self.shared.clone(), clock, max_payload_bytes: self.max_payload_bytes }
    }

    /// Every stored job, by ascending id (for assertions in tests).
    pub fn snapshot(&self) -> Vec<Job> {
        self.jobs().values().cloned().collect()
    }

    fn jobs(&self) -> MutexGuard<'_, BTreeMap<JobId, Job>> {
        // Every operation leaves the map consistent before anything that can
        // panic, so a poisoned lock still guards valid data.
        self.shared.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn roles(&self) -> MutexGuard<'_, BTreeMap<String, (LeaseToken, Leader)>> {
        self.shared.roles.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn periodic_rows(&self) -> MutexGuard<'_, BTreeMap<String, PeriodicInfo>> {
        self.shared.periodic.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn controls(&self) -> MutexGuard<'_, BTreeMap<QueueName, Control>> {
        self.shared.controls.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn graph(&self) -> MutexGuard<'_, workflow::Graph> {
        self.shared.graph.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn keys(&self) -> MutexGuard<'_, keys::Keys> {
        self.shared.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn journals(&self) -> MutexGuard<'_, durable::Journals> {
        self.shared.journals.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn bump(&self) {
        self.shared.signal.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// Stores `jobs` as [`Storage::enqueue`] does (the payloads already
/// checked): the ids, and how many were new or changed (a unique rule's
/// update).
fn insert(map: &mut BTreeMap<JobId, Job>, jobs: Vec<NewJob>, now: Timestamp) -> (Vec<JobId>, usize) {
    let mut ids = Vec::with_capacity(jobs.len());
    let mut stored = 0usize;
    for job in jobs {
        if let Some(existing) = map.get(&job.id) {
            // A re-sent job (a client retrying after a lost answer)
            // is not stored twice.
            ids.push(existing.id);
            continue;
        }
        let mut job = job;
        if let Some(key) = &job.unique_key {
            let holders = map.values().filter(|j| j.queue == job.queue && j.unique_key.as_ref() == Some(key));
            match job.unique_rule {
                None => {
                    if let Some(existing) = holders.clone().find(|j| !j.state.is_terminal()) {
                        ids.push(existing.id);
                        continue;
                    }
                }
                Some(rule) => {
                    // The contract's "Unique rules": every job of the key is
                    // a holder here (the decision filters what counts).
                    let holders: Vec<Holder> =
                        holders.map(|j| Holder { id: j.id, state: j.state, created_at: j.created_at }).collect();
                    match decide(rule, job.run_at, &holders, now) {
                        Decision::Answer(id) => {
                            ids.push(id);
                            continue;
                        }
                        Decision::Update { id, run_at } => {
                            if let Some(held) = map.get_mut(&id) {
                                held.payload = job.payload;
                                held.run_at = run_at;
                                held.state = if run_at <= now { State::Pending } else { State::Scheduled };
                            }
                            ids.push(id);
                            stored += 1;
                            continue;
                        }
                        Decision::Store { run_at, .. } => job.run_at = run_at,
                    }
                }
            }
        }
        ids.push(job.id);
        stored += 1;
        map.insert(job.id, job.stored_at(now));
    }
    (ids, stored)
}

fn claimable(job: &Job, now: Timestamp) -> bool {
    job.state == State::Pending || (job.state == State::Scheduled && job.run_at <= now)
}

/// Claim order: priority high to low, then run_at, then id.
fn claim_order(a: &Job, b: &Job) -> std::cmp::Ordering {
    b.priority.cmp(&a.priority).then(a.run_at.cmp(&b.run_at)).then(a.id.cmp(&b.id))
}

impl MemoryStorage {
    /// After a short claim (its jobs now Running, its starts logged): what
    /// held back the claimable jobs it left in the asked, unpaused queues,
    /// from the state the claim left. A queue whose own limits are full
    /// holds back all of its jobs; otherwise each keyed job left is held by
    /// its key's limits.
    fn held_back(
        &self,
        map: &BTreeMap<JobId, Job>,
        controls: &BTreeMap<QueueName, Control>,
        request: &ClaimRequest,
        now: Timestamp,
    ) -> Option<Limited> {
        let keys = self.keys();
        let mut limited = None;
        let asked: BTreeSet<&QueueName> = request.queues.iter().collect();
        for queue in asked {
            let control = controls.get(queue).filter(|c| c.is_set());
            if control.is_some_and(|c| c.paused_at.is_some()) {
                continue;
            }
            let left: Vec<&Job> = map.values().filter(|j| j.queue == *queue && claimable(j, now)).collect();
            if left.is_empty() {
                continue;
            }
            if let Some(control) = control {
                let running = map.values().filter(|j| j.state == State::Running && j.queue == *queue).count();
                let held = held_by(
                    &control.limits,
                    running as u64,
                    control.starts.len() as u64,
                    control.starts.front().copied(),
                );
                if held.is_some() {
                    limited = Limited::merge(limited, held);
                    continue;
                }
            }
            for job in left {
                if let Some(key) = &job.key {
                    limited = Limited::merge(limited, keys.held(map, queue, key, now));
                }
            }
        }
        limited
    }
}

/// The message recover records; the same text in every backend.
pub fn lease_expired_message(worker: &str) -> String {
    format!("lease expired (worker {worker} did not finish or heartbeat in time)")
}

#[async_trait]
impl Storage for MemoryStorage {
    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        for job in &jobs {
            job.check_payload(self.max_payload_bytes)?;
        }
        let now = self.clock.now();
        let (ids, stored) = insert(&mut self.jobs(), jobs, now);
        if stored > 0 {
            self.bump();
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
        let mut map = self.jobs();
        // The reference looks for an earlier attempt of the same claim even
        // when `resend` is false: a fresh token finds nothing.
        let mut earlier: Vec<Job> =
            map.values().filter(|j| j.state == State::Running && j.token() == Some(request.token)).cloned().collect();
        if !earlier.is_empty() {
            earlier.sort_by(claim_order);
            return Ok(ClaimAnswer::jobs(earlier));
        }
        // Each asked queue's allowance under its control, decided under the
        // same locks as the claim: the claim's atomic step.
        let mut controls = self.controls();
        let mut allowed: BTreeMap<&QueueName, usize> = BTreeMap::new();
        for queue in &request.queues {
            let allow = match controls.get_mut(queue).filter(|c| c.is_set()) {
                None => request.limit,
                Some(control) => {
                    control.seen.insert(request.worker.clone(), (now, control.paused_at.is_some()));
                    let forgotten = jq_core::storage::seen_forgotten_at(now);
                    control.seen.retain(|_, (at, _)| *at > forgotten);
                    let running = map.values().filter(|j| j.state == State::Running && j.queue == *queue).count();
                    let started = match control.limits.rate {
                        Some(rate) => {
                            let after = rate.window_after(now);
                            control.starts.retain(|s| *s > after);
                            control.starts.len()
                        }
                        None => 0,
                    };
                    let paused = control.paused_at.is_some();
                    jq_core::storage::allowance(paused, &control.limits, running as u64, started as u64, request.limit)
                }
            };
            allowed.insert(queue, allow);
        }
        let mut candidates: Vec<&Job> =
            map.values().filter(|j| claimable(j, now) && allowed.get(&j.queue).is_some_and(|n| *n > 0)).collect();
        let mut picked: Vec<JobId> = Vec::new();
        if candidates.iter().any(|j| j.key.is_some()) {
            // Keyed jobs: their limits, the rotations, and the merge with
            // the plain jobs (the contract's "Keyed jobs").
            let taken = self.keys().pick(&map, candidates, &mut allowed, request.limit, now);
            for job in taken {
                picked.push(job.id);
                if let Some(control) = controls.get_mut(&job.queue).filter(|c| c.limits.rate.is_some()) {
                    control.starts.push_back(now);
                }
            }
            candidates = Vec::new();
        }
        candidates.sort_by(|a, b| claim_order(a, b));
        for job in candidates {
            if picked.len() == request.limit {
                break;
            }
            if let Some(left) = allowed.get_mut(&job.queue).filter(|n| **n > 0) {
                *left -= 1;
                picked.push(job.id);
                if let Some(control) = controls.get_mut(&job.queue).filter(|c| c.limits.rate.is_some()) {
                    control.starts.push_back(now);
                }
            }
        }
        let mut claimed = Vec::with_capacity(picked.len());
        for id in picked {
            if let Some(job) = map.get_mut(&id) {
                job.state = State::Running;
                job.attempts += 1;
                job.lease = Some(Lease { token: request.token, worker: request.worker.clone(), expires_at });
                claimed.push(job.clone());
            }
        }
        let limited = if claimed.len() < request.limit { self.held_back(&map, &controls, request, now) } else { None };
        Ok(ClaimAnswer { jobs: claimed, limited })
    }

    async fn settle(&self, batch: Vec<Settlement>) -> Result<Vec<Settled>> {
        let now = self.clock.now();
        let mut results = Vec::with_capacity(batch.len());
        let mut handed_back = false;
        {
            let mut map = self.jobs();
            let mut graph = self.graph();
            for Settlement { lease, outcome } in batch {
                let job = match map.get_mut(&lease.id) {
                    Some(job) if job.state == State::Running && job.token() == Some(lease.token) => job,
                    _ => {
                        results.push(Err(Error::LeaseLost { id: lease.id }));
                        continue;
                    }
                };
                job.lease = None;
                match outcome {
                    Outcome::Ack => {
                        job.state = State::Completed;
                        job.finished_at = Some(now);
                    }
                    Outcome::AckWith { result } => {
                        job.state = State::Completed;
                        job.finished_at = Some(now);
                        graph.set_result(lease.id, result);
                    }
                    Outcome::Nack { error, delay } => {
                        let message = storable_message(&error).into_owned();
                        job.errors.push(AttemptError { attempt: job.attempts, at: now, message });
                        if job.attempts >= job.max_attempts {
                            job.state = State::Dead;
                            job.finished_at = Some(now);
                        } else {
                            job.run_at = add(now, delay);
                            job.state = if delay.is_zero() { State::Pending } else { State::Scheduled };
                            handed_back = true;
                        }
                    }
                    Outcome::Bury { error } => {
                        let message = storable_message(&error).into_owned();
                        job.errors.push(AttemptError { attempt: job.attempts, at: now, message });
                        job.state = State::Dead;
                        job.finished_at = Some(now);
                    }
                    Outcome::Release { delay } => {
                        job.attempts = job.attempts.saturating_sub(1);
                        job.run_at = add(now, delay);
                        job.state = if delay.is_zero() { State::Pending } else { State::Scheduled };
                        handed_back = true;
                    }
                    Outcome::Cancel => {
                        job.state = State::Cancelled;
                        job.finished_at = Some(now);
                    }
                }
                let state = job.state;
                if state.is_terminal() && graph.has_children(lease.id) {
                    handed_back |= graph.finished(&mut map, lease.id, now);
                }
                results.push(Ok(state));
            }
        }
        if handed_back {
            self.bump();
        }
        Ok(results)
    }

    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<Beat> {
        let expires_at = add(self.clock.now(), lease);
        let mut map = self.jobs();
        let mut beat = Beat::default();
        for l in leases {
            match map.get_mut(&l.id) {
                Some(job) if job.state == State::Running && job.token() == Some(l.token) => {
                    if let Some(held) = job.lease.as_mut() {
                        held.expires_at = expires_at;
                    }
                    if job.cancel_requested.is_some() {
                        beat.cancel.push(l.id);
                    }
                }
                _ => beat.lost.push(l.id),
            }
        }
        Ok(beat)
    }

    async fn promote(&self) -> Result<u64> {
        let now = self.clock.now();
        let mut moved = 0;
        {
            let mut map = self.jobs();
            for job in map.values_mut().filter(|j| j.state == State::Scheduled && j.run_at <= now) {
                job.state = State::Pending;
                moved += 1;
            }
        }
        if moved > 0 {
            self.bump();
        }
        Ok(moved)
    }

    async fn recover(&self) -> Result<u64> {
        let now = self.clock.now();
        let mut recovered = 0;
        {
            let mut map = self.jobs();
            let mut dead = Vec::new();
            for job in map.values_mut() {
                let Some(lease) = job.lease.as_ref().filter(|l| job.state == State::Running && l.expires_at <= now)
                else {
                    continue;
                };
                let message = lease_expired_message(&lease.worker);
                job.lease = None;
                recovered += 1;
                if job.cancel_requested.is_some() {
                    // Its worker died (or was cut off) while cancelling:
                    // the cancel wins over another attempt.
                    job.state = State::Cancelled;
                    job.finished_at = Some(now);
                    continue;
                }
                job.errors.push(AttemptError { attempt: job.attempts, at: now, message });
                if job.attempts >= job.max_attempts {
                    job.state = State::Dead;
                    job.finished_at = Some(now);
                    dead.push(job.id);
                } else {
                    job.state = State::Pending;
                    job.run_at = now;
                }
            }
            let mut graph = self.graph();
            for id in dead {
                graph.finished(&mut map, id, now);
            }
        }
        if recovered > 0 {
            self.bump();
        }
        Ok(recovered)
    }

    async fn get(&self, id: JobId) -> Result<Job> {
        self.jobs().get(&id).cloned().ok_or(Error::NotFound { id })
    }

    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        let map = self.jobs();
        let start = match filter.after {
            Some(after) => std::ops::Bound::Excluded(after),
            None => std::ops::Bound::Unbounded,
        };
        Ok(map
            .range((start, std::ops::Bound::Unbounded))
            .map(|(_, j)| j)
            .filter(|j| filter.matches(j))
            .take(filter.page_size())
            .cloned()
            .collect())
    }

    async fn stats(&self) -> Result<Stats> {
        let map = self.jobs();
        let mut stats = Stats::default();
        for job in map.values() {
            stats.queues.entry(job.queue.as_str().to_owned()).or_default().add(job.state, 1);
        }
        Ok(stats)
    }

    async fn retry(&self, id: JobId) -> Result<()> {
        let now = self.clock.now();
        {
            let mut map = self.jobs();
            let job = map.get_mut(&id).ok_or(Error::NotFound { id })?;
            if job.state != State::Dead {
                return Err(Error::InvalidState { id, state: job.state, operation: "retry" });
            }
            job.state = State::Pending;
            job.run_at = now;
            job.finished_at = None;
            job.lease = None;
            job.cancel_requested = None;
            job.max_attempts = job.max_attempts.max(job.attempts + 1);
            self.graph().retried(&mut map, id);
        }
        self.bump();
        Ok(())
    }

    async fn cancel(&self, id: JobId) -> Result<()> {
        let now = self.clock.now();
        let woke = {
            let mut map = self.jobs();
            let job = map.get_mut(&id).ok_or(Error::NotFound { id })?;
            if !matches!(job.state, State::Waiting | State::Scheduled | State::Pending) {
                return Err(Error::InvalidState { id, state: job.state, operation: "cancel" });
            }
            job.state = State::Cancelled;
            job.finished_at = Some(now);
            self.graph().finished(&mut map, id, now)
        };
        if woke {
            self.bump();
        }
        Ok(())
    }

    async fn purge(&self, state: State, older_than: Timestamp) -> Result<u64> {
        jq_core::storage::check_purge_state(state)?;
        let mut map = self.jobs();
        let mut graph = self.graph();
        let mut journals = self.journals();
        let before = map.len();
        map.retain(|id, j| {
            let purge = j.state == state && j.finished_at.is_some_and(|f| f < older_than);
            if purge {
                graph.purged(*id);
                journals.purged(*id);
            }
            !purge
        });
        Ok((before - map.len()) as u64)
    }

    fn subscribe(&self) -> Option<WorkSignal> {
        Some(self.shared.signal.subscribe())
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
            keys: Some(self),
            durable: Some(self),
        }
    }
}

#[async_trait]
impl CancelStorage for MemoryStorage {
    async fn request_cancel(&self, id: JobId, reason: &str) -> Result<CancelAnswer> {
        let now = self.clock.now();
        let (answer, woke) = {
            let mut map = self.jobs();
            let job = map.get_mut(&id).ok_or(Error::NotFound { id })?;
            match job.state {
                State::Waiting | State::Scheduled | State::Pending => {
                    job.state = State::Cancelled;
                    job.finished_at = Some(now);
                    // Like any other end of a parent: its children are
                    // cancelled, or released under run_anyway.
                    (CancelAnswer::Cancelled, self.graph().finished(&mut map, id, now))
                }
                State::Running => {
                    if job.cancel_requested.is_none() {
                        job.cancel_requested =
                            Some(CancelRequest { at: now, reason: jq_core::storage::cancel_reason(reason) });
                    }
                    (CancelAnswer::Requested, false)
                }
                finished => (CancelAnswer::Finished(finished), false),
            }
        };
        if woke {
            self.bump();
        }
        Ok(answer)
    }

    async fn progress(&self, reports: &[ProgressReport]) -> Result<Vec<JobId>> {
        for report in reports {
            jq_core::storage::check_progress(&report.value)?;
        }
        let mut map = self.jobs();
        let mut lost = Vec::new();
        for report in reports {
            match map.get_mut(&report.lease.id) {
                Some(job) if job.state == State::Running && job.token() == Some(report.lease.token) => {
                    job.progress = Some(report.value.clone());
                }
                _ => lost.push(report.lease.id),
            }
        }
        Ok(lost)
    }
}

#[async_trait]
impl RoleStorage for MemoryStorage {
    async fn elect(&self, election: &Election) -> Result<bool> {
        election.check()?;
        let now = self.clock.now();
        let mut roles = self.roles();
        let free = match roles.get(&election.role) {
            None => true,
            Some((token, leader)) => *token == election.token || leader.expires_at <= now,
        };
        if free {
            let leader = Leader {
                role: election.role.clone(),
                holder: election.holder.clone(),
                expires_at: add(now, election.ttl),
            };
            roles.insert(election.role.clone(), (election.token, leader));
        }
        Ok(free)
    }

    async fn resign(&self, role: &str, token: LeaseToken) -> Result<()> {
        jq_core::storage::check_role(role)?;
        let mut roles = self.roles();
        if roles.get(role).is_some_and(|(held, _)| *held == token) {
            roles.remove(role);
        }
        Ok(())
    }

    async fn leaders(&self) -> Result<Vec<Leader>> {
        Ok(self.roles().values().map(|(_, leader)| leader.clone()).collect())
    }
}

#[async_trait]
impl PeriodicStorage for MemoryStorage {
    async fn fire(&self, fire: &Fire) -> Result<FireOutcome> {
        fire.check()?;
        for job in &fire.jobs {
            job.check_payload(self.max_payload_bytes)?;
        }
        let now = self.clock.now();
        let (ids, stored) = {
            let mut rows = self.periodic_rows();
            let before = rows.get(&fire.name);
            if !fire.matches(before) {
                return Ok(FireOutcome::Moved);
            }
            let (ids, stored) = insert(&mut self.jobs(), fire.jobs.clone(), now);
            let row = fire.applied(before, now, &ids);
            rows.insert(fire.name.clone(), row);
            (ids, stored)
        };
        if stored > 0 {
            self.bump();
        }
        Ok(FireOutcome::Fired(ids))
    }

    async fn periodic(&self) -> Result<Vec<PeriodicInfo>> {
        Ok(self.periodic_rows().values().cloned().collect())
    }

    async fn trigger(&self, name: &str) -> Result<()> {
        jq_core::periodic::check_name(name)?;
        let now = self.clock.now();
        let mut rows = self.periodic_rows();
        let row = rows.get_mut(name).ok_or_else(|| Error::PeriodicNotFound { name: name.to_owned() })?;
        row.triggered_at.get_or_insert(now);
        Ok(())
    }
}

#[async_trait]
impl ControlStorage for MemoryStorage {
    async fn set_paused(&self, queue: &QueueName, paused: bool) -> Result<()> {
        let now = self.clock.now();
        {
            let mut controls = self.controls();
            let control = controls.entry(queue.clone()).or_default();
            control.paused_at = if paused { control.paused_at.or(Some(now)) } else { None };
        }
        if !paused {
            self.bump();
        }
        Ok(())
    }

    async fn set_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<()> {
        limits.check()?;
        {
            let mut controls = self.controls();
            let control = controls.entry(queue.clone()).or_default();
            control.limits = *limits;
        }
        // Raised or lifted limits may make jobs claimable.
        self.bump();
        Ok(())
    }

    async fn queues(&self) -> Result<Vec<QueueInfo>> {
        let forgotten = jq_core::storage::seen_forgotten_at(self.clock.now());
        let names: BTreeSet<QueueName> = self.jobs().values().map(|j| j.queue.clone()).collect();
        let controls = self.controls();
        let names = names.into_iter().chain(controls.iter().filter(|(_, c)| c.is_set()).map(|(q, _)| q.clone()));
        let names: BTreeSet<QueueName> = names.collect();
        Ok(names
            .into_iter()
            .map(|queue| {
                let control = controls.get(&queue);
                QueueInfo {
                    paused_at: control.and_then(|c| c.paused_at),
                    limits: control.map(|c| c.limits).unwrap_or_default(),
                    seen: control
                        .map(|c| {
                            c.seen
                                .iter()
                                .filter(|(_, (at, _))| *at > forgotten)
                                .map(|(worker, (at, paused))| Seen { worker: worker.clone(), at: *at, paused: *paused })
                                .collect()
                        })
                        .unwrap_or_default(),
                    queue,
                }
            })
            .collect())
    }
}

#[async_trait]
impl ThroughputStorage for MemoryStorage {
    async fn throughput(&self, since: Timestamp) -> Result<Vec<Throughput>> {
        Ok(Throughput::tally(self.jobs().values(), since))
    }
}

/// The [`Harness`] of [`MemoryStorage`]: every `connect` shares one store.
#[derive(Clone, Debug, Default)]
pub struct MemoryHarness {
    storage: MemoryStorage,
}

impl MemoryHarness {
    /// A harness on a new, empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The shared store (for assertions that bypass the trait).
    pub fn storage(&self) -> &MemoryStorage {
        &self.storage
    }
}

#[async_trait]
impl Harness for MemoryHarness {
    type Storage = MemoryStorage;

    async fn connect(&self, clock: Clock) -> MemoryStorage {
        self.storage.connect(clock)
    }

    async fn cleanup(&self) {
        self.storage.jobs().clear();
        self.storage.roles().clear();
        self.storage.periodic_rows().clear();
        self.storage.controls().clear();
        self.storage.graph().clear();
        self.storage.keys().clear();
        self.storage.journals().clear();
    }
}

#[cfg(test)]
mod tests {
    use jq_core::storage::StorageExt;
    use jq_core::{ManualClock, NewJob, Payload};

    use super::*;

    fn job(clock: &ManualClock) -> NewJob {
        NewJob::builder("k", Payload::from_json("{}").expect("JSON")).queue("q").build_at(clock.now()).expect("job")
    }

    #[tokio::test]
    async fn subscribe_signals_new_work_across_handles() {
        let clock = ManualClock::starting_now();
        let storage = MemoryStorage::new().clock(clock.clock());
        let other = storage.connect(clock.clock());
        let mut signal = other.subscribe().expect("memory storage signals");
        let seen = *signal.borrow_and_update();

        storage.enqueue_one(job(&clock)).await.expect("enqueue");
        assert!(signal.has_changed().expect("sender alive"), "enqueue signals");
        signal.borrow_and_update();

        let request =
            ClaimRequest::new(vec![jq_core::QueueName::new("q").expect("queue")], 1, Duration::from_secs(1), "w");
        let claimed = storage.claim(&request).await.expect("claim").jobs;
        assert!(!signal.has_changed().expect("sender alive"), "a claim is no new work");
        storage.release(claimed[0].lease_ref().expect("lease")).await.expect("release");
        assert!(signal.has_changed().expect("sender alive"), "release signals");
        assert_ne!(*signal.borrow_and_update(), seen);

        let request = ClaimRequest { token: LeaseToken::new(), ..request };
        let claimed = storage.claim(&request).await.expect("claim").jobs;
        clock.advance(Duration::from_secs(1));
        assert!(!signal.has_changed().expect("sender alive"));
        assert_eq!(storage.recover().await.expect("recover"), 1);
        assert!(signal.has_changed().expect("sender alive"), "recover signals");
        assert_eq!(claimed.len(), 1);
    }

    #[tokio::test]
    async fn payload_limit_is_configurable() {
        let clock = ManualClock::starting_now();
        let storage = MemoryStorage::new().clock(clock.clock()).max_payload_bytes(1);
        let err = storage.enqueue_one(job(&clock)).await.expect_err("2 bytes over a 1-byte limit");
        assert!(matches!(err, Error::PayloadTooLarge { size: 2, limit: 1 }), "{err:?}");
        assert!(storage.snapshot().is_empty());
    }
}
