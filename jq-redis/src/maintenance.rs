//! promote, recover, purge: per queue, bounded batches, looping client side
//! while a script call was full.

use jq_core::{QueueName, Result, State, Timestamp};

use crate::{Inner, scripts};

/// Jobs one promote or recover call moves at most.
const BATCH: usize = 1_000;
/// Jobs one purge call deletes at most.
const PURGE_BATCH: usize = 10_000;

pub(crate) async fn promote(s: &Inner) -> Result<u64> {
    let queues = s.queues().await?;
    let mut total = 0;
    for q in &queues {
        total += promote_queue(s, q).await?;
    }
    Ok(total)
}

async fn promote_queue(s: &Inner, q: &QueueName) -> Result<u64> {
    let keys = [s.keys.base(q.as_str())];
    let mut total = 0;
    loop {
        let mut cmd = scripts::call(&scripts::PROMOTE, &keys);
        cmd.arg(s.now_micros()).arg(BATCH).arg(s.keys.channel());
        let moved: u64 = s.query(&cmd).await?;
        total += moved;
        if moved < BATCH as u64 {
            return Ok(total);
        }
    }
}

pub(crate) async fn recover(s: &Inner) -> Result<u64> {
    let queues = s.queues().await?;
    let mut total = 0;
    for q in &queues {
        let keys = [s.keys.base(q.as_str())];
        loop {
            let mut cmd = scripts::call(&scripts::RECOVER, &keys);
            cmd.arg(s.now_micros()).arg(BATCH).arg(s.keys.channel());
            let (moved, seen, corrupt): (u64, u64, Vec<String>) = s.query(&cmd).await?;
            for reason in corrupt {
                tracing::error!(queue = %q, %reason, "recover moved an expired job that cannot be decoded to Dead");
            }
            total += moved;
            if seen < BATCH as u64 {
                break;
            }
        }
    }
    Ok(total)
}

pub(crate) async fn purge(s: &Inner, state: State, older_than: Timestamp) -> Result<u64> {
    jq_core::storage::check_purge_state(state)?;
    let queues = s.queues().await?;
    let mut total = 0;
    for q in &queues {
        let keys = [s.keys.base(q.as_str())];
        loop {
            let mut cmd = scripts::call(&scripts::PURGE, &keys);
            cmd.arg(state.as_str()).arg(older_than.timestamp_micros()).arg(PURGE_BATCH);
            let deleted: u64 = s.query(&cmd).await?;
            total += deleted;
            if deleted < PURGE_BATCH as u64 {
                break;
            }
        }
    }
    Ok(total)
}
