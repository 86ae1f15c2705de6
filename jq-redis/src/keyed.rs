//! Keyed jobs' limits and report ([`KeyStorage`](jq_core::storage::KeyStorage)):
//! `lua/key_limits.lua` writes and reads a queue's `klimits` hash (in
//! its slot, beside the keyed jobs' sets that `lua/claim.lua` walks; see
//! "Keyed jobs" in schema.rs).

use std::time::Duration;

use jq_core::storage::check_key;
use jq_core::{KeyInfo, KeyLimit, KeyReport, QueueLimits, QueueName, Rate, Result};

use crate::{Inner, error, scripts};

/// `key_limits.lua` with `args`, on `queue`'s slot.
fn call(s: &Inner, queue: &QueueName, args: &[&str]) -> redis::Cmd {
    let mut cmd = scripts::call(&scripts::KEY_LIMITS, &[s.keys.base(queue.as_str())]);
    for a in args {
        cmd.arg(*a);
    }
    cmd
}

/// Sets `queue`'s default key limits (`key` None) or `key`'s override, and
/// wakes idle workers: raised limits may make jobs claimable.
pub(crate) async fn set(s: &Inner, queue: &QueueName, key: Option<&str>, limits: &QueueLimits) -> Result<()> {
    limits.check()?;
    if let Some(key) = key {
        check_key(key)?;
    }
    let concurrency = limits.concurrency.map(|n| n.to_string()).unwrap_or_default();
    let rate = limits.rate.map(|r| r.limit.to_string()).unwrap_or_default();
    let period = limits.rate.map(|r| r.period_micros().to_string()).unwrap_or_default();
    let channel = s.keys.channel();
    let cmd = call(s, queue, &["set", key.unwrap_or(""), &concurrency, &rate, &period, &channel]);
    let _: i64 = s.query(&cmd).await?;
    Ok(())
}

/// Removes `key`'s override of `queue` (nothing when it has none).
pub(crate) async fn clear(s: &Inner, queue: &QueueName, key: &str) -> Result<()> {
    check_key(key)?;
    let channel = s.keys.channel();
    let cmd = call(s, queue, &["clear", key, "", "", "", &channel]);
    let _: i64 = s.query(&cmd).await?;
    Ok(())
}

/// Limits as `key_limits.lua` stores them: `concurrency\0rate\0period`.
fn parse_limits(value: &str) -> QueueLimits {
    let mut f = value.split('\0');
    let mut num = || f.next().and_then(|v| v.parse::<u64>().ok());
    let concurrency = num().and_then(|n| u32::try_from(n).ok());
    let (rate, period) = (num(), num());
    let rate = rate.zip(period).and_then(|(n, p)| Some(Rate::new(u32::try_from(n).ok()?, Duration::from_micros(p))));
    QueueLimits { concurrency, rate }
}

/// `queue`'s key report: its default, its overrides by key, and its
/// busiest `top` keys by Running plus Pending and Scheduled jobs, then key.
pub(crate) async fn report(s: &Inner, queue: &QueueName, top: usize) -> Result<KeyReport> {
    let cmd = call(s, queue, &["report"]);
    let (limits, counts): (Vec<String>, Vec<String>) = s.query(&cmd).await?;
    let mut default = QueueLimits::default();
    let mut overrides = Vec::new();
    for pair in limits.chunks(2) {
        let [field, value] = pair else { continue };
        if field.is_empty() {
            default = parse_limits(value);
        } else {
            overrides.push(KeyLimit { key: field.clone(), limits: parse_limits(value) });
        }
    }
    overrides.sort_by(|a, b| a.key.as_bytes().cmp(b.key.as_bytes()));
    let effective = |key: &str| overrides.iter().find(|o| o.key == key).map_or(default, |o| o.limits);
    let mut busiest = Vec::with_capacity(counts.len() / 3);
    for row in counts.chunks(3) {
        let [key, running, pending] = row else {
            return Err(error::unexpected("the keys report returned a partial row".to_owned()));
        };
        let number =
            |v: &str| v.parse::<u64>().map_err(|_| error::unexpected(format!("the keys report returned {v:?}")));
        busiest.push(KeyInfo {
            key: key.clone(),
            running: number(running)?,
            pending: number(pending)?,
            limits: effective(key),
        });
    }
    busiest.sort_by(|a, b| (b.running + b.pending).cmp(&(a.running + a.pending)).then(a.key.cmp(&b.key)));
    busiest.truncate(top);
    Ok(KeyReport { queue: queue.clone(), default, overrides, busiest })
}
