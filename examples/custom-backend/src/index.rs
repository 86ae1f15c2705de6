//! The tables: the rows, and the indexes that let every operation find its
//! jobs without scanning them all. A row changes only through
//! [`Tables::insert`], [`Tables::update`] and [`Tables::remove`], which keep
//! every index in step with it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use jq::{Job, JobId, Leader, LeaseRef, LeaseToken, Priority, QueueName, ScheduleInfo, State, Timestamp};

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
    /// Named roles (`Storage::elect`): role -> the holder's token and lease.
    pub(crate) roles: BTreeMap<String, (LeaseToken, Leader)>,
    /// Recurring schedules (`Storage::fire`): name -> row with its cursor.
    pub(crate) schedules: BTreeMap<String, ScheduleInfo>,
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

    /// Up to `limit` claimable jobs (Pending, or Scheduled and due) of
    /// `queues`, in claim order across the queues.
    pub(crate) fn claimable(&self, queues: &[QueueName], limit: usize, now: Timestamp) -> Vec<JobId> {
        let queues: BTreeSet<&QueueName> = queues.iter().collect();
        let mut picked: Vec<WaitKey> = Vec::new();
        for queue in queues {
            let Some(waiting) = self.waiting.get(queue) else { continue };
            // Each queue's first `limit` claimable jobs are the only candidates.
            let claimable = waiting.iter().filter(|(_, run_at, id)| {
                *run_at <= now || self.rows.get(id).is_some_and(|job| job.state == State::Pending)
            });
            picked.extend(claimable.take(limit).copied());
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
            }
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
