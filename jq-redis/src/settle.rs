//! settle and heartbeat: one script call per batch
//! (`lua/settle.lua`, `lua/heartbeat.lua`); on Redis Cluster one per
//! queue of the batch, sent concurrently.

use std::collections::HashMap;
use std::time::Duration;

use jq_core::storage::{Beat, LeaseRef, Outcome, Settled, Settlement, storable_message};
use jq_core::{Error, JobId, QueueName, Result, State};

use crate::schema::id_hex;
use crate::{Inner, duration_micros, error, scripts};

/// The KEYS of one script call and each queue's 1-based index into them.
pub(crate) struct Groups {
    pub(crate) bases: Vec<String>,
    pub(crate) index: HashMap<QueueName, usize>,
}

impl Groups {
    pub(crate) fn new<'a>(s: &Inner, queues: impl Iterator<Item = &'a QueueName>) -> Self {
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

/// Splits item positions into script calls: all in one on a single server,
/// one call per queue on Cluster.
pub(crate) fn calls<'a>(s: &Inner, items: &[usize], queue_of: impl Fn(usize) -> &'a QueueName) -> Vec<Vec<usize>> {
    if !s.is_cluster() {
        return vec![items.to_vec()];
    }
    let mut by_queue: Vec<Vec<usize>> = Vec::new();
    let mut index: HashMap<&QueueName, usize> = HashMap::new();
    for &i in items {
        let g = *index.entry(queue_of(i)).or_insert_with(|| {
            by_queue.push(Vec::new());
            by_queue.len() - 1
        });
        by_queue[g].push(i);
    }
    by_queue
}

pub(crate) async fn settle(s: &Inner, batch: Vec<Settlement>) -> Result<Vec<Settled>> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<JobId> = batch.iter().map(|c| c.lease.id).collect();
    let located = s.locate(&ids).await?;
    // Items whose job exists nowhere are LeaseLost without a server call.
    let mut results: Vec<Option<Settled>> = batch
        .iter()
        .map(|c| match c.outcome {
            _ if located.contains_key(&c.lease.id) => None,
            _ => Some(Err(Error::LeaseLost { id: c.lease.id })),
        })
        .collect();
    let sent: Vec<usize> = (0..batch.len()).filter(|&i| results[i].is_none()).collect();
    let calls = calls(s, &sent, |i| &located[&batch[i].lease.id]);
    let now = s.now_micros();
    let cmds: Vec<redis::Cmd> = calls
        .iter()
        .filter(|call| !call.is_empty())
        .map(|call| {
            let groups = Groups::new(s, call.iter().map(|&i| &located[&batch[i].lease.id]));
            let mut cmd = scripts::call(&scripts::SETTLE, &groups.bases);
            cmd.arg(now).arg(s.keys.channel());
            for &i in call {
                let c = &batch[i];
                let (kind, message, delay) = match &c.outcome {
                    Outcome::Ack => ("ack", "".into(), Duration::ZERO),
                    // the result goes where an error message goes
                    Outcome::AckWith { result } => ("ackr", result.as_str().into(), Duration::ZERO),
                    Outcome::Nack { error, delay } => ("nack", storable_message(error), *delay),
                    Outcome::Bury { error } => ("bury", storable_message(error), Duration::ZERO),
                    Outcome::Release { delay } => ("release", "".into(), *delay),
                    Outcome::Cancel => ("cancel", "".into(), Duration::ZERO),
                };
                cmd.arg(groups.index[&located[&c.lease.id]])
                    .arg(id_hex(c.lease.id))
                    .arg(c.lease.token.to_string())
                    .arg(kind)
                    .arg(message.as_ref())
                    .arg(duration_micros(delay));
            }
            cmd
        })
        .collect();
    let replies: Vec<Vec<String>> = s.query_each(cmds).await?;
    for (call, states) in calls.iter().filter(|call| !call.is_empty()).zip(replies) {
        if states.len() != call.len() {
            return Err(error::unexpected(format!(
                "settle returned {} results for {} items",
                states.len(),
                call.len()
            )));
        }
        for (&i, state) in call.iter().zip(states) {
            let id = batch[i].lease.id;
            results[i] = Some(if state == "lost" {
                Err(Error::LeaseLost { id })
            } else {
                state.parse::<State>().map_err(|_| error::unexpected(format!("settle returned the state {state:?}")))
            });
        }
    }
    // Whatever happened (LeaseLost too), this handle no longer holds them.
    s.owners.remove(&ids);
    Ok(results.into_iter().map(|r| r.unwrap_or_else(|| Err(error::unexpected("settle lost an item")))).collect())
}

pub(crate) async fn heartbeat(s: &Inner, leases: &[LeaseRef], lease: Duration) -> Result<Beat> {
    if leases.is_empty() {
        return Ok(Beat::default());
    }
    let ids: Vec<JobId> = leases.iter().map(|l| l.id).collect();
    let located = s.locate(&ids).await?;
    let mut lost: Vec<JobId> = ids.iter().filter(|id| !located.contains_key(id)).copied().collect();
    let known: Vec<usize> = (0..leases.len()).filter(|&i| located.contains_key(&leases[i].id)).collect();
    let calls = calls(s, &known, |i| &located[&leases[i].id]);
    let now = s.now_micros();
    let cmds: Vec<redis::Cmd> = calls
        .iter()
        .filter(|call| !call.is_empty())
        .map(|call| {
            let groups = Groups::new(s, call.iter().map(|&i| &located[&leases[i].id]));
            let mut cmd = scripts::call(&scripts::HEARTBEAT, &groups.bases);
            cmd.arg(now).arg(duration_micros(lease));
            for &i in call {
                let l = &leases[i];
                cmd.arg(groups.index[&located[&l.id]]).arg(id_hex(l.id)).arg(l.token.to_string());
            }
            cmd
        })
        .collect();
    let replies: Vec<(Vec<String>, Vec<String>)> = s.query_each(cmds).await?;
    let mut cancel = Vec::new();
    let find = |hex: &str| known.iter().find(|&&i| id_hex(leases[i].id) == hex).map(|&i| leases[i].id);
    for (lost_hex, cancel_hex) in replies {
        lost.extend(lost_hex.iter().filter_map(|hex| find(hex)));
        cancel.extend(cancel_hex.iter().filter_map(|hex| find(hex)));
    }
    // The lost ones are someone else's now (or gone).
    s.owners.remove(&lost);
    Ok(Beat { lost, cancel })
}
