//! enqueue: one script call (`lua/enqueue.lua`) for the whole batch.

use std::collections::HashMap;

use jq_core::{JobId, NewJob, Result};
use uuid::Uuid;

use crate::keys::id_hex;
use crate::{Inner, error, scripts};

pub(crate) async fn enqueue(s: &Inner, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    for job in &jobs {
        job.check_payload(s.config.max_payload_bytes)?;
    }
    let now = s.now_micros();
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut names: Vec<&str> = Vec::new();
    for job in &jobs {
        let q = job.queue.as_str();
        if !index.contains_key(q) {
            names.push(q);
            index.insert(q, names.len());
        }
    }
    let bases: Vec<String> = names.iter().map(|q| s.keys.base(q)).collect();
    let mut cmd = scripts::call(&scripts::ENQUEUE, &bases);
    cmd.arg(now).arg(s.keys.channel()).arg(names.join("\n"));
    for job in &jobs {
        cmd.arg(id_hex(job.id))
            .arg(index[job.queue.as_str()])
            .arg(&job.kind)
            .arg(job.payload.as_str())
            .arg(job.priority.as_i16());
        match job.run_at {
            Some(at) => cmd.arg(at.timestamp_micros()),
            None => cmd.arg(""),
        };
        cmd.arg(job.max_attempts).arg(job.unique_key.as_deref().unwrap_or(""));
    }
    // The registry first, in the same round trip: it must name every queue
    // that holds a job (see keys.rs).
    let mut pipe = redis::pipe();
    pipe.cmd("SADD").arg(s.keys.registry()).arg(&names).ignore();
    pipe.add_command(cmd);
    let (results,): (Vec<String>,) = s.query_pipe(&pipe).await?;
    if results.len() != jobs.len() {
        return Err(error::unexpected(format!("enqueue returned {} ids for {} jobs", results.len(), jobs.len())));
    }
    jobs.iter()
        .zip(results)
        .map(|(job, existing)| {
            if existing.is_empty() {
                Ok(job.id)
            } else {
                Uuid::parse_str(&existing)
                    .map(JobId)
                    .map_err(|_| error::unexpected(format!("enqueue returned the id {existing:?}")))
            }
        })
        .collect()
}
