//! enqueue: one script call (`lua/enqueue.lua`) for the whole batch, so a
//! batch is stored whole or not at all. On Redis Cluster a script touches
//! one slot: a batch whose queues live in several slots is refused with
//! [`Error::BatchNotAtomic`] before anything is stored.
//!
//! Everything per job that does not depend on what is stored already (run_at,
//! Pending or Scheduled, the ready-set member) is computed here, so the script
//! only moves strings: the server is single-threaded and is what limits
//! throughput.

use std::collections::HashMap;

use jq_core::{Error, JobId, NewJob, Result};
use uuid::Uuid;

use crate::schema::{id_hex, slot};
use crate::{Inner, error, scripts};

/// Values per job after the script's 2 leading arguments.
const PER_JOB: usize = 12;

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
    let cmd = script_call(s, &jobs, now);
    let reply = registered_then(s, &names, cmd).await?;
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
    let Some(due) = s.registry_due(queues) else { return s.query(&cmd).await };
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

/// The script call storing every job of the batch.
fn script_call(s: &Inner, jobs: &[NewJob], now: i64) -> redis::Cmd {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut names: Vec<&str> = Vec::new();
    for job in jobs {
        let q = job.queue.as_str();
        if !index.contains_key(q) {
            names.push(q);
            index.insert(q, names.len());
        }
    }
    let bases: Vec<String> = names.iter().map(|q| s.keys.base(q)).collect();
    let mut cmd = scripts::call(&scripts::ENQUEUE, &bases);
    cmd.arg(now).arg(s.keys.channel());
    for job in jobs {
        job_args(&mut cmd, job, index[job.queue.as_str()], now);
    }
    debug_assert_eq!(cmd.args_iter().count(), 3 + bases.len() + 2 + PER_JOB * jobs.len());
    cmd
}

/// Appends the 12 script values of `job` (`lua/enqueue.lua`) to `cmd`;
/// `queue_index` is 1-based into the script's KEYS.
pub(crate) fn job_args(cmd: &mut redis::Cmd, job: &NewJob, queue_index: usize, now: i64) {
    let hex = id_hex(job.id);
    let run_at = job.run_at.map_or(now, |at| at.timestamp_micros());
    let mut member = String::new();
    if run_at <= now {
        use std::fmt::Write as _;
        // the ready member: run_at in 20 digits, then the id (schema.rs)
        let _ = write!(member, "{:020}{hex}", run_at.max(0));
    }
    cmd.arg(&hex)
        .arg(queue_index)
        .arg(&job.kind)
        .arg(job.payload.as_str())
        .arg(job.priority.as_i16())
        .arg(run_at)
        .arg(job.max_attempts)
        .arg(job.unique_key.as_deref().unwrap_or(""))
        .arg(&member)
        .arg(job.trace.as_ref().map_or("", |t| t.as_stored()))
        .arg(job.timeout.map_or(String::new(), |t| t.as_millis().to_string()))
        .arg(job.key.as_deref().unwrap_or(""));
}
