//! The smallest backend that keeps the contract: [`MinimalStorage`]
//! implements only the core [`Storage`] trait and declares no capability.
//! Copy this file to start a backend for a new database, replace the
//! `BTreeMap` behind a mutex with your tables, and run
//! `jq_testkit::conformance!(setup)` on it (`tests/minimal.rs`) until it
//! passes.
//!
//! Each operation below takes the lock once, does all its work without
//! awaiting, and lets go: that critical section stands for one transaction
//! (or one script) of your database, which is what makes every operation
//! one atomic step as other callers see it. It also means no lock is held
//! across an `.await`.
//!
//! Without capabilities, jq still runs everything about jobs: the client,
//! typed enqueue, worker pools (each maintains on its own: promote, recover
//! and purge are safe from many processes). Calls that need a capability
//! (`Client::pause`, a pool with a periodic job) fail with
//! [`Error::Unsupported`]; add one by implementing its trait and declaring
//! it in `Storage::capabilities` (`Capabilities { roles: Some(self), ..
//! Capabilities::NONE }`), as `IndexedStorage` in `lib.rs` does.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use jq::storage::{
    Beat, ClaimAnswer, ClaimRequest, Decision, Holder, LeaseRef, Outcome, Settled, Settlement, Storage, WorkSignal,
    add, async_trait, decide, storable_message,
};
use jq::{
    AttemptError, Clock, DEFAULT_MAX_PAYLOAD_BYTES, Error, Job, JobFilter, JobId, Lease, NewJob, Priority, Result,
    State, Stats, Timestamp,
};
use tokio::sync::watch;

/// The whole "database": every job by id. Ordered by id, so `list` pages
/// in id order and the first live holder of a unique key is the smallest.
type Jobs = BTreeMap<JobId, Job>;

/// An in-memory store implementing only the core [`Storage`]. Clones share
/// the store; so do the handles [`MinimalStorage::connect`] makes, each
/// with its own clock, as new connections to one database would.
#[derive(Clone, Debug)]
pub struct MinimalStorage {
    jobs: Arc<Mutex<Jobs>>,
    /// Bumped when work may have become claimable, so idle pools claim at
    /// once instead of at their next poll.
    wake: Arc<watch::Sender<u64>>,
    /// "Now" comes from here, never from the machine: tests move it.
    clock: Clock,
}

impl Default for MinimalStorage {
    fn default() -> Self {
        Self::new(Clock::system())
    }
}

impl MinimalStorage {
    /// An empty store taking "now" from `clock`.
    pub fn new(clock: Clock) -> Self {
        MinimalStorage { jobs: Arc::default(), wake: Arc::new(watch::Sender::new(0)), clock }
    }

    /// Another handle on the same store, with its own clock.
    pub fn connect(&self, clock: Clock) -> Self {
        MinimalStorage { clock, ..self.clone() }
    }

    /// Begins a "transaction". Every operation checks its input before it
    /// changes anything, so a lock poisoned by a panic elsewhere still
    /// guards consistent data and is safe to take.
    fn begin(&self) -> MutexGuard<'_, Jobs> {
        self.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Tells idle pools to claim. Called after the lock is released, as a
    /// database would notify after its commit.
    fn wake(&self) {
        self.wake.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// Claims take jobs by priority (high first), then `run_at`, then id.
fn claim_order(job: &Job) -> (Reverse<Priority>, Timestamp, JobId) {
    (Reverse(job.priority), job.run_at, job.id)
}

/// The fence on every write after a claim: the job, if it is still Running
/// under the very claim that presents `lease`. The worker name is never
/// checked (it is for operators), nor the expiry: until recover takes the
/// job, an expired lease still acks and heartbeats.
fn held<'a>(jobs: &'a mut Jobs, lease: &LeaseRef) -> Option<&'a mut Job> {
    jobs.get_mut(&lease.id).filter(|job| job.state == State::Running && job.token() == Some(lease.token))
}

/// Records a failed attempt. Messages come from handlers: a NUL becomes
/// U+FFFD, as on the backends that cannot store one.
fn record_error(job: &mut Job, now: Timestamp, message: &str) {
    let message = storable_message(message).into_owned();
    job.errors.push(AttemptError { attempt: job.attempts, at: now, message });
}

/// To a terminal state, now.
fn finish(job: &mut Job, state: State, now: Timestamp) {
    job.state = state;
    job.finished_at = Some(now);
}

/// Back to waiting: Pending at once, or Scheduled until `now + delay`.
fn hand_back(job: &mut Job, now: Timestamp, delay: Duration) {
    job.run_at = add(now, delay);
    job.state = if delay.is_zero() { State::Pending } else { State::Scheduled };
}

#[async_trait]
impl Storage for MinimalStorage {
    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        // Size and NUL checks on every job before any is stored: all or none.
        // A keyed job is refused: this backend does not keep per-key limits,
        // and storing the job without them would drop them silently.
        jq::storage::refuse_keys(&jobs)?;
        for job in &jobs {
            job.check_payload(DEFAULT_MAX_PAYLOAD_BYTES)?;
        }
        let now = self.clock.now();
        let mut ids = Vec::with_capacity(jobs.len());
        let mut stored = false;
        {
            let mut t = self.begin();
            for mut job in jobs {
                // Sent again after a lost answer: the stored job stays as it is.
                if t.contains_key(&job.id) {
                    ids.push(job.id);
                    continue;
                }
                // A unique rule (debounce, period, replace): jq's own
                // decision over every job of the key.
                if let (Some(key), Some(rule)) = (&job.unique_key, job.unique_rule) {
                    let holders: Vec<Holder> = (t.values())
                        .filter(|j| j.queue == job.queue && j.unique_key.as_ref() == Some(key))
                        .map(|j| Holder { id: j.id, state: j.state, created_at: j.created_at })
                        .collect();
                    match decide(rule, job.run_at, &holders, now) {
                        Decision::Answer(id) => {
                            ids.push(id);
                            continue;
                        }
                        Decision::Update { id, run_at } => {
                            if let Some(held) = t.get_mut(&id) {
                                held.payload = job.payload;
                                held.run_at = run_at;
                                held.state = if run_at <= now { State::Pending } else { State::Scheduled };
                            }
                            ids.push(id);
                            stored = true;
                            continue;
                        }
                        Decision::Store { run_at, .. } => {
                            job.run_at = run_at;
                            ids.push(job.id);
                            stored = true;
                            t.insert(job.id, job.stored_at(now));
                            continue;
                        }
                    }
                }
                // A live job of the queue holds the key (earlier in this
                // batch too, since each job is stored as we go): its id
                // answers. Ascending ids make it the smallest holder.
                let holder = job.unique_key.as_ref().and_then(|key| {
                    t.values()
                        .find(|j| !j.state.is_terminal() && j.queue == job.queue && j.unique_key.as_ref() == Some(key))
                        .map(|j| j.id)
                });
                if let Some(holder) = holder {
                    ids.push(holder);
                    continue;
                }
                ids.push(job.id);
                stored = true;
                t.insert(job.id, job.stored_at(now)); // Pending or Scheduled by its run_at
            }
        }
        if stored {
            self.wake();
        }
        Ok(ids)
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimAnswer> {
        request.check()?; // a worker name with a NUL is refused everywhere
        let now = self.clock.now();
        let mut t = self.begin();
        if request.resend {
            // The first attempt's answer was lost: hand over what it took,
            // in claim order, and take nothing more.
            let mut earlier: Vec<Job> =
                t.values().filter(|j| j.state == State::Running && j.token() == Some(request.token)).cloned().collect();
            if !earlier.is_empty() {
                earlier.sort_by_key(claim_order);
                return Ok(ClaimAnswer::jobs(earlier));
            }
        }
        // A real backend walks an index in claim order and stops at the
        // limit; a scan and a sort keep this one short.
        let mut due: Vec<&Job> = (t.values())
            .filter(|j| j.state == State::Pending || (j.state == State::Scheduled && j.run_at <= now))
            .filter(|j| request.queues.contains(&j.queue))
            .collect();
        due.sort_by_key(|j| claim_order(j));
        let picked: Vec<JobId> = due.into_iter().take(request.limit).map(|j| j.id).collect();
        let expires_at = add(now, request.lease);
        let mut claimed = Vec::with_capacity(picked.len());
        for id in picked {
            if let Some(job) = t.get_mut(&id) {
                job.state = State::Running;
                job.attempts += 1;
                // Every job of the claim carries its token: fencing is by id
                // and token together, and a resend finds them by it.
                job.lease = Some(Lease { token: request.token, worker: request.worker.clone(), expires_at });
                claimed.push(job.clone());
            }
        }
        // Without queue controls or keys no limit holds a job back: a
        // short claim drained its queues.
        Ok(ClaimAnswer::jobs(claimed))
    }

    async fn settle(&self, batch: Vec<Settlement>) -> Result<Vec<Settled>> {
        let now = self.clock.now();
        let mut results = Vec::with_capacity(batch.len());
        {
            let mut t = self.begin();
            // In order, each item fenced on its own: a later item on the
            // same job sees the earlier one's effect, and one stale token
            // fails only its own place.
            for Settlement { lease, outcome } in batch {
                // Results are the capability workflows, which this backend
                // does not declare: refused, nothing changed (the pool
                // never sends one here).
                if matches!(outcome, Outcome::AckWith { .. }) {
                    results.push(Err(jq::storage::unsupported(jq::storage::Capability::Workflows)));
                    continue;
                }
                let Some(job) = held(&mut t, &lease) else {
                    results.push(Err(Error::LeaseLost { id: lease.id }));
                    continue;
                };
                job.lease = None;
                match outcome {
                    // An AckWith was refused above and never gets here.
                    Outcome::Ack | Outcome::AckWith { .. } => finish(job, State::Completed, now),
                    Outcome::Nack { error, delay } => {
                        record_error(job, now, &error);
                        if job.attempts >= job.max_attempts {
                            finish(job, State::Dead, now);
                        } else {
                            hand_back(job, now, delay);
                        }
                    }
                    Outcome::Bury { error } => {
                        record_error(job, now, &error);
                        finish(job, State::Dead, now);
                    }
                    Outcome::Release { delay } => {
                        // Not a failure: the attempt is given back, no error kept.
                        job.attempts = job.attempts.saturating_sub(1);
                        hand_back(job, now, delay);
                    }
                    // Only sent after a heartbeat reported a cancel request,
                    // which a core-only backend never does; kept exact anyway.
                    Outcome::Cancel => finish(job, State::Cancelled, now),
                }
                results.push(Ok(job.state));
            }
        }
        if results.iter().any(|r| matches!(r, Ok(State::Pending | State::Scheduled))) {
            self.wake();
        }
        Ok(results)
    }

    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<Beat> {
        let expires_at = add(self.clock.now(), lease);
        let mut t = self.begin();
        let mut lost = Vec::new();
        for lease_ref in leases {
            match held(&mut t, lease_ref).and_then(|job| job.lease.as_mut()) {
                Some(current) => current.expires_at = expires_at,
                None => lost.push(lease_ref.id),
            }
        }
        // No cancellation capability: nothing to stop, only lost leases.
        Ok(Beat::lost(lost))
    }

    async fn promote(&self) -> Result<u64> {
        let now = self.clock.now();
        let mut moved = 0;
        for job in self.begin().values_mut().filter(|j| j.state == State::Scheduled && j.run_at <= now) {
            job.state = State::Pending;
            moved += 1;
        }
        if moved > 0 {
            self.wake();
        }
        Ok(moved)
    }

    async fn recover(&self) -> Result<u64> {
        let now = self.clock.now();
        let mut recovered = 0;
        {
            let mut t = self.begin();
            // Guarded on state and expiry in the same step, so a job a
            // concurrent ack just finished is never touched.
            let expired = |j: &Job| j.state == State::Running && j.lease.as_ref().is_some_and(|l| l.expires_at <= now);
            for job in t.values_mut().filter(|j| expired(j)) {
                let worker = job.lease.take().map(|l| l.worker).unwrap_or_default();
                // This exact text on every backend: the property suite compares it.
                record_error(job, now, &format!("lease expired (worker {worker} did not finish or heartbeat in time)"));
                if job.attempts >= job.max_attempts {
                    finish(job, State::Dead, now);
                } else {
                    hand_back(job, now, Duration::ZERO);
                }
                recovered += 1;
            }
        }
        if recovered > 0 {
            self.wake();
        }
        Ok(recovered)
    }

    async fn get(&self, id: JobId) -> Result<Job> {
        self.begin().get(&id).cloned().ok_or(Error::NotFound { id })
    }

    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        // Pages start after the last id of the previous one: ids order it.
        let after = filter.after.map_or(Bound::Unbounded, Bound::Excluded);
        let t = self.begin();
        let page = t.range((after, Bound::Unbounded)).map(|(_, job)| job).filter(|job| filter.matches(job));
        Ok(page.take(filter.page_size()).cloned().collect())
    }

    async fn stats(&self) -> Result<Stats> {
        let mut stats = Stats::default();
        for job in self.begin().values() {
            stats.queues.entry(job.queue.as_str().to_owned()).or_default().add(job.state, 1);
        }
        Ok(stats)
    }

    async fn retry(&self, id: JobId) -> Result<()> {
        let now = self.clock.now();
        {
            let mut t = self.begin();
            let job = t.get_mut(&id).ok_or(Error::NotFound { id })?;
            if job.state != State::Dead {
                return Err(Error::InvalidState { id, state: job.state, operation: "retry" });
            }
            // Errors are kept; the job gets one more attempt than it used.
            job.max_attempts = job.max_attempts.max(job.attempts.saturating_add(1));
            job.finished_at = None;
            job.lease = None;
            hand_back(job, now, Duration::ZERO);
        }
        self.wake();
        Ok(())
    }

    async fn cancel(&self, id: JobId) -> Result<()> {
        let now = self.clock.now();
        let mut t = self.begin();
        let job = t.get_mut(&id).ok_or(Error::NotFound { id })?;
        // A Running job belongs to its handler until it settles or its lease
        // expires: cancelling it would race the handler's ack.
        if !matches!(job.state, State::Scheduled | State::Pending) {
            return Err(Error::InvalidState { id, state: job.state, operation: "cancel" });
        }
        finish(job, State::Cancelled, now);
        Ok(())
    }

    async fn purge(&self, state: State, older_than: Timestamp) -> Result<u64> {
        jq::storage::check_purge_state(state)?;
        // A database deletes in bounded batches so no write holds locks for
        // long; in memory one pass is brief.
        let mut t = self.begin();
        let before = t.len();
        t.retain(|_, job| !(job.state == state && job.finished_at.is_some_and(|at| at < older_than)));
        Ok((before - t.len()) as u64)
    }

    fn subscribe(&self) -> Option<WorkSignal> {
        Some(self.wake.subscribe())
    }

    fn clock(&self) -> Clock {
        self.clock.clone()
    }

    // No `capabilities`: the default answers `Capabilities::NONE`, which is
    // what makes this backend core-only.
}
