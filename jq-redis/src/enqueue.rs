//! enqueue: one script call (`lua/enqueue.lua`) for the whole batch; on
//! Redis Cluster one per queue of the batch (a script touches one slot).
//!
//! Everything per job that does not depend on what is stored already (run_at,
//! Pending or Scheduled, the ready-set member) is computed here, so the script
//! only moves strings: the server is single-threaded and is what limits
//! throughput.

use std::collections::HashMap;

use jq_core::{JobId, NewJob, Result};
use uuid::Uuid;

use crate::keys::id_hex;
use crate::{Inner, error, scripts};

/// Values per job after the script's 3 leading arguments.
const PER_JOB: usize = 9;

pub(crate) async fn enqueue(s: &Inner, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    for job in &jobs {
        job.check_payload(s.config.max_payload_bytes)?;
    }
    let now = s.now_micros();
    // positions of the jobs of each script call
    let groups: Vec<Vec<usize>> = if s.is_cluster() {
        let mut by_queue: Vec<Vec<usize>> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, job) in jobs.iter().enumerate() {
            let g = *index.entry(job.queue.as_str()).or_insert_with(|| {
                by_queue.push(Vec::new());
                by_queue.len() - 1
            });
            by_queue[g].push(i);
        }
        by_queue
    } else {
        vec![(0..jobs.len()).collect()]
    };
    let mut names: Vec<&str> = jobs.iter().map(|j| j.queue.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let cmds: Vec<redis::Cmd> = groups.iter().map(|g| script_call(s, &jobs, g, now)).collect();

    let due = s.registry_due(&names);
    let replies: Vec<Vec<String>> = match (due, s.is_cluster()) {
        (None, _) => s.query_each(cmds).await?,
        // The registry first, in the same round trip: it must name every
        // queue that holds a job (see keys.rs).
        (Some(due), false) => {
            let mut pipe = redis::pipe();
            pipe.cmd("SADD").arg(s.keys.registry()).arg(&due).ignore();
            for cmd in cmds {
                pipe.add_command(cmd);
            }
            let replies: Vec<Vec<String>> = s.query_pipe(&pipe).await?;
            s.registered(&due);
            replies
        }
        // On Cluster the registry is in another slot: first, then the rest.
        (Some(due), true) => {
            let _: u64 = s.query(redis::cmd("SADD").arg(s.keys.registry()).arg(&due)).await?;
            s.registered(&due);
            s.query_each(cmds).await?
        }
    };
    if replies.len() != groups.len() {
        return Err(error::unexpected(format!("enqueue got {} replies for {} calls", replies.len(), groups.len())));
    }
    let mut ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    for (group, reply) in groups.iter().zip(replies) {
        if reply.len() != group.len() {
            return Err(error::unexpected(format!("enqueue returned {} ids for {} jobs", reply.len(), group.len())));
        }
        for (&i, existing) in group.iter().zip(reply) {
            if !existing.is_empty() {
                ids[i] = Uuid::parse_str(&existing)
                    .map(JobId)
                    .map_err(|_| error::unexpected(format!("enqueue returned the id {existing:?}")))?;
            }
        }
    }
    Ok(ids)
}

/// The script call storing `jobs[i]` for every `i` of `group`.
fn script_call(s: &Inner, jobs: &[NewJob], group: &[usize], now: i64) -> redis::Cmd {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut names: Vec<&str> = Vec::new();
    for &i in group {
        let q = jobs[i].queue.as_str();
        if !index.contains_key(q) {
            names.push(q);
            index.insert(q, names.len());
        }
    }
    let bases: Vec<String> = names.iter().map(|q| s.keys.base(q)).collect();
    let mut cmd = scripts::call(&scripts::ENQUEUE, &bases);
    cmd.arg(now).arg(s.keys.channel()).arg(names.join("\n"));
    let mut member = String::with_capacity(52);
    for &i in group {
        let job = &jobs[i];
        let hex = id_hex(job.id);
        let run_at = job.run_at.map_or(now, |at| at.timestamp_micros());
        member.clear();
        if run_at <= now {
            use std::fmt::Write as _;
            // the ready member: run_at in 20 digits, then the id (keys.rs)
            let _ = write!(member, "{:020}{hex}", run_at.max(0));
        }
        cmd.arg(&hex)
            .arg(index[job.queue.as_str()])
            .arg(&job.kind)
            .arg(job.payload.as_str())
            .arg(job.priority.as_i16())
            .arg(run_at)
            .arg(job.max_attempts)
            .arg(job.unique_key.as_deref().unwrap_or(""))
            .arg(&member);
    }
    debug_assert_eq!(cmd.args_iter().count(), 3 + bases.len() + 3 + PER_JOB * group.len());
    cmd
}
