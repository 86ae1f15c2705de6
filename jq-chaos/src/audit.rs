//! The audit trail: one JSON line per handler start and per handler finish,
//! appended by each worker process to a file of its own.
//!
//! The file is opened with `O_APPEND` and each record is one `write` of a
//! whole line, so a SIGKILL loses at most the line being written, which the
//! reader counts and skips.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::Mutex;

use jq_core::JobId;
use jq_core::storage::LeaseToken;
use serde::{Deserialize, Serialize};

/// What a record marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    /// The handler began.
    Started,
    /// The handler finished its work and is about to return `Ok` (ack).
    Finished,
}

/// One line of the trail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Started or finished.
    pub event: Event,
    /// The job.
    pub job: JobId,
    /// The attempt number of this run.
    pub attempt: u32,
    /// The lease token of this run's claim.
    pub token: LeaseToken,
    /// The worker process.
    pub pid: u32,
    /// When the handler started, microseconds since the epoch.
    pub started_us: i64,
    /// When it finished (finished records only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_us: Option<i64>,
}

/// Appends records to one file.
#[derive(Debug)]
pub struct AuditWriter {
    file: Mutex<File>,
}

impl AuditWriter {
    /// Opens (creating) `path` for appending.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(AuditWriter { file: Mutex::new(file) })
    }

    /// Appends one record as one line with a single write.
    pub fn append(&self, record: &Record) -> io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(&line)?;
        file.flush()
    }
}

/// Microseconds since the epoch, now.
pub fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// One run of a handler: a claim's started record and, if it got that far,
/// its finished record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// The claim's token.
    pub token: LeaseToken,
    /// The attempt number.
    pub attempt: u32,
    /// The worker process.
    pub pid: u32,
    /// Start, microseconds since the epoch.
    pub started_us: i64,
    /// Finish, when the handler finished.
    pub finished_us: Option<i64>,
}

/// Every run of every job, read from all the trail files of a run.
#[derive(Clone, Debug, Default)]
pub struct Trail {
    /// Runs per job, ordered by attempt, then start.
    pub runs: BTreeMap<JobId, Vec<Run>>,
    /// Lines that did not parse (a line cut by a SIGKILL).
    pub torn_lines: usize,
    /// Records read.
    pub records: usize,
}

impl Trail {
    /// Reads every `*.jsonl` file of `dir`.
    pub fn read_dir(dir: &Path) -> io::Result<Trail> {
        let mut trail = Trail::default();
        let mut by_token: HashMap<(JobId, LeaseToken), Run> = HashMap::new();
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.extension().is_none_or(|e| e != "jsonl") {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            for line in text.lines() {
                let Ok(record) = serde_json::from_str::<Record>(line) else {
                    trail.torn_lines += 1;
                    continue;
                };
                trail.records += 1;
                let run = by_token.entry((record.job, record.token)).or_insert(Run {
                    token: record.token,
                    attempt: record.attempt,
                    pid: record.pid,
                    started_us: record.started_us,
                    finished_us: None,
                });
                if record.event == Event::Finished {
                    run.finished_us = record.finished_us.or(Some(record.started_us));
                }
            }
        }
        for ((job, _), run) in by_token {
            trail.runs.entry(job).or_default().push(run);
        }
        for runs in trail.runs.values_mut() {
            runs.sort_by_key(|r| (r.attempt, r.started_us));
        }
        Ok(trail)
    }
}
