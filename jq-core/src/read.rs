//! The read model: which jobs a list asks for ([`JobFilter`]), the counts
//! of the stats ([`Stats`], [`StateCounts`]) and of the throughput chart
//! ([`Throughput`]). Values only, so the workflow summary can count its
//! steps as the stats do without naming the storage.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::id::JobId;
use crate::job::{Job, QueueName};
use crate::state::State;

/// Which jobs [`Storage::list`](crate::storage::Storage::list) returns. Results are ordered by id
/// (creation order); page with `after`.
#[derive(Clone, Debug, Default)]
pub struct JobFilter {
    /// Only this queue.
    pub queue: Option<QueueName>,
    /// Only this state.
    pub state: Option<State>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only ids greater than this (the last id of the previous page).
    pub after: Option<JobId>,
    /// At most this many; 0 means [`JobFilter::DEFAULT_LIMIT`].
    pub limit: usize,
}

impl JobFilter {
    /// Page size when `limit` is 0.
    pub const DEFAULT_LIMIT: usize = 100;

    /// The effective page size.
    pub fn page_size(&self) -> usize {
        if self.limit == 0 { Self::DEFAULT_LIMIT } else { self.limit }
    }

    /// True when `job` passes the queue, state, kind and `after` filters.
    pub fn matches(&self, job: &Job) -> bool {
        self.queue.as_ref().is_none_or(|q| *q == job.queue)
            && self.state.is_none_or(|s| s == job.state)
            && self.kind.as_ref().is_none_or(|k| *k == job.kind)
            && self.after.is_none_or(|a| job.id > a)
    }
}

/// Job counts per state of one queue. Serialized as a map from every
/// state's name (`"waiting"`, ...) to its count, in [`State::ALL`]'s order,
/// so a view of it names every state there is; a state missing from a map
/// read back counts 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateCounts {
    counts: [u64; State::ALL.len()],
}

impl StateCounts {
    /// The count of `state`.
    pub fn get(&self, state: State) -> u64 {
        self.counts[state_index(state)]
    }

    /// Sets the count of `state`.
    pub fn set(&mut self, state: State, n: u64) {
        self.counts[state_index(state)] = n;
    }

    /// Adds `n` to the count of `state`.
    pub fn add(&mut self, state: State, n: u64) {
        self.counts[state_index(state)] += n;
    }

    /// All jobs of the queue.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Every state with its count, in [`State::ALL`]'s order, zeros
    /// included: what a view of the counts iterates, so that it cannot
    /// leave a state out.
    pub fn iter(&self) -> impl Iterator<Item = (State, u64)> + '_ {
        State::ALL.into_iter().map(|state| (state, self.get(state)))
    }

    /// Adds every count of `other` to these.
    pub fn add_all(&mut self, other: &StateCounts) {
        for (state, n) in other.iter() {
            self.add(state, n);
        }
    }
}

impl FromIterator<(State, u64)> for StateCounts {
    /// The counts, each state's added up.
    fn from_iter<I: IntoIterator<Item = (State, u64)>>(iter: I) -> Self {
        let mut counts = StateCounts::default();
        for (state, n) in iter {
            counts.add(state, n);
        }
        counts
    }
}

impl Serialize for StateCounts {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for StateCounts {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<State, u64>::deserialize(deserializer)?;
        Ok(map.into_iter().collect())
    }
}

fn state_index(state: State) -> usize {
    State::ALL.iter().position(|s| *s == state).unwrap_or(0)
}

/// Counts by queue and state. Queues with no job are absent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Per queue.
    pub queues: BTreeMap<String, StateCounts>,
}

impl Stats {
    /// The count of `state` over every queue.
    pub fn total(&self, state: State) -> u64 {
        self.queues.values().map(|c| c.get(state)).sum()
    }

    /// The counts over every queue.
    pub fn counts(&self) -> StateCounts {
        let mut all = StateCounts::default();
        for counts in self.queues.values() {
            all.add_all(counts);
        }
        all
    }
}

/// The jobs of one queue that finished in one minute, for throughput
/// charts; see [`ThroughputStorage::throughput`](crate::storage::ThroughputStorage::throughput).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Throughput {
    /// The queue.
    pub queue: String,
    /// The minute's first instant (UTC, whole minute).
    pub minute: Timestamp,
    /// Jobs that reached Completed in it.
    pub completed: u64,
    /// Jobs that reached Dead in it.
    pub dead: u64,
}

impl Throughput {
    /// [`ThroughputStorage::throughput`](crate::storage::ThroughputStorage::throughput) over jobs in memory: the reference the
    /// conformance suite holds backends to, and what an in-memory backend
    /// can return as it is.
    pub fn tally<'a>(jobs: impl IntoIterator<Item = &'a Job>, since: Timestamp) -> Vec<Throughput> {
        let since = minute_of(since);
        let mut counts: BTreeMap<(String, Timestamp), (u64, u64)> = BTreeMap::new();
        for job in jobs {
            let Some(finished) = job.finished_at.filter(|t| *t >= since) else { continue };
            let entry = counts.entry((job.queue.as_str().to_owned(), minute_of(finished))).or_default();
            match job.state {
                State::Completed => entry.0 += 1,
                State::Dead => entry.1 += 1,
                _ => {}
            }
        }
        counts
            .into_iter()
            .filter(|(_, (completed, dead))| completed + dead > 0)
            .map(|((queue, minute), (completed, dead))| Throughput { queue, minute, completed, dead })
            .collect()
    }
}

/// The start of the minute `t` falls in.
pub fn minute_of(t: Timestamp) -> Timestamp {
    let micros = t.timestamp_micros();
    crate::clock::from_micros(micros - micros.rem_euclid(60_000_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_name_every_state() {
        let counts: StateCounts = [(State::Waiting, 2), (State::Dead, 1), (State::Waiting, 1)].into_iter().collect();
        assert_eq!(counts.iter().map(|(s, _)| s).collect::<Vec<_>>(), State::ALL);
        assert_eq!((counts.get(State::Waiting), counts.total()), (3, 4));
        let json = serde_json::to_value(counts).unwrap();
        let names: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        let mut all: Vec<&str> = State::ALL.iter().map(|s| s.as_str()).collect();
        all.sort_unstable();
        assert_eq!(names, all, "every state is a key, zeros included");
        assert_eq!(json["waiting"], 3);
        assert_eq!(serde_json::from_value::<StateCounts>(json).unwrap(), counts);
        let sparse: StateCounts = serde_json::from_str(r#"{"dead":1}"#).unwrap();
        assert_eq!((sparse.get(State::Dead), sparse.total()), (1, 1));
        assert!(serde_json::from_str::<StateCounts>(r#"{"done":1}"#).is_err());
        let stats = Stats { queues: BTreeMap::from([("a".to_owned(), counts), ("b".to_owned(), sparse)]) };
        assert_eq!(stats.counts().get(State::Dead), 2);
        assert_eq!(stats.counts().total(), stats.queues.values().map(StateCounts::total).sum::<u64>());
    }
}
