//! Keyed jobs in the reference model: per-key limits, the rotation of each
//! queue's keys (a cursor per priority), and the merge of the rotations with the plain jobs
//! (the contract's "Keyed jobs"). Written for reading, not speed: every
//! claim that meets a keyed job rebuilds the rotations from the jobs.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, VecDeque};

use async_trait::async_trait;
use jq_core::storage::{KeyStorage, Limited, allowance, check_key, held_by};
use jq_core::{Job, JobId, KeyInfo, KeyLimit, KeyReport, Priority, QueueLimits, QueueName, Result, State, Timestamp};

use super::{MemoryStorage, claim_order};

/// Every queue's key limits and rotation cursors. Locked after `jobs` and
/// `controls`.
#[derive(Debug, Default)]
pub(super) struct Keys {
    queues: BTreeMap<QueueName, QueueKeys>,
}

/// One queue's keys.
#[derive(Debug, Default)]
struct QueueKeys {
    /// The limits every key without an override follows.
    default: QueueLimits,
    /// key -> its own limits.
    overrides: BTreeMap<String, QueueLimits>,
    /// priority -> the rotation's cursor there: the key it served last.
    /// The next job of that priority comes from the first eligible key
    /// after it in byte order, wrapping around.
    cursors: BTreeMap<Priority, String>,
    /// key -> the instant of every start still in its rate window, oldest
    /// first (kept only while the key's limits have a rate).
    starts: BTreeMap<String, VecDeque<Timestamp>>,
}

impl QueueKeys {
    fn limits(&self, key: &str) -> QueueLimits {
        self.overrides.get(key).copied().unwrap_or(self.default)
    }
}

/// One member of a rotation during a claim (a key at a priority): its
/// claimable jobs, by (run_at, id), at most as many as the claim may take.
struct Member<'a> {
    jobs: VecDeque<&'a Job>,
}

/// What one claim knows of a key: its Running jobs and starts in the
/// window, counting what the claim took.
#[derive(Default, Clone, Copy)]
struct Load {
    running: u64,
    started: u64,
}

impl Keys {
    /// Forgets everything (the harness's cleanup).
    pub(super) fn clear(&mut self) {
        self.queues.clear();
    }

    /// The jobs a claim takes, in the order it takes them, from
    /// `candidates` (claimable jobs of queues whose allowance is above
    /// zero, some with a key): the plain jobs in claim order and each
    /// queue's rotation, merged by (priority desc, effective run_at, plain
    /// before keyed, queue name). Takes each job's place in `allowed`, and
    /// records the keyed jobs' cursors and starts.
    pub(super) fn pick<'a>(
        &mut self,
        jobs: &BTreeMap<JobId, Job>,
        candidates: Vec<&'a Job>,
        allowed: &mut BTreeMap<&QueueName, usize>,
        limit: usize,
        now: Timestamp,
    ) -> Vec<&'a Job> {
        let (mut plain, keyed): (Vec<&Job>, Vec<&Job>) = candidates.into_iter().partition(|j| j.key.is_none());
        plain.sort_by(|a, b| claim_order(a, b));
        let mut plain = plain.into_iter().peekable();

        // The rotations: queue -> priority -> key -> member.
        let mut rotations: BTreeMap<QueueName, BTreeMap<Priority, BTreeMap<String, Member<'a>>>> = BTreeMap::new();
        for job in keyed {
            let (Some(key), queue) = (job.key.as_ref(), &job.queue) else { continue };
            let member = rotations
                .entry(queue.clone())
                .or_default()
                .entry(job.priority)
                .or_default()
                .entry(key.clone())
                .or_insert_with(|| Member { jobs: VecDeque::new() });
            member.jobs.push_back(job);
        }
        let by_run_at = |a: &&Job, b: &&Job| a.run_at.cmp(&b.run_at).then(a.id.cmp(&b.id));
        for members in rotations.values_mut().flat_map(|r| r.values_mut()) {
            for member in members.values_mut() {
                let jobs = member.jobs.make_contiguous();
                // A claim takes at most `limit` jobs of one member: only
                // that many of its heads can matter.
                if jobs.len() > limit {
                    jobs.select_nth_unstable_by(limit, by_run_at);
                    member.jobs.truncate(limit);
                }
                member.jobs.make_contiguous().sort_by(by_run_at);
            }
        }

        // Each key's load, counted from the leases (an expired lease holds
        // its slot until recover) and from its sliding log.
        let mut load: BTreeMap<(QueueName, String), Load> = BTreeMap::new();
        for job in jobs.values().filter(|j| j.state == State::Running) {
            if let Some(key) = &job.key
                && rotations.contains_key(&job.queue)
            {
                load.entry((job.queue.clone(), key.clone())).or_default().running += 1;
            }
        }
        for (queue, keys) in &mut self.queues {
            if !rotations.contains_key(queue) {
                continue;
            }
            let QueueKeys { default, overrides, starts, .. } = keys;
            starts.retain(|key, log| {
                let Some(rate) = overrides.get(key).copied().unwrap_or(*default).rate else { return false };
                let after = rate.window_after(now);
                log.retain(|s| *s > after);
                !log.is_empty()
            });
            for (key, log) in starts.iter() {
                load.entry((queue.clone(), key.clone())).or_default().started = log.len() as u64;
            }
        }

        let mut picked = Vec::new();
        // Per (queue, priority): the latest effective run_at its rotation
        // yielded in this claim (the running maximum).
        let mut yielded: BTreeMap<(QueueName, Priority), Timestamp> = BTreeMap::new();
        while picked.len() < limit {
            while plain.peek().is_some_and(|j| allowed.get(&j.queue).is_none_or(|n| *n == 0)) {
                plain.next();
            }
            // The smallest of the plain stream's next job and each queue's
            // rotation's next job.
            let mut best: Option<(Next<'_>, Option<(Priority, String)>)> = plain
                .peek()
                .map(|j| (Next { priority: j.priority, run_at: j.run_at, keyed: false, queue: &j.queue }, None));
            for (queue, rotation) in &rotations {
                if allowed.get(queue).is_none_or(|n| *n == 0) {
                    continue;
                }
                let keys = self.queues.get(queue);
                let cursors = keys.map(|q| &q.cursors);
                let Some((priority, key, job)) = next_of(rotation, cursors, |key| {
                    let limits = keys.map(|q| q.limits(key)).unwrap_or_default();
                    let l = load.get(&(queue.clone(), key.to_owned())).copied().unwrap_or_default();
                    allowance(false, &limits, l.running, l.started, 1) > 0
                }) else {
                    continue;
                };
                let after = yielded.get(&(queue.clone(), priority)).copied();
                let run_at = after.map_or(job.run_at, |a| a.max(job.run_at));
                let next = Next { priority, run_at, keyed: true, queue };
                if best.as_ref().is_none_or(|(b, _)| next.cmp(b) == Ordering::Less) {
                    best = Some((next, Some((priority, key.to_owned()))));
                }
            }
            let Some((next, member)) = best else { break };
            let queue = next.queue.clone();
            let run_at = next.run_at;
            let job = match member {
                None => plain.next(),
                Some((priority, key)) => {
                    let job = rotations
                        .get_mut(&queue)
                        .and_then(|r| r.get_mut(&priority))
                        .and_then(|m| m.get_mut(&key))
                        .and_then(|m| m.jobs.pop_front());
                    let keys = self.queues.entry(queue.clone()).or_default();
                    keys.cursors.insert(priority, key.clone());
                    let l = load.entry((queue.clone(), key.clone())).or_default();
                    l.running += 1;
                    if keys.limits(&key).rate.is_some() {
                        keys.starts.entry(key).or_default().push_back(now);
                        l.started += 1;
                    }
                    yielded.insert((queue.clone(), priority), run_at);
                    job
                }
            };
            let Some(job) = job else { break };
            if let Some(left) = allowed.get_mut(&job.queue) {
                *left = left.saturating_sub(1);
            }
            picked.push(job);
        }
        picked
    }

    /// What holds back one more start of `queue`'s `key` after a claim
    /// (`jobs` as it left them, its starts logged): its limits' answer
    /// ([`held_by`]), `None` when they allow it.
    pub(super) fn held(
        &self,
        jobs: &BTreeMap<JobId, Job>,
        queue: &QueueName,
        key: &str,
        now: Timestamp,
    ) -> Option<Limited> {
        let keys = self.queues.get(queue)?;
        let limits = keys.limits(key);
        let running = jobs
            .values()
            .filter(|j| j.state == State::Running && j.queue == *queue && j.key.as_deref() == Some(key))
            .count() as u64;
        let (started, oldest) = match (limits.rate, keys.starts.get(key)) {
            (Some(rate), Some(log)) => {
                let after = rate.window_after(now);
                let mut window = log.iter().filter(|s| **s > after);
                let oldest = window.next().copied();
                (oldest.map_or(0, |_| 1 + window.count() as u64), oldest)
            }
            _ => (0, None),
        };
        held_by(&limits, running, started, oldest)
    }

    /// [`KeyStorage::keys`] over `jobs`.
    fn report(&self, jobs: &BTreeMap<JobId, Job>, queue: &QueueName, top: usize) -> KeyReport {
        let keys = self.queues.get(queue);
        let limits = |key: &str| keys.map(|q| q.limits(key)).unwrap_or_default();
        let mut counts: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for job in jobs.values().filter(|j| j.queue == *queue) {
            let Some(key) = job.key.as_deref() else { continue };
            match job.state {
                State::Running => counts.entry(key).or_default().0 += 1,
                State::Pending | State::Scheduled => counts.entry(key).or_default().1 += 1,
                _ => {}
            }
        }
        let mut busiest: Vec<KeyInfo> = counts
            .into_iter()
            .map(|(key, (running, pending))| KeyInfo { key: key.to_owned(), running, pending, limits: limits(key) })
            .collect();
        busiest.sort_by(|a, b| (b.running + b.pending).cmp(&(a.running + a.pending)).then(a.key.cmp(&b.key)));
        busiest.truncate(top);
        KeyReport {
            queue: queue.clone(),
            default: keys.map(|q| q.default).unwrap_or_default(),
            overrides: keys
                .map(|q| {
                    q.overrides.iter().map(|(key, limits)| KeyLimit { key: key.clone(), limits: *limits }).collect()
                })
                .unwrap_or_default(),
            busiest,
        }
    }
}

/// A stream's next job as the merge compares it.
#[derive(PartialEq, Eq)]
struct Next<'q> {
    priority: Priority,
    run_at: Timestamp,
    keyed: bool,
    queue: &'q QueueName,
}

impl Ord for Next<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        (Reverse(self.priority), self.run_at, self.keyed, self.queue).cmp(&(
            Reverse(other.priority),
            other.run_at,
            other.keyed,
            other.queue,
        ))
    }
}

impl PartialOrd for Next<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A rotation's next job: from the highest priority with an eligible
/// member (a job, and `eligible(key)`), the first such key after that
/// priority's cursor in byte order, wrapping around to the smallest (and
/// last to the cursor's own key); its head job.
fn next_of<'r, 'a>(
    rotation: &'r BTreeMap<Priority, BTreeMap<String, Member<'a>>>,
    cursors: Option<&BTreeMap<Priority, String>>,
    eligible: impl Fn(&str) -> bool,
) -> Option<(Priority, &'r str, &'a Job)> {
    for (priority, members) in rotation.iter().rev() {
        let ready = |(key, m): &(&String, &Member<'a>)| !m.jobs.is_empty() && eligible(key);
        // `String` orders by bytes.
        let cursor = cursors.and_then(|c| c.get(priority));
        let after = members.iter().filter(|(key, _)| cursor.is_none_or(|c| key.as_str() > c.as_str()));
        let from_start = members.iter().filter(|(key, _)| cursor.is_some_and(|c| key.as_str() <= c.as_str()));
        if let Some((key, member)) = after.chain(from_start).find(ready) {
            return member.jobs.front().map(|job| (*priority, key.as_str(), *job));
        }
    }
    None
}

#[async_trait]
impl KeyStorage for MemoryStorage {
    async fn set_key_limits(&self, queue: &QueueName, key: Option<&str>, limits: &QueueLimits) -> Result<()> {
        limits.check()?;
        if let Some(key) = key {
            check_key(key)?;
        }
        {
            let mut keys = self.keys();
            let keys = keys.queues.entry(queue.clone()).or_default();
            match key {
                Some(key) => {
                    keys.overrides.insert(key.to_owned(), *limits);
                }
                None => keys.default = *limits,
            }
        }
        // Raised or lifted limits may make jobs claimable.
        self.bump();
        Ok(())
    }

    async fn clear_key_limits(&self, queue: &QueueName, key: &str) -> Result<()> {
        check_key(key)?;
        let removed = self.keys().queues.get_mut(queue).and_then(|q| q.overrides.remove(key)).is_some();
        if removed {
            self.bump();
        }
        Ok(())
    }

    async fn keys(&self, queue: &QueueName, top: usize) -> Result<KeyReport> {
        let jobs = self.jobs();
        Ok(self.keys().report(&jobs, queue, top))
    }
}
