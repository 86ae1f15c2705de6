//! The commands that change jobs: `cancel`, `signal`, `dead retry`, `purge`.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use jq::CancelAnswer;
use jq::storage::{Storage, StorageExt};
use jq::{JobFilter, JobId, State};
use serde::Serialize;

use super::RetryTarget;
use crate::duration;
use crate::error::{CliError, CliResult};
use crate::view;

/// `jqctl cancel ID [--reason TEXT]`: cancels a job that has not started,
/// asks the worker of a running one to stop it (with the cancellation
/// capability), and says which; a job already finished is a refusal (exit
/// 2), except one already cancelled (a cancel sent again).
pub async fn cancel<S: Storage>(storage: &S, id: JobId, reason: &str, json: bool) -> CliResult {
    let answer = match storage.capabilities().cancellation {
        Some(cancels) => cancels.request_cancel(id, reason).await?,
        None => {
            storage.cancel(id).await?;
            CancelAnswer::Cancelled
        }
    };
    let (word, state, text) = match answer {
        CancelAnswer::Cancelled => ("cancelled", State::Cancelled, format!("cancelled {id}\n")),
        CancelAnswer::Requested => (
            "requested",
            State::Running,
            format!("cancel requested for {id}: its worker stops it and it ends cancelled\n"),
        ),
        CancelAnswer::Finished(State::Cancelled) => {
            ("finished", State::Cancelled, format!("{id} is already cancelled\n"))
        }
        CancelAnswer::Finished(state) => {
            return Err(CliError::bad_input(format!("job {id} is {state}: too late to cancel, it already finished")));
        }
    };
    if json {
        view::emit_json(&serde_json::json!({ "id": id.to_string(), "answer": word, "state": state }))
    } else {
        view::emit(&text)
    }
}

/// `jqctl signal ID NAME [--payload JSON]`.
pub async fn signal<S: Storage>(storage: &S, id: JobId, name: &str, payload: &jq::Payload, json: bool) -> CliResult {
    storage.require_durable()?.signal(id, name, payload).await?;
    if json {
        view::emit_json(&serde_json::json!({ "id": id.to_string(), "signal": name }))
    } else {
        view::emit(&format!("signal {name:?} sent to {id}\n"))
    }
}

/// `jqctl dead retry ID | --all [--queue Q]`.
pub async fn retry<S: Storage + Clone>(storage: &S, target: RetryTarget, json: bool) -> CliResult {
    let (ids, one) = match target {
        RetryTarget::One(id) => {
            storage.retry(id).await?;
            (vec![id], true)
        }
        RetryTarget::All(queue) => (jq::Client::new(storage.clone()).retry_dead(queue.as_ref()).await?, false),
    };
    if json {
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        return view::emit_json(&serde_json::json!({ "retried": ids.len(), "ids": ids }));
    }
    match ids.as_slice() {
        [id] if one => view::emit(&format!("retried {id}: pending again, with one more attempt\n")),
        _ => view::emit(&format!("retried {} dead job(s)\n", ids.len())),
    }
}

#[derive(Serialize)]
struct Purged {
    purged: u64,
    state: State,
    finished_before: jq::Timestamp,
}

/// How many time slices a long purge is cut into, for the progress bar.
const PURGE_SLICES: i32 = 20;
/// Above this many candidates a purge shows a progress bar.
const PROGRESS_THRESHOLD: u64 = 10_000;

/// `jqctl purge --state S --older-than D`.
///
/// `Storage::purge` deletes everything finished before an instant, in
/// bounded batches. For a progress bar, a long purge walks the cut-off
/// forward from the oldest job to the requested one in slices, each a
/// bounded call; the bar's length is the count of jobs in that state, an
/// upper bound.
pub async fn purge<S: Storage>(storage: &S, state: State, older_than: Duration, json: bool) -> CliResult {
    if !state.is_terminal() {
        return Err(CliError::bad_input(format!(
            "{state} is not a finished state; purge completed, dead or cancelled"
        )));
    }
    let now = jq::Clock::system().now();
    let cutoff = chrono::Duration::from_std(older_than)
        .ok()
        .and_then(|d| now.checked_sub_signed(d))
        .ok_or_else(|| CliError::bad_input(format!("--older-than {}: too far back", duration::human(older_than))))?;
    let candidates = storage.stats().await?.total(state);
    let oldest = storage.list(&JobFilter { state: Some(state), limit: 1, ..JobFilter::default() }).await?;

    let purged = match oldest.first() {
        Some(first) if candidates > PROGRESS_THRESHOLD && first.created_at < cutoff => {
            let bar = ProgressBar::new(candidates).with_message(format!("purging {state} jobs"));
            if let Ok(style) = ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} ({elapsed})") {
                bar.set_style(style);
            }
            // Jobs finish after they are created, so none finished before the
            // oldest one's creation: start the slices there.
            let span = cutoff - first.created_at;
            let mut total = 0;
            for i in 1..=PURGE_SLICES {
                let slice_end = if i == PURGE_SLICES { cutoff } else { first.created_at + span * i / PURGE_SLICES };
                total += storage.purge(state, slice_end).await?;
                bar.set_position(total.min(candidates));
            }
            bar.finish_and_clear();
            total
        }
        _ => storage.purge(state, cutoff).await?,
    };
    if json {
        view::emit_json(&Purged { purged, state, finished_before: cutoff })
    } else {
        view::emit(&format!("purged {purged} {state} job(s) that finished before {}\n", view::instant(cutoff)))
    }
}
