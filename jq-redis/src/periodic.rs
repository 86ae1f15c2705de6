//! Recurring periodic jobs ([`Storage::fire`](jq_core::Storage::fire)): one
//! hash per periodic job in its queue's slot (`Keys::periodic job`), so
//! `lua/fire.lua` compares the cursor and stores the tick's jobs in one
//! script, on a single server and on Cluster alike. The registry
//! `P:periodic jobs` (name -> queue, another slot) is written first, as the
//! queue registry is, so `periodic jobs` and `trigger` find every periodic job.
//!
//! A periodic job moved to another queue gets a new hash there: its cursor
//! starts afresh at the first step in the new queue (the registry points to
//! the newest queue; the old hash is left unread).

use std::collections::HashMap;

use jq_core::clock::from_micros;
use jq_core::{Error, Fire, FireOutcome, JobId, PeriodicInfo, Result, Timestamp};
use uuid::Uuid;

use crate::enqueue::job_args;
use crate::{Inner, error, scripts};

/// One step.
pub(crate) async fn fire(s: &Inner, fire: &Fire) -> Result<FireOutcome> {
    fire.check()?;
    for job in &fire.jobs {
        job.check_payload(s.config.max_payload_bytes)?;
    }
    let now = s.now_micros();
    let queue = fire.queue.as_str();
    let micros = |t: Option<Timestamp>| t.map(|t| t.timestamp_micros().to_string()).unwrap_or_default();
    let mut cmd = scripts::call(&scripts::FIRE, &[s.keys.schedule(queue, &fire.name), s.keys.base(queue)]);
    cmd.arg(now)
        .arg(s.keys.channel())
        .arg(queue)
        .arg(&fire.name)
        .arg(&fire.spec)
        .arg(&fire.zone)
        .arg(micros(fire.expected))
        .arg(micros(fire.expected_trigger))
        .arg(fire.cursor.timestamp_micros())
        .arg(fire.missed)
        .arg(micros(fire.last_missed));
    for job in &fire.jobs {
        job_args(&mut cmd, job, 1, now);
    }
    let mut register = redis::cmd("HSET");
    register.arg(s.keys.periodic()).arg(&fire.name).arg(queue);
    let due = if fire.jobs.is_empty() { None } else { s.registry_due(&[queue]) };
    let reply: Vec<String> = if s.is_cluster() {
        let _: i64 = s.query(&register).await?;
        if let Some(due) = &due {
            let _: u64 = s.query(redis::cmd("SADD").arg(s.keys.registry()).arg(due)).await?;
        }
        s.query(&cmd).await?
    } else {
        let mut pipe = redis::pipe();
        pipe.add_command(register).ignore();
        if let Some(due) = &due {
            pipe.cmd("SADD").arg(s.keys.registry()).arg(due).ignore();
        }
        pipe.add_command(cmd);
        let (reply,): (Vec<String>,) = s.query_pipe(&pipe).await?;
        reply
    };
    if let Some(due) = &due {
        s.registered(due);
    }
    match reply.split_first() {
        Some((flag, _)) if flag == "0" => Ok(FireOutcome::Moved),
        Some((flag, stored)) if flag == "1" && stored.len() == fire.jobs.len() => {
            let ids = fire
                .jobs
                .iter()
                .zip(stored)
                .map(|(job, existing)| {
                    if existing.is_empty() {
                        return Ok(job.id);
                    }
                    Uuid::parse_str(existing)
                        .map(JobId)
                        .map_err(|_| error::unexpected(format!("fire returned the id {existing:?}")))
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(FireOutcome::Fired(ids))
        }
        _ => Err(error::unexpected(format!("fire returned {reply:?} for {} jobs", fire.jobs.len()))),
    }
}

/// Every registered periodic job whose hash exists, by name.
pub(crate) async fn list(s: &Inner) -> Result<Vec<PeriodicInfo>> {
    let registry: HashMap<String, String> = s.query(redis::cmd("HGETALL").arg(s.keys.periodic())).await?;
    let mut names: Vec<(String, String)> = registry.into_iter().collect();
    names.sort();
    let cmds = names
        .iter()
        .map(|(name, queue)| {
            let mut cmd = redis::cmd("HGETALL");
            cmd.arg(s.keys.schedule(queue, name));
            cmd
        })
        .collect();
    let hashes: Vec<HashMap<String, String>> = s.query_each(cmds).await?;
    let mut out = Vec::with_capacity(names.len());
    for ((name, _), hash) in names.into_iter().zip(hashes) {
        if hash.is_empty() {
            continue; // registered by a step that did not create it (moved queue, lost race)
        }
        match decode(&hash) {
            Some(info) => out.push(info),
            None => tracing::error!(schedule = %name, ?hash, "a schedule hash cannot be read; left out"),
        }
    }
    Ok(out)
}

/// Sets the trigger of `name`.
pub(crate) async fn trigger(s: &Inner, name: &str) -> Result<()> {
    jq_core::periodic::check_name(name)?;
    let not_found = || Error::PeriodicNotFound { name: name.to_owned() };
    let queue: Option<String> = s.query(redis::cmd("HGET").arg(s.keys.periodic()).arg(name)).await?;
    let queue = queue.ok_or_else(not_found)?;
    let mut cmd = scripts::call(&scripts::TRIGGER, &[s.keys.schedule(&queue, name)]);
    cmd.arg(s.now_micros());
    let found: i64 = s.query(&cmd).await?;
    if found == 0 {
        return Err(not_found());
    }
    Ok(())
}

fn decode(h: &HashMap<String, String>) -> Option<PeriodicInfo> {
    let instant = |field: &str| h.get(field).and_then(|v| v.parse::<i64>().ok()).map(from_micros);
    Some(PeriodicInfo {
        name: h.get("name")?.clone(),
        queue: h.get("queue")?.clone(),
        spec: h.get("spec")?.clone(),
        zone: h.get("zone")?.clone(),
        cursor: instant("cursor")?,
        last_job: match h.get("last_job") {
            None => None,
            Some(hex) => Some(JobId(Uuid::parse_str(hex).ok()?)),
        },
        missed: h.get("missed").and_then(|v| v.parse().ok()).unwrap_or(0),
        last_missed: instant("last_missed"),
        declared_at: instant("declared_at")?,
        triggered_at: instant("run_requested"),
    })
}
