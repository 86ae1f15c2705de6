//! complete and heartbeat: one script call per batch
//! (`lua/complete.lua`, `lua/heartbeat.lua`).

use std::collections::HashMap;
use std::time::Duration;

use jq_core::{Completion, CompletionResult, Error, JobId, LeaseRef, Outcome, QueueName, Result, State};

use crate::keys::id_hex;
use crate::{Inner, duration_micros, error, scripts};

/// The KEYS of a batch and each queue's 1-based index into them.
struct Groups {
    bases: Vec<String>,
    index: HashMap<QueueName, usize>,
}

impl Groups {
    fn new<'a>(s: &Inner, queues: impl Iterator<Item = &'a QueueName>) -> Self {
        let mut groups = Groups { bases: Vec::new(), index: HashMap::new() };
        for q in queues {
            if !groups.index.contains_key(q) {
                groups.bases.push(s.keys.base(q.as_str()));
                groups.index.insert(q.clone(), groups.bases.len());
            }
        }
        groups
    }
}

pub(crate) async fn complete(s: &Inner, batch: Vec<Completion>) -> Result<Vec<CompletionResult>> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<JobId> = batch.iter().map(|c| c.lease.id).collect();
    let located = s.locate(&ids).await?;
    let groups = Groups::new(s, located.values());
    // Items whose job exists nowhere are LeaseLost without a server call.
    let mut results: Vec<Option<CompletionResult>> = batch
        .iter()
        .map(|c| if located.contains_key(&c.lease.id) { None } else { Some(Err(Error::LeaseLost { id: c.lease.id })) })
        .collect();
    let sent: Vec<usize> = (0..batch.len()).filter(|&i| results[i].is_none()).collect();
    if !sent.is_empty() {
        let mut cmd = scripts::call(&scripts::COMPLETE, &groups.bases);
        cmd.arg(s.now_micros()).arg(s.keys.channel());
        for &i in &sent {
            let c = &batch[i];
            let (kind, message, delay) = match &c.outcome {
                Outcome::Ack => ("ack", "", Duration::ZERO),
                Outcome::Retry { error, delay } => ("retry", error.as_str(), *delay),
                Outcome::Fail { error } => ("fail", error.as_str(), Duration::ZERO),
                Outcome::Release { delay } => ("release", "", *delay),
            };
            cmd.arg(groups.index[&located[&c.lease.id]])
                .arg(id_hex(c.lease.id))
                .arg(c.lease.token.to_string())
                .arg(kind)
                .arg(message)
                .arg(duration_micros(delay));
        }
        let states: Vec<String> = s.query(&cmd).await?;
        if states.len() != sent.len() {
            return Err(error::unexpected(format!(
                "complete returned {} results for {} items",
                states.len(),
                sent.len()
            )));
        }
        for (&i, state) in sent.iter().zip(states) {
            let id = batch[i].lease.id;
            results[i] = Some(if state == "lost" {
                Err(Error::LeaseLost { id })
            } else {
                state.parse::<State>().map_err(|_| error::unexpected(format!("complete returned the state {state:?}")))
            });
        }
    }
    {
        // Whatever happened, this handle no longer holds these jobs.
        let mut owners = s.owners.lock().unwrap_or_else(|e| e.into_inner());
        for id in &ids {
            owners.remove(id);
        }
    }
    Ok(results.into_iter().map(|r| r.unwrap_or_else(|| Err(error::unexpected("complete lost an item")))).collect())
}

pub(crate) async fn heartbeat(s: &Inner, leases: &[LeaseRef], lease: Duration) -> Result<Vec<JobId>> {
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<JobId> = leases.iter().map(|l| l.id).collect();
    let located = s.locate(&ids).await?;
    let mut lost: Vec<JobId> = ids.iter().filter(|id| !located.contains_key(id)).copied().collect();
    let known: Vec<&LeaseRef> = leases.iter().filter(|l| located.contains_key(&l.id)).collect();
    if !known.is_empty() {
        let groups = Groups::new(s, located.values());
        let mut cmd = scripts::call(&scripts::HEARTBEAT, &groups.bases);
        cmd.arg(s.now_micros()).arg(duration_micros(lease));
        for l in &known {
            cmd.arg(groups.index[&located[&l.id]]).arg(id_hex(l.id)).arg(l.token.to_string());
        }
        let lost_hex: Vec<String> = s.query(&cmd).await?;
        for hex in lost_hex {
            if let Some(l) = known.iter().find(|l| id_hex(l.id) == hex) {
                lost.push(l.id);
            }
        }
    }
    Ok(lost)
}
