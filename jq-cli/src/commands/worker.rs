//! `jqctl worker`: the jq-core worker pool, running a command per job.
//!
//! The command gets the payload on stdin and the job's id, kind, queue,
//! attempt and max attempts in `JQ_JOB_*` variables. Exit 0 acks, the
//! `--fail-exit-code` (78 by default, `EX_CONFIG` in sysexits.h, which no
//! common tool uses for a transient failure) fails the job for good, any other
//! exit retries with the tail of stderr as the error.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use jq::storage::Storage;
use jq::{HandlerError, HandlerResult, JobContext, WorkerPool};
use jq::{Job, QueueName};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::cli::WorkerArgs;
use crate::duration;
use crate::error::{CliError, CliResult};

/// How much of the end of stderr is recorded as a failed attempt's error.
pub const STDERR_TAIL_BYTES: usize = 2048;

/// The pool gets this much longer than `--timeout`, so the command's own
/// timeout (which kills its process group and says so) fires first.
const POOL_TIMEOUT_SLACK: Duration = Duration::from_secs(5);

/// A checked `jqctl worker` command line.
#[derive(Debug)]
pub struct WorkerPlan {
    queues: Vec<QueueName>,
    concurrency: usize,
    exec: Exec,
    name: Option<String>,
    shutdown_grace: Duration,
    retention: jq::Retention,
    metrics_listen: Option<std::net::SocketAddr>,
}

/// How to run the command for one job.
#[derive(Debug, Clone)]
struct Exec {
    program: Vec<String>,
    timeout: Duration,
    /// From SIGTERM to SIGKILL of a command told to stop.
    stop_grace: Duration,
    fail_exit_code: i32,
}

impl WorkerPlan {
    /// Checks the command exists before anything is claimed: a typo would
    /// otherwise burn every job's attempts.
    pub fn prepare(args: WorkerArgs) -> CliResult<Self> {
        let program = args.program().to_vec();
        let retention = args.retention();
        let Some(first) = program.first() else {
            return Err(CliError::bad_input("no command to run: add --exec CMD [ARGS...] or -- CMD [ARGS...]"));
        };
        if !is_runnable(first) {
            return Err(CliError::bad_input(format!(
                "command {first:?} not found (or not executable); give a path or a program on PATH"
            )));
        }
        Ok(WorkerPlan {
            queues: args.queues,
            concurrency: usize::try_from(args.concurrency).unwrap_or(1),
            exec: Exec {
                program,
                timeout: args.timeout,
                stop_grace: args.stop_grace,
                fail_exit_code: i32::from(args.fail_exit_code),
            },
            name: args.name,
            shutdown_grace: args.shutdown_grace,
            retention,
            metrics_listen: args.metrics_listen,
        })
    }
}

fn is_runnable(program: &str) -> bool {
    let executable = |p: &Path| {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        }
        #[cfg(not(unix))]
        {
            p.is_file()
        }
    };
    if program.contains(std::path::MAIN_SEPARATOR) {
        return executable(Path::new(program));
    }
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| executable(&dir.join(program))))
}

/// Runs the pool until SIGINT or SIGTERM, then shuts it down gracefully.
pub async fn run<S: Storage + Clone>(storage: S, plan: WorkerPlan) -> CliResult {
    if let Some(listen) = plan.metrics_listen {
        super::serve_metrics(listen)?;
        eprintln!("jqctl worker: serving http://{listen}/metrics");
    }
    let exec = Arc::new(plan.exec);
    let handler_exec = exec.clone();
    let mut pool = WorkerPool::new(storage)
        .queues(plan.queues.iter().map(ToString::to_string))
        .concurrency(plan.concurrency)
        .job_timeout(Some(exec.timeout.saturating_add(POOL_TIMEOUT_SLACK)))
        // The command's own SIGTERM-to-SIGKILL grace comes first: the pool
        // drops the handler (which kills the group) only after it.
        .stop_grace(exec.stop_grace.saturating_add(POOL_TIMEOUT_SLACK))
        .shutdown_grace(plan.shutdown_grace)
        .retention(plan.retention)
        .register_fallback(move |job: Job, ctx: JobContext| {
            let exec = handler_exec.clone();
            async move { exec.run(job, ctx).await }
        });
    if let Some(name) = plan.name {
        pool = pool.worker_name(name);
    }
    let handle = pool.start()?;
    let queues: Vec<&str> = plan.queues.iter().map(QueueName::as_str).collect();
    eprintln!(
        "jqctl worker {}: running `{}` for jobs of queue(s) {} with concurrency {}; {}; Ctrl-C or SIGTERM to stop",
        handle.worker_name(),
        exec.program.join(" "),
        queues.join(", "),
        plan.concurrency,
        describe_retention(&plan.retention),
    );
    // A fatal storage error (a schema never migrated, ...) stops the pool by
    // itself: it cancels this token, and shutdown() returns the error.
    let stopped = handle.shutdown_token();
    tokio::select! {
        signal = shutdown_signal() => signal?,
        _ = stopped.cancelled() => {}
    }
    if !handle.has_failed() {
        eprintln!(
            "shutting down: no new jobs; waiting up to {} for running commands (the rest are handed back)",
            duration::human(plan.shutdown_grace)
        );
    }
    handle.shutdown().await?;
    eprintln!("worker stopped");
    Ok(())
}

/// "keeps finished jobs: completed 1d, cancelled 1d, dead 7d", for the
/// start-up line.
fn describe_retention(retention: &jq::Retention) -> String {
    if retention.is_forever() {
        return "keeps finished jobs until `jqctl purge`".to_owned();
    }
    let keep = |d: Option<Duration>| d.map_or_else(|| "forever".to_owned(), duration::human);
    format!(
        "keeps finished jobs: completed {}, cancelled {}, dead {}",
        keep(retention.completed),
        keep(retention.cancelled),
        keep(retention.dead)
    )
}

pub(crate) async fn shutdown_signal() -> CliResult {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r?,
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c().await?;
    Ok(())
}

impl Exec {
    /// Runs the command for one job and turns its exit into an outcome.
    async fn run(&self, job: Job, ctx: JobContext) -> HandlerResult {
        let program = &self.program[0];
        let mut command = tokio::process::Command::new(program);
        command
            .args(&self.program[1..])
            .env("JQ_JOB_ID", job.id.to_string())
            .env("JQ_JOB_KIND", &job.kind)
            .env("JQ_JOB_QUEUE", job.queue.as_str())
            .env("JQ_JOB_ATTEMPT", ctx.attempt().to_string())
            .env("JQ_JOB_MAX_ATTEMPTS", ctx.max_attempts().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // Its own process group: a terminal's Ctrl-C reaches only jqctl,
        // which lets running commands finish (the graceful shutdown), and a
        // timeout can kill the command's children too.
        #[cfg(unix)]
        command.process_group(0);
        let mut child = command.spawn().map_err(|e| HandlerError::nack(format!("cannot start {program:?}: {e}")))?;
        // Kills the whole group if this future is dropped (the pool's
        // timeout, a lost lease, the end of the shutdown grace).
        let mut group = GroupKiller(child.id());
        let stdin = child.stdin.take();
        let stderr = child.stderr.take();
        let payload = job.payload.as_str().as_bytes();
        let write = async move {
            if let Some(mut stdin) = stdin {
                // A command that does not read its stdin closes the pipe: fine.
                let _ = stdin.write_all(payload).await;
            }
        };
        let read = async move {
            match stderr {
                Some(stderr) => read_tail(stderr).await,
                None => String::new(),
            }
        };
        let work = async {
            let ((), tail, status) = tokio::join!(write, read, child.wait());
            (tail, status)
        };
        let mut work = std::pin::pin!(work);
        // Told to stop (its job cancelled, or the pool's timeout) or past
        // --timeout: SIGTERM to the whole group, SIGKILL after the grace.
        let stopped = tokio::select! {
            done = &mut work => Ok(done),
            _ = tokio::time::sleep(self.timeout) => Err(format!("timed out after {}", duration::human(self.timeout))),
            _ = ctx.cancellation().cancelled() => Err(if ctx.is_cancel_requested() {
                "cancelled".to_owned()
            } else {
                "stopped by the worker".to_owned()
            }),
        };
        let result = match stopped {
            Ok((_, Err(e))) => Err(HandlerError::nack(format!("waiting for {program:?} failed: {e}"))),
            Ok((tail, Ok(status))) => {
                group.0 = None; // exited by itself: leave anything it started in the background alone
                self.outcome(status, &tail)
            }
            Err(why) => {
                group.signal(Signal::Terminate);
                let ended = match tokio::time::timeout(self.stop_grace, &mut work).await {
                    Ok(_) => "it exited after SIGTERM",
                    Err(_) => {
                        group.signal(Signal::Kill);
                        let _ = work.await; // reaps it; the group is gone, so its pipes close
                        "killed after the stop grace"
                    }
                };
                // Whatever the leader did, nothing of the group outlives
                // the run (GroupKiller's drop sends SIGKILL).
                Err(HandlerError::nack(format!("{why}: {ended}")))
            }
        };
        match &result {
            Ok(()) => tracing::info!(job = %job.id, kind = %job.kind, attempt = ctx.attempt(), "completed"),
            Err(e) => tracing::warn!(job = %job.id, kind = %job.kind, attempt = ctx.attempt(), "{e}"),
        }
        result
    }

    fn outcome(&self, status: ExitStatus, tail: &str) -> HandlerResult {
        let with_tail = |what: String| if tail.is_empty() { what } else { format!("{what}: {tail}") };
        match status.code() {
            Some(0) => Ok(()),
            Some(code) if code == self.fail_exit_code => {
                Err(HandlerError::bury(with_tail(format!("exit code {code} (permanent failure)"))))
            }
            Some(code) => Err(HandlerError::nack(with_tail(format!("exit code {code}")))),
            None => Err(HandlerError::nack(with_tail(signal_description(status)))),
        }
    }
}

#[cfg(unix)]
fn signal_description(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match status.signal() {
        Some(sig) => format!("killed by signal {sig}"),
        None => format!("ended without an exit code ({status})"),
    }
}

#[cfg(not(unix))]
fn signal_description(status: ExitStatus) -> String {
    format!("ended without an exit code ({status})")
}

/// Reads `stream` to its end, keeping only its last [`STDERR_TAIL_BYTES`].
async fn read_tail(mut stream: impl tokio::io::AsyncRead + Unpin) -> String {
    let mut tail: Vec<u8> = Vec::with_capacity(STDERR_TAIL_BYTES * 2);
    let mut chunk = [0u8; 8192];
    let mut truncated = false;
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                tail.extend_from_slice(&chunk[..n]);
                if tail.len() > STDERR_TAIL_BYTES {
                    tail.drain(..tail.len() - STDERR_TAIL_BYTES);
                    truncated = true;
                }
            }
        }
    }
    let text = String::from_utf8_lossy(&tail);
    let text = text.trim();
    if truncated { format!("...{text}") } else { text.to_owned() }
}

/// Kills a process group on drop, unless disarmed (`.0 = None`).
struct GroupKiller(Option<u32>);

/// What [`GroupKiller::signal`] sends.
#[derive(Clone, Copy)]
enum Signal {
    /// SIGTERM: stop, cleaning up.
    Terminate,
    /// SIGKILL.
    Kill,
}

impl GroupKiller {
    /// Sends `signal` to every process of the group (still armed).
    fn signal(&self, signal: Signal) {
        #[cfg(unix)]
        if let Some(pgid) = self.0.and_then(|id| i32::try_from(id).ok()) {
            use nix::sys::signal::Signal as S;
            let sig = match signal {
                Signal::Terminate => S::SIGTERM,
                Signal::Kill => S::SIGKILL,
            };
            // ESRCH: the group is gone already.
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), sig);
        }
        #[cfg(not(unix))]
        let _ = signal;
    }

    fn kill(&mut self) {
        self.signal(Signal::Kill);
        self.0 = None;
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}
