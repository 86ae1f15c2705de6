//! Executors: a fixed set of `concurrency` long-lived tasks, each taking
//! claimed jobs from one shared channel and running their handlers.
//!
//! Everything that can go wrong inside a handler becomes an [`Outcome`]:
//! a panic (caught) and a timeout retry, a payload that does not decode
//! fails, a lost lease drops the handler and records nothing (the job is
//! someone else's now), and the end of the shutdown grace releases the job
//! with its attempt given back.

use std::any::Any;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::fetcher::Claimed;
use super::handler::{Action, ErasedHandler, HandlerError, HandlerResult, JobContext, WorkflowAccess};
use super::heartbeat::Inflight;
use super::settler::Finished;
use crate::backoff::Backoff;
use crate::clock::Clock;
use crate::job::Job;
use crate::observe::{JobMetrics, MetricsCache};
use crate::storage::Outcome;

/// What every executor shares.
pub(crate) struct Executor {
    pub(crate) handlers: Arc<HashMap<String, ErasedHandler>>,
    /// Runs jobs whose kind has no handler of its own.
    pub(crate) fallback: Option<ErasedHandler>,
    pub(crate) backoff: Arc<dyn Backoff>,
    pub(crate) job_timeout: Option<Duration>,
    /// Per-kind limits ([`JobType::TIMEOUT`](crate::JobType::TIMEOUT)),
    /// between a job's own and the pool's.
    pub(crate) kind_timeouts: Arc<HashMap<String, Duration>>,
    /// How long a handler told to stop (cancel request, timeout) has to
    /// return before its future is dropped.
    pub(crate) stop_grace: Duration,
    pub(crate) nack_unknown_kinds: bool,
    pub(crate) jobs: async_channel::Receiver<Claimed>,
    pub(crate) finished: mpsc::Sender<Finished>,
    pub(crate) inflight: Arc<Inflight>,
    /// Take no new job once this fires.
    pub(crate) stop: CancellationToken,
    /// The shutdown grace ran out (parent of every job's token).
    pub(crate) abort: CancellationToken,
    /// Spans and metrics on (`WorkerPool::observe`).
    pub(crate) observe: bool,
    /// The pool's worker name, a field of every run's span.
    pub(crate) worker: Arc<str>,
    /// The storage's clock: queue lag is measured against `run_at`.
    pub(crate) clock: Clock,
    /// Results and parents' results, on a storage with workflows.
    pub(crate) workflows: Option<Arc<WorkflowAccess>>,
}

/// How one run ended, before it is turned into an outcome.
enum Ran {
    Returned(HandlerResult),
    Panicked(String),
    /// Told to stop (cancel request or timeout), it did not return within
    /// the stop grace: its future was dropped.
    Dropped,
    /// Lease lost or shutdown grace over: dropped without a grace.
    Cancelled,
}

impl Executor {
    /// Runs jobs until `stop` fires or the channel closes.
    pub(crate) async fn run(self: Arc<Self>) {
        let mut metrics = MetricsCache::default();
        loop {
            let claimed = tokio::select! {
                biased;
                _ = self.stop.cancelled() => return,
                next = self.jobs.recv() => match next {
                    Ok(claimed) => claimed,
                    Err(_) => return,
                },
            };
            if self.observe {
                let handles = metrics.get(&claimed.job.queue, &claimed.job.kind);
                let span = run_span(&claimed.job, &self.worker);
                self.execute(claimed, Some(handles), span).await;
            } else {
                self.execute(claimed, None, tracing::Span::none()).await;
            }
        }
    }

    async fn execute(
        &self,
        Claimed { job, control, permit }: Claimed,
        metrics: Option<Arc<JobMetrics>>,
        span: tracing::Span,
    ) {
        let Some(lease) = job.lease_ref() else { return }; // the fetcher only sends leased jobs
        let attempt = job.attempts;

        let started = Instant::now();
        if let Some(m) = &metrics {
            m.started.increment(1);
            let lag = self.clock.now().signed_duration_since(job.run_at).to_std().unwrap_or(Duration::ZERO);
            m.lag.record(lag.as_secs_f64());
        }
        let timeout = job.timeout.or_else(|| self.kind_timeouts.get(&job.kind).copied()).or(self.job_timeout);
        if job.cancel_requested.is_some() {
            // Asked to stop before this claim (a nack or release raced the
            // request): the handler is told at once.
            control.request_cancel();
        }
        let mut ctx = JobContext::for_job(&job, lease, control.clone());
        ctx.workflows = self.workflows.clone();
        let handler = self.handlers.get(&job.kind).or(self.fallback.as_ref()).cloned();
        let nack_unknown = self.nack_unknown_kinds;
        // Calling the handler inside the future puts a panic in the call
        // itself under the same catch_unwind as one in its body.
        let run = async move {
            match handler {
                Some(handler) => handler(job, ctx).await,
                None => {
                    let message = format!("no handler registered for kind {:?} on this worker", job.kind);
                    Err(if nack_unknown { HandlerError::nack(message) } else { HandlerError::bury(message) })
                }
            }
        };
        // Only the handler runs inside the span: entering it costs on every
        // poll, and the claim-to-outcome bookkeeping around it logs nothing.
        // Entered by reference rather than `instrument(span.clone())`: a
        // clone and its close are two more trips through the subscriber's
        // registry for every job.
        let mut run = std::pin::pin!(run);
        let in_span = std::future::poll_fn(|cx| {
            let _entered = span.enter();
            run.as_mut().poll(cx)
        });
        let guarded = AssertUnwindSafe(in_span).catch_unwind();
        let mut guarded = std::pin::pin!(guarded);
        let returned =
            |r: std::thread::Result<HandlerResult>| r.map_or_else(|p| Ran::Panicked(panic_message(&*p)), Ran::Returned);
        // First the run itself, until it returns or its stop token fires
        // (or its timeout passes, which fires it). A lost lease or the end
        // of the shutdown grace drops the handler at once; a cancel request
        // or the timeout gives it the stop grace first.
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let first = tokio::select! {
            biased;
            _ = control.stop.cancelled() => None,
            ran = &mut guarded => Some(returned(ran)),
            _ = sleep_until(deadline) => {
                control.time_out();
                None
            }
        };
        let ran = match first {
            Some(ran) => ran,
            None if control.is_lost() || self.abort.is_cancelled() => Ran::Cancelled,
            None => tokio::select! {
                biased;
                _ = control.lost() => Ran::Cancelled,
                _ = self.abort.cancelled() => Ran::Cancelled,
                ran = &mut guarded => returned(ran),
                _ = tokio::time::sleep(self.stop_grace) => Ran::Dropped,
            },
        };
        let stopped_for = if control.is_cancel_requested() {
            Some("cancel")
        } else if control.is_timed_out() {
            Some("timeout")
        } else {
            None
        };
        if matches!(ran, Ran::Dropped) {
            let reason = stopped_for.unwrap_or("cancel");
            span.in_scope(|| {
                tracing::warn!(job = %lease.id, grace = ?self.stop_grace, reason, "handler did not return within the stop grace after being told to stop: its future was dropped")
            });
            if let Some(m) = &metrics {
                crate::observe::dropped(&m.queue, &m.kind, reason);
            }
        }
        let nack = |error: String| Outcome::Nack { error, delay: self.backoff.delay(attempt) };
        let outcome = match ran {
            // A durable run that stopped to sleep or wait: the store moved
            // the job out of Running in the same step, so there is nothing
            // to settle and the lease is no longer held.
            Ran::Returned(Err(HandlerError { action: Action::Suspended })) => {
                span.record("outcome", "suspended");
                self.inflight.remove(lease);
                drop(permit);
                return;
            }
            Ran::Returned(Ok(())) => match control.take_result() {
                Some(result) => Outcome::AckWith { result },
                None => Outcome::Ack,
            },
            // Told to stop, it did not succeed: a cancel request ends the
            // job Cancelled, a timeout is a failed attempt.
            Ran::Returned(Err(_)) | Ran::Panicked(_) | Ran::Dropped if stopped_for == Some("cancel") => Outcome::Cancel,
            Ran::Returned(Err(_)) | Ran::Panicked(_) | Ran::Dropped if stopped_for == Some("timeout") => {
                nack(format!("timed out after {:?}", timeout.unwrap_or_default()))
            }
            Ran::Returned(Err(HandlerError { action })) => match action {
                Action::Nack { message, delay: None } => nack(message),
                Action::Nack { message, delay: Some(delay) } => Outcome::Nack { error: message, delay },
                Action::Bury { message } => Outcome::Bury { error: message },
                Action::Release { delay } => Outcome::Release { delay },
                // Matched above; were it not, the store cleared the lease
                // when it suspended the job, so this release is fenced out.
                Action::Suspended => Outcome::Release { delay: Duration::ZERO },
            },
            Ran::Panicked(message) => nack(format!("handler panicked: {message}")),
            Ran::Dropped => Outcome::Cancel,
            Ran::Cancelled if self.abort.is_cancelled() => {
                span.in_scope(
                    || tracing::info!(job = %lease.id, "shutdown grace over: handler cancelled, releasing the job"),
                );
                if let Some(m) = &metrics {
                    crate::observe::dropped(&m.queue, &m.kind, "shutdown");
                }
                Outcome::Release { delay: Duration::ZERO }
            }
            Ran::Cancelled => {
                span.record("outcome", "lease_lost");
                span.in_scope(|| tracing::warn!(job = %lease.id, "lease lost: handler dropped; the job was handed on"));
                self.inflight.remove(lease);
                drop(permit);
                return;
            }
        };
        if let Some(m) = &metrics {
            let took = started.elapsed();
            m.duration.record(took.as_secs_f64());
            record_end(&span, outcome_name(&outcome), took);
        }
        // The heartbeat keeps extending the lease until the outcome is
        // written, but a lease reported lost from now on is no news.
        self.inflight.finish(lease);
        let sent = self.finished.send(Finished { lease, outcome, metrics }).await;
        // The slot is free once the outcome is queued, not once it is
        // written: claiming overlaps the settler's write.
        drop(permit);
        if let Err(unsent) = sent {
            // Only when the settler is gone, which the shutdown sequence
            // never lets happen before the executors end.
            tracing::error!(job = %lease.id, outcome = ?unsent.0.outcome, "settler gone: outcome not recorded; the lease will expire and the job be recovered");
        }
    }
}

/// The span of one run: handler logs nest in it, and with the
/// `opentelemetry` feature it links to the span that enqueued the job.
fn run_span(job: &Job, worker: &str) -> tracing::Span {
    let span = tracing::info_span!(
        "jq.job",
        job.id = %job.id,
        job.kind = %job.kind,
        job.queue = %job.queue,
        job.attempt = job.attempts,
        worker = %worker,
        outcome = tracing::field::Empty,
        duration_us = tracing::field::Empty,
    );
    #[cfg(feature = "opentelemetry")]
    if let Some(cx) = job.trace.as_ref().and_then(crate::trace::TraceContext::span_context) {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        span.add_link(cx);
    }
    span
}

/// Records how the run ended and how long it took in one call: a
/// subscriber that formats fields (fmt) does its lookup and append once.
fn record_end(span: &tracing::Span, outcome: &'static str, took: Duration) {
    let Some(meta) = span.metadata() else { return }; // disabled: nothing records
    let fields = meta.fields();
    let (Some(outcome_field), Some(duration_field)) = (fields.field("outcome"), fields.field("duration_us")) else {
        return;
    };
    // Whole microseconds: an integer formats far cheaper than a float.
    let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
    // Displayed, not recorded as a `str`: fmt quotes and escapes a `str`
    // character by character, and the name needs neither.
    let outcome = tracing::field::display(outcome);
    span.record_all(&fields.value_set(&[
        (&outcome_field, Some(&outcome as &dyn tracing::Value)),
        (&duration_field, Some(&micros as &dyn tracing::Value)),
    ]));
}

/// How a run ended, for its span.
fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Ack | Outcome::AckWith { .. } => "ack",
        Outcome::Nack { .. } => "nack",
        Outcome::Bury { .. } => "bury",
        Outcome::Release { .. } => "release",
        Outcome::Cancel => "cancel",
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The text of a panic's payload (`panic!` gives a `&str` or a `String`).
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}
