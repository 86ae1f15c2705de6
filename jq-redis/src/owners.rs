//! [`Owners`]: the queue of each job this handle claimed and still holds,
//! so its settlements and heartbeats need no lookup by id.
//!
//! A cache, never the truth: a miss falls back to the lookup by id
//! (`Inner::locate`). Entries go when a job stops being this handle's
//! (any settlement, `LeaseLost` included; a heartbeat reporting the lease
//! lost; a claimed row buried as corrupt), and the map never holds more
//! than its cap: when full, it is emptied and fills again from the next
//! claims, which costs the jobs still held one lookup each.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use jq_core::{JobId, QueueName};

/// The most entries by default: far above what a pool holds at once
/// (concurrency + prefetch), about 5 MiB when full.
pub(crate) const DEFAULT_CAP: usize = 65_536;

/// Job id -> queue, bounded. Never held across an `.await`.
#[derive(Debug)]
pub(crate) struct Owners {
    map: Mutex<HashMap<JobId, QueueName>>,
    cap: usize,
}

impl Owners {
    pub(crate) fn new(cap: usize) -> Self {
        Owners { map: Mutex::new(HashMap::new()), cap: cap.max(1) }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<JobId, QueueName>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers the queue of each claimed job.
    pub(crate) fn insert<'a>(&self, jobs: impl IntoIterator<Item = (JobId, &'a QueueName)>) {
        let mut map = self.lock();
        for (id, queue) in jobs {
            if map.len() >= self.cap && !map.contains_key(&id) {
                tracing::debug!(cap = self.cap, "the claimed-jobs cache is full: emptied");
                map.clear();
            }
            map.insert(id, queue.clone());
        }
    }

    /// Forgets jobs this handle no longer holds.
    pub(crate) fn remove<'a>(&self, ids: impl IntoIterator<Item = &'a JobId>) {
        let mut map = self.lock();
        for id in ids {
            map.remove(id);
        }
    }

    /// The known queue of each of `ids`, and the ids it does not know.
    pub(crate) fn find(&self, ids: &[JobId]) -> (HashMap<JobId, QueueName>, Vec<JobId>) {
        let map = self.lock();
        let mut found = HashMap::with_capacity(ids.len());
        let mut missing = Vec::new();
        for id in ids {
            match map.get(id) {
                Some(q) => {
                    found.insert(*id, q.clone());
                }
                None => missing.push(*id),
            }
        }
        (found, missing)
    }

    /// How many jobs it remembers.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn id(n: u128) -> JobId {
        JobId(uuid::Uuid::from_u128(n))
    }

    #[test]
    fn never_holds_more_than_its_cap_and_forgets_on_remove() {
        let owners = Owners::new(100);
        let q = QueueName::new("q").unwrap();
        for n in 0..1_000 {
            owners.insert([(id(n), &q)]);
            assert!(owners.len() <= 100);
        }
        let (found, missing) = owners.find(&[id(999), id(0)]);
        assert_eq!((found.len(), missing), (1, vec![id(0)]), "a miss is answered by the lookup by id");
        owners.remove(&[id(999)]);
        assert_eq!(owners.find(&[id(999)]).1, vec![id(999)]);
    }
}
