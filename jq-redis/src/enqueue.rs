//! enqueue: one script call for the whole batch, so a batch is stored whole
//! or not at all: `lua/enqueue.lua` in general, `lua/enqueue_many.lua` for
//! a batch of one queue without unique keys (its arguments laid out as the
//! commands take them; a resend sends it on to enqueue.lua), and
//! `lua/enqueue_one.lua` for a lone job without a unique key. On Redis Cluster a script touches
//! one slot: a batch whose queues live in several slots is refused with
//! [`Error::BatchNotAtomic`] before anything is stored.
//!
//! Everything per job that does not depend on what is stored already (run_at,
//! Pending or Scheduled, the packed values of its hashes, the index it goes
//! to and its member there) is computed here, so the script only moves
//! strings: the server is single-threaded and is what limits throughput.

use jq_core::storage::from_micros;
use jq_core::{Error, JobId, NewJob, Result, UniqueRule};
use uuid::Uuid;

use crate::schema::{id_hex, slot};
use crate::{Inner, error, scripts};

/// Values per job after the script's 2 leading arguments (`PER_JOB` in
/// `lua/common/store.lua`).
const PER_JOB: usize = 9;

pub(crate) async fn enqueue(s: &Inner, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    for job in &jobs {
        job.check_payload(s.config.max_payload_bytes)?;
    }
    let now = s.now_micros();
    let mut names: Vec<&str> = jobs.iter().map(|j| j.queue.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    if s.is_cluster() && names.iter().any(|q| slot(&s.keys.base(q)) != slot(&s.keys.base(names[0]))) {
        return Err(Error::BatchNotAtomic {
            queues: names.iter().map(|q| (*q).to_owned()).collect(),
            reason: "their keys live in different Redis Cluster hash slots".to_owned(),
        });
    }
    let mut due = s.registry_due(&names);
    if let [queue] = names.as_slice()
        && jobs.len() > 1
        && plain_and_distinct(&jobs)
    {
        let reply = run_registered(s, due, many_call(s, queue, &jobs, now)).await?;
        if reply.is_empty() {
            jq_core::observe::EnqueueTally::of(&jobs).record();
            return Ok(jobs.iter().map(|j| j.id).collect());
        }
        // a resend: nothing was stored, and enqueue.lua answers each job
        due = None;
    }
    let cmd = match jobs.as_slice() {
        [job] if job.unique_key.is_none() => lone_call(s, job, now, due.is_some()),
        _ if jobs.iter().any(|j| j.unique_rule.is_some()) => rules_call(s, &jobs, now),
        _ => script_call(s, &jobs, now),
    };
    let reply = run_registered(s, due, cmd).await?;
    if reply.len() != jobs.len() {
        return Err(error::unexpected(format!("enqueue returned {} ids for {} jobs", reply.len(), jobs.len())));
    }
    let mut ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    for (id, existing) in ids.iter_mut().zip(reply) {
        if !existing.is_empty() {
            *id = Uuid::parse_str(&existing)
                .map(JobId)
                .map_err(|_| error::unexpected(format!("enqueue returned the id {existing:?}")))?;
        }
    }
    jq_core::observe::EnqueueTally::of(&jobs).record();
    Ok(ids)
}
/// Runs `cmd` (a script that stores jobs in `queues`) after naming any of
/// those queues the registry lacks: the registry must name every queue
/// that holds a job (schema.rs). On one server in the same round trip; on
/// Cluster the registry lives in another slot, so it goes first.
pub(crate) async fn registered_then(s: &Inner, queues: &[&str], cmd: redis::Cmd) -> Result<Vec<String>> {
    run_registered(s, s.registry_due(queues), cmd).await
}

/// [`registered_then`] with the queues whose registry entry is due already
/// known ([`Inner::registry_due`]).
async fn run_registered(s: &Inner, due: Option<Vec<&str>>, cmd: redis::Cmd) -> Result<Vec<String>> {
    let Some(due) = due else { return s.query(&cmd).await };
    let reply = if s.is_cluster() {
        let _: u64 = s.query(redis::cmd("SADD").arg(s.keys.registry()).arg(&due)).await?;
        s.query(&cmd).await?
    } else {
        let mut pipe = redis::pipe();
        pipe.cmd("SADD").arg(s.keys.registry()).arg(&due).ignore();
        pipe.add_command(cmd);
        let (reply,): (Vec<String>,) = s.query_pipe(&pipe).await?;
        reply
    };
    s.registered(&due);
    Ok(reply)
}

/// The queues of a batch, in order of first appearance, and each job's
/// 1-based index into them.
fn queue_indexes(jobs: &[NewJob]) -> (Vec<&str>, Vec<usize>) {
    // a batch names a few queues: a list beats a map
    let mut names: Vec<&str> = Vec::new();
    let mut indexes: Vec<usize> = Vec::with_capacity(jobs.len());
    for job in jobs {
        let q = job.queue.as_str();
        let at = match names.iter().position(|n| *n == q) {
            Some(at) => at,
            None => {
                names.push(q);
                names.len() - 1
            }
        };
        indexes.push(at + 1);
    }
    (names, indexes)
}

/// The call of `lua/enqueue_rules.lua` storing a batch in which a job has
/// a unique rule: each job's store values (a debounce's packed with the
/// run_at a new job of it gets), then its rule's values.
fn rules_call(s: &Inner, jobs: &[NewJob], now: i64) -> redis::Cmd {
    let (names, indexes) = queue_indexes(jobs);
    let bases: Vec<String> = names.iter().map(|q| s.keys.base(q)).collect();
    let mut cmd = scripts::call(&scripts::ENQUEUE_RULES, &bases);
    cmd.arg(s.keys.channel()).arg(now);
    let micros = |d: std::time::Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
    for (job, index) in jobs.iter().zip(indexes) {
        let own_run_at = job.run_at.map_or(now, |at| at.timestamp_micros());
        match job.unique_rule {
            None => {
                job_args(&mut cmd, job, index, now);
                cmd.arg("").arg("").arg("").arg("").arg("");
            }
            Some(UniqueRule::Debounce { window, max_delay }) => {
                let first = micros(max_delay.map_or(window, |m| window.min(m)));
                let stored = NewJob { run_at: Some(from_micros(now.saturating_add(first))), ..job.clone() };
                job_args(&mut cmd, &stored, index, now);
                cmd.arg("debounce")
                    .arg(micros(window))
                    .arg(max_delay.map_or(String::new(), |m| micros(m).to_string()))
                    .arg(own_run_at)
                    .arg(job.payload.as_str());
            }
            Some(UniqueRule::Period(period)) => {
                job_args(&mut cmd, job, index, now);
                cmd.arg("period").arg(micros(period)).arg("").arg(own_run_at).arg("");
            }
            Some(UniqueRule::Replace) => {
                job_args(&mut cmd, job, index, now);
                cmd.arg("replace").arg("").arg("").arg(own_run_at).arg(job.payload.as_str());
            }
        }
    }
    cmd
}

/// The script call storing every job of the batch.
fn script_call(s: &Inner, jobs: &[NewJob], now: i64) -> redis::Cmd {
    let (names, indexes) = queue_indexes(jobs);
    let bases: Vec<String> = names.iter().map(|q| s.keys.base(q)).collect();
    let mut cmd = scripts::call(&scripts::ENQUEUE, &bases);
    cmd.arg(s.keys.channel());
    for (job, index) in jobs.iter().zip(indexes) {
        job_args(&mut cmd, job, index, now);
    }
    debug_assert_eq!(cmd.args_iter().count(), 3 + bases.len() + 1 + PER_JOB * jobs.len());
    cmd
}

/// Whether `lua/enqueue_many.lua` can store `jobs`: none has a unique key
/// (whose holder the script would have to look up per job) and no id is
/// there twice (the script checks resends against the store only). Ids
/// made in one process ascend, so the set is built only for a batch whose
/// ids do not.
fn plain_and_distinct(jobs: &[NewJob]) -> bool {
    if jobs.iter().any(|j| j.unique_key.is_some()) {
        return false;
    }
    if jobs.windows(2).all(|w| w[0].id < w[1].id) {
        return true;
    }
    let mut seen = std::collections::HashSet::with_capacity(jobs.len());
    jobs.iter().all(|j| seen.insert(j.id))
}

/// The call of `lua/enqueue_many.lua` storing `jobs`, all of `queue`, as
/// [`plain_and_distinct`] lets it: each command's arguments in one range.
fn many_call(s: &Inner, queue: &str, jobs: &[NewJob], now: i64) -> redis::Cmd {
    let packed: Vec<Packed> = jobs.iter().map(|j| Packed::of(j, now)).collect();
    let index_of = |p: &Packed| INDEXES.iter().position(|i| *i == p.index).unwrap_or(0);
    let mut per_index = [0_usize; 4];
    for p in &packed {
        per_index[index_of(p)] += 1;
    }
    let timeouts = packed.iter().filter(|p| !p.timeout.is_empty()).count();
    let mut cmd = scripts::call(&scripts::ENQUEUE_MANY, &[s.keys.base(queue)]);
    cmd.arg(s.keys.channel()).arg(jobs.len()).arg(per_index[2]).arg(if per_index[0] + per_index[2] > 0 {
        "1"
    } else {
        "0"
    });
    for count in per_index {
        cmd.arg(count);
    }
    cmd.arg(timeouts);
    for p in &packed {
        cmd.arg(&p.hex);
    }
    for p in &packed {
        cmd.arg(&p.hex).arg(&p.body);
    }
    for p in &packed {
        cmd.arg(&p.hex).arg(&p.state);
    }
    for p in &packed {
        cmd.arg("0").arg(&p.hex);
    }
    for (at, index) in INDEXES.iter().enumerate() {
        if per_index[at] > 0 {
            for p in packed.iter().filter(|p| p.index == *index) {
                cmd.arg(&p.score).arg(&p.member);
            }
        }
    }
    for p in packed.iter().filter(|p| !p.timeout.is_empty()) {
        cmd.arg(&p.hex).arg(format!("{}\0\0\0", p.timeout));
    }
    cmd
}

/// The indexes a new job goes to, in the order of `lua/enqueue_many.lua`'s
/// counts.
const INDEXES: [&str; 4] = ["ready", "scheduled", "kwait", "kscheduled"];

/// The call of `lua/enqueue_one.lua` storing `job`, which has no unique
/// key; `refresh`: its queue's registry entry is due, and the call writes
/// the queue's `HASHTABLE` fields too.
fn lone_call(s: &Inner, job: &NewJob, now: i64, refresh: bool) -> redis::Cmd {
    let p = Packed::of(job, now);
    let mut cmd = scripts::call(&scripts::ENQUEUE_ONE, &[s.keys.base(job.queue.as_str())]);
    cmd.arg(s.keys.channel())
        .arg(&p.hex)
        .arg(&p.body)
        .arg(&p.state)
        .arg(p.index)
        .arg(&p.score)
        .arg(&p.member)
        .arg(&p.timeout);
    if refresh {
        cmd.arg("1");
    }
    cmd
}

/// What the scripts store for a new job, packed here so that they only
/// move strings (schema.rs has the layout).
struct Packed {
    /// The id, 32 hex digits.
    hex: String,
    /// The `jobs` value: kind payload priority max_attempts created_at trace.
    body: String,
    /// The `states` value: Pending or Scheduled, attempts 0, run_at,
    /// unique key, the four lease and finish fields empty; a keyed job's
    /// has an empty flow and its key after them.
    state: String,
    /// The index the job goes to: `ready`, `scheduled`, `kwait` or
    /// `kscheduled`.
    index: &'static str,
    /// Its score there.
    score: String,
    /// Its member there.
    member: String,
    /// Its own timeout in milliseconds, "" for none.
    timeout: String,
}

impl Packed {
    /// `job`'s values, created at `now` (which also decides Pending or
    /// Scheduled).
    fn of(job: &NewJob, now: i64) -> Packed {
        use std::fmt::Write as _;
        let hex = id_hex(job.id);
        let run_at = job.run_at.map_or(now, |at| at.timestamp_micros());
        let pending = run_at <= now;
        let priority = job.priority.as_i16();
        let unique_key = job.unique_key.as_deref().unwrap_or("");
        let key = job.key.as_deref().unwrap_or("");
        let trace = job.trace.as_ref().map_or("", |t| t.as_stored());
        let payload = job.payload.as_str();
        // `write!` into a String cannot fail
        let mut body = String::with_capacity(job.kind.len() + payload.len() + trace.len() + 40);
        let _ = write!(body, "{}\0{payload}\0{priority}\0{}\0{now}\0{trace}", job.kind, job.max_attempts);
        let mut state = String::with_capacity(48 + unique_key.len() + key.len());
        let name = if pending { "pending" } else { "scheduled" };
        let _ = write!(state, "{name}\0{attempts}\0{run_at}\0{unique_key}\0\0\0\0", attempts = 0);
        if !key.is_empty() {
            let _ = write!(state, "\0\0{key}");
        }
        let (index, score, member) = match (key.is_empty(), pending) {
            // the ready member: run_at in 20 digits, then the id
            (true, true) => ("ready", (-i32::from(priority)).to_string(), format!("{:020}{hex}", run_at.max(0))),
            // the kwait member: the priority's 11 digits (kprio in
            // lua/common/base.lua), the key, NUL, the ready member
            (false, true) => (
                "kwait",
                "0".to_owned(),
                format!("{:011}{key}\0{:020}{hex}", 5_000_000_000_i64 - i64::from(priority), run_at.max(0)),
            ),
            (true, false) => ("scheduled", run_at.to_string(), hex.clone()),
            (false, false) => ("kscheduled", run_at.to_string(), hex.clone()),
        };
        let timeout = job.timeout.map_or(String::new(), |t| t.as_millis().to_string());
        Packed { hex, body, state, index, score, member, timeout }
    }
}

/// Appends the [`PER_JOB`] script values of `job` (`lua/common/store.lua`)
/// to `cmd`; `queue_index` is 1-based into the script's KEYS, `now` the
/// job's created_at and what decides Pending or Scheduled.
pub(crate) fn job_args(cmd: &mut redis::Cmd, job: &NewJob, queue_index: usize, now: i64) {
    let p = Packed::of(job, now);
    cmd.arg(&p.hex)
        .arg(queue_index)
        .arg(&p.body)
        .arg(&p.state)
        .arg(job.unique_key.as_deref().unwrap_or(""))
        .arg(p.index)
        .arg(&p.score)
        .arg(&p.member)
        .arg(&p.timeout);
}
