//! get, list, stats, retry, cancel (the request to cancel a running job
//! is cancel.rs's).

use jq_core::{Error, Job, JobFilter, JobId, QueueName, Result, State, StateCounts, Stats, Throughput, Timestamp};

use std::collections::HashMap;

use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use crate::schema::{id_hex, slot};
use crate::{Inner, error, row, scripts};

/// Ids one list call examines at most before it returns a cursor.
const LIST_SCAN_BUDGET: usize = 10_000;

pub(crate) async fn get(s: &Inner, id: JobId) -> Result<Job> {
    let queues = s.queues().await?;
    if queues.is_empty() {
        return Err(Error::NotFound { id });
    }
    let hex = id_hex(id);
    let cmds = queues
        .iter()
        .map(|q| {
            let mut cmd = scripts::call(&scripts::GET, &[s.keys.base(q.as_str())]);
            cmd.arg(&hex);
            cmd
        })
        .collect();
    let found: Vec<Vec<String>> = s.query_each(cmds).await?;
    match queues.iter().zip(found).find(|(_, h)| !h.is_empty()) {
        Some((q, h)) => row::decode(h, q),
        None => Err(Error::NotFound { id }),
    }
}

pub(crate) async fn queue_of(s: &Inner, id: JobId) -> Result<QueueName> {
    s.locate(&[id]).await?.remove(&id).ok_or(Error::NotFound { id })
}

/// Maps a retry/cancel script's answer.
fn answer(id: JobId, reply: String, operation: &'static str) -> Result<()> {
    match reply.as_str() {
        "ok" => Ok(()),
        "notfound" => Err(Error::NotFound { id }),
        other => match other.parse::<State>() {
            Ok(state) => Err(Error::InvalidState { id, state, operation }),
            Err(_) => Err(error::unexpected(format!("{operation} returned {other:?}"))),
        },
    }
}

pub(crate) async fn retry(s: &Inner, id: JobId) -> Result<()> {
    let queue = queue_of(s, id).await?;
    let mut cmd = scripts::call(&scripts::RETRY, &[s.keys.base(queue.as_str())]);
    cmd.arg(s.now_micros()).arg(id_hex(id)).arg(s.keys.channel());
    answer(id, s.query(&cmd).await?, "retry")
}

pub(crate) async fn cancel(s: &Inner, id: JobId) -> Result<()> {
    let queue = queue_of(s, id).await?;
    let mut cmd = scripts::call(&scripts::CANCEL, &[s.keys.base(queue.as_str())]);
    cmd.arg(s.now_micros()).arg(id_hex(id)).arg(s.keys.channel());
    answer(id, s.query(&cmd).await?, "cancel")
}

pub(crate) async fn list(s: &Inner, filter: &JobFilter) -> Result<Vec<Job>> {
    let limit = filter.page_size();
    let queues = match &filter.queue {
        Some(q) => vec![q.clone()],
        None => s.queues().await?,
    };
    let after = filter.after.map(id_hex).unwrap_or_default();
    let state = filter.state.map(|st| st.as_str()).unwrap_or("");
    let kind = filter.kind.as_deref().unwrap_or("");
    let mut jobs: Vec<Job> = Vec::new();
    for q in &queues {
        let keys = [s.keys.base(q.as_str())];
        let mut cursor = after.clone();
        let mut found = 0;
        loop {
            let mut cmd = scripts::call(&scripts::LIST, &keys);
            cmd.arg(&cursor).arg(limit - found).arg(state).arg(kind).arg(LIST_SCAN_BUDGET);
            let (rows, next): (Vec<Vec<String>>, String) = s.query(&cmd).await?;
            // A job that does not decode is left out and logged, and does
            // not count: the loop goes on after it (the script's cursor is
            // past every id it examined), so a short page still means "no
            // more" and paging with `after` neither stops early nor loops.
            for r in rows {
                match row::decode(r, q) {
                    Ok(job) => {
                        jobs.push(job);
                        found += 1;
                    }
                    Err(e) => skipped(q, &e),
                }
            }
            if next.is_empty() || found >= limit {
                break;
            }
            cursor = next;
        }
    }
    jobs.sort_by_key(|j| j.id);
    jobs.truncate(limit);
    Ok(jobs)
}

/// Logs a job that `list` leaves out because it does not decode;
/// `get` of it reports why.
fn skipped(queue: &QueueName, e: &Error) {
    match e {
        Error::Corrupt { id: Some(id), reason } => {
            tracing::error!(%queue, job = %id, %reason, "list skips a job that cannot be decoded")
        }
        other => tracing::error!(%queue, error = %other, "list skips a job that cannot be decoded"),
    }
}

const COUNTED: [(State, &str); 7] = [
    (State::Waiting, "waiting"),
    (State::Scheduled, "scheduled"),
    (State::Pending, "ready"),
    (State::Running, "leases"),
    (State::Completed, "done:completed"),
    (State::Dead, "done:dead"),
    (State::Cancelled, "done:cancelled"),
];

pub(crate) async fn stats(s: &Inner) -> Result<Stats> {
    let queues = s.queues().await?;
    let mut stats = Stats::default();
    if queues.is_empty() {
        return Ok(stats);
    }
    // per queue: COUNTED, then its keyed Scheduled and Pending jobs (schema.rs)
    let per = COUNTED.len() + 2;
    let mut cmds = Vec::with_capacity(queues.len() * per);
    for q in &queues {
        let base = s.keys.base(q.as_str());
        for (_, key) in COUNTED {
            let mut cmd = redis::cmd("ZCARD");
            cmd.arg(format!("{base}{key}"));
            cmds.push(cmd);
        }
        let mut scheduled = redis::cmd("ZCARD");
        scheduled.arg(format!("{base}kscheduled"));
        let mut pending = redis::cmd("GET");
        pending.arg(format!("{base}kpending"));
        cmds.extend([scheduled, pending]);
    }
    let counts: Vec<Option<u64>> = s.query_each(cmds).await?;
    for (q, chunk) in queues.iter().zip(counts.chunks(per)) {
        let mut c = StateCounts::default();
        for ((state, _), n) in COUNTED.iter().zip(chunk) {
            let keyed = match state {
                State::Scheduled => chunk[COUNTED.len()],
                State::Pending => chunk[COUNTED.len() + 1],
                _ => None,
            };
            c.set(*state, n.unwrap_or(0) + keyed.unwrap_or(0));
        }
        if c.total() > 0 {
            stats.queues.insert(q.to_string(), c);
        }
    }
    Ok(stats)
}

/// Minutes one throughput call counts at most: a range longer than a day
/// starts a day back (one ZCOUNT per queue, state and minute).
const THROUGHPUT_MINUTES: i64 = 24 * 60;

/// Completed and dead jobs per queue and minute since `since`: a ZCOUNT of
/// each minute's score range in the queue's `done:completed` and
/// `done:dead` sets (scored by finished_at), pipelined per slot.
pub(crate) async fn throughput(s: &Inner, since: Timestamp) -> Result<Vec<Throughput>> {
    const MINUTE: i64 = 60_000_000;
    let queues = s.queues().await?;
    let now = jq_core::storage::minute_of(jq_core::storage::from_micros(s.now_micros())).timestamp_micros();
    let first = jq_core::storage::minute_of(since).timestamp_micros().max(now - (THROUGHPUT_MINUTES - 1) * MINUTE);
    if queues.is_empty() || first > now {
        return Ok(Vec::new());
    }
    let minutes: Vec<i64> = (0..).map(|i| first + i * MINUTE).take_while(|m| *m <= now).collect();
    let mut cmds = Vec::with_capacity(queues.len() * minutes.len() * 2);
    for q in &queues {
        let base = s.keys.base(q.as_str());
        for key in ["done:completed", "done:dead"] {
            for (i, start) in minutes.iter().enumerate() {
                // The last minute is open-ended: a job finished by a clock a
                // little ahead of ours still counts now.
                let end = if i + 1 == minutes.len() { "+inf".to_owned() } else { format!("({}", start + MINUTE) };
                let mut cmd = redis::cmd("ZCOUNT");
                cmd.arg(format!("{base}{key}")).arg(start).arg(end);
                cmds.push(cmd);
            }
        }
    }
    let counts: Vec<u64> = s.query_each(cmds).await?;
    let mut out = Vec::new();
    for (q, chunk) in queues.iter().zip(counts.chunks(minutes.len() * 2)) {
        let (completed, dead) = chunk.split_at(minutes.len());
        for ((start, c), d) in minutes.iter().zip(completed).zip(dead) {
            if c + d > 0 {
                out.push(Throughput {
                    queue: q.to_string(),
                    minute: jq_core::storage::from_micros(*start),
                    completed: *c,
                    dead: *d,
                });
            }
        }
    }
    out.sort_by(|a, b| (&a.queue, a.minute).cmp(&(&b.queue, b.minute)));
    Ok(out)
}

/// Deletes every key under the prefix with `SCAN MATCH` and `UNLINK`, in
/// batches of up to 1,000 keys; returns how many keys were deleted. On
/// Cluster, SCAN runs on every primary and UNLINK per hash slot.
pub(crate) async fn delete_prefix(s: &Inner) -> Result<u64> {
    match s.conn.is_cluster() {
        false => scan_unlink(s, None).await,
        true => {
            let nodes: String = s.query(redis::cmd("CLUSTER").arg("NODES")).await?;
            let mut deleted = 0;
            for (host, port) in crate::eviction::parse_primaries(&nodes) {
                deleted += scan_unlink(s, Some((host, port))).await?;
            }
            Ok(deleted)
        }
    }
}

/// SCAN + UNLINK on the single server, or on the cluster node at `node`.
async fn scan_unlink(s: &Inner, node: Option<(String, u16)>) -> Result<u64> {
    let pattern = s.keys.pattern();
    let mut cursor: u64 = 0;
    let mut deleted = 0;
    loop {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(1000);
        let (next, keys): (u64, Vec<String>) = match &node {
            Some((host, port)) if s.conn.is_cluster() => {
                let routing =
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host: host.clone(), port: *port });
                let mut c = s.conn.cluster().await.map_err(error::map)?;
                let value = c.route_command(scan, routing).await.map_err(error::map)?;
                redis::from_redis_value(value).map_err(|e| error::unexpected(format!("SCAN reply: {e}")))?
            }
            _ => s.query(&scan).await?,
        };
        // UNLINK of several keys must stay in one slot on Cluster
        let mut by_slot: HashMap<u16, Vec<String>> = HashMap::new();
        for key in keys {
            let slot = if node.is_some() { slot(&key) } else { 0 };
            by_slot.entry(slot).or_default().push(key);
        }
        for keys in by_slot.into_values() {
            let n: u64 = s.query(redis::cmd("UNLINK").arg(&keys)).await?;
            deleted += n;
        }
        if next == 0 {
            return Ok(deleted);
        }
        cursor = next;
    }
}
