//! The reference model of durable jobs ([`DurableStorage`]): each job's
//! journal, its open wait and its signals not taken yet, changed inside
//! the same critical section as the job they belong to (the contract's
//! "Durable jobs").

use std::collections::{BTreeMap, VecDeque};

use async_trait::async_trait;
use jq_core::durable::{
    Entry, EntryKind, Journal, Record, SignalInfo, Suspend, Suspended, Wait, check_append, check_signal, check_signals,
    check_step_name, place,
};
use jq_core::storage::{DurableStorage, LeaseRef};
use jq_core::{Error, Job, JobId, Payload, Result, State, Timestamp};

use super::MemoryStorage;

/// Every durable job's journal, wait and signals; locked after `jobs`.
#[derive(Debug, Default)]
pub(super) struct Journals {
    jobs: BTreeMap<JobId, Durable>,
}

#[derive(Debug, Default)]
struct Durable {
    entries: Vec<Entry>,
    wait: Option<Wait>,
    /// Not taken yet, oldest first: name, payload, sent at.
    signals: VecDeque<(String, Payload, Timestamp)>,
}

impl Durable {
    fn bytes(&self) -> usize {
        self.entries.iter().map(Entry::bytes).sum()
    }

    /// Appends `record` under the contract's places and limits: `true`
    /// when appended, `false` when the same record is there already.
    fn append(&mut self, id: JobId, record: &Record, now: Timestamp) -> Result<bool> {
        let fresh = place(id, self.entries.len(), self.entries.get(record.index as usize), record)?;
        if fresh {
            check_append(self.entries.len(), self.bytes(), record)?;
            self.entries.push(record.entry(now));
        }
        Ok(fresh)
    }
}

impl Journals {
    pub(super) fn clear(&mut self) {
        self.jobs.clear();
    }

    /// A purged job's journal goes with it.
    pub(super) fn purged(&mut self, id: JobId) {
        self.jobs.remove(&id);
    }
}

/// The job `lease` holds, or [`Error::LeaseLost`].
fn leased(jobs: &mut BTreeMap<JobId, Job>, lease: LeaseRef) -> Result<&mut Job> {
    match jobs.get_mut(&lease.id) {
        Some(job) if job.state == State::Running && job.token() == Some(lease.token) => Ok(job),
        _ => Err(Error::LeaseLost { id: lease.id }),
    }
}

/// Running -> Scheduled until `until`, the attempt given back, no lease:
/// what a release with a delay does.
fn park(job: &mut Job, until: Timestamp) {
    job.lease = None;
    job.attempts = job.attempts.saturating_sub(1);
    job.run_at = until;
    job.state = State::Scheduled;
}

#[async_trait]
impl DurableStorage for MemoryStorage {
    async fn checkpoint(&self, lease: LeaseRef, record: &Record) -> Result<()> {
        if !matches!(record.kind, EntryKind::Step | EntryKind::Patch) {
            return Err(Error::invalid("checkpoint", format!("a {} is recorded by suspend", record.kind.as_str())));
        }
        let now = self.clock.now();
        let mut jobs = self.jobs();
        leased(&mut jobs, lease)?;
        let mut journals = self.journals();
        journals.jobs.entry(lease.id).or_default().append(lease.id, record, now)?;
        Ok(())
    }

    async fn suspend(&self, lease: LeaseRef, suspend: &Suspend) -> Result<Suspended> {
        let now = self.clock.now();
        let mut jobs = self.jobs();
        let job = leased(&mut jobs, lease)?;
        let mut journals = self.journals();
        let durable = journals.jobs.entry(lease.id).or_default();
        match suspend {
            Suspend::Sleep { index, until } => {
                let record = Suspend::sleep_record(*index, *until);
                durable.append(lease.id, &record, now)?;
                // The recorded instant wins over a replay's ask.
                let until = durable.entries[*index as usize].until.unwrap_or(*until);
                if until <= now {
                    return Ok(Suspended::Due);
                }
                park(job, until);
                Ok(Suspended::Waiting)
            }
            Suspend::Wait { index, name, until } => {
                check_step_name(name)?;
                // A wait already answered at its place answers again.
                if let Some(entry) = durable.entries.get(*index as usize) {
                    if entry.kind.ends_a_wait() && entry.name == *name {
                        return Ok(match &entry.value {
                            Some(payload) if entry.kind == EntryKind::Signal => Suspended::Signal(payload.clone()),
                            _ => Suspended::TimedOut,
                        });
                    }
                    let asked =
                        Record { index: *index, name: name.clone(), kind: EntryKind::Signal, value: None, until: None };
                    return Err(jq_core::durable::mismatch(lease.id, &asked, Some(entry.describe())));
                }
                let mut record =
                    Record { index: *index, name: name.clone(), kind: EntryKind::Timeout, value: None, until: None };
                if let Some(at) = durable.signals.iter().position(|(n, _, _)| n == name) {
                    let payload = durable.signals[at].1.clone();
                    record.kind = EntryKind::Signal;
                    record.value = Some(payload.clone());
                    durable.append(lease.id, &record, now)?;
                    durable.signals.remove(at);
                    durable.wait = None;
                    return Ok(Suspended::Signal(payload));
                }
                let until = match &durable.wait {
                    Some(wait) if wait.index == *index && wait.name == *name => wait.until,
                    _ => *until,
                };
                if until <= now {
                    durable.append(lease.id, &record, now)?;
                    durable.wait = None;
                    return Ok(Suspended::TimedOut);
                }
                if *index as usize != durable.entries.len() {
                    return Err(jq_core::durable::mismatch(lease.id, &record, None));
                }
                durable.wait = Some(Wait { index: *index, name: name.clone(), until });
                park(job, until);
                Ok(Suspended::Waiting)
            }
        }
    }

    async fn signal(&self, id: JobId, name: &str, payload: &Payload) -> Result<()> {
        check_signal(name, payload)?;
        let now = self.clock.now();
        let woke = {
            let mut jobs = self.jobs();
            let job = jobs.get_mut(&id).ok_or(Error::NotFound { id })?;
            if job.state.is_terminal() {
                return Err(Error::InvalidState { id, state: job.state, operation: "signal" });
            }
            let mut journals = self.journals();
            let durable = journals.jobs.entry(id).or_default();
            check_signals(durable.signals.len())?;
            durable.signals.push_back((name.to_owned(), payload.clone(), now));
            let waits_for_it = durable.wait.as_ref().is_some_and(|w| w.name == name);
            if waits_for_it && job.state == State::Scheduled {
                job.state = State::Pending;
                job.run_at = now;
                true
            } else {
                false
            }
        };
        if woke {
            self.bump();
        }
        Ok(())
    }

    async fn journal(&self, id: JobId) -> Result<Journal> {
        let jobs = self.jobs();
        if !jobs.contains_key(&id) {
            return Err(Error::NotFound { id });
        }
        let journals = self.journals();
        Ok(journals.jobs.get(&id).map_or_else(Journal::default, |d| Journal {
            entries: d.entries.clone(),
            wait: d.wait.clone(),
            signals: d.signals.iter().map(|(name, _, at)| SignalInfo { name: name.clone(), sent_at: *at }).collect(),
        }))
    }
}
