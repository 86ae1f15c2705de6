//! The suite must catch broken backends: each mutant below is
//! `MemoryStorage` with one contract violation, and the suite must fail on it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use async_trait::async_trait;
use jq_core::{
    ClaimRequest, Clock, Election, Fire, FireOutcome, Job, JobFilter, JobId, Leader, LeaseRef, LeaseToken, NewJob,
    PeriodicInfo, QueueInfo, QueueLimits, QueueName, Rate, Result, Settled, Settlement, State, Stats, Storage,
    Timestamp,
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
}

#[derive(Clone)]
struct Mutant {
    inner: MemoryStorage,
    bug: Bug,
}

#[async_trait]
impl Storage for Mutant {
    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        self.inner.enqueue(jobs).await
    }
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Job>> {
        if self.bug == Bug::ResendClaimsAgain && request.resend {
            return self
                .inner
                .claim(&ClaimRequest { token: LeaseToken::new(), resend: false, ..request.clone() })
                .await;
        }
        self.inner.claim(request).await
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
    async fn heartbeat(&self, leases: &[LeaseRef], lease: Duration) -> Result<Vec<JobId>> {
        let lost = self.inner.heartbeat(leases, lease).await?;
        Ok(if self.bug == Bug::HeartbeatLies { Vec::new() } else { lost })
    }
    async fn promote(&self) -> Result<u64> {
        self.inner.promote().await
    }
    async fn recover(&self) -> Result<u64> {
        self.inner.recover().await
    }
    async fn get(&self, id: JobId) -> Result<Job> {
        self.inner.get(id).await
    }
    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        self.inner.list(filter).await
    }
    async fn throughput(&self, since: jq_core::Timestamp) -> Result<Vec<jq_core::Throughput>> {
        self.inner.throughput(since).await
    }
    async fn stats(&self) -> Result<Stats> {
        let mut stats = self.inner.stats().await?;
        if self.bug == Bug::StatsMissDead {
            for counts in stats.queues.values_mut() {
                counts.set(State::Dead, 0);
            }
        }
        Ok(stats)
    }
    async fn retry(&self, id: JobId) -> Result<()> {
        self.inner.retry(id).await
    }
    async fn cancel(&self, id: JobId) -> Result<()> {
        self.inner.cancel(id).await
    }
    async fn purge(&self, state: State, older_than: Timestamp) -> Result<u64> {
        self.inner.purge(state, older_than).await
    }
    async fn elect(&self, election: &Election) -> Result<bool> {
        let won = self.inner.elect(election).await?;
        Ok(won || self.bug == Bug::ElectAlwaysWins)
    }
    async fn resign(&self, role: &str, token: LeaseToken) -> Result<()> {
        self.inner.resign(role, token).await
    }
    async fn leaders(&self) -> Result<Vec<Leader>> {
        self.inner.leaders().await
    }
    async fn fire(&self, fire: &Fire) -> Result<FireOutcome> {
        if self.bug == Bug::FireUncompared {
            let stored = self.inner.periodic().await?.into_iter().find(|r| r.name == fire.name);
            let mut forced = fire.clone();
            forced.expected = stored.as_ref().map(|r| r.cursor);
            forced.expected_trigger = stored.and_then(|r| r.triggered_at);
            return self.inner.fire(&forced).await;
        }
        self.inner.fire(fire).await
    }
    async fn periodic(&self) -> Result<Vec<PeriodicInfo>> {
        self.inner.periodic().await
    }
    async fn trigger(&self, name: &str) -> Result<()> {
        self.inner.trigger(name).await
    }
    async fn set_paused(&self, queue: &QueueName, paused: bool) -> Result<()> {
        if self.bug == Bug::PauseForgotten && paused {
            return Ok(());
        }
        self.inner.set_paused(queue, paused).await
    }
    async fn set_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<()> {
        let mut limits = *limits;
        if self.bug == Bug::LimitsLoose {
            limits.concurrency = limits.concurrency.map(|n| n + 1);
            limits.rate = limits.rate.map(|r| Rate::new(r.limit + 1, r.period));
        }
        self.inner.set_limits(queue, &limits).await
    }
    async fn queues(&self) -> Result<Vec<QueueInfo>> {
        self.inner.queues().await
    }
    fn clock(&self) -> jq_core::Clock {
        Storage::clock(&self.inner)
    }
}

struct MutantHarness {
    inner: MemoryHarness,
    bug: Bug,
}

#[async_trait]
impl Harness for MutantHarness {
    type Storage = Mutant;
    async fn connect(&self, clock: Clock) -> Mutant {
        Mutant { inner: self.inner.connect(clock).await, bug: self.bug }
    }
    async fn cleanup(&self) {}
}

fn fails(f: impl FnOnce()) -> bool {
    catch_unwind(AssertUnwindSafe(f)).is_err()
}

fn model_catches(bug: Bug) -> bool {
    // Fixed sequences, many of them: a mutation must be caught on every run,
    // not on most (24 fresh random cases once missed the unfenced ack).
    fails(|| {
        jq_testkit::model::check_deterministic(256, move || async move {
            MutantHarness { inner: MemoryHarness::new(), bug }
        })
    })
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
    let h = MutantHarness { inner: MemoryHarness::new(), bug: Bug::Unfenced };
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::stale_token_fencing(&h))));
    let h = MutantHarness { inner: MemoryHarness::new(), bug: Bug::Unfenced };
    assert!(fails(|| {
        jq_testkit::__private::block_on(jq_testkit::scenarios::crash_before_ack_recovered_after_lease_expiry(&h))
    }));
}

#[test]
fn scenarios_catch_lying_heartbeat_and_stats() {
    let h = MutantHarness { inner: MemoryHarness::new(), bug: Bug::HeartbeatLies };
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::lease_boundary_and_heartbeat(&h))));
    let h = MutantHarness { inner: MemoryHarness::new(), bug: Bug::StatsMissDead };
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::stats_agree_with_list(&h))));
}

#[test]
fn model_and_scenarios_catch_a_resend_that_claims_again() {
    assert!(model_catches(Bug::ResendClaimsAgain));
    let h = MutantHarness { inner: MemoryHarness::new(), bug: Bug::ResendClaimsAgain };
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::claim_resend_returns_the_earlier_claim(
        &h
    ))));
}

#[test]
fn scenarios_catch_an_election_everyone_wins() {
    let h = MutantHarness { inner: MemoryHarness::new(), bug: Bug::ElectAlwaysWins };
    assert!(fails(|| {
        jq_testkit::__private::block_on(jq_testkit::scenarios::election_exclusive_under_concurrent_contenders(&h))
    }));
    let h = MutantHarness { inner: MemoryHarness::new(), bug: Bug::ElectAlwaysWins };
    assert!(fails(|| {
        jq_testkit::__private::block_on(jq_testkit::scenarios::stale_holder_cannot_renew_after_takeover(&h))
    }));
}

#[test]
fn scenarios_catch_a_schedule_step_without_its_comparison() {
    let h = MutantHarness { inner: MemoryHarness::new(), bug: Bug::FireUncompared };
    assert!(fails(|| {
        jq_testkit::__private::block_on(jq_testkit::scenarios::periodic_one_job_per_tick_under_racing_pools(&h))
    }));
    let h = MutantHarness { inner: MemoryHarness::new(), bug: Bug::FireUncompared };
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::periodic_fire_is_a_compare_and_set(&h))));
}

#[test]
fn scenarios_catch_a_forgotten_pause_and_loose_limits() {
    let h = MutantHarness { inner: MemoryHarness::new(), bug: Bug::PauseForgotten };
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::pause_is_honoured_across_handles(&h))));
    let h = MutantHarness { inner: MemoryHarness::new(), bug: Bug::PauseForgotten };
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::pause_survives_reconnect(&h))));
    let h = MutantHarness { inner: MemoryHarness::new(), bug: Bug::LimitsLoose };
    assert!(fails(|| {
        jq_testkit::__private::block_on(jq_testkit::scenarios::limits_hold_under_concurrent_claimers(&h))
    }));
    let h = MutantHarness { inner: MemoryHarness::new(), bug: Bug::LimitsLoose };
    assert!(fails(|| jq_testkit::__private::block_on(jq_testkit::scenarios::rate_limit_is_a_sliding_window(&h))));
}
