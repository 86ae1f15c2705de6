//! Maintenance: promote due Scheduled jobs, recover expired leases, purge
//! finished jobs past their retention, and sample the store's metrics
//! gauges, on one pool per store.
//!
//! Each operation is idempotent and safe from many processes at once, but
//! every pool running them multiplies the store's work by the number of
//! pools. So the pools elect one maintainer: the task campaigns for the
//! [`MAINTENANCE_ROLE`] every quarter of the maintenance lease ([`RoleStorage::elect`], held
//! for three quarters of it, so two renewals may fail), and the
//! jittered loops run only while this pool holds the role. The others keep
//! campaigning and take over within one maintenance lease when the holder
//! dies; a pool shutting down resigns, so another takes over at its next
//! campaign. An error is logged and the next round tries again; a fatal one
//! stops the pool.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::failure::Failure;
use super::pace::jitter;
use super::retention::Retention;
use crate::clock::Timestamp;
use crate::error::Error;
use crate::id::LeaseToken;
use crate::storage::{Election, MAINTENANCE_ROLE, RoleStorage, Storage};

/// What maintenance needs.
pub(crate) struct Maintenance<S> {
    pub(crate) storage: Arc<S>,
    /// The candidate's name for operators (the pool's worker name).
    pub(crate) holder: String,
    /// See `WorkerPool::maintenance_lease`.
    pub(crate) lease: Duration,
    pub(crate) promote_interval: Duration,
    pub(crate) recover_interval: Duration,
    pub(crate) purge_interval: Duration,
    /// How long finished jobs are kept (`WorkerPool::retention`).
    pub(crate) retention: Retention,
    /// How often to sample the store's gauges; `None`: observation off.
    pub(crate) sample_interval: Option<Duration>,
    pub(crate) stop: CancellationToken,
    pub(crate) failure: Arc<Failure>,
}

impl<S: Storage> Maintenance<S> {
    /// Campaigns and, while elected, runs the loops (promote, recover, purge, sample), until `stop`
    /// fires; then resigns.
    pub(crate) async fn run(self) {
        let election = Election {
            role: MAINTENANCE_ROLE.to_owned(),
            token: LeaseToken::new(),
            holder: self.holder.clone(),
            ttl: self.lease * 3 / 4,
        };
        let Some(roles) = self.storage.capabilities().roles else {
            // Without named roles there is no election: this pool maintains
            // alongside any other, which the operations allow (idempotent,
            // safe from many processes), at the cost of repeated work.
            tracing::info!(
                holder = %election.holder,
                "the store has no named roles (RoleStorage): this pool maintains it without an election"
            );
            let (_always, elected) = watch::channel(true);
            tokio::select! {
                _ = self.stop.cancelled() => {}
                _ = self.work(elected) => {}
            }
            return;
        };
        let (leader, elected) = watch::channel(false);
        // The campaign ends only between two elections: an `elect` dropped
        // in flight could still commit on the server after the `resign`
        // below, leaving the role held by a pool that is gone until its
        // lease expires. The work loops may be dropped anywhere: their
        // operations are idempotent.
        tokio::select! {
            _ = self.campaign(roles, &election, &leader) => {}
            _ = self.work(elected) => {}
        }
        // A no-op unless the role is ours.
        match roles.resign(MAINTENANCE_ROLE, election.token).await {
            Ok(()) => tracing::debug!("maintenance role handed back"),
            Err(error) => {
                tracing::warn!(%error, "resigning the maintenance role failed; it frees itself when its lease expires")
            }
        }
    }

    /// The loops, each running while `elected` says this pool maintains.
    async fn work(&self, elected: watch::Receiver<bool>) {
        tokio::join!(
            self.promote_loop(elected.clone()),
            self.recover_loop(elected.clone()),
            self.purge_loop(elected.clone()),
            self.sample_loop(elected),
        );
    }

    /// Takes or renews the role every quarter of the lease, and tells the
    /// loops whether this pool holds it.
    async fn campaign(&self, roles: &dyn RoleStorage, election: &Election, leader: &watch::Sender<bool>) {
        while !self.stop.is_cancelled() {
            let held = match roles.elect(election).await {
                Ok(held) => held,
                Err(error) => {
                    if self.fatal("elect", error) {
                        leader.send_replace(false);
                        return;
                    }
                    // Unsure whether the role is still ours: pause the work;
                    // the operations are safe from several pools anyway.
                    false
                }
            };
            if leader.send_replace(held) != held {
                if held {
                    tracing::info!(holder = %election.holder, "this pool now runs maintenance for the store");
                } else {
                    tracing::info!("this pool no longer runs maintenance; another pool holds the role");
                }
            }
            // Never later than a quarter: the lease is three of them.
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep(jitter(self.lease / 4, 0.1).min(self.lease / 4)) => {}
            }
        }
    }

    /// Logs a failed operation; reports a fatal one and returns true.
    fn fatal(&self, operation: &'static str, error: Error) -> bool {
        if error.is_fatal() {
            self.failure.report("maintenance", error);
            return true;
        }
        tracing::warn!(%error, operation, "maintenance operation failed; retrying next round");
        false
    }

    async fn promote_loop(&self, mut elected: watch::Receiver<bool>) {
        while elected.wait_for(|held| *held).await.is_ok() {
            match self.storage.promote().await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(promoted = n, "due scheduled jobs made pending"),
                Err(error) => {
                    if self.fatal("promote", error) {
                        return;
                    }
                }
            }
            tokio::time::sleep(jitter(self.promote_interval, 0.2)).await;
        }
    }

    async fn recover_loop(&self, mut elected: watch::Receiver<bool>) {
        while elected.wait_for(|held| *held).await.is_ok() {
            match self.storage.recover().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(recovered = n, "jobs with expired leases handed back"),
                Err(error) => {
                    if self.fatal("recover", error) {
                        return;
                    }
                }
            }
            tokio::time::sleep(jitter(self.recover_interval, 0.2)).await;
        }
    }

    async fn purge_loop(&self, mut elected: watch::Receiver<bool>) {
        if self.retention.is_forever() {
            return;
        }
        loop {
            // First round after one interval: a restart loop must not turn
            // into a purge loop.
            tokio::time::sleep(jitter(self.purge_interval, 0.2)).await;
            if elected.wait_for(|held| *held).await.is_err() {
                return;
            }
            for (state, keep) in self.retention.rules() {
                let older_than = before(self.storage.clock().now(), keep);
                match self.storage.purge(state, older_than).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(purged = n, %state, "finished jobs past retention deleted"),
                    Err(error) => {
                        if self.fatal("purge", error) {
                            return;
                        }
                    }
                }
            }
        }
    }
}

impl<S: Storage> Maintenance<S> {
    /// Samples the store's gauges while elected: one pool per store does
    /// it, so fifty pools do not read the counts fifty times. A failed
    /// sample is logged and the gauges keep their last values.
    async fn sample_loop(&self, mut elected: watch::Receiver<bool>) {
        let Some(interval) = self.sample_interval else { return };
        while elected.wait_for(|held| *held).await.is_ok() {
            // The first sample waits an interval too: a pool elected as it
            // starts into a backlog spends its first moments draining it,
            // not counting it (a `stats` of the whole store slows a drain
            // measurably), and a scrape every 15 s or more
            // cannot tell the difference.
            tokio::time::sleep(jitter(interval, 0.1)).await;
            if !*elected.borrow() {
                continue;
            }
            if let Err(error) = crate::observe::sample_store(&*self.storage).await
                && self.fatal("sample", error)
            {
                return;
            }
        }
    }
}

/// `now - keep`, saturating at the earliest instant.
fn before(now: Timestamp, keep: Duration) -> Timestamp {
    chrono::Duration::from_std(keep).ok().and_then(|d| now.checked_sub_signed(d)).unwrap_or(Timestamp::MIN_UTC)
}
