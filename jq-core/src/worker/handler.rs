//! What a handler sees ([`JobContext`]) and what it returns ([`HandlerError`]),
//! and the type erasure that lets typed and raw handlers share one table.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::cancel::RunControl;
use crate::id::JobId;
use crate::job::{Job, JobType, LeaseRef, Payload, QueueName};
use crate::workflow::ParentResult;

/// What a handler returns: `Ok(())` acks the job.
pub type HandlerResult = Result<(), HandlerError>;

/// Why a handler did not finish its job, and what should happen next.
///
/// `?` on any `std::error::Error` nacks the job with that error's message
/// (and its sources), like `anyhow`. For the other outcomes use the
/// constructors (the words are the storage's, see the repository's
/// `docs/GLOSSARY.md`):
///
/// - [`HandlerError::nack`]: record the message, try again after the pool's
///   backoff (or Dead when no attempts are left).
/// - [`HandlerError::nack_after`]: the same with a delay of your choosing.
/// - [`HandlerError::bury`]: record the message and go to Dead now (the job
///   can never succeed: bad input, a deleted account, ...).
/// - [`HandlerError::release`]: not a failure: hand the job back to run again
///   after a delay, without counting the attempt and without an error.
///
/// Every outcome, panics and timeouts included, is in the table of
/// [`WorkerPool`'s guide](crate::WorkerPool#writing-a-handler), with what a
/// handler may do (never block its thread).
///
/// `HandlerError` deliberately does not implement `std::error::Error`: that
/// is what makes the blanket `From<E: std::error::Error>` possible.
pub struct HandlerError {
    pub(crate) action: Action,
}

/// What the pool does with a failed handler's job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    Nack {
        message: String,
        delay: Option<Duration>,
    },
    Bury {
        message: String,
    },
    Release {
        delay: Duration,
    },
    /// A durable run stopped to sleep or wait: the store already moved the
    /// job out of Running ([`DurableStorage::suspend`](crate::storage::DurableStorage::suspend)),
    /// so nothing is settled.
    Suspended,
}

impl HandlerError {
    /// Nack: record `message`; another attempt after the pool's backoff, or
    /// Dead when no attempt is left.
    pub fn nack(message: impl fmt::Display) -> Self {
        HandlerError { action: Action::Nack { message: message.to_string(), delay: None } }
    }

    /// Nack with exactly `delay` before the next attempt, recording `message`
    /// (a rate limit's `Retry-After`, for instance).
    pub fn nack_after(message: impl fmt::Display, delay: Duration) -> Self {
        HandlerError { action: Action::Nack { message: message.to_string(), delay: Some(delay) } }
    }

    /// Bury: record `message` and move the job to Dead now, whatever
    /// attempts it has left.
    pub fn bury(message: impl fmt::Display) -> Self {
        HandlerError { action: Action::Bury { message: message.to_string() } }
    }

    /// Run again after `delay` without counting this attempt and without
    /// recording an error.
    pub fn release(delay: Duration) -> Self {
        HandlerError { action: Action::Release { delay } }
    }

    /// True for [`HandlerError::bury`].
    pub fn is_bury(&self) -> bool {
        matches!(self.action, Action::Bury { .. })
    }

    /// True for [`HandlerError::release`].
    pub fn is_release(&self) -> bool {
        matches!(self.action, Action::Release { .. })
    }

    /// True when a durable run stopped to sleep or wait
    /// ([`DurableContext::sleep`](crate::DurableContext::sleep), ...): return
    /// it as it is (`?`), the job runs again at its time.
    pub fn is_suspended(&self) -> bool {
        matches!(self.action, Action::Suspended)
    }

    /// The message recorded against the attempt (`None` for a release).
    pub fn message(&self) -> Option<&str> {
        match &self.action {
            Action::Nack { message, .. } | Action::Bury { message } => Some(message),
            Action::Release { .. } | Action::Suspended => None,
        }
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for HandlerError {
    /// Any error is a nack; its message includes the chain of sources so
    /// the stored error says more than "connection error".
    fn from(error: E) -> Self {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        HandlerError::nack(message)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.action.fmt(f)
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.action {
            Action::Nack { message, delay: None } => write!(f, "nack: {message}"),
            Action::Nack { message, delay: Some(d) } => write!(f, "nack, next attempt after {d:?}: {message}"),
            Action::Bury { message } => write!(f, "bury: {message}"),
            Action::Release { delay } => write!(f, "release for {delay:?}"),
            Action::Suspended => f.write_str("suspended: the job sleeps or waits in the store"),
        }
    }
}

/// What a handler knows about the job it runs. Cheap to clone.
#[derive(Clone, Debug)]
pub struct JobContext {
    pub(crate) id: JobId,
    pub(crate) kind: String,
    pub(crate) queue: QueueName,
    pub(crate) attempt: u32,
    pub(crate) max_attempts: u32,
    pub(crate) lease: LeaseRef,
    /// The run's stop signals, progress and result, shared by the clones.
    pub(crate) control: Arc<RunControl>,
    /// `None` on a storage without [`Capability::Workflows`](crate::storage::Capability::Workflows).
    pub(crate) workflows: Option<Arc<WorkflowAccess>>,
}

/// Reads a job's parents' results ([`WorkflowStorage::parent_results`](crate::storage::WorkflowStorage::parent_results)).
pub(crate) type ParentReader = Arc<dyn Fn(JobId) -> BoxFuture<'static, crate::Result<Vec<ParentResult>>> + Send + Sync>;

/// What a handler reaches of a storage with workflows.
pub(crate) struct WorkflowAccess {
    /// The pool's cap on a result ([`WorkerPool::max_result_bytes`](crate::WorkerPool::max_result_bytes)).
    pub(crate) max_result_bytes: usize,
    pub(crate) parents: ParentReader,
}

impl fmt::Debug for WorkflowAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkflowAccess").field("max_result_bytes", &self.max_result_bytes).finish_non_exhaustive()
    }
}

impl JobContext {
    pub(crate) fn for_job(job: &Job, lease: LeaseRef, control: Arc<RunControl>) -> Self {
        JobContext {
            id: job.id,
            kind: job.kind.clone(),
            queue: job.queue.clone(),
            attempt: job.attempts,
            max_attempts: job.max_attempts,
            lease,
            control,
            workflows: None,
        }
    }

    /// Sets the job's result: stored with its ack when the handler returns
    /// `Ok(())` (and dropped otherwise), readable with
    /// [`WorkflowStorage::result`](crate::storage::WorkflowStorage::result)
    /// and by its children's [`JobContext::parent_results`]. A second call
    /// replaces the first. [`Error::ResultTooLarge`](crate::Error::ResultTooLarge)
    /// over the pool's cap, [`Error::InvalidPayload`](crate::Error::InvalidPayload)
    /// when it does not serialize, [`Error::Unsupported`](crate::Error::Unsupported)
    /// on a storage without workflows.
    pub fn set_result<T: serde::Serialize + ?Sized>(&self, value: &T) -> crate::Result<()> {
        let access = self
            .workflows
            .as_ref()
            .ok_or_else(|| crate::storage::unsupported(crate::storage::Capability::Workflows))?;
        let payload = Payload::of(value)?;
        crate::workflow::check_result(&payload, access.max_result_bytes)?;
        self.control.set_result(payload);
        Ok(())
    }

    /// This job's parents in its workflow, each with its step name, state
    /// and result, in step order; empty for a job without parents.
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a storage
    /// without workflows. One read of the storage per call.
    pub async fn parent_results(&self) -> crate::Result<Vec<ParentResult>> {
        let access = self
            .workflows
            .as_ref()
            .ok_or_else(|| crate::storage::unsupported(crate::storage::Capability::Workflows))?;
        (access.parents)(self.id).await
    }

    /// The job's id.
    pub fn id(&self) -> JobId {
        self.id
    }

    /// The job's kind.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The queue it was claimed from.
    pub fn queue(&self) -> &QueueName {
        &self.queue
    }

    /// This attempt's number, 1 for the first run (a release, by the
    /// handler or at shutdown, gives the attempt back).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Attempts the job gets in all.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// True when a nack would send the job to Dead.
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }

    /// The job id and the token of this claim.
    pub fn lease(&self) -> LeaseRef {
        self.lease
    }

    /// Fires when this run must stop:
    ///
    /// - a cancel request for the job reached the pool (the job ends
    ///   Cancelled unless the handler returns `Ok` first), or the attempt's
    ///   timeout passed (a failed attempt unless the handler returns `Ok`
    ///   first): the handler has the pool's
    ///   [stop grace](crate::WorkerPool::stop_grace) to return, then its
    ///   future is dropped;
    /// - the lease was lost (another worker may now hold the job) or the
    ///   pool is shutting down and its grace period ran out: the future is
    ///   dropped at its next `.await`.
    ///
    /// Await it in a `select!` beside the work, or poll
    /// [`JobContext::is_cancelled`] between steps; watch it for work that
    /// runs outside the future (a spawned task, a blocking thread).
    pub fn cancellation(&self) -> &CancellationToken {
        &self.control.stop
    }

    /// True once [`JobContext::cancellation`] fired.
    pub fn is_cancelled(&self) -> bool {
        self.control.stop.is_cancelled()
    }

    /// True once a cancel request for this job reached the pool (not a
    /// timeout nor a lost lease).
    pub fn is_cancel_requested(&self) -> bool {
        self.control.is_cancel_requested()
    }

    /// True once this attempt's timeout passed.
    pub fn is_timed_out(&self) -> bool {
        self.control.is_timed_out()
    }

    /// Reports progress: a small JSON value (a percent and a message, say)
    /// stored with the job by the pool's next heartbeat, so at most once
    /// per heartbeat interval whatever the rate of calls (only the newest
    /// value of an interval is stored), and shown by `jqctl get`,
    /// `jqctl list` and the dashboard. Cheap: it stores the value in
    /// memory and returns.
    ///
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) when the value
    /// does not serialize, is over
    /// [`MAX_PROGRESS_BYTES`](crate::storage::MAX_PROGRESS_BYTES) or holds
    /// a NUL character. On a storage without
    /// [`Capability::Cancellation`](crate::storage::Capability::Cancellation) the
    /// value is checked and dropped.
    pub fn progress<T: serde::Serialize + ?Sized>(&self, value: &T) -> crate::Result<()> {
        let text = serde_json::to_string(value).map_err(|e| crate::Error::invalid("progress", e.to_string()))?;
        crate::storage::check_progress(&text)?;
        self.control.set_progress(text);
        Ok(())
    }
}

/// A handler with its payload type erased: takes the raw job.
pub(crate) type ErasedHandler = Arc<dyn Fn(Job, JobContext) -> BoxFuture<'static, HandlerResult> + Send + Sync>;

/// Wraps a typed handler: decodes the payload into `T`, and buries the job
/// when it does not decode (it never will: retrying would only delay
/// the Dead state and hide the reason).
pub(crate) fn typed<T, F, Fut>(handler: F) -> ErasedHandler
where
    T: JobType,
    F: Fn(T, JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    Arc::new(move |job: Job, ctx: JobContext| -> BoxFuture<'static, HandlerResult> {
        match job.payload.decode::<T>() {
            Ok(value) => Box::pin(handler(value, ctx)),
            Err(e) => {
                let error = HandlerError::bury(format!(
                    "payload does not deserialize into {} (kind {:?}): {e}",
                    std::any::type_name::<T>(),
                    job.kind
                ));
                Box::pin(std::future::ready(Err(error)))
            }
        }
    })
}

/// Wraps a raw handler, which gets the job with its payload as JSON text.
pub(crate) fn raw<F, Fut>(handler: F) -> ErasedHandler
where
    F: Fn(Job, JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    Arc::new(move |job: Job, ctx: JobContext| -> BoxFuture<'static, HandlerResult> { Box::pin(handler(job, ctx)) })
}
