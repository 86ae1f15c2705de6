//! The checker: reads the audit trail and the store after a run and says
//! whether any job was lost, and how every repeated run is explained.
//!
//! Rules:
//!
//! - every enqueued job is Completed in the store (else it is *lost*);
//! - every Completed job has at least one finished run in the trail (an ack
//!   without a run would mean the store acked the wrong job);
//! - a job runs again only after its previous run ended badly. The run
//!   before each repeated run must be explained by one of:
//!   - its worker process was SIGKILLed (its pid is in the killed set);
//!   - the store recorded "lease expired" for that run's attempt (recovery
//!     handed it on: the worker stalled, or could not reach the server to
//!     heartbeat or ack, typically while the server was down);
//!
//!   anything else is *unexplained* and fails the run;
//! - a *duplicate* is a finished run beyond the first of a job (work done
//!   twice); each is one of the repeated runs above, so it is explained the
//!   same way;
//! - no run's attempt, and no job's attempts, exceed `max_attempts`;
//! - stats agree with list.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use jq_core::storage::Storage;
use jq_core::{Job, JobFilter, JobId, State};

use crate::audit::{Run, Trail};

/// Why a job ran again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Explanation {
    /// The previous run's worker was SIGKILLed.
    WorkerKilled,
    /// The previous run's lease expired (recorded by recovery) while its
    /// worker was alive, during a server outage.
    LeaseExpiredDuringOutage,
    /// The previous run's lease expired while its worker was alive, outside
    /// any server outage (a stalled worker).
    LeaseExpired,
    /// None of the above: a bug.
    Unexplained,
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Explanation::WorkerKilled => "earlier run's worker was SIGKILLed",
            Explanation::LeaseExpiredDuringOutage => "earlier run's lease expired while the server was down",
            Explanation::LeaseExpired => "earlier run's lease expired (worker alive, server up)",
            Explanation::Unexplained => "UNEXPLAINED",
        })
    }
}

/// What the checker knows besides the store and the trail.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// Every job id the producers enqueued (acknowledged by the store).
    pub enqueued: Vec<JobId>,
    /// Pids of worker processes that were SIGKILLed.
    pub killed: HashSet<u32>,
    /// Server outages, (from, to) in microseconds since the epoch; `to`
    /// includes the time the storage clients needed to reconnect.
    pub outages: Vec<(i64, i64)>,
}

/// The verdict on one run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Jobs enqueued.
    pub enqueued: usize,
    /// Of those, Completed in the store.
    pub completed: usize,
    /// Enqueued jobs not Completed (missing, or in another state), with what
    /// the store says about each.
    pub lost: Vec<(JobId, String)>,
    /// Completed jobs with no finished run in the trail.
    pub completed_without_run: Vec<JobId>,
    /// Runs started (audit).
    pub runs: usize,
    /// Repeated runs by explanation (a job's second, third... run).
    pub repeated: BTreeMap<Explanation, usize>,
    /// Finished runs beyond the first of a job, by explanation.
    pub duplicates: BTreeMap<Explanation, usize>,
    /// Unexplained repeated runs, described.
    pub unexplained: Vec<String>,
    /// Runs or jobs over max_attempts, described.
    pub over_max_attempts: Vec<String>,
    /// Disagreement between stats and list, described.
    pub stats_mismatch: Option<String>,
    /// Trail lines cut by a SIGKILL.
    pub torn_lines: usize,
}

impl Report {
    /// Everything that makes the run fail; empty when it passed.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if !self.lost.is_empty() {
            p.push(format!("{} job(s) lost, e.g. {:?}", self.lost.len(), &self.lost[..self.lost.len().min(5)]));
        }
        if !self.completed_without_run.is_empty() {
            p.push(format!(
                "{} Completed job(s) with no finished run in the audit trail, e.g. {:?}",
                self.completed_without_run.len(),
                &self.completed_without_run[..self.completed_without_run.len().min(5)]
            ));
        }
        if !self.unexplained.is_empty() {
            p.push(format!(
                "{} unexplained repeated run(s): {:?}",
                self.unexplained.len(),
                &self.unexplained[..self.unexplained.len().min(5)]
            ));
        }
        if !self.over_max_attempts.is_empty() {
            p.push(format!(
                "attempts over max_attempts: {:?}",
                &self.over_max_attempts[..self.over_max_attempts.len().min(5)]
            ));
        }
        if let Some(m) = &self.stats_mismatch {
            p.push(format!("stats disagree with list: {m}"));
        }
        p
    }

    /// Total duplicates.
    pub fn duplicate_count(&self) -> usize {
        self.duplicates.values().sum()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "  jobs enqueued:     {}", self.enqueued)?;
        writeln!(f, "  completed:         {}", self.completed)?;
        writeln!(f, "  lost:              {}", self.lost.len())?;
        writeln!(f, "  runs (audit):      {} ({} torn trail lines)", self.runs, self.torn_lines)?;
        writeln!(f, "  repeated runs:     {}", self.repeated.values().sum::<usize>())?;
        for (why, n) in &self.repeated {
            writeln!(f, "    {n:>5}  {why}")?;
        }
        writeln!(f, "  duplicates (job finished more than once): {}", self.duplicate_count())?;
        for (why, n) in &self.duplicates {
            writeln!(f, "    {n:>5}  {why}")?;
        }
        Ok(())
    }
}

/// Every job of the store, by id (pages through `list`).
pub async fn all_jobs(storage: &dyn Storage) -> jq_core::Result<BTreeMap<JobId, Job>> {
    let mut jobs = BTreeMap::new();
    let mut filter = JobFilter { limit: 1000, ..JobFilter::default() };
    loop {
        let page = list_patiently(storage, &filter).await?;
        let Some(last) = page.last().map(|j| j.id) else { break };
        let full = page.len() == filter.page_size();
        jobs.extend(page.into_iter().map(|j| (j.id, j)));
        if !full {
            break;
        }
        filter.after = Some(last);
    }
    Ok(jobs)
}

/// One page, retrying a retryable error a few times: a page of 1,000 jobs
/// can outlast Redis's 500 ms response timeout on a loaded machine, and the
/// checker must not fail a run over it.
async fn list_patiently(storage: &dyn Storage, filter: &JobFilter) -> jq_core::Result<Vec<Job>> {
    let mut tries = 0;
    loop {
        match storage.list(filter).await {
            Err(e) if e.is_retryable() && tries < 5 => {
                tries += 1;
                tracing::warn!(error = %e, "checker: listing jobs failed; trying again");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            result => return result,
        }
    }
}

fn lease_expired_for(job: &Job, attempt: u32) -> bool {
    job.errors.iter().any(|e| e.attempt == attempt && e.message.contains("lease expired"))
}

fn during_outage(run: &Run, outages: &[(i64, i64)]) -> bool {
    let end = run.finished_us.unwrap_or(run.started_us);
    // The lease (a few seconds) could have been lost during an outage that
    // began shortly after the run.
    outages.iter().any(|&(from, to)| run.started_us <= to && end + 10_000_000 >= from)
}

/// Checks the store and the trail against the facts.
pub async fn check(storage: &dyn Storage, trail: &Trail, facts: &Facts) -> jq_core::Result<Report> {
    let jobs = all_jobs(storage).await?;
    let mut report = Report { enqueued: facts.enqueued.len(), torn_lines: trail.torn_lines, ..Report::default() };

    for id in &facts.enqueued {
        match jobs.get(id) {
            Some(job) if job.state == State::Completed => report.completed += 1,
            Some(job) => report
                .lost
                .push((*id, format!("{} after {} attempt(s), errors {:?}", job.state, job.attempts, job.errors))),
            None => report.lost.push((*id, "missing from the store".into())),
        }
    }

    for job in jobs.values() {
        if job.attempts > job.max_attempts {
            report
                .over_max_attempts
                .push(format!("job {} has {} attempts of {}", job.id, job.attempts, job.max_attempts));
        }
        let runs = trail.runs.get(&job.id).map(Vec::as_slice).unwrap_or_default();
        if job.state == State::Completed && !runs.iter().any(|r| r.finished_us.is_some()) {
            report.completed_without_run.push(job.id);
        }
        report.runs += runs.len();
        let mut finished_seen = false;
        for (k, run) in runs.iter().enumerate() {
            if run.attempt > job.max_attempts {
                report
                    .over_max_attempts
                    .push(format!("job {} ran attempt {} of {}", job.id, run.attempt, job.max_attempts));
            }
            let why = if k == 0 {
                None
            } else {
                let prev = &runs[k - 1];
                Some(if facts.killed.contains(&prev.pid) {
                    Explanation::WorkerKilled
                } else if lease_expired_for(job, prev.attempt) {
                    if during_outage(prev, &facts.outages) {
                        Explanation::LeaseExpiredDuringOutage
                    } else {
                        Explanation::LeaseExpired
                    }
                } else {
                    report.unexplained.push(format!(
                        "job {}: run of attempt {} (pid {}) after attempt {} (pid {}, finished: {}), errors {:?}",
                        job.id,
                        run.attempt,
                        run.pid,
                        prev.attempt,
                        prev.pid,
                        prev.finished_us.is_some(),
                        job.errors
                    ));
                    Explanation::Unexplained
                })
            };
            if let Some(why) = why {
                *report.repeated.entry(why).or_default() += 1;
            }
            if run.finished_us.is_some() {
                if finished_seen {
                    // The explanation of a duplicate is that of the rerun
                    // that produced it.
                    *report.duplicates.entry(why.unwrap_or(Explanation::Unexplained)).or_default() += 1;
                }
                finished_seen = true;
            }
        }
    }
    let unknown_runs: Vec<_> = trail.runs.keys().filter(|id| !jobs.contains_key(id)).collect();
    if !unknown_runs.is_empty() {
        report.unexplained.push(format!("runs of jobs the store does not know: {unknown_runs:?}"));
    }

    // stats agree with list
    let stats = storage.stats().await?;
    let mut counted: BTreeMap<(String, State), u64> = BTreeMap::new();
    for job in jobs.values() {
        *counted.entry((job.queue.as_str().to_owned(), job.state)).or_default() += 1;
    }
    let mut mismatches = Vec::new();
    for (queue, counts) in &stats.queues {
        for state in State::ALL {
            let listed = counted.remove(&(queue.clone(), state)).unwrap_or(0);
            if counts.get(state) != listed {
                mismatches.push(format!("{queue}/{state}: stats {} list {listed}", counts.get(state)));
            }
        }
    }
    for ((queue, state), n) in counted {
        mismatches.push(format!("{queue}/{state}: stats 0 list {n}"));
    }
    if !mismatches.is_empty() {
        report.stats_mismatch = Some(mismatches.join(", "));
    }
    Ok(report)
}
