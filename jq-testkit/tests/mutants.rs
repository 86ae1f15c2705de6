//! The suite must catch broken backends: each mutant below is
//! `MemoryStorage` with one contract violation, and the suite must fail on it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use async_trait::async_trait;
use jq_core::periodic::{Fire, FireOutcome};
use jq_core::storage::{ClaimRequest, Election, Layer, LeaseRef, LeaseToken, Settled, Settlement, Storage, StorageExt};
use jq_core::{Clock, Job, JobId, QueueLimits, QueueName, Rate, Result, State, Stats};
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

/// Only the mutated operations: every other one forwards ([`Layer`]).
#[async_trait]
impl Layer for Mutant {
    type Inner = MemoryStorage;
    fn inner(&self) -> &MemoryStorage {
        &self.inner
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
    async fn stats(&self) -> Result<Stats> {
        let mut stats = self.inner.stats().await?;
        if self.bug == Bug::StatsMissDead {
            for counts in stats.queues.values_mut() {
                counts.set(State::Dead, 0);
            }
        }
        Ok(stats)
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
