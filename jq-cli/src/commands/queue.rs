//! `jqctl queue list | pause | resume | limit | keys | key-limit |
//! key-clear`: queue controls and key limits, stored in the backend and
//! honoured by every worker pool's claims.

use jq::storage::{Storage, StorageExt};
use jq::{KeyReport, QueueInfo, QueueLimits, QueueName};
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
        QueueCommand::Keys { queue, top } => keys(storage, &queue, top, json).await,
        QueueCommand::KeyLimit { queue, key, concurrency, rate } => {
            // A flag not given keeps the stored value: the key's override,
            // else the default.
            let report = storage.require_keys()?.keys(&queue, 0).await?;
            let current = match &key {
                Some(k) => report.overrides.iter().find(|o| o.key == *k).map_or(report.default, |o| o.limits),
                None => report.default,
            };
            let limits = QueueLimits {
                concurrency: concurrency.map_or(current.concurrency, |c| c.into_option()),
                rate: rate.map_or(current.rate, |r| r.into_option()),
            };
            storage.require_keys()?.set_key_limits(&queue, key.as_deref(), &limits).await?;
            let whom = key.as_ref().map_or_else(|| "every key".to_owned(), |k| format!("key {k:?}"));
            let text =
                format!("{queue}, {whom}: concurrency {}, rate {}\n", show_concurrency(&limits), show_rate(&limits));
            keys_changed(storage, &queue, json, &text).await
        }
        QueueCommand::KeyClear { queue, key } => {
            storage.require_keys()?.clear_key_limits(&queue, &key).await?;
            keys_changed(storage, &queue, json, &format!("{queue}: key {key:?} follows the default again\n")).await
        }
    }
}

/// Prints `text`, or the queue's key limits as JSON.
async fn keys_changed<S: Storage>(storage: &S, queue: &QueueName, json: bool, text: &str) -> CliResult {
    if !json {
        return view::emit(text);
    }
    view::emit_json(&KeysView::of(&storage.require_keys()?.keys(queue, 0).await?))
}

/// One key's limits as `queue keys --json` shows them.
#[derive(Debug, Serialize)]
struct KeyLimitsView {
    /// At most this many Running at once; null: no limit.
    concurrency: Option<u32>,
    /// `N/PERIOD`; null: no limit.
    rate: Option<String>,
}

impl From<&QueueLimits> for KeyLimitsView {
    fn from(limits: &QueueLimits) -> Self {
        KeyLimitsView { concurrency: limits.concurrency, rate: limits.rate.map(|r| r.to_string()) }
    }
}

/// `queue keys --json`.
#[derive(Debug, Serialize)]
struct KeysView {
    queue: String,
    /// What every key without an override follows.
    default: KeyLimitsView,
    /// Keys with their own limits.
    overrides: Vec<KeyOverrideView>,
    /// The busiest keys: most running and pending jobs first.
    busiest: Vec<KeyView>,
}

#[derive(Debug, Serialize)]
struct KeyOverrideView {
    key: String,
    #[serde(flatten)]
    limits: KeyLimitsView,
}

#[derive(Debug, Serialize)]
struct KeyView {
    key: String,
    running: u64,
    /// Pending and Scheduled jobs.
    pending: u64,
    /// The limits it follows (its override, else the default).
    #[serde(flatten)]
    limits: KeyLimitsView,
    /// True when its limits are its own override.
    overridden: bool,
}

impl KeysView {
    fn of(report: &KeyReport) -> Self {
        KeysView {
            queue: report.queue.to_string(),
            default: (&report.default).into(),
            overrides: report
                .overrides
                .iter()
                .map(|o| KeyOverrideView { key: o.key.clone(), limits: (&o.limits).into() })
                .collect(),
            busiest: report
                .busiest
                .iter()
                .map(|k| KeyView {
                    key: k.key.clone(),
                    running: k.running,
                    pending: k.pending,
                    limits: (&k.limits).into(),
                    overridden: report.overrides.iter().any(|o| o.key == k.key),
                })
                .collect(),
        }
    }
}

/// `jqctl queue keys QUEUE`.
async fn keys<S: Storage>(storage: &S, queue: &QueueName, top: usize, json: bool) -> CliResult {
    let report = storage.require_keys()?.keys(queue, top).await?;
    let view = KeysView::of(&report);
    if json {
        return view::emit_json(&view);
    }
    let mut out = format!(
        "{queue}: every key at most {} running, {} starts\n",
        show_concurrency(&report.default),
        show_rate(&report.default)
    );
    for o in &report.overrides {
        out.push_str(&format!(
            "  override {:?}: {} running, {} starts\n",
            o.key,
            show_concurrency(&o.limits),
            show_rate(&o.limits)
        ));
    }
    let rows: Vec<Vec<String>> = view
        .busiest
        .iter()
        .map(|k| {
            vec![
                k.key.clone(),
                k.running.to_string(),
                k.pending.to_string(),
                k.limits.concurrency.map_or_else(|| "-".to_owned(), |n| n.to_string()),
                k.limits.rate.clone().unwrap_or_else(|| "-".to_owned()),
                if k.overridden { "override" } else { "default" }.to_owned(),
            ]
        })
        .collect();
    out.push_str(&view::table(&["KEY", "RUNNING", "PENDING", "CONCURRENCY", "RATE", "LIMITS"], &rows));
    view::emit(&out)
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
