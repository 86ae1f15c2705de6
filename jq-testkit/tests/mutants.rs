//! The suite must catch broken backends: each mutant below is
//! `MemoryStorage` with one contract violation, and the suite must fail on it.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use jq_core::durable::{Record, Suspend, Suspended};
use jq_core::periodic::{Fire, FireOutcome};
use jq_core::storage::{
    ClaimRequest, Election, LeaseRef, LeaseToken, Settled, Settlement, Storage, StorageExt, Wrapper,
};
use jq_core::{
    Clock, JobFilter, JobId, NewJob, QueueLimits, QueueName, Rate, Result, State, Stats, Timestamp, UniqueRule,
};
use jq_testkit::{Harness, MemoryHarness, MemoryStorage};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Bug {
    /// settle() does not check the token.
    Unfenced,
    /// heartbeat() never reports a lost lease.
    HeartbeatLies,
    /// stats() forgets Dead jobs.
    StatsMissDead,
    /// A resent claim ignores its earlier attempt and claims afresh.
    ResendClaimsAgain,
    /// elect() says every contender won.
    ElectAlwaysWins,
    /// fire() applies every step, whatever cursor it expected (a store that
    /// writes the cursor without comparing it).
    FireUncompared,
    /// set_paused(true) is not stored.
    PauseForgotten,
    /// set_limits() stores each limit one higher than asked.
    LimitsLoose,
    /// stats() keeps counting a retried job as Dead (a counter of finished
    /// jobs that retry forgets to decrement).
    RetryUncounted,
    /// purge() stops after its first batch of 1,000 (a backend that forgets
    /// to loop).
    PurgeOneBatch,
    /// enqueue() treats a debounce as a plain unique key.
    DebounceIgnored,
    /// enqueue() forgets a debounce's max_delay.
    MaxDelayIgnored,
    /// enqueue() treats a unique period as a plain unique key.
    PeriodIgnored,
    /// enqueue() treats a replace as a plain unique key.
    ReplaceIgnored,
    /// enqueue() drops a rule it should refuse and stores the job.
    RulesUnchecked,
    /// enqueue() decides a rule per connection (a process-local lock or
    /// cache), not in the store: each connection sees its own key.
    RulesPerConnection,
    /// checkpoint() does not check the token (a stale worker's write lands).
    CheckpointUnfenced,
    /// A wait that takes a signal leaves it stored (taken twice).
    SignalKept,
    /// suspend() skips the journal's limits (checked on checkpoint only:
    /// Inngest PR #4212).
    SuspendUnlimited,
    /// A sleep answers Waiting but leaves the job Running under its lease
    /// (it would hold a slot until its lease expired).
    SleepHoldsTheLease,
}

#[derive(Clone)]
struct Mutant {
    inner: MemoryStorage,
    bug: Bug,
    /// Which connection of its harness this is, for [`Bug::RulesPerConnection`].
    connection: usize,
    /// Jobs retried, per queue, for [`Bug::RetryUncounted`].
    retried: Arc<Mutex<BTreeMap<String, u64>>>,
}

/// Only the mutated operations: every other one forwards ([`Wrapper`]).
#[async_trait]
impl Wrapper for Mutant {
    type Inner = MemoryStorage;
    fn inner(&self) -> &MemoryStorage {
        &self.inner
    }
    async fn claim(&self, request: &ClaimRequest) -> Result<jq_core::storage::ClaimAnswer> {
        if self.bug == Bug::ResendClaimsAgain && request.resend {
            return self
                .inner
                .claim(&ClaimRequest { token: LeaseToken::new(), resend: false, ..request.clone() })
                .await;
        }
        self.inner.claim(request).await
    }
    async fn enqueue(&self, mut jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        for job in &mut jobs {
            let Some(rule) = job.unique_rule else { continue };
            match (self.bug, rule) {
                (Bug::DebounceIgnored, UniqueRule::Debounce { .. })
                | (Bug::PeriodIgnored, UniqueRule::Period(_))
                | (Bug::ReplaceIgnored, UniqueRule::Replace) => job.unique_rule = None,
                (Bug::MaxDelayIgnored, UniqueRule::Debounce { window, .. }) => {
                    job.unique_rule = Some(UniqueRule::Debounce { window, max_delay: None });
                }
                (Bug::RulesUnchecked, rule)
                    if rule.check(job.unique_key.as_deref(), job.run_at, job.key.as_deref()).is_err() =>
                {
                    job.unique_rule = None;
                    job.run_at = None;
                    job.key = None;
                }
                (Bug::RulesPerConnection, _) => {
                    job.unique_key = job.unique_key.take().map(|k| format!("{k}@{}", self.connection));
                }
                _ => {}
            }
        }
        self.inner.enqueue(jobs).await
    }
    async fn settle(&self, mut batch: Vec<Settlement>) -> Result<Vec<Settled>> {
        if self.bug == Bug::Unfenced {
            for c in &mut batch {
                if let Some(token) = self.inner.get(c.lease.id).await.ok().and_then(|j| j.token()) {
                    c.lease.token = token;
                }
            }
        }
        self.inner.settle(batch).await
    }
    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<jq_core::storage::Beat> {
        let beat = self.inner.heartbeat(leases, lease).await?;
        Ok(if self.bug == Bug::HeartbeatLies { jq_core::storage::Beat::default() } else { beat })
    }
    async fn stats(&self) -> Result<Stats> {
        let mut stats = self.inner.stats().await?;
        if self.bug == Bug::StatsMissDead {
            for counts in stats.queues.values_mut() {
                counts.set(State::Dead, 0);
            }
        }
        if self.bug == Bug::RetryUncounted {
            for (queue, n) in self.retried.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                stats.queues.entry(queue.clone()).or_default().add(State::Dead, *n);
            }
        }
        Ok(stats)
    }
    async fn retry(&self, id: JobId) -> Result<()> {
        let queue = self.inner.get(id).await.map(|j| j.queue.as_str().to_owned());
        self.inner.retry(id).await?;
        if let Ok(queue) = queue {
            *self.retried.lock().unwrap_or_else(|p| p.into_inner()).entry(queue).or_default() += 1;
        }
        Ok(())
    }
    async fn purge(&self, state: State, older_than: Timestamp) -> Result<u64> {
        if self.bug != Bug::PurgeOneBatch {
            return self.inner.purge(state, older_than).await;
        }
        // The oldest 1,000 only: what finished before the 1,001st.
        let mut finished: Vec<Timestamp> = Vec::new();
        let mut filter = JobFilter { state: Some(state), limit: 1_000, ..JobFilter::default() };
        loop {
            let page = self.inner.list(&filter).await?;
            let Some(last) = page.last() else { break };
            filter.after = Some(last.id);
            finished.extend(page.iter().filter_map(|j| j.finished_at).filter(|f| *f < older_than));
        }
        finished.sort();
        let cutoff = finished.get(1_000).copied().unwrap_or(older_than);
        self.inner.purge(state, cutoff).await
    }
    async fn checkpoint(&self, mut lease: LeaseRef, record: &Record) -> Result<()> {
        if self.bug == Bug::CheckpointUnfenced
            && let Some(token) = self.inner.get(lease.id).await.ok().and_then(|j| j.token())
        {
            lease.token = token;
        }
        self.inner.require_durable()?.checkpoint(lease, record).await
    }
    async fn suspend(&self, lease: LeaseRef, suspend: &Suspend) -> Result<Suspended> {
        let durable = self.inner.require_durable()?;
        if self.bug == Bug::SleepHoldsTheLease && matches!(suspend, Suspend::Sleep { .. }) {
            return Ok(Suspended::Waiting);
        }
        let answer = durable.suspend(lease, suspend).await;
        match (&answer, suspend) {
            (Err(jq_core::Error::DurableLimit { .. }), _) if self.bug == Bug::SuspendUnlimited => Ok(Suspended::Due),
            (Ok(Suspended::Signal(payload)), Suspend::Wait { name, .. }) if self.bug == Bug::SignalKept => {
                durable.signal(lease.id, name, payload).await?;
                answer
            }
            _ => answer,
        }
    }
    async fn elect(&self, election: &Election) -> Result<bool> {
        let won = self.inner.require_roles()?.elect(election).await?;
        Ok(won || self.bug == Bug::ElectAlwaysWins)
    }
    async fn fire(&self, fire: &Fire) -> Result<FireOutcome> {
        let periodic = self.inner.require_periodic()?;
        if self.bug == Bug::FireUncompared {
            let stored = periodic.periodic().await?.into_iter().find(|r| r.name == fire.name);
            let mut forced = fire.clone();
            forced.expected = stored.as_ref().map(|r| r.cursor);
            forced.expected_trigger = stored.and_then(|r| r.triggered_at);
            return periodic.fire(&forced).await;
        }
        periodic.fire(fire).await
    }
    async fn set_paused(&self, queue: &QueueName, paused: bool) -> Result<()> {
        if self.bug == Bug::PauseForgotten && paused {
            return Ok(());
        }
        self.inner.require_controls()?.set_paused(queue, paused).await
    }
    async fn set_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<()> {
        let mut limits = *limits;
        if self.bug == Bug::LimitsLoose {
            limits.concurrency = limits.concurrency.map(|n| n + 1);
            limits.rate = limits.rate.map(|r| Rate::new(r.limit + 1, r.period));
        }
        self.inner.require_controls()?.set_limits(queue, &limits).await
    }
}

struct MutantHarness {
    inner: MemoryHarness,
    bug: Bug,
    retried: Arc<Mutex<BTreeMap<String, u64>>>,
    connections: AtomicUsize,
}

impl MutantHarness {
    fn new(bug: Bug) -> Self {
        MutantHarness { inner: MemoryHarness::new(), bug, retried: Arc::default(), connections: AtomicUsize::new(0) }
    }
}

#[async_trait]
impl Harness for MutantHarness {
    type Storage = Mutant;
    async fn connect(&self, clock: Clock) -> Mutant {
        Mutant {
            inner: self.inner.connect(clock).await,
            bug: self.bug,
            connection: self.connections.fetch_add(1, Ordering::Relaxed),
            retried: self.retried.clone(),
        }
    }
    async fn cleanup(&self) {}
}

fn fails(f: impl FnOnce()) -> bool {
    catch_unwind(AssertUnwindSafe(f)).is_err()
}

fn model_catches(bug: Bug) -> bool {
    // Fixed sequences, many of them: a mutation must be caught on every run,
    // not on most (24 fresh random cases once missed the unfenced ack).
    fails(|| jq_testkit::model::check_deterministic(256, move || async move { MutantHarness::new(bug) }))
}

#[test]
fn model_catches_unfenced_settlements() {
    assert!(model_catches(Bug::Unfenced));
}

#[test]
fn model_catches_lying_heartbeat() {
    assert!(model_catches(Bug::HeartbeatLies));
}

#[test]
fn model_catches_wrong_stats() {
    assert!(model_catches(Bug::StatsMissDead));
}

#[test]
fn scenarios_catch_unfenced_settlements() {
    let h = MutantHarness::new(Bug::Unfenced);
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::stale_token_fencing(&h))));
    let h = MutantHarness::new(Bug::Unfenced);
    assert!(fails(|| {
        jq_testkit::__private::block_on(jq_testkit::scenarios::crash_before_ack_recovered_after_lease_expiry(&h))
    }));
}

#[test]
fn scenarios_catch_lying_heartbeat_and_stats() {
    let h = MutantHarness::new(Bug::HeartbeatLies);
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::lease_boundary_and_heartbeat(&h))));
    let h = MutantHarness::new(Bug::StatsMissDead);
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::stats_agree_with_list(&h))));
}

#[test]
fn model_and_scenarios_catch_a_resend_that_claims_again() {
    assert!(model_catches(Bug::ResendClaimsAgain));
    let h = MutantHarness::new(Bug::ResendClaimsAgain);
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::claim_resend_returns_the_earlier_claim(
        &h
    ))));
}

#[test]
fn scenarios_catch_an_election_everyone_wins() {
    let h = MutantHarness::new(Bug::ElectAlwaysWins);
    assert!(fails(|| {
        jq_testkit::__private::block_on(jq_testkit::scenarios::election_exclusive_under_concurrent_contenders(&h))
    }));
    let h = MutantHarness::new(Bug::ElectAlwaysWins);
    assert!(fails(|| {
        jq_testkit::__private::block_on(jq_testkit::scenarios::stale_holder_cannot_renew_after_takeover(&h))
    }));
}

#[test]
fn scenarios_catch_a_periodic_step_without_its_comparison() {
    let h = MutantHarness::new(Bug::FireUncompared);
    assert!(fails(|| {
        jq_testkit::__private::block_on(jq_testkit::scenarios::periodic_one_job_per_tick_under_racing_pools(&h))
    }));
    let h = MutantHarness::new(Bug::FireUncompared);
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::periodic_fire_is_a_compare_and_set(&h))));
}

#[test]
fn scenarios_catch_a_forgotten_pause_and_loose_limits() {
    let h = MutantHarness::new(Bug::PauseForgotten);
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::pause_is_honoured_across_handles(&h))));
    let h = MutantHarness::new(Bug::PauseForgotten);
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::pause_survives_reconnect(&h))));
    let h = MutantHarness::new(Bug::LimitsLoose);
    assert!(fails(|| {
        jq_testkit::__private::block_on(jq_testkit::scenarios::limits_hold_under_concurrent_claimers(&h))
    }));
    let h = MutantHarness::new(Bug::LimitsLoose);
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::rate_limit_is_a_sliding_window(&h))));
}

#[test]
fn model_and_scenarios_catch_counts_a_retry_leaves_behind() {
    assert!(model_catches(Bug::RetryUncounted));
    let h = MutantHarness::new(Bug::RetryUncounted);
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::stats_count_every_transition(&h))));
}

#[test]
fn scenarios_catch_a_purge_that_stops_after_one_batch() {
    let h = MutantHarness::new(Bug::PurgeOneBatch);
    assert!(fails(|| {
        jq_testkit::__private::block_on(jq_testkit::scenarios::purge_deletes_every_batch_until_none_is_left(&h))
    }));
}

/// Runs `scenario` on a fresh mutant of `bug` and says whether it failed.
fn scenario_fails<F, Fut>(bug: Bug, scenario: F) -> bool
where
    F: FnOnce(MutantHarness) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let h = MutantHarness::new(bug);
    fails(|| jq_testkit::__private::block_on(scenario(h)))
}

#[test]
fn scenarios_catch_an_ignored_debounce_and_max_delay() {
    use jq_testkit::scenarios::{
        debounce_keeps_the_last_payload_and_runs_after_quiet, debounce_max_delay_bounds_a_steady_stream,
    };
    assert!(scenario_fails(Bug::DebounceIgnored, |h| async move {
        debounce_keeps_the_last_payload_and_runs_after_quiet(&h).await
    }));
    assert!(scenario_fails(
        Bug::MaxDelayIgnored,
        |h| async move { debounce_max_delay_bounds_a_steady_stream(&h).await }
    ));
}

#[test]
fn scenarios_catch_an_ignored_period_and_replace() {
    use jq_testkit::scenarios::{replace_changes_a_waiting_job_only, unique_period_counts_finished_jobs};
    assert!(scenario_fails(Bug::PeriodIgnored, |h| async move { unique_period_counts_finished_jobs(&h).await }));
    assert!(scenario_fails(Bug::ReplaceIgnored, |h| async move { replace_changes_a_waiting_job_only(&h).await }));
}

#[test]
fn scenarios_catch_unchecked_rules() {
    use jq_testkit::scenarios::unique_rules_refuse_bad_input;
    assert!(scenario_fails(Bug::RulesUnchecked, |h| async move { unique_rules_refuse_bad_input(&h).await }));
}

#[test]
fn scenarios_catch_rules_decided_per_connection() {
    use jq_testkit::scenarios::{debounce_under_concurrent_producers, unique_period_under_concurrent_producers};
    assert!(scenario_fails(Bug::RulesPerConnection, |h| async move { debounce_under_concurrent_producers(&h).await }));
    assert!(scenario_fails(
        Bug::RulesPerConnection,
        |h| async move { unique_period_under_concurrent_producers(&h).await }
    ));
}

#[test]
fn model_catches_ignored_rules() {
    assert!(model_catches(Bug::DebounceIgnored));
    assert!(model_catches(Bug::PeriodIgnored));
    assert!(model_catches(Bug::ReplaceIgnored));
}

#[test]
fn scenarios_catch_durable_jobs_broken_four_ways() {
    let h = MutantHarness::new(Bug::CheckpointUnfenced);
    assert!(fails(|| {
        jq_testkit::__private::block_on(
            jq_testkit::scenarios::durable_step_survives_an_expired_lease_and_stale_writes_are_refused(&h),
        )
    }));
    let h = MutantHarness::new(Bug::SignalKept);
    assert!(fails(|| {
        jq_testkit::__private::block_on(jq_testkit::scenarios::durable_signal_sent_before_the_wait_is_taken_once(&h))
    }));
    let h = MutantHarness::new(Bug::SignalKept);
    assert!(fails(|| {
        jq_testkit::__private::block_on(jq_testkit::scenarios::durable_signal_sent_after_the_wait_wakes_the_job_once(
            &h,
        ))
    }));
    let h = MutantHarness::new(Bug::SuspendUnlimited);
    assert!(fails(|| {
        jq_testkit::__private::block_on(jq_testkit::scenarios::durable_limits_are_refused_alike_on_every_path(&h))
    }));
    let h = MutantHarness::new(Bug::SleepHoldsTheLease);
    assert!(fails(|| {
        jq_testkit::__private::block_on(jq_testkit::scenarios::durable_sleep_holds_no_slot_and_runs_at_its_time(&h))
    }));
}
