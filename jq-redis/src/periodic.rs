//! Periodic jobs ([`PeriodicStorage::fire`](jq_core::storage::PeriodicStorage::fire)):
//! a hash per periodic job in its queue's slot (`Keys::periodic_job`), so
//! `lua/fire.lua` compares the cursor and stores the tick's jobs in one
//! script, on a single server and on Cluster alike. The registry
//! `P:periodic` (name -> queue, another slot) says where a periodic job's
//! hash is.
//!
//! **One cursor per name, whatever the queue.** A periodic job has one
//! *live* hash; a hash whose periodic job moved away carries `moved_to` and
//! is never fired again. A pool that declares the periodic job in another
//! queue than the live hash's moves it, in two compare-and-sets (a script
//! touches one slot): `lua/seal.lua` marks the live hash moved, if its
//! cursor and trigger are the ones the pool read; then `lua/fire.lua` in
//! the pool's queue takes the sealed row over (cursor, counters, trigger,
//! and a generation one higher) and fires it in the same script; then the
//! registry points to the new queue. During a rolling deploy whose pools
//! declare the periodic job in two queues, the row moves back and forth,
//! and every tick is still fired once. A move whose second half was lost
//! (a sealed hash whose target holds no newer generation) is finished by
//! the next pool that finds it, whatever queue that pool declares.

use std::collections::HashMap;

use jq_core::periodic::{Fire, FireOutcome, PeriodicInfo};
use jq_core::storage::from_micros;
use jq_core::{Error, JobId, Result, Timestamp};
use uuid::Uuid;

use crate::enqueue::job_args;
use crate::{Inner, error, scripts};

/// How many moves `locate` follows from the registry's queue.
const MAX_HOPS: usize = 8;

/// Where a periodic job's row is.
enum Located {
    /// No hash: not registered, or registered in `0` by a step that has not
    /// created it (yet).
    Absent(Option<String>),
    /// The live hash, in queue `queue`.
    Live { queue: String, row: HashMap<String, String> },
    /// A hash sealed for a move to `to` whose target does not hold it yet.
    Dangling { row: HashMap<String, String>, to: String },
}

fn generation(row: &HashMap<String, String>) -> i64 {
    row.get("gen").and_then(|g| g.parse().ok()).unwrap_or(0)
}

/// Follows the moves from `queue` (the registry's value for `name`), whose
/// hash `row` holds.
async fn follow(s: &Inner, name: &str, mut queue: String, mut row: HashMap<String, String>) -> Result<Located> {
    for _ in 0..MAX_HOPS {
        if row.is_empty() {
            return Ok(Located::Absent(Some(queue)));
        }
        let Some(to) = row.get("moved_to").cloned() else { return Ok(Located::Live { queue, row }) };
        let next: HashMap<String, String> = s.query(redis::cmd("HGETALL").arg(s.keys.periodic_job(&to, name))).await?;
        if next.is_empty() || generation(&next) <= generation(&row) {
            return Ok(Located::Dangling { row, to });
        }
        (queue, row) = (to, next);
    }
    Err(error::unexpected(format!("periodic job {name:?} moved more than {MAX_HOPS} times while it was read")))
}

/// Finds `name`'s row.
async fn locate(s: &Inner, name: &str) -> Result<Located> {
    let queue: Option<String> = s.query(redis::cmd("HGET").arg(s.keys.periodic()).arg(name)).await?;
    let Some(queue) = queue else { return Ok(Located::Absent(None)) };
    let row: HashMap<String, String> = s.query(redis::cmd("HGETALL").arg(s.keys.periodic_job(&queue, name))).await?;
    follow(s, name, queue, row).await
}

/// The arguments of `fire.lua` up to `ARGV[21]`, for `queue`: a plain step
/// (`adopt` None) or one that takes a moved row over.
fn fire_cmd(s: &Inner, fire: &Fire, queue: &str, now: i64, adopt: Option<(&str, &[String])>) -> redis::Cmd {
    let micros = |t: Option<Timestamp>| t.map(|t| t.timestamp_micros().to_string()).unwrap_or_default();
    let mut cmd = scripts::call(&scripts::FIRE, &[s.keys.periodic_job(queue, &fire.name), s.keys.base(queue)]);
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
    match adopt {
        Some((mode, sealed)) => {
            cmd.arg(mode).arg(sealed);
        }
        None => {
            cmd.arg("").arg(vec![""; 9]);
        }
    }
    cmd
}

/// The sealed row's fields in the order seal.lua returns them.
fn sealed_fields(row: &HashMap<String, String>) -> Vec<String> {
    ["gen", "spec", "zone", "cursor", "missed", "last_missed", "last_job", "triggered_at", "declared_at"]
        .iter()
        .map(|f| {
            row.get(*f)
                .cloned()
                .unwrap_or_else(|| if matches!(*f, "gen" | "missed") { "0".into() } else { String::new() })
        })
        .collect()
}

/// Finishes the move of `name`'s dangling row to `to` (no job, the cursor
/// as sealed), and points the registry there.
async fn finish_move(s: &Inner, name: &str, row: &HashMap<String, String>, to: &str) -> Result<()> {
    let mut cmd = scripts::call(&scripts::FIRE, &[s.keys.periodic_job(to, name), s.keys.base(to)]);
    // ARGV[5..11] are not read by "adopt-only".
    cmd.arg(s.now_micros()).arg(s.keys.channel()).arg(to).arg(name).arg(vec![""; 7]);
    cmd.arg("adopt-only").arg(sealed_fields(row));
    let _: Vec<String> = s.query(&cmd).await?;
    let _: i64 = s.query(redis::cmd("HSET").arg(s.keys.periodic()).arg(name).arg(to)).await?;
    Ok(())
}

/// One step.
pub(crate) async fn fire(s: &Inner, fire: &Fire) -> Result<FireOutcome> {
    fire.check()?;
    for job in &fire.jobs {
        job.check_payload(s.config.max_payload_bytes)?;
    }
    let queue = fire.queue.as_str();
    let adopt: Option<Vec<String>> = match locate(s, &fire.name).await? {
        Located::Absent(registered) => {
            if fire.expected.is_some() {
                return Ok(FireOutcome::Moved);
            }
            // The first step of a new periodic job: the registry names its queue
            // first, so that a pool of another queue finds it and moves it.
            match registered {
                None => {
                    let set: i64 =
                        s.query(redis::cmd("HSETNX").arg(s.keys.periodic()).arg(&fire.name).arg(queue)).await?;
                    if set == 0 {
                        return Ok(FireOutcome::Moved);
                    }
                }
                Some(other) if other != queue => {
                    // Registered by a step that never created its hash:
                    // this queue takes the name over.
                    let _: i64 = s.query(redis::cmd("HSET").arg(s.keys.periodic()).arg(&fire.name).arg(queue)).await?;
                }
                Some(_) => {}
            }
            None
        }
        Located::Live { queue: live, .. } if live == queue => None,
        Located::Live { queue: live, .. } => {
            // Move the row here: seal it where it is, then take it over below.
            let micros = |t: Option<Timestamp>| t.map(|t| t.timestamp_micros().to_string()).unwrap_or_default();
            let mut seal = scripts::call(&scripts::SEAL, &[s.keys.periodic_job(&live, &fire.name)]);
            seal.arg(micros(fire.expected)).arg(micros(fire.expected_trigger)).arg(queue);
            let sealed: Vec<String> = s.query(&seal).await?;
            if sealed.is_empty() {
                return Ok(FireOutcome::Moved);
            }
            Some(sealed)
        }
        Located::Dangling { row, to } if to == queue => Some(sealed_fields(&row)),
        Located::Dangling { row, to } => {
            // Another pool's move: finish it; the next round moves it here.
            finish_move(s, &fire.name, &row, &to).await?;
            return Ok(FireOutcome::Moved);
        }
    };
    let now = s.now_micros();
    let mut cmd = fire_cmd(s, fire, queue, now, adopt.as_deref().map(|a| ("adopt", a)));
    for job in &fire.jobs {
        job_args(&mut cmd, job, 1, now);
    }
    let due = if fire.jobs.is_empty() { None } else { s.registry_due(&[queue]) };
    if let Some(due) = &due {
        let _: u64 = s.query(redis::cmd("SADD").arg(s.keys.registry()).arg(due)).await?;
    }
    let reply: Vec<String> = s.query(&cmd).await?;
    if let Some(due) = &due {
        s.registered(due);
    }
    if adopt.is_some() && reply.first().is_some_and(|flag| flag == "1") {
        let _: i64 = s.query(redis::cmd("HSET").arg(s.keys.periodic()).arg(&fire.name).arg(queue)).await?;
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

/// Every registered periodic job whose hash exists, by name: its live row,
/// or the row of a move not finished yet.
pub(crate) async fn list(s: &Inner) -> Result<Vec<PeriodicInfo>> {
    let registry: HashMap<String, String> = s.query(redis::cmd("HGETALL").arg(s.keys.periodic())).await?;
    let mut names: Vec<(String, String)> = registry.into_iter().collect();
    names.sort();
    let cmds = names
        .iter()
        .map(|(name, queue)| {
            let mut cmd = redis::cmd("HGETALL");
            cmd.arg(s.keys.periodic_job(queue, name));
            cmd
        })
        .collect();
    let hashes: Vec<HashMap<String, String>> = s.query_each(cmds).await?;
    let mut out = Vec::with_capacity(names.len());
    for ((name, queue), hash) in names.into_iter().zip(hashes) {
        let hash = match follow(s, &name, queue, hash).await? {
            Located::Absent(_) => continue, // registered by a step that did not create it (yet)
            Located::Live { row, .. } | Located::Dangling { row, .. } => row,
        };
        match decode(&hash) {
            Some(info) => out.push(info),
            None => tracing::error!(periodic = %name, ?hash, "a periodic job's hash cannot be read; left out"),
        }
    }
    Ok(out)
}

/// Sets the trigger of `name` on its live hash.
pub(crate) async fn trigger(s: &Inner, name: &str) -> Result<()> {
    jq_core::periodic::check_name(name)?;
    let not_found = || Error::PeriodicNotFound { name: name.to_owned() };
    for _ in 0..MAX_HOPS {
        let queue = match locate(s, name).await? {
            Located::Absent(_) => return Err(not_found()),
            Located::Live { queue, .. } => queue,
            Located::Dangling { row, to } => {
                finish_move(s, name, &row, &to).await?;
                continue;
            }
        };
        let mut cmd = scripts::call(&scripts::TRIGGER, &[s.keys.periodic_job(&queue, name)]);
        cmd.arg(s.now_micros());
        let found: i64 = s.query(&cmd).await?;
        match found {
            1 => return Ok(()),
            0 => return Err(not_found()),
            _ => {} // moved meanwhile: look again
        }
    }
    Err(error::unexpected(format!("periodic job {name:?} kept moving while it was triggered")))
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
        triggered_at: instant("triggered_at"),
    })
}
