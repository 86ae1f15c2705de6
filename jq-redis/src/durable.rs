//! Durable jobs ([`DurableStorage`](jq_core::storage::DurableStorage)):
//! `lua/durable.lua` (checkpoint, suspend, signal: one script call on the
//! job's queue each, the fence, the limits and the job's move in one atomic
//! step) and `lua/durable_read.lua` (the journal). The limits are jq-core's
//! constants, passed to the script with every call; names and payloads
//! are checked here first with jq-core's functions.

use jq_core::durable::{
    Entry, EntryKind, Journal, MAX_JOURNAL_BYTES, MAX_SIGNALS, MAX_STEP_RESULT_BYTES, MAX_STEPS, Record, SignalInfo,
    Suspend, Suspended, Wait, check_signal, check_step_name, describe,
};
use jq_core::storage::{DurableLimit, LeaseRef, from_micros};
use jq_core::{Error, JobId, Payload, Result, State};

use crate::admin::queue_of;
use crate::schema::id_hex;
use crate::{Inner, error, scripts};

/// A call of `lua/durable.lua`: op, job, token, then the limits.
fn call(s: &Inner, base: String, op: &str, id: JobId, token: &str) -> redis::Cmd {
    let mut cmd = scripts::call(&scripts::DURABLE, &[base]);
    cmd.arg(op)
        .arg(s.now_micros())
        .arg(id_hex(id))
        .arg(token)
        .arg(MAX_STEP_RESULT_BYTES)
        .arg(MAX_STEPS)
        .arg(MAX_JOURNAL_BYTES);
    cmd
}

fn number(reply: &[String], at: usize) -> usize {
    reply.get(at).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The script's refusals as jq's errors; `None` for the other replies.
fn refused(id: JobId, reply: &[String], asked: &str) -> Option<Error> {
    match reply.first().map(String::as_str) {
        Some("lost") => Some(Error::LeaseLost { id }),
        Some("notfound") => Some(Error::NotFound { id }),
        Some("mismatch") => {
            let index = u32::try_from(number(reply, 1)).unwrap_or(u32::MAX);
            let kind = reply.get(2).and_then(|k| EntryKind::parse(k));
            let recorded = kind.map(|k| describe(k, reply.get(3).map_or("", String::as_str)));
            Some(Error::JournalMismatch { id, index, asked: asked.to_owned(), recorded })
        }
        Some("limit") => {
            let limit = match reply.get(1).map(String::as_str) {
                Some("value") => DurableLimit::StepResultBytes,
                Some("steps") => DurableLimit::Steps,
                Some("signals") => DurableLimit::Signals,
                _ => DurableLimit::JournalBytes,
            };
            Some(Error::DurableLimit { limit, size: number(reply, 2), max: number(reply, 3) })
        }
        Some("state") => {
            let state = reply.get(1).and_then(|s| s.parse::<State>().ok()).unwrap_or(State::Completed);
            Some(Error::InvalidState { id, state, operation: "signal" })
        }
        _ => None,
    }
}

fn unexpected(op: &str, reply: &[String]) -> Error {
    error::unexpected(format!("durable {op} returned {reply:?}"))
}

/// [`DurableStorage::checkpoint`](jq_core::storage::DurableStorage::checkpoint).
pub(crate) async fn checkpoint(s: &Inner, lease: LeaseRef, record: &Record) -> Result<()> {
    if !matches!(record.kind, EntryKind::Step | EntryKind::Patch) {
        return Err(Error::invalid("checkpoint", format!("a {} is recorded by suspend", record.kind.as_str())));
    }
    check_step_name(&record.name)?;
    let queue = queue_of(s, lease.id).await.map_err(|_| Error::LeaseLost { id: lease.id })?;
    let mut cmd = call(s, s.keys.base(queue.as_str()), "checkpoint", lease.id, &lease.token.to_string());
    cmd.arg(record.index)
        .arg(&record.name)
        .arg(record.kind.as_str())
        .arg(record.value.as_ref().map_or("", Payload::as_str))
        .arg("");
    let reply: Vec<String> = s.query(&cmd).await?;
    if let Some(e) = refused(lease.id, &reply, &record.describe()) {
        return Err(e);
    }
    match reply.first().map(String::as_str) {
        Some("ok") => Ok(()),
        _ => Err(unexpected("checkpoint", &reply)),
    }
}

/// [`DurableStorage::suspend`](jq_core::storage::DurableStorage::suspend).
pub(crate) async fn suspend(s: &Inner, lease: LeaseRef, suspend: &Suspend) -> Result<Suspended> {
    let queue = queue_of(s, lease.id).await.map_err(|_| Error::LeaseLost { id: lease.id })?;
    let base = s.keys.base(queue.as_str());
    let token = lease.token.to_string();
    let (cmd, asked) = match suspend {
        Suspend::Sleep { index, until } => {
            let mut cmd = call(s, base, "sleep", lease.id, &token);
            cmd.arg(index).arg("sleep").arg("sleep").arg("").arg(until.timestamp_micros());
            (cmd, describe(EntryKind::Sleep, "sleep"))
        }
        Suspend::Wait { index, name, until } => {
            check_step_name(name)?;
            let mut cmd = call(s, base, "wait", lease.id, &token);
            cmd.arg(index).arg(name).arg("signal").arg("").arg(until.timestamp_micros());
            (cmd, describe(EntryKind::Signal, name))
        }
    };
    let reply: Vec<String> = s.query(&cmd).await?;
    if let Some(e) = refused(lease.id, &reply, &asked) {
        return Err(e);
    }
    match reply.first().map(String::as_str) {
        Some("due") => Ok(Suspended::Due),
        Some("waiting") => Ok(Suspended::Waiting),
        Some("timedout") => Ok(Suspended::TimedOut),
        Some("signal") => match reply.get(1) {
            Some(payload) => Ok(Suspended::Signal(Payload::from_stored(payload.clone()))),
            None => Err(unexpected("suspend", &reply)),
        },
        _ => Err(unexpected("suspend", &reply)),
    }
}

/// [`DurableStorage::signal`](jq_core::storage::DurableStorage::signal).
pub(crate) async fn signal(s: &Inner, id: JobId, name: &str, payload: &Payload) -> Result<()> {
    check_signal(name, payload)?;
    let queue = queue_of(s, id).await?;
    let mut cmd = call(s, s.keys.base(queue.as_str()), "signal", id, "");
    cmd.arg(name).arg(payload.as_str()).arg(s.keys.channel()).arg(MAX_SIGNALS);
    let reply: Vec<String> = s.query(&cmd).await?;
    if let Some(e) = refused(id, &reply, "signal") {
        return Err(e);
    }
    match reply.first().map(String::as_str) {
        Some("ok") => Ok(()),
        _ => Err(unexpected("signal", &reply)),
    }
}

/// One packed journal entry (`lua/durable.lua`'s layout).
fn entry(id: JobId, index: usize, packed: &str) -> Result<Entry> {
    let fields: Vec<&str> = packed.splitn(5, '\0').collect();
    let corrupt = |what: &str| Error::Corrupt { id: Some(id), reason: format!("journal entry {index}: {what}") };
    let [kind, name, until, at, value] = fields[..] else { return Err(corrupt("not five fields")) };
    let kind = EntryKind::parse(kind).ok_or_else(|| corrupt("unknown kind"))?;
    let at = at.parse::<i64>().map_err(|_| corrupt("unreadable instant"))?;
    Ok(Entry {
        index: u32::try_from(index).unwrap_or(u32::MAX),
        name: name.to_owned(),
        kind,
        value: (!value.is_empty()).then(|| Payload::from_stored(value.to_owned())),
        until: until.parse::<i64>().ok().map(from_micros),
        at: from_micros(at),
    })
}

/// [`DurableStorage::journal`](jq_core::storage::DurableStorage::journal).
pub(crate) async fn journal(s: &Inner, id: JobId) -> Result<Journal> {
    let queue = queue_of(s, id).await?;
    let mut cmd = scripts::call(&scripts::DURABLE_READ, &[s.keys.base(queue.as_str())]);
    cmd.arg(id_hex(id));
    let reply: Vec<String> = s.query(&cmd).await?;
    match reply.first().map(String::as_str) {
        Some("notfound") => return Err(Error::NotFound { id }),
        Some("ok") => {}
        _ => return Err(unexpected("journal", &reply)),
    }
    let mut journal = Journal::default();
    if let Some(wait) = reply.get(1).filter(|w| !w.is_empty()) {
        let f: Vec<&str> = wait.splitn(3, '\0').collect();
        if let [index, name, until] = f[..] {
            journal.wait = Some(Wait {
                index: index.parse().unwrap_or(u32::MAX),
                name: name.to_owned(),
                until: from_micros(until.parse().unwrap_or(0)),
            });
        }
    }
    let n = number(&reply, 2);
    for (i, packed) in reply.iter().skip(3).take(n).enumerate() {
        journal.entries.push(entry(id, i, packed)?);
    }
    for packed in reply.iter().skip(3 + n) {
        if let Some((at, name)) = packed.split_once('\0') {
            journal.signals.push(SignalInfo { name: name.to_owned(), sent_at: from_micros(at.parse().unwrap_or(0)) });
        }
    }
    Ok(journal)
}
