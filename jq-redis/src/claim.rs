//! claim: one script call (`lua/claim.lua`) takes a batch over every asked
//! queue, Pending jobs and (bounded) due Scheduled ones alike.

use jq_core::{ClaimRequest, Job, LeaseToken, Result};

use crate::{Inner, duration_micros, row, scripts};

/// Most jobs one script call claims; larger requests loop.
const CHUNK: usize = 1_000;
/// Most due Scheduled jobs per queue a claim considers besides the Pending
/// ones (the earliest due); `promote` moves the rest.
const DUE_IN_CLAIM: usize = 1_000;

pub(crate) async fn claim(s: &Inner, request: &ClaimRequest) -> Result<Vec<Job>> {
    let mut queues: Vec<&str> = request.queues.iter().map(|q| q.as_str()).collect();
    queues.sort_unstable();
    queues.dedup();
    if request.limit == 0 || queues.is_empty() {
        return Ok(Vec::new());
    }
    let bases: Vec<String> = queues.iter().map(|q| s.keys.base(q)).collect();
    let lease = duration_micros(request.lease);
    let mut out: Vec<Job> = Vec::new();
    while out.len() < request.limit {
        let n = (request.limit - out.len()).min(CHUNK);
        let mut cmd = scripts::call(&scripts::CLAIM, &bases);
        cmd.arg(s.now_micros()).arg(n).arg(lease).arg(&request.worker).arg(DUE_IN_CLAIM);
        for _ in 0..n {
            cmd.arg(LeaseToken::new().to_string());
        }
        let rows: Vec<Vec<String>> = s.query(&cmd).await?;
        let got = rows.len();
        let mut jobs = Vec::with_capacity(got);
        for r in rows {
            // A job that cannot be decoded is Running now; its lease expires
            // and recover hands it on (and eventually to Dead), so one bad
            // hash never blocks the queue. We report it rather than hide it.
            match row::decode(r) {
                Ok(job) => jobs.push(job),
                Err(e) => tracing::error!(error = %e, "claimed a job that cannot be decoded"),
            }
        }
        {
            let mut owners = s.owners.lock().unwrap_or_else(|e| e.into_inner());
            for job in &jobs {
                owners.insert(job.id, job.queue.clone());
            }
        }
        out.extend(jobs);
        if got < n {
            break;
        }
    }
    Ok(out)
}
