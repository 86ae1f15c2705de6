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
//! An empty claim never loops: the fetcher then waits for the storage's
//! wake-up signal ([`Storage::subscribe`]) or the jittered poll interval,
//! whichever comes first.
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

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::cancel::RunControl;
use super::failure::Failure;
use super::heartbeat::Inflight;
use super::pace::{ErrorBackoff, jitter};
use super::prefetch::Prefetch;
use crate::id::LeaseToken;
use crate::job::Job;
use crate::storage::{ClaimRequest, Storage, WorkSignal};

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
    /// The jobs it took (possibly none).
    Jobs(Vec<Job>),
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
            self.request.limit = permit.num_permits();
            self.request.token = LeaseToken::new();
            self.request.resend = false;
            let (claimed, stopping) = match self.claim(&mut errors).await {
                Answer::Jobs(jobs) => (jobs, false),
                Answer::Stopping(jobs) => (jobs, true),
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
                // The queues are drained for now: wait for news.
                self.idle(&mut signal).await;
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
                Ok(jobs) => Answer::Stopping(jobs),
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

    /// Waits for the wake-up signal, the jittered poll interval, or `stop`.
    async fn idle(&self, signal: &mut Option<WorkSignal>) {
        let poll = tokio::time::sleep(jitter(self.poll_interval, 0.25));
        match signal {
            Some(s) => {
                tokio::select! {
                    _ = self.stop.cancelled() => {}
                    _ = poll => {}
                    changed = s.changed() => if changed.is_err() {
                        tracing::debug!("storage wake-up signal closed; polling only");
                        *signal = None;
                    },
                }
            }
            None => {
                tokio::select! {
                    _ = self.stop.cancelled() => {}
                    _ = poll => {}
                }
            }
        }
    }
}
