//! claim: one script call (`lua/claim.lua`) takes a batch over every asked
//! queue, Pending jobs and (bounded) due Scheduled ones alike, each under
//! the claim's token.
//!
//! On Redis Cluster a script touches one slot, so a claim over several
//! queues first peeks at each queue (`lua/peek.lua`, concurrently), merges
//! the peeks in claim order, and then claims from each queue as many jobs as
//! it contributed to the first `limit`. Jobs claimed meanwhile by others
//! make the answer shorter, never out of order within a queue.
//!
//! A claim is several script calls when it spans slots or more than
//! [`CHUNK`] jobs. Whatever one of them took is handed over even when
//! another fails: then the claim looks up everything its token holds
//! (`lua/claim_earlier.lua`, which also finds what a failed call took
//! before its answer was lost) and returns that, or, if the lookup fails
//! too, what the calls that answered returned. It returns an error only
//! when no call claimed anything. A resend starts with the same lookup.
//!
//! A short script call ends its reply with what held back the claimable
//! jobs it left (`{ "limited", v }`), which the claim answers
//! ([`ClaimAnswer::limited`]). On Redis Cluster, a claim over queues in
//! several slots reports what the queues it claimed from found.

use std::cmp::Reverse;

use jq_core::storage::{ClaimAnswer, ClaimRequest, LeaseRef, Limited, Outcome, Settlement};
use jq_core::{Error, Job, JobId, Lease, QueueName, Result};

use crate::{Inner, duration_micros, row, scripts};

/// Most jobs one script call claims; larger requests loop.
const CHUNK: usize = 1_000;
/// Most due Scheduled jobs per queue a claim considers besides the Pending
/// ones (the earliest due); `promote` moves the rest.
const DUE_IN_CLAIM: usize = 1_000;

/// What some script calls claimed, the first error of the others, and
/// what held back the jobs the short ones left.
type Partial = (Vec<Job>, Option<Error>, Option<Limited>);

pub(crate) async fn claim(s: &Inner, request: &ClaimRequest) -> Result<ClaimAnswer> {
    request.check()?;
    let mut queues: Vec<&str> = request.queues.iter().map(|q| q.as_str()).collect();
    queues.sort_unstable();
    queues.dedup();
    if request.limit == 0 || queues.is_empty() {
        return Ok(ClaimAnswer::default());
    }
    if request.resend {
        let earlier = earlier(s, &queues, request).await?;
        if !earlier.is_empty() {
            tracing::info!(jobs = earlier.len(), "a resent claim returns what its first attempt took");
            return Ok(ClaimAnswer::jobs(earlier));
        }
    }
    let (jobs, failed, limited) = if queues.len() == 1 || !s.is_cluster() {
        claim_from(s, &queues, request.limit, request).await
    } else {
        claim_across_slots(s, &queues, request).await?
    };
    let limited = limited.filter(|_| jobs.len() < request.limit);
    let Some(error) = failed else { return Ok(ClaimAnswer { jobs, limited }) };
    if jobs.is_empty() {
        // Nothing claimed, or a lost answer: the caller resends.
        return Err(error);
    }
    tracing::warn!(%error, claimed = jobs.len(), "part of a claim failed; handing over everything its token holds");
    match earlier(s, &queues, request).await {
        Ok(all) if all.len() >= jobs.len() => Ok(ClaimAnswer::jobs(all)),
        Ok(_) | Err(_) => Ok(ClaimAnswer::jobs(jobs)),
    }
}

/// Cluster, several queues: peek, merge, then claim per queue.
async fn claim_across_slots(s: &Inner, queues: &[&str], request: &ClaimRequest) -> Result<Partial> {
    let limit = request.limit.min(CHUNK);
    let now = s.now_micros();
    let forgotten = jq_core::storage::seen_forgotten_at(jq_core::storage::from_micros(now)).timestamp_micros();
    let peeks = queues
        .iter()
        .map(|q| {
            let mut cmd = scripts::call(&scripts::PEEK, &[s.keys.base(q)]);
            cmd.arg(now).arg(limit).arg(DUE_IN_CLAIM).arg(&request.worker).arg(forgotten);
            cmd
        })
        .collect();
    let peeks: Vec<Vec<(i64, String, String)>> = s.query_each(peeks).await?;
    // Merged as claim.lua merges one slot's queues: by (priority desc,
    // run_at, plain before keyed, then the id for plain jobs and the queue
    // for keyed ones, whose peek gives their effective run_at and their
    // order within the queue).
    let mut merged: Vec<(i64, String, u8, String, usize, usize)> = peeks
        .into_iter()
        .enumerate()
        .flat_map(|(qi, peek)| {
            peek.into_iter().enumerate().map(move |(at, (score, member, effective))| {
                if effective.is_empty() {
                    let run_at = member.get(..20).unwrap_or_default().to_owned();
                    (score, run_at, 0, member, qi, at)
                } else {
                    (score, effective, 1, String::new(), qi, at)
                }
            })
        })
        .collect();
    merged.sort_unstable();
    let mut counts = vec![0usize; queues.len()];
    for (.., qi, _) in merged.iter().take(limit) {
        counts[*qi] += 1;
    }
    let claims =
        counts.iter().enumerate().filter(|(_, n)| **n > 0).map(|(qi, n)| claim_from(s, &queues[qi..=qi], *n, request));
    let mut jobs = Vec::new();
    let mut failed = None;
    let mut limited = None;
    for (taken, error, held) in futures::future::join_all(claims).await {
        jobs.extend(taken);
        failed = failed.or(error);
        limited = Limited::merge(limited, held);
    }
    jobs.sort_by_key(|j| (Reverse(j.priority.as_i16()), j.run_at, j.id));
    Ok((jobs, failed, limited))
}

/// Claims up to `limit` jobs of `queues` (all in one slot, or a single
/// server) in script calls of at most [`CHUNK`]. A failing call ends the
/// loop; what the earlier calls took is returned with its error.
async fn claim_from(s: &Inner, queues: &[&str], limit: usize, request: &ClaimRequest) -> Partial {
    let bases: Vec<String> = queues.iter().map(|q| s.keys.base(q)).collect();
    let lease = duration_micros(request.lease);
    let token = request.token.to_string();
    let mut out: Vec<Job> = Vec::new();
    let mut limited = None;
    while out.len() < limit {
        let n = (limit - out.len()).min(CHUNK);
        let now = s.now_micros();
        let claimed = Lease {
            token: request.token,
            worker: request.worker.clone(),
            expires_at: jq_core::storage::from_micros(now + lease),
        };
        let mut cmd = scripts::call(&scripts::CLAIM, &bases);
        let forgotten = jq_core::storage::seen_forgotten_at(jq_core::storage::from_micros(now)).timestamp_micros();
        cmd.arg(now).arg(n).arg(lease).arg(&request.worker).arg(DUE_IN_CLAIM).arg(&token).arg(forgotten);
        let mut rows: Vec<redis::Value> = match s.query(&cmd).await {
            Ok(rows) => rows,
            Err(error) => return (out, Some(error), None),
        };
        limited = rows.last().and_then(limited_report);
        if limited.is_some() {
            rows.pop();
        }
        let got = rows.len();
        let mut jobs = Vec::with_capacity(got);
        let mut corrupt = Vec::new();
        for row in rows {
            let (row, unsplit) = match split_claimed(row) {
                Ok(row) => (row, None),
                Err((row, reason)) => (row, Some(reason)),
            };
            if let [Some(tag), Some(id), Some(reason)] = row.as_slice()
                && tag == "corrupt"
            {
                // claim.lua moved it to Dead already
                tracing::error!(job = %id, %reason, "claimed a job that cannot be used: moved it to Dead");
                continue;
            }
            // A row that cannot be split or decoded is buried under the
            // claim's lease when its id and queue can still be read.
            let located = claimed_id_and_queue(&row, queues);
            let reason = match unsplit {
                Some(reason) => reason,
                None => match row::decode_claimed(row, queues, &claimed) {
                    Ok(job) => {
                        jobs.push(job);
                        continue;
                    }
                    Err(e) => e.to_string(),
                },
            };
            match located {
                Some((id, queue)) => corrupt.push((LeaseRef { id, token: request.token }, queue, reason)),
                None => tracing::error!(%reason, "claimed a job whose id cannot be read; recover will hand it on"),
            }
        }
        s.owners.insert(jobs.iter().map(|j| (j.id, &j.queue)));
        bury(s, corrupt).await;
        out.extend(jobs);
        if got < n {
            break;
        }
    }
    (out, None, limited)
}

/// The `{ "limited", v }` report that ends a short `claim.lua` reply
/// (`None` for any other row): `v` is "c" (a concurrency limit) or the
/// instant, in microseconds, a full rate window has room again.
fn limited_report(row: &redis::Value) -> Option<Limited> {
    let redis::Value::Array(items) = row else { return None };
    let [tag, value] = items.as_slice() else { return None };
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => std::str::from_utf8(b).ok().map(str::to_owned),
        redis::Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    if text(tag)? != "limited" {
        return None;
    }
    let value = text(value)?;
    if value == "c" {
        return Some(Limited::Concurrency);
    }
    match value.parse::<i64>() {
        Ok(micros) => Some(Limited::Rate { until: jq_core::storage::from_micros(micros) }),
        // A report that cannot be read still says a limit held jobs back.
        Err(_) => Some(Limited::Concurrency),
    }
}

/// Every Running job of `queues` that `request.token` holds, in claim
/// order: one script call per queue, pipelined.
async fn earlier(s: &Inner, queues: &[&str], request: &ClaimRequest) -> Result<Vec<Job>> {
    let token = request.token.to_string();
    let names: Vec<QueueName> = queues.iter().filter_map(|q| QueueName::new(*q).ok()).collect();
    let cmds = names
        .iter()
        .map(|q| {
            let mut cmd = scripts::call(&scripts::CLAIM_EARLIER, &[s.keys.base(q.as_str())]);
            cmd.arg(&token);
            cmd
        })
        .collect();
    let replies: Vec<Vec<Vec<String>>> = s.query_each(cmds).await?;
    let mut jobs: Vec<Job> = names
        .iter()
        .zip(replies)
        .flat_map(|(q, flats)| flats.into_iter().map(move |flat| (q, flat)))
        .filter_map(|(q, flat)| {
            row::decode(flat, q).inspect_err(|e| tracing::error!(error = %e, "a job of a resent claim cannot be decoded; recover will hand it on")).ok()
        })
        .collect();
    jobs.sort_by_key(|j| (Reverse(j.priority.as_i16()), j.run_at, j.id));
    s.owners.insert(jobs.iter().map(|j| (j.id, &j.queue)));
    Ok(jobs)
}

/// One row of a `claim.lua` reply, field by field (`None` when absent).
type Row = Vec<Option<String>>;

/// Fields per claimed job in `claim.lua`'s reply: fourteen stored ones
/// (the last four from `extra`), then the id and the queue index.
const CLAIMED_FIELDS: usize = 16;

/// The fields of one row of a `claim.lua` reply: a job's
/// [`CLAIMED_FIELDS`] fields from the string that joins them with NUL (""
/// is absent), or the `corrupt` array as it is. A field that is not UTF-8,
/// or a NUL inside a field (more fields then) makes the row corrupt: the error carries what could be
/// split, with the id and queue index still last, and the reason.
fn split_claimed(row: redis::Value) -> std::result::Result<Row, (Row, String)> {
    let bytes = match row {
        redis::Value::BulkString(bytes) => bytes,
        other => {
            return redis::from_redis_value(other)
                .map_err(|e| (Vec::new(), format!("claim returned a row that is neither a job nor a report: {e}")));
        }
    };
    let mut fields = Vec::with_capacity(CLAIMED_FIELDS);
    let mut bad = None;
    for (i, field) in bytes.split(|b| *b == 0).enumerate() {
        match std::str::from_utf8(field) {
            Ok("") => fields.push(None),
            Ok(field) => fields.push(Some(field.to_owned())),
            Err(_) => {
                bad.get_or_insert(format!("field {} of the claimed job is not UTF-8", i + 1));
                fields.push(None);
            }
        }
    }
    // a keyed job's row carries its key and "k" (a plain row's last field
    // is the queue index, a number, whatever NULs its fields hold)
    let expected =
        if matches!(fields.last(), Some(Some(last)) if last == "k") { CLAIMED_FIELDS + 2 } else { CLAIMED_FIELDS };
    if fields.len() != expected {
        bad.get_or_insert(format!("a field of the claimed job holds a NUL ({} fields, not {expected})", fields.len()));
    }
    match bad {
        None => Ok(fields),
        Some(reason) => Err((fields, reason)),
    }
}

/// The id and queue of a claimed row, read apart from its other fields so a
/// job whose fields are garbage can still be found (the script puts them
/// last).
fn claimed_id_and_queue(row: &[Option<String>], queues: &[&str]) -> Option<(JobId, QueueName)> {
    // the id and queue index end the row, but for a keyed job's key and "k"
    let row = match row {
        [rest @ .., _, Some(k)] if k == "k" => rest,
        row => row,
    };
    let [.., Some(id), Some(queue)] = row else { return None };
    let queue = queues.get(queue.parse::<usize>().ok()?.checked_sub(1)?)?;
    Some((id.parse().ok()?, QueueName::new(*queue).ok()?))
}

/// Moves claimed jobs that cannot be decoded to Dead with the reason, under
/// the lease the claim just took, so the worker never sees them and they
/// do not come back after every lease expiry. When that fails they stay
/// Running for recover (which buries them then); the claim goes on.
async fn bury(s: &Inner, corrupt: Vec<(LeaseRef, QueueName, String)>) {
    if corrupt.is_empty() {
        return;
    }
    // settle() finds their queue here, and forgets them when done.
    s.owners.insert(corrupt.iter().map(|(lease, queue, _)| (lease.id, queue)));
    let ids: Vec<JobId> = corrupt.iter().map(|(lease, _, _)| lease.id).collect();
    let batch = corrupt
        .into_iter()
        .map(|(lease, _, reason)| {
            tracing::error!(job = %lease.id, %reason, "claimed a job that cannot be decoded: moving it to Dead");
            Settlement { lease, outcome: Outcome::Bury { error: reason } }
        })
        .collect();
    match crate::settle::settle(s, batch).await {
        Ok(results) => {
            for result in results {
                if let Err(e) = result {
                    tracing::error!(error = %e, "could not move a corrupt job to Dead; recover will hand it on");
                }
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "could not move the corrupt jobs of a claim to Dead; recover will hand them on");
            s.owners.remove(&ids);
        }
    }
}
