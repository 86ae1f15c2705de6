//! get, list, stats, retry, cancel.

use jq_core::{Error, Job, JobFilter, JobId, QueueName, Result, State, StateCounts, Stats};

use crate::keys::id_hex;
use crate::{Inner, error, row, scripts};

/// Ids one list call examines at most before it returns a cursor.
const LIST_SCAN_BUDGET: usize = 10_000;

pub(crate) async fn get(s: &Inner, id: JobId) -> Result<Job> {
    let queues = s.queues().await?;
    if queues.is_empty() {
        return Err(Error::NotFound { id });
    }
    let mut pipe = redis::pipe();
    for q in &queues {
        pipe.cmd("HGETALL").arg(s.keys.job(q.as_str(), id));
    }
    let hashes: Vec<Vec<String>> = s.query_pipe(&pipe).await?;
    match hashes.into_iter().find(|h| !h.is_empty()) {
        Some(h) => row::decode(h),
        None => Err(Error::NotFound { id }),
    }
}

async fn queue_of(s: &Inner, id: JobId) -> Result<QueueName> {
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
    cmd.arg(s.now_micros()).arg(id_hex(id));
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
            found += rows.len();
            for r in rows {
                jobs.push(row::decode(r)?);
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

const COUNTED: [(State, &str); 6] = [
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
    let mut pipe = redis::pipe();
    for q in &queues {
        let base = s.keys.base(q.as_str());
        for (_, key) in COUNTED {
            pipe.cmd("ZCARD").arg(format!("{base}{key}"));
        }
    }
    let counts: Vec<u64> = s.query_pipe(&pipe).await?;
    for (q, chunk) in queues.iter().zip(counts.chunks(COUNTED.len())) {
        let mut c = StateCounts::default();
        for ((state, _), n) in COUNTED.iter().zip(chunk) {
            c.set(*state, *n);
        }
        if c.total() > 0 {
            stats.queues.insert(q.to_string(), c);
        }
    }
    Ok(stats)
}
