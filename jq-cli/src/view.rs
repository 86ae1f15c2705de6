//! What the CLI prints: serializable views of jobs and stats for `--json`,
//! and hand-formatted tables for people.

use std::fmt::Write as _;
use std::io::Write as _;

use jq::storage::Leader;
use jq::{AttemptError, Job, State, StateCounts, Stats, Timestamp};
use serde::Serialize;
use serde_json::value::RawValue;

use crate::error::CliResult;

/// Writes `text` to stdout. A closed pipe (`jqctl list | head`) is not an
/// error: the reader has what it wanted.
pub fn emit(text: &str) -> CliResult {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Writes `value` as pretty JSON and a newline.
pub fn emit_json<T: Serialize + ?Sized>(value: &T) -> CliResult {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    emit(&text)
}

/// A job as `--json` shows it. The lease token is left out: it is the
/// worker's fencing secret, not something an operator acts on.
#[derive(Debug, Serialize)]
pub struct JobView {
    /// Its id.
    pub id: String,
    /// Its queue.
    pub queue: String,
    /// Its kind.
    pub kind: String,
    /// Its state.
    pub state: State,
    /// Its priority name.
    pub priority: &'static str,
    /// Claims so far.
    pub attempts: u32,
    /// Claims allowed in all.
    pub max_attempts: u32,
    /// Not claimable before.
    pub run_at: Timestamp,
    /// When it was enqueued.
    pub created_at: Timestamp,
    /// When it finished, if it did.
    pub finished_at: Option<Timestamp>,
    /// Who holds it, while running.
    pub lease: Option<LeaseView>,
    /// Its unique key.
    pub unique_key: Option<String>,
    /// Its key (keyed jobs: limits and turns per key), if any.
    pub key: Option<String>,
    /// Every failure, oldest first.
    pub errors: Vec<AttemptError>,
    /// The payload: the stored JSON as is (a string if it is not JSON).
    pub payload: PayloadView,
    /// The progress its handler last reported (JSON as stored), if any.
    pub progress: Option<PayloadView>,
    /// A cancel request stored while it ran, if any.
    pub cancel_requested: Option<CancelView>,
    /// Its own limit per attempt, in milliseconds, if it has one.
    pub timeout_ms: Option<u64>,
}

/// A cancel request of a running job.
#[derive(Debug, Serialize)]
pub struct CancelView {
    /// When it was asked for.
    pub at: Timestamp,
    /// Why.
    pub reason: String,
}

/// Stored JSON as is, or as a string when it does not parse.
fn json_view(text: &str) -> PayloadView {
    match RawValue::from_string(text.to_owned()) {
        Ok(raw) => PayloadView::Json(raw),
        Err(_) => PayloadView::Text(text.to_owned()),
    }
}

/// The lease of a running job.
#[derive(Debug, Serialize)]
pub struct LeaseView {
    /// The worker's name.
    pub worker: String,
    /// When the lease runs out unless extended.
    pub expires_at: Timestamp,
}

/// A payload embedded as JSON, or as a string when storage holds non-JSON.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum PayloadView {
    /// Valid JSON, reproduced byte for byte.
    Json(Box<RawValue>),
    /// Anything else.
    Text(String),
}

impl From<&Job> for JobView {
    fn from(job: &Job) -> Self {
        let payload = json_view(job.payload.as_str());
        JobView {
            id: job.id.to_string(),
            queue: job.queue.to_string(),
            kind: job.kind.clone(),
            state: job.state,
            priority: job.priority.as_str(),
            attempts: job.attempts,
            max_attempts: job.max_attempts,
            run_at: job.run_at,
            created_at: job.created_at,
            finished_at: job.finished_at,
            lease: job.lease.as_ref().map(|l| LeaseView { worker: l.worker.clone(), expires_at: l.expires_at }),
            unique_key: job.unique_key.clone(),
            key: job.key.clone(),
            errors: job.errors.clone(),
            payload,
            progress: job.progress.as_deref().map(json_view),
            cancel_requested: job.cancel_requested.as_ref().map(|c| CancelView { at: c.at, reason: c.reason.clone() }),
            timeout_ms: job.timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

/// Counts of one queue (or all) as `--json` shows them: every state's
/// count by its name (`waiting`, `scheduled`, ..., from [`State::ALL`]:
/// a new state shows without a change here), then `total`.
#[derive(Debug, Default)]
pub struct CountsView(StateCounts);

impl Serialize for CountsView {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(State::ALL.len() + 1))?;
        for (state, n) in self.0.iter() {
            map.serialize_entry(state.as_str(), &n)?;
        }
        map.serialize_entry("total", &self.0.total())?;
        map.end()
    }
}

/// `stats --json`.
#[derive(Debug, Serialize)]
pub struct StatsView {
    /// Per queue, by name.
    pub queues: std::collections::BTreeMap<String, CountsView>,
    /// Over every queue.
    pub total: CountsView,
}

impl From<&Stats> for StatsView {
    fn from(stats: &Stats) -> Self {
        StatsView {
            queues: stats.queues.iter().map(|(q, c)| (q.clone(), CountsView(*c))).collect(),
            total: CountsView(stats.counts()),
        }
    }
}

/// A role's holder as `leaders --json` shows it.
#[derive(Debug, Serialize)]
pub struct LeaderView {
    /// The role ("maintenance": the pool that promotes, recovers and purges).
    pub role: String,
    /// The holder's name: a worker pool's worker name.
    pub holder: String,
    /// When the role is free unless renewed.
    pub expires_at: Timestamp,
    /// True when that is past: the holder stopped renewing (it died, or
    /// cannot reach the store) and the next pool to campaign takes over.
    pub expired: bool,
}

impl LeaderView {
    /// The view of `leader` at `now`.
    pub fn of(leader: &Leader, now: Timestamp) -> Self {
        LeaderView {
            role: leader.role.clone(),
            holder: leader.holder.clone(),
            expires_at: leader.expires_at,
            expired: leader.expires_at <= now,
        }
    }
}

/// The `leaders` table.
pub fn leaders_table(leaders: &[Leader], now: Timestamp) -> String {
    let rows: Vec<Vec<String>> = leaders
        .iter()
        .map(|l| {
            let until = if l.expires_at <= now {
                format!("{} (expired)", instant(l.expires_at))
            } else {
                instant(l.expires_at)
            };
            vec![l.role.clone(), l.holder.clone(), until]
        })
        .collect();
    table(&["ROLE", "HOLDER", "HELD UNTIL"], &rows)
}

/// Formats an instant for people: UTC, second precision.
pub fn instant(t: Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// A left-aligned text table with a header row; the last column is not padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            if i + 1 == widths.len() {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<w$}  ");
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// The `list` table.
pub fn jobs_table(jobs: &[Job], with_last_error: bool) -> String {
    let mut header = vec!["ID", "QUEUE", "KIND", "STATE", "PRIORITY", "ATTEMPTS", "RUN AT", "CREATED", "PROGRESS"];
    if with_last_error {
        header.push("LAST ERROR");
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let mut row = vec![
                j.id.to_string(),
                j.queue.to_string(),
                j.kind.clone(),
                j.state.to_string(),
                j.priority.to_string(),
                format!("{}/{}", j.attempts, j.max_attempts),
                instant(j.run_at),
                instant(j.created_at),
                j.progress.as_deref().map_or_else(String::new, |p| one_line(p, 40)),
            ];
            if with_last_error {
                row.push(j.errors.last().map_or_else(String::new, |e| one_line(&e.message, 60)));
            }
            row
        })
        .collect();
    table(&header, &rows)
}

/// The `stats` table: one row per queue, one column per state, and a total row.
pub fn stats_table(stats: &Stats) -> String {
    let states: Vec<String> = State::ALL.iter().map(|s| s.as_str().to_uppercase()).collect();
    let mut header = vec!["QUEUE"];
    header.extend(states.iter().map(String::as_str));
    header.push("TOTAL");
    let row = |name: &str, c: &StateCounts| {
        let mut row = vec![name.to_owned()];
        row.extend(c.iter().map(|(_, n)| n.to_string()));
        row.push(c.total().to_string());
        row
    };
    let mut rows: Vec<Vec<String>> = stats.queues.iter().map(|(q, c)| row(q, c)).collect();
    if rows.is_empty() {
        return "no jobs\n".to_owned();
    }
    rows.push(row("(all)", &stats.counts()));
    table(&header, &rows)
}

/// `get` for people.
pub fn job_details(job: &Job) -> String {
    let mut out = String::new();
    let mut field = |name: &str, value: &str| {
        let _ = writeln!(out, "{name:<13}{value}");
    };
    field("id", &job.id.to_string());
    field("queue", job.queue.as_str());
    field("kind", &job.kind);
    field("state", job.state.as_str());
    field("priority", job.priority.as_str());
    field("attempts", &format!("{} of {}", job.attempts, job.max_attempts));
    field("run at", &instant(job.run_at));
    field("created at", &instant(job.created_at));
    if let Some(at) = job.finished_at {
        field("finished at", &instant(at));
    }
    if let Some(lease) = &job.lease {
        field("held by", &format!("{} until {}", lease.worker, instant(lease.expires_at)));
    }
    if let Some(key) = &job.unique_key {
        field("unique key", key);
    }
    if let Some(key) = &job.key {
        field("key", key);
    }
    if let Some(timeout) = job.timeout {
        field("timeout", &format!("{timeout:?}"));
    }
    if let Some(progress) = &job.progress {
        field("progress", progress);
    }
    if let Some(request) = &job.cancel_requested {
        let reason = if request.reason.is_empty() { String::new() } else { format!(": {}", request.reason) };
        field("cancel asked", &format!("at {}{reason}", instant(request.at)));
    }
    let payload = serde_json::from_str::<serde_json::Value>(job.payload.as_str())
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| job.payload.as_str().to_owned());
    let _ = writeln!(out, "payload");
    for line in payload.lines() {
        let _ = writeln!(out, "  {line}");
    }
    if job.errors.is_empty() {
        let _ = writeln!(out, "errors       none");
    } else {
        let _ = writeln!(out, "errors");
        for e in &job.errors {
            let _ = writeln!(out, "  attempt {} at {}:", e.attempt, instant(e.at));
            for line in e.message.lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
    }
    out
}

/// The last non-blank line of `text` (where a stderr tail says what went
/// wrong), cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let first = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    if first.chars().count() <= max {
        first.to_owned()
    } else {
        let cut: String = first.chars().take(max.saturating_sub(3)).collect();
        format!("{cut}...")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn stats_show_every_state() {
        let mut counts = StateCounts::default();
        counts.set(State::Waiting, 2);
        counts.set(State::Dead, 1);
        let stats = Stats { queues: [("mail".to_owned(), counts)].into_iter().collect() };
        let json = serde_json::to_value(StatsView::from(&stats)).unwrap();
        for state in State::ALL {
            assert!(json["queues"]["mail"].get(state.as_str()).is_some(), "{state} in {json}");
        }
        assert_eq!((json["total"]["waiting"].as_u64(), json["total"]["total"].as_u64()), (Some(2), Some(3)));
        let text = stats_table(&stats);
        let header = text.lines().next().unwrap();
        for state in State::ALL {
            assert!(header.contains(&state.as_str().to_uppercase()), "{state} in {header:?}");
        }
        let mail = text.lines().nth(1).unwrap().split_whitespace().collect::<Vec<_>>();
        assert_eq!(mail, ["mail", "2", "0", "0", "0", "0", "1", "0", "3"]);
    }

    #[test]
    fn tables_align_columns() {
        let t = table(&["A", "BB"], &[vec!["xxx".into(), "y".into()], vec!["z".into(), "w".into()]]);
        assert_eq!(t, "A    BB\nxxx  y\nz    w\n");
    }

    #[test]
    fn one_line_keeps_the_last_nonblank_line() {
        assert_eq!(one_line("a\nboom\n\n", 10), "boom");
        assert_eq!(one_line(&"x".repeat(20), 10), "xxxxxxx...");
    }
}

/// A durable job's journal as `jqctl get --json` shows it.
#[derive(Debug, Serialize)]
pub struct JournalView {
    /// Every entry, by index.
    pub entries: Vec<EntryView>,
    /// The wait the job is in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitView>,
    /// Signals not taken yet, oldest first.
    pub signals: Vec<SignalView>,
}

/// One journal entry.
#[derive(Debug, Serialize)]
pub struct EntryView {
    /// Its place, from 0.
    pub index: u32,
    /// step, sleep, signal, timeout or patch.
    pub kind: &'static str,
    /// The step's (or signal's, or patch's) name.
    pub name: String,
    /// When it was recorded.
    pub at: Timestamp,
    /// A sleep's instant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<Timestamp>,
    /// A step's result or a signal's payload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<serde_json::Value>,
}

/// The wait a job is in.
#[derive(Debug, Serialize)]
pub struct WaitView {
    /// The signal's name.
    pub signal: String,
    /// When it times out.
    pub until: Timestamp,
}

/// A signal not taken yet.
#[derive(Debug, Serialize)]
pub struct SignalView {
    /// Its name.
    pub name: String,
    /// When it was sent.
    pub sent_at: Timestamp,
}

impl From<&jq::durable::Journal> for JournalView {
    fn from(j: &jq::durable::Journal) -> Self {
        JournalView {
            entries: j
                .entries
                .iter()
                .map(|e| EntryView {
                    index: e.index,
                    kind: e.kind.as_str(),
                    name: e.name.clone(),
                    at: e.at,
                    until: e.until,
                    value: e.value.as_ref().map(|v| {
                        serde_json::from_str(v.as_str())
                            .unwrap_or_else(|_| serde_json::Value::String(v.as_str().into()))
                    }),
                })
                .collect(),
            wait: j.wait.as_ref().map(|w| WaitView { signal: w.name.clone(), until: w.until }),
            signals: j.signals.iter().map(|s| SignalView { name: s.name.clone(), sent_at: s.sent_at }).collect(),
        }
    }
}

/// The journal lines of `get` for people: one line per entry with its
/// instant, then what the job sleeps until or waits for, and its signals
/// not taken yet.
pub fn journal_text(journal: &jq::durable::Journal, state: State, run_at: Timestamp) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "journal");
    for e in &journal.entries {
        let what = match e.kind {
            jq::durable::EntryKind::Sleep => format!("sleep until {}", e.until.map(instant).unwrap_or_default()),
            jq::durable::EntryKind::Timeout => format!("wait for {:?}: timed out", e.name),
            jq::durable::EntryKind::Signal => {
                format!("wait for {:?}: {}", e.name, e.value.as_ref().map_or("", |v| v.as_str()))
            }
            jq::durable::EntryKind::Step => {
                format!("step {:?}: {}", e.name, e.value.as_ref().map_or("", |v| v.as_str()))
            }
            jq::durable::EntryKind::Patch => format!("patch {:?}", e.name),
        };
        let _ = writeln!(out, "  {:>3}  {}  {what}", e.index, instant(e.at));
    }
    match &journal.wait {
        Some(w) => {
            let _ = writeln!(out, "{:<13}signal {:?} until {}", "waits for", w.name, instant(w.until));
        }
        None if state == State::Scheduled
            && journal.entries.last().is_some_and(|e| e.kind == jq::durable::EntryKind::Sleep) =>
        {
            let _ = writeln!(out, "{:<13}{}", "sleeps until", instant(run_at));
        }
        None => {}
    }
    if !journal.signals.is_empty() {
        let names: Vec<String> =
            journal.signals.iter().map(|s| format!("{:?} ({})", s.name, instant(s.sent_at))).collect();
        let _ = writeln!(out, "{:<13}{}", "signals", names.join(", "));
    }
    out
}
