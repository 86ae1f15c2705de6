//! The tables: the rows, and the indexes that let every operation find its
//! jobs without scanning them all. A row changes only through
//! [`Tables::insert`], [`Tables::update`] and [`Tables::remove`], which keep
//! every index in step with it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use jq::periodic::PeriodicInfo;
use jq::storage::{Leader, LeaseRef, LeaseToken};
use jq::{Job, JobId, Priority, QueueInfo, QueueLimits, QueueName, Seen, State, Timestamp};

/// A waiting job's place in its queue: claim order (priority high to low,
/// then run_at, then id) is the key's order.
type WaitKey = (Reverse<Priority>, Timestamp, JobId);

/// One store: rows by id, and indexes.
#[derive(Debug, Default)]
pub(crate) struct Tables {
    /// Every job, by id (ids are time-ordered: `list` pages by id).
    pub(crate) rows: BTreeMap<JobId, Job>,
    /// Pending and Scheduled jobs of each queue, in claim order.
    waiting: HashMap<QueueName, BTreeSet<WaitKey>>,
    /// Scheduled jobs by run_at, for promote.
    scheduled: BTreeSet<(Timestamp, JobId)>,
    /// Running jobs by lease expiry, for recover.
    running: BTreeSet<(Timestamp, JobId)>,
    /// Finished jobs by state and finish time, for purge.
    finished: BTreeSet<(State, Timestamp, JobId)>,
    /// The live (not terminal) jobs holding each (queue, unique key). Usually
    /// one; an operator's retry of a Dead job can make two.
    unique: HashMap<(QueueName, String), BTreeSet<JobId>>,
    /// Named roles (`RoleStorage::elect`): role -> the holder's token and lease.
    pub(crate) roles: BTreeMap<String, (LeaseToken, Leader)>,
    /// Recurring periodic jobs (`PeriodicStorage::fire`): name -> row with its cursor.
    pub(crate) periodic_jobs: BTreeMap<String, PeriodicInfo>,
    /// Running jobs per queue: the concurrency slots their leases hold.
    running_per_queue: HashMap<QueueName, usize>,
    /// Queue controls (`ControlStorage::set_paused`, `set_limits`): a table keyed
    /// by queue, which a claim reads by key for each asked queue.
    pub(crate) controls: BTreeMap<QueueName, Control>,
    /// Workflows: edges, nodes and results (`workflow.rs`).
    pub(crate) graph: crate::workflow::Graph,
}

/// One queue's control, and what enforcing it needs.
#[derive(Debug, Default)]
pub(crate) struct Control {
    pub(crate) paused_at: Option<Timestamp>,
    pub(crate) limits: QueueLimits,
    /// Start instants still in the rate window, oldest first (a table of
    /// starts indexed by (queue, at) in a database).
    starts: VecDeque<Timestamp>,
    /// worker -> its latest claim that met the control, paused then.
    seen: BTreeMap<String, (Timestamp, bool)>,
}

impl Tables {
    /// Stores a new row.
    pub(crate) fn insert(&mut self, job: Job) {
        self.index(&job);
        self.rows.insert(job.id, job);
    }

    /// Deletes a row.
    pub(crate) fn remove(&mut self, id: JobId) {
        if let Some(job) = self.rows.remove(&id) {
            self.unindex(&job);
        }
    }

    /// Applies `change` to a row and re-indexes it; the changed row, or
    /// `None` for an unknown id.
    pub(crate) fn update(&mut self, id: JobId, change: impl FnOnce(&mut Job)) -> Option<&Job> {
        let mut job = self.rows.remove(&id)?;
        self.unindex(&job);
        change(&mut job);
        self.index(&job);
        Some(self.rows.entry(id).or_insert(job))
    }

    /// True when `lease` is the current lease of a Running job: the fence
    /// every change after a claim passes.
    pub(crate) fn holds(&self, lease: &LeaseRef) -> bool {
        self.rows.get(&lease.id).is_some_and(|job| job.state == State::Running && job.token() == Some(lease.token))
    }

    /// The Running jobs whose lease has `token` (one claim's jobs), in
    /// claim order.
    pub(crate) fn held_by(&self, token: LeaseToken) -> Vec<Job> {
        let mut held: Vec<&Job> = (self.running.iter())
            .filter_map(|(_, id)| self.rows.get(id))
            .filter(|job| job.token() == Some(token))
            .collect();
        held.sort_by_key(|job| (Reverse(job.priority), job.run_at, job.id));
        held.into_iter().cloned().collect()
    }

    /// The smallest id of the live jobs of `queue` holding `key`.
    pub(crate) fn live_holder(&self, queue: &QueueName, key: &str) -> Option<JobId> {
        self.unique.get(&(queue.clone(), key.to_owned()))?.first().copied()
    }

    /// How many jobs a claim of `want` by `worker` may take from `queue`
    /// under its control (all of them without one), recording that the
    /// worker met the control.
    pub(crate) fn allowance(&mut self, queue: &QueueName, worker: &str, want: usize, now: Timestamp) -> usize {
        let running = self.running_per_queue.get(queue).copied().unwrap_or(0) as u64;
        let Some(control) = self.controls.get_mut(queue) else { return want };
        let paused = control.paused_at.is_some();
        control.seen.insert(worker.to_owned(), (now, paused));
        // Pools long gone must not pile up: forget a day-old entry.
        let forgotten = jq::storage::seen_forgotten_at(now);
        control.seen.retain(|_, (at, _)| *at > forgotten);
        if let Some(rate) = control.limits.rate {
            let after = rate.window_after(now);
            while control.starts.front().is_some_and(|s| *s <= after) {
                control.starts.pop_front();
            }
        }
        jq::storage::allowance(paused, &control.limits, running, control.starts.len() as u64, want)
    }

    /// After a short claim: what `queue`'s own limits hold back, when it
    /// still has a claimable job at `now` (`None` without a control, while
    /// paused, or when they allow one more start). The contract's
    /// "limited" answer: the pool claims again sooner than its poll.
    pub(crate) fn held_back(&self, queue: &QueueName, now: Timestamp) -> Option<jq::storage::Limited> {
        let control = self.controls.get(queue).filter(|c| c.paused_at.is_none())?;
        let running = self.running_per_queue.get(queue).copied().unwrap_or(0) as u64;
        let held = jq::storage::held_by(
            &control.limits,
            running,
            control.starts.len() as u64,
            control.starts.front().copied(),
        )?;
        let left = self.waiting.get(queue).is_some_and(|waiting| {
            waiting.iter().any(|(_, run_at, id)| {
                *run_at <= now || self.rows.get(id).is_some_and(|job| job.state == State::Pending)
            })
        });
        left.then_some(held)
    }

    /// Records a start of a job of `queue` at `now` for its rate limit.
    pub(crate) fn started(&mut self, queue: &QueueName, now: Timestamp) {
        if let Some(control) = self.controls.get_mut(queue).filter(|c| c.limits.rate.is_some()) {
            control.starts.push_back(now);
        }
    }

    /// The control of `queue`, made when missing; dropped again by
    /// [`Tables::tidy`] once nothing is set.
    pub(crate) fn control(&mut self, queue: &QueueName) -> &mut Control {
        self.controls.entry(queue.clone()).or_default()
    }

    /// Forgets `queue`'s control when neither a pause nor a limit is set.
    pub(crate) fn tidy(&mut self, queue: &QueueName) {
        if self.controls.get(queue).is_some_and(|c| c.paused_at.is_none() && c.limits.is_none()) {
            self.controls.remove(queue);
        }
    }

    /// Every queue with a job or a control, by name, at `now`. Who met a
    /// control is kept while the control is, for [`jq::storage::SEEN_TTL`].
    pub(crate) fn queues(&self, now: Timestamp) -> Vec<QueueInfo> {
        let forgotten = jq::storage::seen_forgotten_at(now);
        let mut names: BTreeSet<&QueueName> = self.rows.values().map(|j| &j.queue).collect();
        names.extend(self.controls.keys());
        names
            .into_iter()
            .map(|queue| {
                let control = self.controls.get(queue);
                QueueInfo {
                    queue: queue.clone(),
                    paused_at: control.and_then(|c| c.paused_at),
                    limits: control.map(|c| c.limits).unwrap_or_default(),
                    seen: control
                        .map(|c| {
                            let seen = c.seen.iter().filter(|(_, (at, _))| *at > forgotten);
                            seen.map(|(w, (at, paused))| Seen { worker: w.clone(), at: *at, paused: *paused }).collect()
                        })
                        .unwrap_or_default(),
                }
            })
            .collect()
    }

    /// Up to `limit` claimable jobs (Pending, or Scheduled and due) of
    /// `queues`, each queue giving at most its allowance, in claim order
    /// across the queues.
    pub(crate) fn claimable(&self, queues: &[(QueueName, usize)], limit: usize, now: Timestamp) -> Vec<JobId> {
        let queues: BTreeMap<&QueueName, usize> = queues.iter().map(|(q, n)| (q, *n)).collect();
        let mut picked: Vec<WaitKey> = Vec::new();
        for (queue, allowed) in queues {
            let Some(waiting) = self.waiting.get(queue) else { continue };
            // Each queue's first claimable jobs, up to its allowance, are
            // the only candidates.
            let claimable = waiting.iter().filter(|(_, run_at, id)| {
                *run_at <= now || self.rows.get(id).is_some_and(|job| job.state == State::Pending)
            });
            picked.extend(claimable.take(limit.min(allowed)).copied());
        }
        picked.sort_unstable();
        picked.into_iter().take(limit).map(|(_, _, id)| id).collect()
    }

    /// Scheduled jobs whose run_at has come.
    pub(crate) fn due(&self, now: Timestamp) -> Vec<JobId> {
        self.scheduled.iter().take_while(|(run_at, _)| *run_at <= now).map(|(_, id)| *id).collect()
    }

    /// Running jobs whose lease has expired.
    pub(crate) fn expired(&self, now: Timestamp) -> Vec<JobId> {
        self.running.iter().take_while(|(expires_at, _)| *expires_at <= now).map(|(_, id)| *id).collect()
    }

    /// Jobs in `state` that finished before `older_than`.
    pub(crate) fn finished_before(&self, state: State, older_than: Timestamp) -> Vec<JobId> {
        self.finished
            .iter()
            .skip_while(|(s, _, _)| *s < state)
            .take_while(|(s, finished_at, _)| *s == state && *finished_at < older_than)
            .map(|(_, _, id)| *id)
            .collect()
    }

    fn index(&mut self, job: &Job) {
        match job.state {
            State::Scheduled | State::Pending => {
                let key = (Reverse(job.priority), job.run_at, job.id);
                self.waiting.entry(job.queue.clone()).or_default().insert(key);
                if job.state == State::Scheduled {
                    self.scheduled.insert((job.run_at, job.id));
                }
            }
            State::Running => {
                if let Some(lease) = &job.lease {
                    self.running.insert((lease.expires_at, job.id));
                }
                *self.running_per_queue.entry(job.queue.clone()).or_default() += 1;
            }
            // Found through its parents' edges, never by a scan.
            State::Waiting => {}
            State::Completed | State::Dead | State::Cancelled => {
                if let Some(finished_at) = job.finished_at {
                    self.finished.insert((job.state, finished_at, job.id));
                }
            }
        }
        if let Some(key) = job.unique_key.as_ref().filter(|_| !job.state.is_terminal()) {
            self.unique.entry((job.queue.clone(), key.clone())).or_default().insert(job.id);
        }
    }

    fn unindex(&mut self, job: &Job) {
        if let Some(waiting) = self.waiting.get_mut(&job.queue) {
            waiting.remove(&(Reverse(job.priority), job.run_at, job.id));
            if waiting.is_empty() {
                self.waiting.remove(&job.queue);
            }
        }
        self.scheduled.remove(&(job.run_at, job.id));
        if job.state == State::Running
            && let Some(n) = self.running_per_queue.get_mut(&job.queue)
        {
            *n = n.saturating_sub(1);
        }
        if let Some(lease) = &job.lease {
            self.running.remove(&(lease.expires_at, job.id));
        }
        if let Some(finished_at) = job.finished_at {
            self.finished.remove(&(job.state, finished_at, job.id));
        }
        if let Some(key) = &job.unique_key {
            let slot = (job.queue.clone(), key.clone());
            if let Some(holders) = self.unique.get_mut(&slot) {
                holders.remove(&job.id);
                if holders.is_empty() {
                    self.unique.remove(&slot);
                }
            }
        }
    }
}
