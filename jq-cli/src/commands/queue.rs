//! `jqctl queue list | pause | resume | limit`: queue controls, stored in
//! the backend and honoured by every worker pool's claims.

use jq::storage::{Storage, StorageExt};
use jq::{QueueInfo, QueueLimits};
use serde::Serialize;

use crate::cli::QueueCommand;
use crate::error::CliResult;
use crate::view;

/// Runs one `queue` subcommand.
pub async fn run<S: Storage>(storage: &S, command: QueueCommand, json: bool) -> CliResult {
    match command {
        QueueCommand::List => list(storage, json).await,
        QueueCommand::Pause { queue } => {
            storage.require_controls()?.set_paused(&queue, true).await?;
            changed(
                storage,
                &queue,
                json,
                &format!("paused {queue}: no worker starts its jobs until `jqctl queue resume {queue}`\n"),
            )
            .await
        }
        QueueCommand::Resume { queue } => {
            storage.require_controls()?.set_paused(&queue, false).await?;
            changed(storage, &queue, json, &format!("resumed {queue}\n")).await
        }
        QueueCommand::Limit { queue, concurrency, rate } => {
            // A flag not given keeps the stored value.
            let current =
                storage.require_controls()?.queues().await?.into_iter().find(|q| q.queue == queue).map(|q| q.limits);
            let current = current.unwrap_or_default();
            let limits = QueueLimits {
                concurrency: concurrency.map_or(current.concurrency, |c| c.into_option()),
                rate: rate.map_or(current.rate, |r| r.into_option()),
            };
            storage.require_controls()?.set_limits(&queue, &limits).await?;
            let text = format!("{queue}: concurrency {}, rate {}\n", show_concurrency(&limits), show_rate(&limits));
            changed(storage, &queue, json, &text).await
        }
    }
}

/// Prints `text`, or the queue's view as JSON.
async fn changed<S: Storage>(storage: &S, queue: &jq::QueueName, json: bool, text: &str) -> CliResult {
    if !json {
        return view::emit(text);
    }
    let stats = storage.stats().await?;
    let info = storage.require_controls()?.queues().await?.into_iter().find(|q| q.queue == *queue);
    match info {
        Some(info) => view::emit_json(&QueueView::of(&info, &stats)),
        None => view::emit_json(&serde_json::json!({ "queue": queue.as_str(), "paused": false })),
    }
}

fn show_concurrency(limits: &QueueLimits) -> String {
    limits.concurrency.map_or_else(|| "-".to_owned(), |n| n.to_string())
}

fn show_rate(limits: &QueueLimits) -> String {
    limits.rate.map_or_else(|| "-".to_owned(), |r| r.to_string())
}

/// One queue as `queue list --json` shows it.
#[derive(Debug, Serialize)]
struct QueueView {
    queue: String,
    paused: bool,
    paused_at: Option<jq::Timestamp>,
    /// At most this many Running across every worker; null: no limit.
    concurrency: Option<u32>,
    /// `N/PERIOD` (e.g. `1000/1s`); null: no limit.
    rate: Option<String>,
    /// Scheduled and Pending jobs.
    waiting: u64,
    running: u64,
    /// Workers whose latest claim met the pause (since it was made).
    seen_pause: Vec<String>,
    /// Every worker that met a control, its latest claim and whether the
    /// queue was paused then.
    seen: Vec<SeenView>,
}

#[derive(Debug, Serialize)]
struct SeenView {
    worker: String,
    at: jq::Timestamp,
    paused: bool,
}

impl QueueView {
    fn of(info: &QueueInfo, stats: &jq::Stats) -> Self {
        let counts = stats.queues.get(info.queue.as_str()).copied().unwrap_or_default();
        let seen_pause = info
            .paused_at
            .map(|since| info.seen.iter().filter(|s| s.paused && s.at >= since).map(|s| s.worker.clone()).collect())
            .unwrap_or_default();
        QueueView {
            queue: info.queue.to_string(),
            paused: info.paused(),
            paused_at: info.paused_at,
            concurrency: info.limits.concurrency,
            rate: info.limits.rate.map(|r| r.to_string()),
            waiting: counts.get(jq::State::Pending) + counts.get(jq::State::Scheduled),
            running: counts.get(jq::State::Running),
            seen_pause,
            seen: info.seen.iter().map(|s| SeenView { worker: s.worker.clone(), at: s.at, paused: s.paused }).collect(),
        }
    }
}

/// `jqctl queue list`.
async fn list<S: Storage>(storage: &S, json: bool) -> CliResult {
    let queues = storage.require_controls()?.queues().await?;
    let stats = storage.stats().await?;
    let views: Vec<QueueView> = queues.iter().map(|q| QueueView::of(q, &stats)).collect();
    if json {
        return view::emit_json(&views);
    }
    let rows: Vec<Vec<String>> = views
        .iter()
        .map(|v| {
            let state = match v.paused_at {
                Some(at) => format!("paused since {}", view::instant(at)),
                None => "active".to_owned(),
            };
            let seen = if v.paused { format!("{} of {}", v.seen_pause.len(), v.seen.len()) } else { "-".to_owned() };
            vec![
                v.queue.clone(),
                state,
                v.concurrency.map_or_else(|| "-".to_owned(), |n| n.to_string()),
                v.rate.clone().unwrap_or_else(|| "-".to_owned()),
                v.waiting.to_string(),
                v.running.to_string(),
                seen,
            ]
        })
        .collect();
    view::emit(&view::table(
        &["QUEUE", "STATE", "CONCURRENCY", "RATE", "WAITING", "RUNNING", "POOLS SEEN PAUSE"],
        &rows,
    ))
}
