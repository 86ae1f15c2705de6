//! The commands, each a generic function over `S: Storage`.
//!
//! Input is checked (and the payload read) in [`Action::prepare`], before
//! any backend is opened: bad input stores nothing and creates no file.

mod admin;
mod enqueue;
mod metrics;
mod periodic;
mod queue;
mod read;
mod serve;
pub mod worker;
mod workflow;

pub use metrics::serve as serve_metrics;

use std::time::Duration;

use jq::storage::Storage;
use jq::{JobId, NewJob, State};

use crate::cli::{Command, DeadCommand, ListArgs, PageArgs, PeriodicCommand, QueueCommand, WorkflowCommand};
use crate::error::CliResult;

/// A command whose input has been checked, ready to run on a storage.
#[derive(Debug)]
pub enum Action {
    /// Store a job.
    Enqueue(Box<NewJob>),
    /// Show a job.
    Get(JobId),
    /// Show a workflow.
    WorkflowShow(jq::workflow::WorkflowId),
    /// List jobs.
    List(ListArgs),
    /// Count jobs.
    Stats {
        /// Redraw interval.
        watch: Option<Duration>,
    },
    /// Cancel a job, with a reason.
    Cancel(JobId, String),
    /// Send a signal to a durable job.
    Signal(JobId, String, jq::Payload),
    /// List dead jobs.
    DeadList(PageArgs),
    /// Retry one dead job, or all of them.
    DeadRetry(RetryTarget),
    /// Delete finished jobs.
    Purge {
        /// A terminal state.
        state: State,
        /// Jobs that finished longer ago than this.
        older_than: Duration,
    },
    /// Show the holders of roles.
    Leaders,
    /// List the periodic jobs.
    PeriodicList,
    /// Trigger one job of a periodic job.
    PeriodicTrigger(String),
    /// List, pause, resume or limit queues.
    Queue(QueueCommand),
    /// Serve the store's gauges on /metrics.
    Metrics {
        /// Where to listen.
        listen: std::net::SocketAddr,
        /// Sampling interval.
        every: Duration,
    },
    /// Serve the dashboard.
    Serve(serve::ServePlan),
    /// Run a worker.
    Worker(worker::WorkerPlan),
}

/// What `dead retry` retries.
#[derive(Debug)]
pub enum RetryTarget {
    /// One job.
    One(JobId),
    /// Every dead job, or those of one queue.
    All(Option<jq::QueueName>),
}

impl Action {
    /// Checks the command's input; `None` for `migrate`, which needs the
    /// backend itself rather than a generic storage.
    pub fn prepare(command: Command) -> CliResult<Option<Self>> {
        Ok(Some(match command {
            Command::Enqueue(args) => Action::Enqueue(Box::new(enqueue::prepare(&args)?)),
            Command::Get { id } => Action::Get(id),
            Command::Workflow(WorkflowCommand::Show { id }) => Action::WorkflowShow(id),
            Command::List(args) => Action::List(args),
            Command::Stats { watch } => Action::Stats { watch },
            Command::Cancel { id, reason } => Action::Cancel(id, reason),
            Command::Signal { id, name, payload } => Action::Signal(id, name, jq::Payload::from_json(payload)?),
            Command::Dead(DeadCommand::List(page)) => Action::DeadList(page),
            Command::Dead(DeadCommand::Retry { id: Some(id), .. }) => Action::DeadRetry(RetryTarget::One(id)),
            Command::Dead(DeadCommand::Retry { id: None, queue, .. }) => Action::DeadRetry(RetryTarget::All(queue)),
            Command::Purge { state, older_than } => Action::Purge { state, older_than },
            Command::Leaders => Action::Leaders,
            Command::Periodic(PeriodicCommand::List) => Action::PeriodicList,
            Command::Periodic(PeriodicCommand::Trigger { name }) => Action::PeriodicTrigger(name),
            Command::Queue(command) => Action::Queue(command),
            Command::Metrics { listen, interval } => Action::Metrics { listen, every: interval },
            Command::Serve { listen, read_only, token, allowed_hosts, read_token } => Action::Serve(
                serve::ServePlan::prepare(listen, read_only, token, allowed_hosts)?.read_token(read_token)?,
            ),
            Command::Worker(args) => Action::Worker(worker::WorkerPlan::prepare(args)?),
            Command::Migrate => return Ok(None),
        }))
    }

    /// Runs the action on `storage`.
    pub async fn run<S: Storage + Clone>(self, storage: S, json: bool) -> CliResult {
        match self {
            Action::Enqueue(job) => enqueue::run(&storage, *job, json).await,
            Action::Get(id) => workflow::get(&storage, id, json).await,
            Action::WorkflowShow(id) => workflow::show(&storage, id, json).await,
            Action::List(args) => read::list(&storage, args.state, &args.page, json, false).await,
            Action::Stats { watch: None } => read::stats(&storage, json).await,
            Action::Stats { watch: Some(every) } => read::watch_stats(&storage, every, json).await,
            Action::Cancel(id, reason) => admin::cancel(&storage, id, &reason, json).await,
            Action::Signal(id, name, payload) => admin::signal(&storage, id, &name, &payload, json).await,
            Action::DeadList(page) => read::list(&storage, Some(State::Dead), &page, json, true).await,
            Action::DeadRetry(target) => admin::retry(&storage, target, json).await,
            Action::Purge { state, older_than } => admin::purge(&storage, state, older_than, json).await,
            Action::Leaders => read::leaders(&storage, json).await,
            Action::PeriodicList => periodic::list(&storage, json).await,
            Action::PeriodicTrigger(name) => periodic::trigger(&storage, &name, json).await,
            Action::Queue(command) => queue::run(&storage, command, json).await,
            Action::Metrics { listen, every } => metrics::run(&storage, listen, every).await,
            Action::Serve(plan) => serve::run(storage, plan).await,
            Action::Worker(plan) => worker::run(storage, plan).await,
        }
    }
}
