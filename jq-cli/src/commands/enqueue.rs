//! `jqctl enqueue`.

use std::io::Read as _;

use jq::storage::{Storage, StorageExt};
use jq::{NewJob, Payload};
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
    /// False when a live job with the same unique key was found instead.
    created: bool,
}

/// Stores `job` and prints its id (or the id of the live job with its key).
pub async fn run<S: Storage>(storage: &S, job: NewJob, json: bool) -> CliResult {
    let new_id = job.id;
    let key = job.unique_key.clone();
    let queue = job.queue.clone();
    let id = storage.enqueue_one(job).await?;
    let created = id == new_id;
    if !created {
        let state = storage.get(id).await.map(|j| j.state.to_string()).unwrap_or_else(|_| "unknown".into());
        eprintln!(
            "note: job {id} ({state}) in queue {queue} already has unique key {:?}; nothing new was stored",
            key.unwrap_or_default()
        );
    }
    if json { view::emit_json(&Enqueued { id: id.to_string(), created }) } else { view::emit(&format!("{id}\n")) }
}
