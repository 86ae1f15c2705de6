//! Queue controls ([`ControlStorage::set_paused`](jq_core::storage::ControlStorage::set_paused),
//! `set_limits`, `queues`): a `control` hash per queue, in the queue's
//! slot, which `lua/claim.lua` reads inside the claim's script, with the
//! rate limit's log (`starts`) and the claimers that met a control
//! (`seen`) beside it. `lua/control.lua` writes it.

use std::time::Duration;

use jq_core::storage::from_micros;
use jq_core::{QueueInfo, QueueLimits, QueueName, Rate, Result, Seen};

use crate::{Inner, scripts};

/// Registers `queue` (so that `queues` lists a controlled queue with no
/// job), then runs `control.lua` with `args`.
async fn run(s: &Inner, queue: &QueueName, args: &[String]) -> Result<()> {
    let mut cmd = scripts::call(&scripts::CONTROL, &[s.keys.base(queue.as_str())]);
    for a in args {
        cmd.arg(a);
    }
    cmd.arg(s.keys.channel());
    let mut register = redis::cmd("SADD");
    register.arg(s.keys.registry()).arg(queue.as_str());
    if s.is_cluster() {
        let _: i64 = s.query(&register).await?;
        let _: i64 = s.query(&cmd).await?;
    } else {
        let mut pipe = redis::pipe();
        pipe.add_command(register).ignore().add_command(cmd);
        let _: (i64,) = s.query_pipe(&pipe).await?;
    }
    Ok(())
}

/// Pauses or resumes `queue`; a resume wakes idle workers (PUBLISH).
pub(crate) async fn set_paused(s: &Inner, queue: &QueueName, paused: bool) -> Result<()> {
    let (op, now) = if paused { ("pause", s.now_micros().to_string()) } else { ("resume", String::new()) };
    run(s, queue, &[op.to_owned(), now, String::new(), String::new()]).await
}

/// Replaces `queue`'s limits and wakes idle workers.
pub(crate) async fn set_limits(s: &Inner, queue: &QueueName, limits: &QueueLimits) -> Result<()> {
    limits.check()?;
    let concurrency = limits.concurrency.map(|n| n.to_string()).unwrap_or_default();
    let rate = limits.rate.map(|r| r.limit.to_string()).unwrap_or_default();
    let period = limits.rate.map(|r| r.period_micros().to_string()).unwrap_or_default();
    run(s, queue, &["limits".to_owned(), concurrency, rate, period]).await
}

/// Every registered queue with a job or a control, by name.
pub(crate) async fn queues(s: &Inner) -> Result<Vec<QueueInfo>> {
    let names = s.queues().await?;
    let forgotten = jq_core::storage::seen_forgotten_at(from_micros(s.now_micros()));
    let mut cmds = Vec::with_capacity(names.len() * 3);
    for q in &names {
        let base = s.keys.base(q.as_str());
        let mut ids = redis::cmd("ZCARD");
        ids.arg(format!("{base}ids"));
        let mut control = redis::cmd("HMGET");
        control.arg(format!("{base}control")).arg("paused_at").arg("concurrency").arg("rate_limit").arg("rate_period");
        let mut seen = redis::cmd("HGETALL");
        seen.arg(format!("{base}seen"));
        cmds.extend([ids, control, seen]);
    }
    let replies: Vec<redis::Value> = s.query_each(cmds).await?;
    let mut out = Vec::new();
    for (queue, reply) in names.into_iter().zip(replies.chunks(3)) {
        let [ids, control, seen] = reply else { continue };
        let jobs: u64 = redis::from_redis_value(ids.clone()).unwrap_or(0);
        let c: Vec<Option<String>> = redis::from_redis_value(control.clone()).unwrap_or_default();
        let field = |i: usize| c.get(i).cloned().flatten();
        let num = |i: usize| field(i).and_then(|v| v.parse::<i64>().ok());
        let limits = QueueLimits {
            concurrency: num(1).and_then(|n| u32::try_from(n).ok()),
            rate: num(2).zip(num(3)).and_then(|(n, p)| {
                Some(Rate::new(u32::try_from(n).ok()?, Duration::from_micros(u64::try_from(p).ok()?)))
            }),
        };
        let paused_at = num(0).map(from_micros);
        if jobs == 0 && paused_at.is_none() && limits.is_none() {
            continue;
        }
        let pairs: Vec<(String, String)> = redis::from_redis_value(seen.clone()).unwrap_or_default();
        let mut seen: Vec<Seen> = pairs
            .into_iter()
            .filter_map(|(worker, value)| {
                let (at, paused) = value.split_once(':')?;
                Some(Seen { worker, at: from_micros(at.parse().ok()?), paused: paused == "1" })
            })
            .filter(|seen| seen.at > forgotten)
            .collect();
        seen.sort_by(|a, b| a.worker.cmp(&b.worker));
        out.push(QueueInfo { queue, paused_at, limits, seen });
    }
    Ok(out)
}
