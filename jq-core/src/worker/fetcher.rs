//! Fetcher: claims jobs in batches sized to the free slots and hands them to
//! the executors.
//!
//! A slot is a semaphore permit; it travels with the job to an executor and
//! is freed once the job's outcome is queued for the settler, so at most
//! `concurrency + prefetch` jobs wait or run, and the next claim overlaps the write of
//! the previous outcomes (the settler's bounded queue pushes back when the
//! storage is slow). The semaphore holds the most slots the [`Prefetch`]
//! policy may ever allow; before each claim the fetcher leaves unused the
//! slots the policy does not allow now.
//!
//! A short claim never loops: the fetcher then waits for the storage's
//! wake-up signal ([`Storage::subscribe`]) or the jittered poll interval,
//! whichever comes first. A claim that a limit cut short
//! ([`ClaimAnswer::limited`]) is not a drained queue, and waits less:
//!
//! - [`Limited::Concurrency`]: until one of the pool's own jobs leaves
//!   Running (the settler's next written batch frees its slot), the
//!   wake-up signal, or [`LIMITED_POLL_INTERVAL`] (jittered, at most the
//!   poll interval), which bounds how long a slot freed by another process
//!   goes unseen;
//! - [`Limited::Rate`]: until the window it names has room (at most the
//!   poll interval), or the wake-up signal.
//!
//! Every claim gets a fresh [`LeaseToken`]. A claim that fails is sent
//! again, after a bounded exponential backoff, with the same token, the
//! same slots and `resend` set: if the failed attempt took effect and only
//! its answer was lost, the storage hands over the jobs it took instead of
//! leaving them Running with nobody holding them. When shutdown begins
//! while a claim is unanswered, one last resend collects what it took, so
//! the shutdown releases those jobs at once. A fatal error
//! ([`crate::Error::is_fatal`]) stops the pool instead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::cancel::RunControl;
use super::failure::Failure;
use super::heartbeat::Inflight;
use super::pace::{ErrorBackoff, jitter};
use super::prefetch::Prefetch;
use crate::id::LeaseToken;
use crate::job::Job;
use crate::storage::{ClaimAnswer, ClaimRequest, Limited, Storage, WorkSignal};

/// The longest a fetcher whose claim a concurrency limit cut short waits
/// without news before it claims again (jittered by a quarter, and never
/// longer than the pool's poll interval): how long a slot that another
/// process frees, or a window that opens, may go unseen. A slot one of the
/// pool's own jobs frees is seen at once.
pub const LIMITED_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The shortest wait for a rate window: a window that the storage says
/// ends now or earlier (clocks that disagree) must not spin the fetcher.
const MIN_RATE_WAIT: Duration = Duration::from_millis(1);

/// A claimed job on its way to an executor.
pub(crate) struct Claimed {
    pub(crate) job: Job,
    /// Its stop signals (cancel request, timeout, lost lease, end of the
    /// shutdown grace) and progress.
    pub(crate) control: Arc<RunControl>,
    /// The job's slot.
    pub(crate) permit: OwnedSemaphorePermit,
}

/// What the fetcher needs.
pub(crate) struct Fetcher<S> {
    pub(crate) storage: Arc<S>,
    pub(crate) request: ClaimRequest,
    pub(crate) poll_interval: Duration,
    /// Bumped by the settler after each batch it wrote: the pool's own
    /// jobs left Running, and the slots they held are free.
    pub(crate) settled: watch::Receiver<u64>,
    pub(crate) slots: Arc<Semaphore>,
    /// How many of the slots beyond the concurrency may hold waiting jobs.
    pub(crate) prefetch: Prefetch,
    pub(crate) inflight: Arc<Inflight>,
    pub(crate) jobs: async_channel::Sender<Claimed>,
    /// Stops claiming (graceful shutdown).
    pub(crate) stop: CancellationToken,
    /// Parent of every job's token: fires when the shutdown grace ran out.
    pub(crate) abort: CancellationToken,
    /// Where a fatal error goes.
    pub(crate) failure: Arc<Failure>,
}

/// How a claim ended.
enum Answer {
    /// The storage's answer: the jobs it took (possibly none), and the
    /// limit that cut it short, if one did.
    Jobs(ClaimAnswer),
    /// Shutdown began; these are what the last resend collected.
    Stopping(Vec<Job>),
    /// A fatal error, or shutdown with nothing to collect.
    Stop,
}

impl<S: Storage> Fetcher<S> {
    /// Claims until `stop` fires.
    pub(crate) async fn run(mut self) {
        let mut signal = self.storage.subscribe();
        let mut errors = ErrorBackoff::default();
        // Jobs handed to the executors' channel; minus what still waits in
        // it, the jobs the executors took: the rate the prefetch follows.
        let mut sent: u64 = 0;
        loop {
            let taken = sent.saturating_sub(self.jobs.len() as u64);
            let waiting = self.prefetch.observe(Instant::now(), taken);
            // Slots the policy does not allow now stay free.
            let reserve = self.prefetch.cap().saturating_sub(waiting);
            // Wait for at least one usable free slot, then take every free one.
            let mut permit = tokio::select! {
                biased;
                _ = self.stop.cancelled() => return,
                permit = self.slots.clone().acquire_many_owned(u32::try_from(reserve + 1).unwrap_or(u32::MAX)) => match permit {
                    Ok(permit) => permit,
                    Err(_) => return, // semaphore closed: the pool is gone
                },
            };
            if let Ok(more) = self.slots.clone().try_acquire_many_owned(self.slots.available_permits() as u32) {
                permit.merge(more);
            }
            drop(permit.split(reserve));
            // Mark the signal seen before claiming: work arriving during the
            // claim changes it again and the wait below returns at once.
            if let Some(s) = signal.as_mut() {
                s.borrow_and_update();
            }
            // And the settled batches: one written during the claim freed
            // a slot the claim may not have seen.
            self.settled.borrow_and_update();
            self.request.limit = permit.num_permits();
            self.request.token = LeaseToken::new();
            self.request.resend = false;
            let (claimed, limited, stopping) = match self.claim(&mut errors).await {
                Answer::Jobs(answer) => (answer.jobs, answer.limited, false),
                Answer::Stopping(jobs) => (jobs, None, true),
                Answer::Stop => return,
            };
            let asked = self.request.limit;
            let got = claimed.len();
            for job in claimed {
                let Some(lease) = job.lease_ref() else {
                    tracing::error!(job = %job.id, "storage returned a claimed job without a lease; skipping it");
                    continue;
                };
                let Some(one) = permit.split(1) else {
                    tracing::error!(job = %job.id, "storage returned more jobs than asked for; its lease will expire");
                    continue;
                };
                let control = Arc::new(RunControl::new(&self.abort));
                self.inflight.insert(lease, control.clone());
                // The channel holds one item per slot and each carries a
                // permit, so this send never waits.
                if self.jobs.send(Claimed { job, control, permit: one }).await.is_err() {
                    return; // executors gone: the pool is being dropped
                }
                sent += 1;
            }
            drop(permit); // slots the claim could not fill
            if stopping {
                return; // the shutdown releases what was just handed over
            }
            if got < asked {
                match limited {
                    // The queues are drained for now: wait for news.
                    None => self.idle(&mut signal).await,
                    // Jobs are left that a limit held back: wait for it.
                    Some(limited) => self.held_back(limited, &mut signal).await,
                }
                if self.stop.is_cancelled() {
                    return;
                }
            }
        }
    }

    /// Sends `self.request` until the storage answers, resending it with
    /// the same token after each error.
    async fn claim(&mut self, errors: &mut ErrorBackoff) -> Answer {
        loop {
            let span = tracing::debug_span!("jq.claim", limit = self.request.limit, resend = self.request.resend);
            let sent = Instant::now();
            let error = match self.storage.claim(&self.request).instrument(span).await {
                Ok(jobs) => {
                    self.prefetch.claimed_in(sent.elapsed());
                    errors.reset();
                    return Answer::Jobs(jobs);
                }
                Err(error) if error.is_fatal() => {
                    self.failure.report("fetcher", error);
                    return Answer::Stop;
                }
                Err(error) => error,
            };
            self.request.resend = true;
            let delay = errors.next_delay();
            tracing::warn!(%error, retry_in = ?delay, "claim failed; sending it again with the same token");
            tokio::select! {
                _ = self.stop.cancelled() => {}
                _ = tokio::time::sleep(delay) => continue,
            }
            // Shutting down with a claim unanswered: what it took, if it
            // took anything, is handed over for the shutdown to release. (If
            // it took nothing, this claims afresh and those are released
            // too, their attempts given back.)
            return match self.storage.claim(&self.request).await {
                Ok(answer) => Answer::Stopping(answer.jobs),
                Err(error) => {
                    tracing::warn!(
                        %error,
                        "shutting down with a claim unanswered: any job it took stays Running until its lease \
                         expires and recover hands it on"
                    );
                    Answer::Stop
                }
            };
        }
    }

    /// After a claim that `limited` cut short: waits as the module docs
    /// say, for a freed slot or an open window, the wake-up signal, or
    /// `stop`.
    async fn held_back(&mut self, limited: Limited, signal: &mut Option<WorkSignal>) {
        let (wait, own_slots) = match limited {
            Limited::Concurrency => (jitter(LIMITED_POLL_INTERVAL, 0.25).min(self.poll_interval), true),
            Limited::Rate { until } => {
                let left = (until - self.storage.clock().now()).to_std().unwrap_or(Duration::ZERO);
                (left.max(MIN_RATE_WAIT).min(self.poll_interval), false)
            }
        };
        tracing::trace!(?limited, ?wait, "claim held back by a limit");
        self.wait(wait, own_slots, signal).await;
    }

    /// Waits for the wake-up signal, the jittered poll interval, or `stop`.
    async fn idle(&mut self, signal: &mut Option<WorkSignal>) {
        self.wait(jitter(self.poll_interval, 0.25), false, signal).await;
    }

    /// Waits `wait`, or less: until the wake-up signal changes, `stop`, or
    /// (with `own_slots`) the settler writes a batch.
    async fn wait(&mut self, wait: Duration, own_slots: bool, signal: &mut Option<WorkSignal>) {
        let poll = tokio::time::sleep(wait);
        let Fetcher { settled, stop, .. } = self;
        // A settler that is gone writes nothing more: never a wake-up then.
        let settled = async move {
            if !own_slots || settled.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = settled => {}
            _ = wait_signal(stop, poll, signal) => {}
        }
    }
}

/// Waits for `poll`, the wake-up signal, or `stop`.
async fn wait_signal(stop: &CancellationToken, poll: tokio::time::Sleep, signal: &mut Option<WorkSignal>) {
    match signal {
        Some(s) => {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = poll => {}
                changed = s.changed() => if changed.is_err() {
                    tracing::debug!("storage wake-up signal closed; polling only");
                    *signal = None;
                },
            }
        }
        None => {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = poll => {}
            }
        }
    }
}
