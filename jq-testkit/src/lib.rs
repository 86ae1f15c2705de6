//! jq-testkit: the storage contract (the repository's `docs/CONTRACT.md`)
//! made executable.
//!
//! Every jq backend (SQLite, PostgreSQL, Redis, and any backend you write)
//! runs the same suites:
//!
//! - [`conformance!`]: one test per scenario of [`scenarios`], each a plain
//!   `pub async fn name<H: Harness>(h: &H)` you can also call yourself.
//! - [`properties!`]: random sequences of operations, run on your backend
//!   and on [`MemoryStorage`] (the reference model) side by side, compared
//!   after every step ([`model`]).
//!
//! [`MemoryStorage`] doubles as an in-memory storage for your own tests, and
//! [`FaultyStorage`] wraps any storage to fail chosen calls, before or
//! after their effect ([`faults`]). [`proxy::Proxy`] puts a TCP proxy between a
//! backend and its server that can go silent, strand or reset its
//! connections, for tests of what a backend does on a hostile network.
//!
//! # Running the suite against your backend
//!
//! Implement [`Harness`] for a type that owns one private namespace of
//! your backend (a temp file, a fresh schema, a random key prefix), then
//! write one test file:
//!
//! ```no_run
//! // my-backend/tests/conformance.rs
//! # mod my_backend {
//! #     pub struct MyConfig(jq_core::Clock);
//! #     impl MyConfig { pub fn new(_prefix: &str) -> Self { MyConfig(jq_core::Clock::system()) }
//! #         pub fn clock(self, clock: jq_core::Clock) -> Self { MyConfig(clock) } }
//! #     pub type MyStorage = jq_testkit::MemoryStorage;
//! #     pub async fn connect(config: MyConfig) -> Result<MyStorage, std::io::Error> {
//! #         Ok(jq_testkit::MemoryStorage::new().clock(config.0)) }
//! #     pub async fn drop_namespace(_prefix: &str) {}
//! # }
//! use jq_core::Clock;
//!
//! struct MyHarness { prefix: String }
//!
//! #[async_trait::async_trait]
//! impl jq_testkit::Harness for MyHarness {
//!     type Storage = my_backend::MyStorage;
//!     async fn connect(&self, clock: Clock) -> my_backend::MyStorage {
//!         // A NEW connection every call, on the same namespace.
//!         my_backend::connect(my_backend::MyConfig::new(&self.prefix).clock(clock))
//!             .await
//!             .expect("cannot reach the server: run scripts/start-services.sh")
//!     }
//!     async fn cleanup(&self) {
//!         // Called only when the test passed: a failure leaves the evidence.
//!         my_backend::drop_namespace(&self.prefix).await;
//!     }
//! }
//!
//! async fn setup() -> MyHarness {
//!     MyHarness { prefix: format!("t-{}", uuid::Uuid::new_v4()) }
//! }
//!
//! jq_testkit::conformance!(setup); // one #[test] per scenario, same names for every backend
//! jq_testkit::properties!(setup); // the model-based property suite
//! # fn main() {}
//! ```
//!
//! `examples/custom-backend` in the repository is a whole backend written
//! this way, with its suites passing.
//!
//! `cargo test -- claim_` runs the claim scenarios only;
//! `PROPTEST_CASES=200 cargo test -- model_` runs more random cases.
//!
//! Each generated test is a plain `#[test]` that runs on its own
//! multi-thread tokio runtime with 4 workers (what
//! `#[tokio::test(flavor = "multi_thread", worker_threads = 4)]` would do),
//! so your crate needs no tokio features of its own for it. No scenario
//! sleeps: time moves through [`jq_core::ManualClock`], and concurrency is
//! real tasks on separate connections.
//!
//! # What the suite expects of a backend, beyond the trait
//!
//! - `connect` uses the default payload limit
//!   ([`jq_core::DEFAULT_MAX_PAYLOAD_BYTES`]) and the clock it is given.
//! - Everything [`MemoryStorage`] does is the reference: the property suite
//!   compares whole jobs after every step, so e.g. the recover error text
//!   must be exactly [`memory::lease_expired_message`], `run_at` stays as it
//!   was on transitions that do not set it (ack, fail, Dead), and a claim
//!   changes only the jobs it returns (it does not promote others).
//! - Items of one `settle` batch apply in order: a second item on the
//!   same job sees the first one's effect (typically `LeaseLost`).
//! - A claim's jobs hold the request's token (`ClaimRequest::token`), and a
//!   resend returns what the token still holds: both sides get the same
//!   tokens, so leases compare equal.
//! - The pool scenarios (`pool_*`, `one_maintainer_among_eight_pools`)
//!   run a real `WorkerPool` through [`FaultyStorage`] with short real
//!   timers; they need `connect` to give handles that can be used from
//!   several tasks at once, as every other scenario does.
//! - Not compared: the order of jobs inside one claim's answer, the order
//!   of heartbeat's lost ids, payload formatting (compared as JSON values).
//!
//! # Tests that need a server
//!
//! [`services`] decides, in one place, whether PostgreSQL, Redis or a
//! headless Chromium is here: a setup returning `Option<Harness>` (`None`
//! from [`services::postgres`] and friends) skips its tests with one
//! message per test binary, and `JQ_REQUIRE_SERVICES=1` turns that into a
//! failure. Other tests start with [`needs!`].

#![deny(missing_docs)]

use jq_core::storage::Storage;
use jq_core::{Clock, Error, JobFilter, JobId, State};

pub mod blocking;
pub mod faults;
pub mod imports;
pub mod memory;
pub mod model;
pub mod network;
pub mod periodic_model;
pub mod proxy;
pub mod scenarios;
pub mod services;
pub mod workflow_model;

pub use faults::FaultyStorage;
pub use memory::{MemoryHarness, MemoryStorage};

/// Draws of a generator seeded by `seed` (proptest's ChaCha): `draw(n)` is
/// uniform in `0..n`, and a seed repeats its draws, so a seeded case fails
/// the same way on every run.
pub fn seeded_draws(seed: u64) -> impl FnMut(u64) -> u64 {
    use proptest::prelude::RngExt;
    use proptest::test_runner::{RngAlgorithm, TestRng};
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    move |n| rng.random_range(0..n)
}

/// The ids of every page [`Storage::list`] gives for `filter`, from the
/// start and following the `after` cursor until a page is not full, as
/// operators' tools page. Panics when a call fails or paging does not end
/// within 1,000 pages (a cursor that stops advancing).
pub async fn list_pages<S: Storage + ?Sized>(storage: &S, filter: JobFilter) -> Vec<Vec<JobId>> {
    let mut pages = Vec::new();
    let mut after = None;
    for _ in 0..1_000 {
        let page = storage
            .list(&JobFilter { after, ..filter.clone() })
            .await
            .unwrap_or_else(|e| panic!("list after {after:?}: {e}"));
        let ids: Vec<JobId> = page.iter().map(|j| j.id).collect();
        let full = ids.len() == filter.page_size();
        after = ids.last().copied();
        pages.push(ids);
        if !full {
            return pages;
        }
    }
    panic!("paging did not end: {pages:?}");
}

/// Checks how a backend's admin reads treat rows its own test corrupted
/// (how to corrupt one is backend-specific): `get` of each of `corrupt`
/// says [`Error::Corrupt`] with its id, and `list` leaves them out of every
/// page while pages stay full until the last, also with a state filter.
/// `good` are the other jobs, all Pending, in id order; there must be 3.
/// Panics on the first difference.
pub async fn assert_list_skips_corrupt<S: Storage + ?Sized>(storage: &S, corrupt: &[JobId], good: &[JobId]) {
    assert_eq!(good.len(), 3, "the page sizes below assume 3 good jobs");
    for &bad in corrupt {
        let got = storage.get(bad).await;
        assert!(matches!(&got, Err(Error::Corrupt { id: Some(id), .. }) if *id == bad), "get {bad}: {got:?}");
    }
    let all = storage.list(&JobFilter::default()).await.unwrap_or_else(|e| panic!("list: {e}"));
    assert_eq!(all.iter().map(|j| j.id).collect::<Vec<_>>(), good);
    // Pages stay full until the last, and the cursor moves past corrupt rows.
    assert_eq!(
        list_pages(storage, JobFilter { limit: 2, ..Default::default() }).await,
        vec![good[..2].to_vec(), good[2..].to_vec()]
    );
    assert_eq!(list_pages(storage, JobFilter { limit: 1, ..Default::default() }).await.concat(), good);
    assert_eq!(list_pages(storage, JobFilter { limit: 3, ..Default::default() }).await, vec![good.to_vec(), vec![]]);
    let pending = JobFilter { state: Some(State::Pending), limit: 2, ..Default::default() };
    assert_eq!(list_pages(storage, pending).await.concat(), good);
}

/// Checks the contract's "stats agree with list" on a store a backend's
/// own test filled (by hand, a migration, another writer): `stats` equals
/// a count, per queue and state, of every job `list` returns. Panics with
/// both when they differ.
pub async fn assert_stats_agree_with_list<S: Storage + ?Sized>(storage: &S) {
    let mut listed = jq_core::Stats::default();
    let mut filter = JobFilter { limit: 1_000, ..JobFilter::default() };
    loop {
        let page = storage.list(&filter).await.unwrap_or_else(|e| panic!("list: {e}"));
        let Some(last) = page.last() else { break };
        filter.after = Some(last.id);
        for job in &page {
            listed.queues.entry(job.queue.as_str().to_owned()).or_default().add(job.state, 1);
        }
    }
    let counted = storage.stats().await.unwrap_or_else(|e| panic!("stats: {e}"));
    assert_eq!(counted, listed, "stats disagree with the jobs list returns");
}

/// One test's private namespace on a backend (SQLite: a temp file;
/// PostgreSQL: a fresh schema; Redis: a random key prefix; memory: shared state).
#[async_trait::async_trait]
pub trait Harness: Send + Sync + 'static {
    /// The backend under test.
    type Storage: Storage + Clone;
    /// A new handle with its OWN connection(s) on this namespace, using `clock`.
    /// Called several times per test (concurrent claimers on separate
    /// connections; a "restarted worker").
    async fn connect(&self, clock: Clock) -> Self::Storage;
    /// Removes the namespace. Called only when the scenario passed, so a
    /// failure leaves the evidence behind.
    async fn cleanup(&self);
    /// False when the backend refuses an enqueue batch over several queues
    /// with [`jq_core::Error::BatchNotAtomic`] (Redis Cluster): scenarios
    /// and the property suite then enqueue one batch per queue.
    fn cross_queue_batches(&self) -> bool {
        true
    }
}

/// Stamps one test per conformance scenario, named after the scenario:
/// the core's, then those of each capability listed after a `;`.
///
/// ```text
/// jq_testkit::conformance!(setup);                                        // a core-only backend
/// jq_testkit::conformance!(setup; roles, periodic, controls, throughput, cancellation, workflows, keys, durable); // every capability
/// ```
///
/// `$setup` is an async fn (or any expression callable with no argument
/// returning a future) that makes a fresh [`Harness`], or `None` when the
/// backend's server is unreachable and the tests may be skipped (see
/// [`services`]). Each test runs `let h = $setup().await;
/// jq_testkit::scenarios::<name>(&h).await; h.cleanup().await;` on a
/// multi-thread runtime with 4 workers. One more test,
/// `declares_its_capabilities`, checks that the storage declares exactly
/// the capabilities listed (`Storage::as_roles`, ...): a capability
/// declared but not listed would go untested, one listed but not declared
/// is refused at run time.
///
/// The lists of scenarios live here and only here, so every backend gets
/// the same test names.
#[macro_export]
macro_rules! conformance {
    ($setup:expr $(; $($capability:ident),* $(,)?)?) => {
        $crate::__conformance_tests!(
            $setup;
            // claim
            claim_exclusivity,
            batch_claim_respects_limit,
            claim_limit_zero_returns_nothing,
            claim_order_priority_run_at_id,
            queue_isolation,
            never_claimed_before_run_at,
            claim_sets_lease_and_attempts,
            claim_resend_returns_the_earlier_claim,
            // lease
            crash_before_ack_recovered_after_lease_expiry,
            stale_token_fencing,
            recover_racing_ack_keeps_ack,
            lease_boundary_and_heartbeat,
            reused_worker_identity_strands_nothing,
            recover_with_no_attempts_left_is_dead,
            // settle: nack, bury, release
            nack_accounting_to_dead,
            poison_job_ends_dead,
            release_does_not_count_attempt,
            release_in_the_claiming_instant_is_claimable_at_once,
            release_with_delay_is_scheduled_at_now_plus_delay,
            nack_with_zero_delay_is_pending,
            // enqueue
            enqueue_stores_every_field,
            resent_enqueue_stores_nothing_twice,
            unique_keys,
            a_retried_job_shares_its_unique_key,
            enqueue_batch_is_atomic,
            // unique rules: debounce, unique for a period, replace
            debounce_keeps_the_last_payload_and_runs_after_quiet,
            debounce_max_delay_bounds_a_steady_stream,
            debounce_under_concurrent_producers,
            unique_period_counts_finished_jobs,
            unique_period_under_concurrent_producers,
            replace_changes_a_waiting_job_only,
            unique_rules_refuse_bad_input,
            trace_context_is_stored_and_kept,
            // maintenance
            promote_exactly_once_under_concurrent_promoters,
            recover_is_idempotent_under_concurrent_recoverers,
            // bad input
            invalid_queue_name_rejected,
            oversized_payload_rejected,
            unknown_id_is_not_found,
            ack_of_unknown_id_is_lease_lost,
            purge_of_non_terminal_state_is_invalid,
            invalid_payload_json_rejected,
            // text from outside
            nul_in_error_messages_is_stored_replaced,
            payload_with_a_nul_escape_is_refused,
            names_with_a_nul_are_refused,
            // admin
            get_returns_the_job,
            list_filters_and_pages,
            stats_agree_with_list,
            retry_dead_job,
            cancel_pending_and_scheduled,
            purge_removes_only_old_terminal,
            stats_count_every_transition,
            purge_deletes_every_batch_until_none_is_left,
            // a worker pool through injected faults
            pool_claim_failing_before_effect_strands_nothing,
            pool_claim_failing_after_effect_strands_nothing,
            pool_settle_failing_before_effect_strands_nothing,
            pool_settle_failing_after_effect_strands_nothing,
            pool_heartbeat_failing_before_effect_strands_nothing,
            pool_heartbeat_failing_after_effect_strands_nothing,
        );
        $($( $crate::__capability_tests!($capability, $setup); )*)?

        #[test]
        fn declares_its_capabilities() {
            $crate::__private::block_on(async {
                let Some(h) = $crate::__private::harness(($setup)()).await else { return };
                let listed: &[&str] = &[$($(stringify!($capability)),*)?];
                $crate::scenarios::declares_its_capabilities(&h, listed).await;
                $crate::Harness::cleanup(&h).await;
            });
        }
    };
}

/// Implementation detail of [`conformance!`]: the scenarios of one
/// capability.
#[doc(hidden)]
#[macro_export]
macro_rules! __capability_tests {
    (roles, $setup:expr) => {
        $crate::__conformance_tests!(
            $setup;
            election_exclusive_under_concurrent_contenders,
            election_renews_with_its_token,
            election_takeover_only_after_expiry,
            stale_holder_cannot_renew_after_takeover,
            resign_frees_the_role_at_once,
            one_maintainer_among_eight_pools,
        );
    };
    (periodic, $setup:expr) => {
        $crate::__conformance_tests!(
            $setup;
            periodic_one_job_per_tick_under_racing_pools,
            periodic_missed_ticks_follow_the_policy,
            periodic_fire_is_a_compare_and_set,
            periodic_trigger_is_served_once,
            periodic_changes_with_the_code_and_orphans_stop,
            periodic_daylight_saving_in_two_zones,
            periodic_worker_pools_store_each_tick_once_through_faults,
            periodic_moved_to_another_queue_keeps_one_cursor,
        );
    };
    (controls, $setup:expr) => {
        $crate::__conformance_tests!(
            $setup;
            pause_is_honoured_across_handles,
            pause_survives_reconnect,
            concurrency_slot_returns_after_recover,
            rate_limit_is_a_sliding_window,
            limits_hold_under_concurrent_claimers,
            limits_beyond_what_backends_store_are_refused,
            paused_or_limited_queue_leaves_the_claim_to_others,
            a_short_claim_says_a_queue_limit_held_it_back,
            seen_forgets_claimers_after_a_day,
            queues_are_those_holding_jobs_or_a_control,
        );
    };
    (throughput, $setup:expr) => {
        $crate::__conformance_tests!($setup; throughput_counts_finished_jobs_per_minute);
    };
    (cancellation, $setup:expr) => {
        $crate::__conformance_tests!(
            $setup;
            cancel_of_a_running_job_is_stored_and_reported,
            cancel_after_success_is_too_late,
            cancel_of_an_expired_lease_ends_cancelled_at_recover,
            progress_is_stored_and_read_back,
            pool_cancels_a_running_job_from_another_connection_within_2s,
            timed_out_attempt_is_retried,
        );
    };

    (workflows, $setup:expr) => {
        $crate::__conformance_tests!(
            $setup;
            workflow_enqueue_stores_waiting_steps,
            workflow_batch_callback_once_when_last_two_race,
            workflow_lost_answer_and_killed_worker_release_once,
            workflow_retried_dependency_releases_children_once,
            workflow_dead_dependency_cancels_and_retry_restores,
            workflow_cancel_and_recover_cascade,
            workflow_results_are_stored_with_the_ack,
            workflow_pool_runs_a_batch_with_results,
            workflow_purge_takes_results_and_steps_with_it,
            workflow_counts_follow_every_change,
        );
    };
    (keys, $setup:expr) => {
        $crate::__conformance_tests!(
            $setup;
            key_limit_leaves_held_back_jobs_untouched,
            key_slots_return_after_recover,
            key_overrides_apply_and_clearing_restores_the_default,
            key_rate_is_a_sliding_window,
            key_concurrency_holds_under_concurrent_claimers,
            keys_take_turns_in_a_rotation,
            plain_and_keyed_jobs_are_merged_by_run_at,
            a_key_that_comes_back_enters_behind_the_waiting_keys,
            keys_report_the_busiest_keys,
            keyed_claims_follow_the_reference_model,
            a_short_claim_says_a_key_limit_held_it_back,
            pool_under_a_key_limit_never_exceeds_it,
        );
    };
    (durable, $setup:expr) => {
        $crate::__conformance_tests!(
            $setup;
            durable_step_survives_an_expired_lease_and_stale_writes_are_refused,
            durable_sleep_holds_no_slot_and_runs_at_its_time,
            durable_signal_sent_before_the_wait_is_taken_once,
            durable_signal_sent_after_the_wait_wakes_the_job_once,
            durable_signal_to_an_unknown_or_finished_job_is_refused,
            durable_signals_not_taken_are_bounded,
            durable_limits_are_refused_alike_on_every_path,
            durable_purge_takes_the_journal_with_it,
            durable_pool_replays_a_killed_run_and_sleeps_to_its_time,
            durable_pool_ends_a_mismatch_dead_and_patches_change_code_safely,
            durable_pool_waits_for_a_signal_or_its_timeout,
        );
    };
    ($other:ident, $setup:expr) => {
        compile_error!(concat!(
            "unknown capability `",
            stringify!($other),
            "`: use roles, periodic, controls, throughput, cancellation, workflows, keys or durable"
        ));
    };
}

/// Implementation detail of [`conformance!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($setup:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::__private::block_on(async {
                    let Some(h) = $crate::__private::harness(($setup)()).await else { return };
                    $crate::scenarios::$name(&h).await;
                    $crate::Harness::cleanup(&h).await;
                });
            }
        )*
    };
}

/// What a conformance setup function may return: a [`Harness`], or
/// `Option<Harness>` whose `None` means the backend's server is not
/// reachable here and the tests were allowed to skip ([`services`]).
pub trait IntoHarness {
    /// The harness inside.
    type Harness: Harness;
    /// The harness, or `None` to skip.
    fn into_harness(self) -> Option<Self::Harness>;
}

impl<H: Harness> IntoHarness for H {
    type Harness = H;
    fn into_harness(self) -> Option<H> {
        Some(self)
    }
}

impl<H: Harness> IntoHarness for Option<H> {
    type Harness = H;
    fn into_harness(self) -> Option<H> {
        self
    }
}

/// Stamps the model-based property tests: `model_matches_reference`, random
/// operation sequences on the backend and on [`MemoryStorage`], compared
/// after every step; and `periodic_matches_reference`, random timelines of
/// pools starting and stopping under a clock that jumps forward
/// ([`periodic_model`]). `$setup` is called once per case (a fresh namespace).
/// Cases default to [`model::DEFAULT_CASES`]; set `PROPTEST_CASES` for more.
#[macro_export]
macro_rules! properties {
    ($setup:expr $(; $($capability:ident),* $(,)?)?) => {
        #[test]
        fn model_matches_reference() {
            if !$crate::__private::reachable(|| ($setup)()) {
                return;
            }
            $crate::model::check(|| ($setup)());
        }
        $($( $crate::__capability_properties!($capability, $setup); )*)?
    };
}

/// Implementation detail of [`properties!`]: the properties of one
/// capability (only periodic jobs have one).
#[doc(hidden)]
#[macro_export]
macro_rules! __capability_properties {
    (periodic, $setup:expr) => {
        #[test]
        fn periodic_matches_reference() {
            if !$crate::__private::reachable(|| ($setup)()) {
                return;
            }
            $crate::periodic_model::check(|| ($setup)());
        }
    };
    (workflows, $setup:expr) => {
        #[test]
        fn workflows_match_reference() {
            if !$crate::__private::reachable(|| ($setup)()) {
                return;
            }
            $crate::workflow_model::check(|| ($setup)());
        }
    };
    ($other:ident, $setup:expr) => {};
}

/// Not public API: what the macros expand to.
#[doc(hidden)]
pub mod __private {
    use std::future::Future;

    use crate::{Harness, IntoHarness};

    /// The harness `setup` made, or `None` to skip the test.
    pub async fn harness<T: IntoHarness>(setup: impl Future<Output = T>) -> Option<T::Harness> {
        setup.await.into_harness()
    }

    /// True when `setup` gives a harness (removing the namespace it made);
    /// false when the test may skip.
    pub fn reachable<T: IntoHarness, Fut: Future<Output = T>>(setup: impl Fn() -> Fut) -> bool {
        block_on(async {
            match harness(setup()).await {
                Some(h) => {
                    h.cleanup().await;
                    true
                }
                None => false,
            }
        })
    }

    /// Runs `future` on a fresh multi-thread runtime, like
    /// `#[tokio::test(flavor = "multi_thread", worker_threads = 4)]`.
    pub fn block_on<F: Future>(future: F) -> F::Output {
        runtime().block_on(future)
    }

    /// The runtime every generated test runs on.
    pub fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot build the tokio runtime of the test: {e}"))
    }
}
