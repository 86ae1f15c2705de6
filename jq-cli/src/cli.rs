//! The command line: every command, flag and its help text.

use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use jq::{JobId, Priority, QueueName, State, Timestamp};

use crate::duration;

const AFTER_HELP: &str = "\
Backends (--url or JQ_URL):
  sqlite://PATH                 a SQLite file, created if missing (default: sqlite://jq.db)
  postgres://USER@HOST:PORT/DB  PostgreSQL (needs the `postgres` feature; run `jqctl migrate` once);
                                add ?schema=NAME to use a schema other than `jq`; through PgBouncer in
                                transaction mode add ?pooler=transaction (and --listen-url)
  redis://HOST:PORT             Redis (needs the `redis` feature); add ?prefix=NAME for another key prefix

Exit codes:
  0  success
  1  failure: backend unreachable, driver error, I/O error
  2  bad input: the message says what to fix; nothing was stored or changed

A first session:
  jqctl enqueue send_email '{\"to\":\"a@example.com\"}'
  jqctl worker --concurrency 4 --exec ./send-email.sh
  jqctl stats --watch";

/// jqctl: enqueue, inspect and run the jobs of a jq queue.
#[derive(Debug, Parser)]
#[command(name = "jqctl", version, about, after_help = AFTER_HELP, max_term_width = 100)]
pub struct Cli {
    /// Where the jobs are stored: sqlite://PATH, postgres://..., redis://...
    #[arg(long, env = "JQ_URL", default_value = "sqlite://jq.db", global = true, value_name = "URL")]
    pub url: String,

    /// PostgreSQL behind a transaction pooler (?pooler=transaction): a direct URL for
    /// wake-ups (LISTEN); without it, workers poll.
    #[arg(long, env = "JQ_LISTEN_URL", global = true, value_name = "URL", hide_env_values = true)]
    pub listen_url: Option<String>,

    /// Print machine-readable JSON instead of tables (for scripts).
    #[arg(long, global = true)]
    pub json: bool,

    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Add a job to a queue and print its id.
    Enqueue(EnqueueArgs),
    /// Show one job: state, attempts, errors with their instants, payload.
    Get {
        /// The job's id, as printed by `enqueue` or `list`.
        #[arg(value_parser = parse_job_id)]
        id: JobId,
    },
    /// List jobs, oldest first, one page at a time.
    List(ListArgs),
    /// Count jobs per queue and state.
    Stats {
        /// Redraw every INTERVAL (default 2s) until Ctrl-C.
        #[arg(long, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "2s",
              value_parser = duration::parse_positive)]
        watch: Option<Duration>,
    },
    /// Cancel a job: one that has not started at once; a running one is stopped by its worker
    /// (within seconds) and ends cancelled, not retried.
    #[command(after_help = "Prints what happened: cancelled (it had not started), cancel requested (its worker
stops it: the handler is told, a --exec command gets SIGTERM, then SIGKILL after the
worker's --stop-grace), or that the job had already finished (exit 2, unless it was
already cancelled: sending the cancel again is safe).")]
    Cancel {
        /// The job's id.
        #[arg(value_parser = parse_job_id)]
        id: JobId,
        /// Why, stored with the request of a running job and shown by `jqctl get`.
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Send a signal to a durable job: kept until the job's wait of that name takes it; a job
    /// waiting for it runs again at once.
    #[command(after_help = "Example: jqctl signal 0190... approved --payload '{\"by\": \"ops\"}'")]
    Signal {
        /// The job's id.
        #[arg(value_parser = parse_job_id)]
        id: JobId,
        /// The signal's name, as the handler's wait_for names it.
        name: String,
        /// The signal's payload: JSON (default null).
        #[arg(long, default_value = "null")]
        payload: String,
    },
    /// Inspect and retry dead jobs (jobs that failed for good).
    #[command(subcommand)]
    Dead(DeadCommand),
    /// Delete finished jobs (completed, dead or cancelled) older than a duration.
    #[command(after_help = "Example: jqctl purge --state completed --older-than 7d")]
    Purge {
        /// Which terminal state to delete: completed, dead or cancelled.
        #[arg(long, value_parser = parse_terminal_state)]
        state: State,
        /// Only jobs that finished longer ago than this (e.g. 12h, 7d).
        #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true)]
        older_than: Duration,
    },
    /// Show which worker pool holds each role and until when: the "maintenance"
    /// holder is the one pool that promotes, recovers and purges for this store.
    Leaders,
    /// Periodic jobs: list those worker pools declared, or trigger one now.
    #[command(subcommand)]
    Periodic(PeriodicCommand),
    /// Workflows: show one's steps, states and edges.
    #[command(subcommand)]
    Workflow(WorkflowCommand),
    /// Pause, resume and limit queues across every worker, and list them.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Serve Prometheus metrics of the store on /metrics: jobs per queue and state
    /// (`jq_jobs`) and the age of each queue's oldest pending job
    /// (`jq_oldest_pending_age_seconds`), sampled every INTERVAL.
    #[command(after_help = "\
The job counters and histograms (jq_jobs_started_total, jq_job_run_duration_seconds, ...)
live in the worker processes: serve them with `jqctl worker --metrics-listen ADDR`, or install
metrics_exporter_prometheus::PrometheusBuilder in your program (see docs/observability.md).

Example: jqctl metrics --listen 0.0.0.0:9464 --interval 15s")]
    Metrics {
        /// The address to serve /metrics on.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9464")]
        listen: std::net::SocketAddr,
        /// How often to sample the store (one stats query, one small list per queue with pending jobs).
        #[arg(long, value_name = "INTERVAL", default_value = "15s", value_parser = duration::parse_positive)]
        interval: Duration,
    },
    /// Serve the web dashboard and the HTTP JSON API (/api/v1/, docs/http-api.md).
    #[command(after_help = "\
The HTTP API is under /api/v1/ (its OpenAPI document: /api/v1/openapi.json),
with the same token; --read-token adds a token for its read endpoints only.

Binds 127.0.0.1:8080 by default. Any other address needs a token (--token or
JQ_DASHBOARD_TOKEN): the browser asks for it as the password of basic auth (any
user name); scripts send `Authorization: Bearer TOKEN`. Whitespace around the
token is ignored; an empty one is refused. --read-only hides and refuses every
action.

Requests must name the dashboard's own host: localhost, 127.0.0.1 or [::1]
with its port, or the address it is bound to; others get 421 (a page that
points its own name at this address is not answered). Behind a reverse proxy,
or under another name, add it with --allowed-host NAME[:PORT].

Example: JQ_DASHBOARD_TOKEN=$(openssl rand -hex 16) jqctl serve --listen 0.0.0.0:8080 --read-only")]
    Serve {
        /// The address to serve the dashboard on.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// Show everything, change nothing: actions are hidden and refused.
        #[arg(long)]
        read_only: bool,
        /// Require this token on every request (needed to bind anything but loopback).
        #[arg(long, env = "JQ_DASHBOARD_TOKEN", value_name = "TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Also answer requests naming this host (NAME, any port, or NAME:PORT); repeatable.
        #[arg(long = "allowed-host", value_name = "HOST", env = "JQ_DASHBOARD_ALLOWED_HOSTS", value_delimiter = ',')]
        allowed_hosts: Vec<String>,
        /// Also accept this token on the HTTP API's read endpoints (get, wait, stats), never for a write.
        #[arg(long, env = "JQ_API_READ_TOKEN", value_name = "TOKEN", hide_env_values = true)]
        read_token: Option<String>,
    },
    /// Create or upgrade the backend's schema (PostgreSQL; nothing to do for SQLite and Redis).
    Migrate,
    /// Run jobs: execute a command for each claimed job.
    Worker(WorkerArgs),
}

/// `jqctl enqueue`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  jqctl enqueue send_email '{\"to\":\"a@example.com\"}'
  jqctl enqueue --queue reports --delay 10m build_report @report.json
  echo '{\"n\":1}' | jqctl enqueue --priority high --max-attempts 4 resize -

Prints the job's id. With --unique-key, when a live job (one not completed, dead
or cancelled) of the same queue has the key, nothing is stored: that job's id is
printed and a note goes to stderr. With --debounce or --replace, a waiting job of
the key takes this payload instead (and its id is printed); with --unique-for, a
job of the key created within that period, whatever its state, keeps it taken.")]
pub struct EnqueueArgs {
    /// The job's kind: which handler (or worker command) runs it.
    pub kind: String,
    /// The payload: inline JSON, @FILE to read a file, or - to read stdin.
    #[arg(default_value = "{}", allow_hyphen_values = true)]
    pub payload: String,
    /// The queue (1 to 128 bytes of letters, digits and _ - . :, optionally after a hash tag {tag}).
    #[arg(long, short, default_value = jq::DEFAULT_QUEUE, value_parser = parse_queue)]
    pub queue: QueueName,
    /// low, normal, high or critical; higher priorities are claimed first.
    #[arg(long, short, default_value = "normal", value_parser = parse_priority)]
    pub priority: Priority,
    /// Not runnable before this delay has passed (e.g. 30s, 5m, 2h).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true, conflicts_with = "run_at")]
    pub delay: Option<Duration>,
    /// Not runnable before this instant (RFC 3339, e.g. 2030-01-01T09:00:00Z).
    #[arg(long, value_name = "RFC3339", value_parser = parse_rfc3339)]
    pub run_at: Option<Timestamp>,
    /// Runs allowed in all, the first included (default 25); then the job is dead.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_attempts: Option<u32>,
    /// Store nothing if a live job of this queue already has this key.
    #[arg(long, value_name = "KEY")]
    pub unique_key: Option<String>,
    /// Trailing debounce (needs --unique-key): a waiting job of the key takes
    /// this payload and runs once the key was quiet this long (e.g. 5s).
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = duration::parse,
        requires = "unique_key",
        conflicts_with_all = ["unique_for", "replace", "delay", "run_at"]
    )]
    pub debounce: Option<Duration>,
    /// With --debounce: the job runs at the latest this long after the
    /// key's first enqueue, however many follow.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, requires = "debounce")]
    pub max_delay: Option<Duration>,
    /// Unique for a period (needs --unique-key; also leading debounce): store
    /// nothing while a job of the key was created less than this long ago,
    /// whatever its state.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, requires = "unique_key", conflicts_with = "replace")]
    pub unique_for: Option<Duration>,
    /// Replace (needs --unique-key): a waiting job of the key takes this
    /// payload and run time instead of a new job being stored.
    #[arg(long, requires = "unique_key")]
    pub replace: bool,
    /// The job's key (a tenant, an account, a host): jobs of one key share
    /// its limits (`jqctl queue key-limit`), and claims take the keys of a
    /// queue in turn.
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
}

impl EnqueueArgs {
    /// The max attempts the flags ask for.
    pub fn effective_max_attempts(&self) -> u32 {
        self.max_attempts.unwrap_or(jq::DEFAULT_MAX_ATTEMPTS)
    }
}

/// Filters and paging shared by `list` and `dead list`.
#[derive(Debug, Args)]
pub struct PageArgs {
    /// Only this queue.
    #[arg(long, short, value_parser = parse_queue)]
    pub queue: Option<QueueName>,
    /// Only this kind.
    #[arg(long, short)]
    pub kind: Option<String>,
    /// At most this many jobs.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub limit: u64,
    /// Only jobs after this id: pass the last id of the previous page.
    #[arg(long, value_name = "ID", value_parser = parse_job_id)]
    pub after: Option<JobId>,
}

/// `jqctl list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only jobs in this state.
    #[arg(long, short, ignore_case = true, value_parser = states())]
    pub state: Option<State>,
    /// Filters and paging.
    #[command(flatten)]
    pub page: PageArgs,
}

/// `jqctl dead ...`.
#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// List dead jobs with their last error.
    List(PageArgs),
    /// Move dead jobs back to pending, with one more attempt each.
    Retry {
        /// The job to retry.
        #[arg(value_parser = parse_job_id, required_unless_present = "all", conflicts_with = "all")]
        id: Option<JobId>,
        /// Retry every dead job (of --queue, when given).
        #[arg(long)]
        all: bool,
        /// With --all: only this queue.
        #[arg(long, short, requires = "all", value_parser = parse_queue)]
        queue: Option<QueueName>,
    },
}

/// `jqctl periodic ...`.
#[derive(Debug, Subcommand)]
pub enum PeriodicCommand {
    /// Every periodic job: expression, zone, next and last tick, last job and
    /// its state, missed ticks, and whether a pool still declares it.
    List,
    /// Trigger one job of a periodic job now. A worker pool that declares it
    /// enqueues the job at its next round (within about a second): only its
    /// code can build the job. Triggers not served yet coalesce.
    Trigger {
        /// The periodic job's name, as `periodic list` shows it.
        name: String,
    },
}

/// `jqctl workflow ...`.
#[derive(Debug, Subcommand)]
pub enum WorkflowCommand {
    /// Every step of a workflow with its job, state, kind and the steps it
    /// runs after, and its counts per state.
    Show {
        /// The workflow's id.
        #[arg(value_parser = parse_workflow_id)]
        id: jq::workflow::WorkflowId,
    },
}

/// `jqctl queue ...`.
#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Every queue with jobs or a control: paused or not, limits, job counts,
    /// and which worker pools have seen the pause.
    List,
    /// Stop every worker pool, in every process, from starting jobs of QUEUE
    /// (within one poll interval); running jobs finish, enqueue still works.
    /// Stored: it survives restarts until `queue resume`.
    Pause {
        /// The queue.
        #[arg(value_parser = parse_queue)]
        queue: QueueName,
    },
    /// Let the workers start jobs of a paused queue again (wakes them at once).
    Resume {
        /// The queue.
        #[arg(value_parser = parse_queue)]
        queue: QueueName,
    },
    /// Cap a queue across every worker: Running jobs (--concurrency) and job
    /// starts per period (--rate, a sliding window). A flag not given keeps
    /// its current value; `none` lifts that limit.
    #[command(after_help = "\
Examples:
  jqctl queue limit emails --rate 1000/s
  jqctl queue limit reports --concurrency 4 --rate 50/10s
  jqctl queue limit emails --rate none")]
    Limit {
        /// The queue.
        #[arg(value_parser = parse_queue)]
        queue: QueueName,
        /// At most N of its jobs running at once (none: no limit).
        #[arg(long, value_name = "N", value_parser = parse_concurrency)]
        concurrency: Option<Lift<u32>>,
        /// At most N starts per PERIOD: 1000/s, 50/10s, 5/250ms, 100/m (none: no limit).
        #[arg(long, value_name = "N/PERIOD", value_parser = parse_rate)]
        rate: Option<Lift<jq::Rate>>,
    },
    /// The keys of QUEUE's keyed jobs: the default limits every key
    /// follows, the overrides, and the busiest keys with their running and
    /// pending (and scheduled) jobs and the limits they follow.
    Keys {
        /// The queue.
        #[arg(value_parser = parse_queue)]
        queue: QueueName,
        /// Show at most this many of the busiest keys.
        #[arg(long, value_name = "N", default_value_t = 20)]
        top: usize,
    },
    /// Cap each key of QUEUE across every worker: Running jobs of one key
    /// (--concurrency) and its starts per period (--rate). Without --key,
    /// the default every key follows; with --key, that key's override (an
    /// override of none/none makes the key unlimited). A flag not given
    /// keeps its current value; `none` lifts that limit.
    #[command(after_help = "\
Examples:
  jqctl queue key-limit webhooks --concurrency 2
  jqctl queue key-limit webhooks --key acme --concurrency 10 --rate 100/s
  jqctl queue key-clear webhooks acme")]
    KeyLimit {
        /// The queue.
        #[arg(value_parser = parse_queue)]
        queue: QueueName,
        /// The key whose override to set; without it, the default.
        #[arg(long, value_name = "KEY")]
        key: Option<String>,
        /// At most N jobs of one key running at once (none: no limit).
        #[arg(long, value_name = "N", value_parser = parse_concurrency)]
        concurrency: Option<Lift<u32>>,
        /// At most N starts of one key per PERIOD: 1000/s, 50/10s (none: no limit).
        #[arg(long, value_name = "N/PERIOD", value_parser = parse_rate)]
        rate: Option<Lift<jq::Rate>>,
    },
    /// Remove KEY's override in QUEUE: it follows the default again.
    KeyClear {
        /// The queue.
        #[arg(value_parser = parse_queue)]
        queue: QueueName,
        /// The key.
        key: String,
    },
}

/// A limit flag's value: a new limit, or `none` to lift it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lift<T> {
    /// Set this limit.
    To(T),
    /// Lift the limit.
    None,
}

impl<T> Lift<T> {
    /// The limit as stored: `None` when lifted.
    pub fn into_option(self) -> Option<T> {
        match self {
            Lift::To(v) => Some(v),
            Lift::None => None,
        }
    }
}

fn parse_concurrency(s: &str) -> Result<Lift<u32>, String> {
    if s == "none" {
        return Ok(Lift::None);
    }
    match s.parse::<u32>() {
        Ok(n) if n > 0 => Ok(Lift::To(n)),
        _ => Err(format!("{s:?}: use a number above 0, or none (to pause, use `jqctl queue pause`)")),
    }
}

fn parse_rate(s: &str) -> Result<Lift<jq::Rate>, String> {
    if s == "none" {
        return Ok(Lift::None);
    }
    jq::Rate::parse(s).map(Lift::To).map_err(|e| e.to_string())
}

/// `jqctl worker`.
#[derive(Debug, Args)]
#[command(after_help = "\
For each job the command runs with the payload on stdin and these variables set:
  JQ_JOB_ID, JQ_JOB_KIND, JQ_JOB_QUEUE, JQ_JOB_ATTEMPT (1 for the first run), JQ_JOB_MAX_ATTEMPTS

Its exit status decides what happens to the job:
  0        the job is completed
  78       the job fails for good and goes to dead at once (change with --fail-exit-code)
  other    the attempt failed; the last 2 KiB of stderr is recorded as the error, and the
           job is retried with exponential backoff until its attempts run out (then dead)
A command still running after --timeout, or whose job is cancelled (`jqctl cancel`), gets
SIGTERM, sent to its whole process group (so its children too), then SIGKILL after
--stop-grace; a timed-out attempt counts as failed, a cancelled job ends cancelled.

Ctrl-C or SIGTERM stops claiming, waits up to --shutdown-grace for running commands,
hands back the jobs that did not finish (pending, attempt not counted), and exits 0.

The worker also does the queue's upkeep, as every jq worker pool does: it makes due
scheduled jobs runnable, recovers jobs whose worker died (lease expired), and purges
finished jobs past their retention: completed and cancelled jobs a day after they
finish, dead ones after seven days (--keep-completed, --keep-cancelled, --keep-dead;
--keep-forever keeps them until `jqctl purge` removes them). Of all the workers of a
store, one at a time does this upkeep; give them all the same retention.

Examples:
  jqctl worker --concurrency 4 --exec ./handle-job.sh
  jqctl worker -q mail -q reports -- python3 handle.py --verbose")]
pub struct WorkerArgs {
    /// A queue to take jobs from; repeat for several.
    #[arg(long = "queue", short, default_value = jq::DEFAULT_QUEUE, value_parser = parse_queue)]
    pub queues: Vec<QueueName>,
    /// How many jobs run at once.
    #[arg(long, short, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub concurrency: u32,
    /// Stop a command still running after this long; the attempt counts as failed.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = duration::parse_positive, allow_hyphen_values = true)]
    pub timeout: Duration,
    /// After SIGTERM (a cancel or the timeout), how long the command's process group gets to
    /// exit before SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration::parse, allow_hyphen_values = true)]
    pub stop_grace: Duration,
    /// On Ctrl-C/SIGTERM, how long running commands get to finish before they are killed and
    /// their jobs handed back (pending, attempt not counted).
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = duration::parse, allow_hyphen_values = true)]
    pub shutdown_grace: Duration,
    /// The exit code that fails a job for good (no retry).
    #[arg(long, default_value_t = 78, value_name = "CODE", value_parser = clap::value_parser!(u8).range(1..))]
    pub fail_exit_code: u8,
    /// The worker's name, recorded on the jobs it holds (default: HOST-PID-RANDOM).
    #[arg(long)]
    pub name: Option<String>,
    /// How long completed jobs are kept after they finish before the upkeep
    /// purges them [default: 24h].
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true)]
    pub keep_completed: Option<Duration>,
    /// How long cancelled jobs are kept [default: 24h].
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true)]
    pub keep_cancelled: Option<Duration>,
    /// How long dead jobs are kept [default: 7d].
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true)]
    pub keep_dead: Option<Duration>,
    /// Keep every finished job until `jqctl purge` removes it.
    #[arg(long, conflicts_with_all = ["keep_completed", "keep_cancelled", "keep_dead"])]
    pub keep_forever: bool,
    /// Serve this worker's metrics (job counters, run duration, queue lag) on
    /// http://ADDR/metrics, for Prometheus.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The command and its arguments; put it last, or use `-- CMD ARGS...`.
    #[arg(long, value_name = "CMD", num_args = 1.., allow_hyphen_values = true, conflicts_with = "command")]
    pub exec: Vec<String>,
    /// The command after `--`.
    #[arg(last = true, value_name = "CMD", required_unless_present = "exec")]
    pub command: Vec<String>,
}

impl WorkerArgs {
    /// The command line to run, from --exec or after `--`.
    pub fn program(&self) -> &[String] {
        if self.exec.is_empty() { &self.command } else { &self.exec }
    }

    /// The retention the flags ask for: the pool's default for each state
    /// not given, nothing purged with --keep-forever.
    pub fn retention(&self) -> jq::Retention {
        if self.keep_forever {
            return jq::Retention::FOREVER;
        }
        let default = jq::Retention::DEFAULT;
        jq::Retention {
            completed: self.keep_completed.or(default.completed),
            cancelled: self.keep_cancelled.or(default.cancelled),
            dead: self.keep_dead.or(default.dead),
        }
    }
}

fn parse_job_id(s: &str) -> Result<JobId, String> {
    s.parse::<JobId>()
        .map_err(|_| format!("{s:?} is not a job id (a UUID such as 0190c3a2-7b1e-7c3d-9a4f-2b8e1d6f0a11)"))
}

fn parse_workflow_id(s: &str) -> Result<jq::workflow::WorkflowId, String> {
    s.parse().map_err(|_| format!("{s:?} is not a workflow id (a UUID)"))
}

fn parse_queue(s: &str) -> Result<QueueName, String> {
    QueueName::new(s).map_err(|e| e.to_string())
}

fn parse_priority(s: &str) -> Result<Priority, String> {
    s.parse::<Priority>().map_err(|_| format!("{s:?}: use low, normal, high or critical"))
}

/// Every state by name, from jq's own list ([`State::ALL`]), so `--help`
/// and a refusal show every state there is.
fn states() -> impl TypedValueParser<Value = State> {
    PossibleValuesParser::new(State::ALL.map(State::as_str)).try_map(|name| name.parse::<State>())
}

/// A terminal state: the ones purge deletes, named from [`State::ALL`].
fn parse_terminal_state(s: &str) -> Result<State, String> {
    let names = State::ALL.into_iter().filter(|s| s.is_terminal()).map(State::as_str).collect::<Vec<_>>();
    let names = match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    let state = s.parse::<State>().map_err(|_| format!("{s:?}: use {names}"))?;
    if !state.is_terminal() {
        return Err(format!("{s:?} is not a finished state; only {names} jobs can be purged"));
    }
    Ok(state)
}

fn parse_rfc3339(s: &str) -> Result<Timestamp, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| format!("{s:?} is not an RFC 3339 instant ({e}); write e.g. 2030-01-01T09:00:00Z"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn exec_takes_the_rest_of_the_line() {
        let cli = Cli::try_parse_from(["jqctl", "worker", "-c", "2", "--exec", "sh", "-c", "exit 1"]).unwrap();
        let Command::Worker(w) = cli.command else { panic!("not a worker") };
        assert_eq!(w.program(), ["sh", "-c", "exit 1"]);
        assert_eq!(w.concurrency, 2);
        let cli = Cli::try_parse_from(["jqctl", "worker", "-q", "a", "-q", "b", "--", "cat", "-n"]).unwrap();
        let Command::Worker(w) = cli.command else { panic!("not a worker") };
        assert_eq!(w.program(), ["cat", "-n"]);
        assert_eq!(w.queues.len(), 2);
    }

    #[test]
    fn max_attempts_counts_every_run() {
        let cli = Cli::try_parse_from(["jqctl", "enqueue", "--max-attempts", "4", "k"]).unwrap();
        let Command::Enqueue(e) = cli.command else { panic!("not enqueue") };
        assert_eq!(e.effective_max_attempts(), 4);
        let cli = Cli::try_parse_from(["jqctl", "enqueue", "k"]).unwrap();
        let Command::Enqueue(e) = cli.command else { panic!("not enqueue") };
        assert_eq!(e.effective_max_attempts(), jq::DEFAULT_MAX_ATTEMPTS);
        assert!(Cli::try_parse_from(["jqctl", "enqueue", "--max-attempts", "0", "k"]).is_err());
        assert!(Cli::try_parse_from(["jqctl", "enqueue", "--max-retries", "3", "k"]).is_err(), "retired flag");
    }

    #[test]
    fn retention_flags_override_the_defaults_one_state_at_a_time() {
        let worker = |args: &[&str]| {
            let line = ["jqctl", "worker"].iter().chain(args).chain(&["--exec", "true"]).copied().collect::<Vec<_>>();
            match Cli::try_parse_from(line).map(|cli| cli.command) {
                Ok(Command::Worker(w)) => Ok(w.retention()),
                Ok(_) => panic!("not a worker"),
                Err(e) => Err(e),
            }
        };
        assert_eq!(worker(&[]).unwrap(), jq::Retention::DEFAULT);
        let dead = worker(&["--keep-dead", "30d", "--keep-completed", "0s"]).unwrap();
        assert_eq!(
            dead,
            jq::Retention {
                completed: Some(Duration::ZERO),
                cancelled: Some(jq::DEFAULT_KEEP_CANCELLED),
                dead: Some(Duration::from_secs(30 * 86_400)),
            }
        );
        assert_eq!(worker(&["--keep-forever"]).unwrap(), jq::Retention::FOREVER);
        assert!(worker(&["--keep-forever", "--keep-dead", "1d"]).is_err(), "contradicting flags");
        assert!(worker(&["--keep-dead", "-1d"]).is_err());
    }
}
