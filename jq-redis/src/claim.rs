//! claim: one script call (`lua/claim.lua`) takes a batch over every asked
//! queue, Pending jobs and (bounded) due Scheduled ones alike.
//!
//! On Redis Cluster a script touches one slot, so a claim over several
//! queues first peeks at each queue (`lua/peek.lua`, concurrently), merges
//! the peeks in claim order, and then claims from each queue as many jobs as
//! it contributed to the first `limit`. Jobs claimed meanwhile by others
//! make the answer shorter, never out of order within a queue.

use std::cmp::Reverse;

use jq_core::{ClaimRequest, Completion, Job, JobId, LeaseRef, LeaseToken, Outcome, QueueName, Result};

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
    if queues.len() == 1 || !s.is_cluster() {
        return claim_from(s, &queues, request.limit, request).await;
    }
    // Cluster, several queues: peek, merge, then claim per queue.
    let limit = request.limit.min(CHUNK);
    let now = s.now_micros();
    let peeks = queues
        .iter()
        .map(|q| {
            let mut cmd = scripts::call(&scripts::PEEK, &[s.keys.base(q)]);
            cmd.arg(now).arg(limit).arg(DUE_IN_CLAIM);
            cmd
        })
        .collect();
    let peeks: Vec<Vec<(i64, String)>> = s.query_each(peeks).await?;
    let mut merged: Vec<(i64, String, usize)> = peeks
        .into_iter()
        .enumerate()
        .flat_map(|(qi, peek)| peek.into_iter().map(move |(score, member)| (score, member, qi)))
        .collect();
    merged.sort_unstable();
    let mut counts = vec![0usize; queues.len()];
    for (_, _, qi) in merged.iter().take(limit) {
        counts[*qi] += 1;
    }
    let claims =
        counts.iter().enumerate().filter(|(_, n)| **n > 0).map(|(qi, n)| claim_from(s, &queues[qi..=qi], *n, request));
    let mut jobs: Vec<Job> = futures::future::try_join_all(claims).await?.into_iter().flatten().collect();
    jobs.sort_by_key(|j| (Reverse(j.priority.as_i16()), j.run_at, j.id));
    Ok(jobs)
}

/// Claims up to `limit` jobs of `queues` (all in one slot, or a single
/// server) in script calls of at most [`CHUNK`].
async fn claim_from(s: &Inner, queues: &[&str], limit: usize, request: &ClaimRequest) -> Result<Vec<Job>> {
    let bases: Vec<String> = queues.iter().map(|q| s.keys.base(q)).collect();
    let lease = duration_micros(request.lease);
    let mut out: Vec<Job> = Vec::new();
    while out.len() < limit {
        let n = (limit - out.len()).min(CHUNK);
        let now = s.now_micros();
        let expires = (now + lease).to_string();
        let tokens: Vec<LeaseToken> = (0..n).map(|_| LeaseToken::new()).collect();
        let token_args: Vec<String> = tokens.iter().map(ToString::to_string).collect();
        let mut cmd = scripts::call(&scripts::CLAIM, &bases);
        cmd.arg(now).arg(n).arg(lease).arg(&request.worker).arg(DUE_IN_CLAIM).arg(&token_args);
        let rows: Vec<Vec<Option<String>>> = s.query(&cmd).await?;
        let got = rows.len();
        let mut jobs = Vec::with_capacity(got);
        let mut corrupt = Vec::new();
        for (row, token) in rows.into_iter().zip(tokens) {
            if let [Some(tag), Some(id), Some(reason)] = row.as_slice()
                && tag == "corrupt"
            {
                // claim.lua moved it to Dead already; its token is unused
                tracing::error!(job = %id, %reason, "claimed a job that cannot be used: moved it to Dead");
                continue;
            }
            let located = claimed_id_and_queue(&row, queues);
            match row::decode_claimed(row, queues, token.to_string(), &request.worker, &expires) {
                Ok(job) => jobs.push(job),
                Err(e) => match located {
                    Some((id, queue)) => corrupt.push((LeaseRef { id, token }, queue, e.to_string())),
                    None => {
                        tracing::error!(error = %e, "claimed a job whose id cannot be read; recover will hand it on")
                    }
                },
            }
        }
        {
            let mut owners = s.owners.lock().unwrap_or_else(|e| e.into_inner());
            for job in &jobs {
                owners.insert(job.id, job.queue.clone());
            }
            for (lease, queue, _) in &corrupt {
                owners.insert(lease.id, queue.clone());
            }
        }
        bury(s, corrupt).await?;
        out.extend(jobs);
        if got < n {
            break;
        }
    }
    Ok(out)
}

/// The id and queue of a claimed row, read apart from its other fields so a
/// job whose fields are garbage can still be found (the script puts them
/// last).
fn claimed_id_and_queue(row: &[Option<String>], queues: &[&str]) -> Option<(JobId, QueueName)> {
    let [.., Some(id), Some(queue)] = row else { return None };
    let queue = queues.get(queue.parse::<usize>().ok()?.checked_sub(1)?)?;
    Some((id.parse().ok()?, QueueName::new(*queue).ok()?))
}

/// Moves claimed jobs that cannot be decoded to Dead with the reason, under
/// the lease the claim just took, so the worker never sees them and they
/// do not come back after every lease expiry.
async fn bury(s: &Inner, corrupt: Vec<(LeaseRef, QueueName, String)>) -> Result<()> {
    if corrupt.is_empty() {
        return Ok(());
    }
    let batch = corrupt
        .into_iter()
        .map(|(lease, _, reason)| {
            tracing::error!(job = %lease.id, %reason, "claimed a job that cannot be decoded: moving it to Dead");
            Completion { lease, outcome: Outcome::Fail { error: reason } }
        })
        .collect();
    for result in crate::complete::complete(s, batch).await? {
        if let Err(e) = result {
            tracing::error!(error = %e, "could not move a corrupt job to Dead; recover will hand it on");
        }
    }
    Ok(())
}
