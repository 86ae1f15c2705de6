//! `jqctl enqueue`.

use std::io::Read as _;

use jq::storage::{Storage, StorageExt};
use jq::{NewJob, Payload, UniqueRule};
use serde::Serialize;

use crate::cli::EnqueueArgs;
use crate::error::{CliError, CliResult};
use crate::view;

/// Reads the payload and checks every field; nothing touches the backend.
pub fn prepare(args: &EnqueueArgs) -> CliResult<NewJob> {
    let text = read_payload(&args.payload)?;
    let payload = Payload::from_json(text)
        .map_err(|e| CliError::bad_input(format!("{e}; pass JSON such as '{{\"n\":1}}', @FILE or - for stdin")))?;
    let mut builder = NewJob::builder(args.kind.as_str(), payload)
        .queue(args.queue.as_str())
        .priority(args.priority)
        .max_attempts(args.effective_max_attempts());
    if let Some(delay) = args.delay {
        builder = builder.delay(delay);
    }
    if let Some(at) = args.run_at {
        builder = builder.run_at(at);
    }
    if let Some(key) = &args.unique_key {
        builder = builder.unique_key(key.as_str());
    }
    if let Some(key) = &args.key {
        builder = builder.key(key.as_str());
    }
    if let Some(window) = args.debounce {
        builder = builder.debounce(window);
    }
    if let Some(max) = args.max_delay {
        builder = builder.max_delay(max);
    }
    if let Some(period) = args.unique_for {
        builder = builder.unique_for(period);
    }
    if args.replace {
        builder = builder.replace();
    }
    Ok(builder.build()?)
}

fn read_payload(arg: &str) -> CliResult<String> {
    if arg == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| CliError::bad_input(format!("cannot read the payload from stdin: {e}")))?;
        return Ok(text);
    }
    if let Some(path) = arg.strip_prefix('@') {
        return std::fs::read_to_string(path)
            .map_err(|e| CliError::bad_input(format!("cannot read the payload file {path:?}: {e}")));
    }
    Ok(arg.to_owned())
}

#[derive(Serialize)]
struct Enqueued {
    id: String,
    /// False when a job with the same unique key answered instead (a live
    /// one, one within a period, or a waiting one that a debounce or
    /// replace changed).
    created: bool,
}

/// Stores `job` and prints its id (or the id of the live job with its key).
pub async fn run<S: Storage>(storage: &S, job: NewJob, json: bool) -> CliResult {
    let new_id = job.id;
    let key = job.unique_key.clone();
    let queue = job.queue.clone();
    let rule = job.unique_rule;
    let id = storage.enqueue_one(job).await?;
    let created = id == new_id;
    if !created {
        let state = storage.get(id).await.map(|j| j.state.to_string()).unwrap_or_else(|_| "unknown".into());
        let key = key.unwrap_or_default();
        match rule {
            // Debounce and replace change only a waiting job.
            Some(UniqueRule::Debounce { .. } | UniqueRule::Replace) if state != "running" => eprintln!(
                "note: job {id} ({state}) in queue {queue} has unique key {key:?} and took this payload; nothing new \
                 was stored"
            ),
            _ => eprintln!(
                "note: job {id} ({state}) in queue {queue} already has unique key {key:?}; nothing new was stored"
            ),
        }
    }
    if json { view::emit_json(&Enqueued { id: id.to_string(), created }) } else { view::emit(&format!("{id}\n")) }
}
