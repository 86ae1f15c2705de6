//! The property of periodic jobs: random timelines of pools starting and
//! stopping while the clock moves, sometimes by days, give the same tick
//! jobs and periodic job rows on a backend as one pool's runner on
//! [`MemoryStorage`] that runs whenever any pool runs, and never two jobs
//! for one (periodic job, tick). Stamped by [`properties!`](crate::properties)
//! as `periodic_matches_reference`.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use jq_core::periodic::{MissedPolicy, Periodic, PeriodicRunner};
use jq_core::storage::StorageExt;
use jq_core::{ManualClock, Timestamp};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};

use crate::__private::harness;
use crate::scenarios::periodic::{tick_jobs, tick_periodic};
use crate::{Harness, IntoHarness, MemoryStorage};

/// Cases per run unless `PROPTEST_CASES` says otherwise.
pub const DEFAULT_CASES: u32 = 12;
/// Pools in a timeline.
const POOLS: usize = 4;

/// One step of a timeline; after each, every running pool runs a round at
/// once.
#[derive(Clone, Debug)]
pub enum Step {
    /// The clock moves forward this many seconds.
    Advance(u32),
    /// The clock jumps forward this many seconds (hours to days).
    Jump(u32),
    /// Pool `n` starts when stopped, stops when running.
    Toggle(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (1u32..900).prop_map(Step::Advance),
        1 => (3_600u32..(3 * 86_400)).prop_map(Step::Jump),
        3 => (0..POOLS).prop_map(Step::Toggle),
    ]
}

/// Runs the property on a fresh harness per case.
pub fn check<H, F, Fut>(setup: F)
where
    H: Harness,
    F: Fn() -> Fut,
    Fut: Future,
    Fut::Output: IntoHarness<Harness = H>,
{
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_CASES);
    let mut runner =
        TestRunner::new(Config { cases, max_shrink_iters: 256, failure_persistence: None, ..Config::default() });
    let runtime = crate::__private::runtime();
    let result = runner.run(&prop::collection::vec(step(), 1..40), |steps| {
        runtime.block_on(async {
            let h = harness(setup()).await.expect("the backend was reachable when the test began");
            run_case(&h, &steps).await.map_err(TestCaseError::fail)?;
            h.cleanup().await;
            Ok(())
        })
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, steps)) => {
            let steps: Vec<String> = steps.iter().enumerate().map(|(i, s)| format!("  {i}: {s:?}")).collect();
            panic!(
                "periodic jobs disagree with the reference: {reason}\nsmallest failing timeline:\n{}",
                steps.join("\n")
            )
        }
        Err(TestError::Abort(reason)) => panic!("periodic property aborted: {reason}"),
    }
}

fn declared(case: &str, queue: &str) -> Vec<Periodic> {
    let name = |s: &str| format!("{case}-{s}");
    let cron = |s: &str, expr: &str| Periodic::cron(name(s), expr).expect("cron");
    vec![
        tick_periodic(cron("a", "*/5 * * * *"), &name("a"), queue),
        tick_periodic(
            Periodic::every(name("b"), Duration::from_secs(420)).expect("every").missed(MissedPolicy::All { cap: 3 }),
            &name("b"),
            queue,
        ),
        tick_periodic(
            cron("c", "0 * * * *").zone("Europe/Berlin").expect("zone").missed(MissedPolicy::Skip),
            &name("c"),
            queue,
        ),
        tick_periodic(cron("d", "15 2 * * *").zone("Australia/Sydney").expect("zone"), &name("d"), queue),
    ]
}

async fn run_case<H: Harness>(h: &H, steps: &[Step]) -> Result<(), String> {
    // Close to Berlin's spring-forward night.
    let start = DateTime::parse_from_rfc3339("2026-03-28T20:00:00Z").map_err(|e| e.to_string())?.with_timezone(&Utc);
    let clock = ManualClock::new(start);
    let case = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let queue = format!("cron-p{case}");
    let declared = declared(&case, &queue);
    let mut pools = Vec::new();
    for _ in 0..POOLS {
        pools.push((
            h.connect(clock.clock()).await,
            PeriodicRunner::new(declared.clone()).map_err(|e| e.to_string())?,
            false,
        ));
    }
    pools[0].2 = true;
    let model = MemoryStorage::new().clock(clock.clock());
    let reference = PeriodicRunner::new(declared.clone()).map_err(|e| e.to_string())?;
    let round = async |pools: &Vec<(H::Storage, PeriodicRunner, bool)>| -> Result<(), String> {
        let running: Vec<_> = pools.iter().filter(|p| p.2).map(|(s, sched, _)| sched.run_once(s)).collect();
        if running.is_empty() {
            return Ok(());
        }
        for r in futures::future::join_all(running).await {
            r.map_err(|e| format!("round: {e}"))?;
        }
        reference.run_once(&model).await.map_err(|e| format!("reference round: {e}"))?;
        Ok(())
    };
    round(&pools).await?;
    for (i, step) in steps.iter().enumerate() {
        match *step {
            Step::Advance(s) | Step::Jump(s) => clock.advance(Duration::from_secs(u64::from(s))),
            Step::Toggle(n) => pools[n].2 = !pools[n].2,
        }
        round(&pools).await.map_err(|e| format!("step {i}: {e}"))?;
    }
    let storage = &pools[0].0;
    let got: BTreeSet<(String, Timestamp)> = tick_jobs(storage, &queue).await.into_iter().collect();
    let want: BTreeSet<(String, Timestamp)> = tick_jobs(&model, &queue).await.into_iter().collect();
    if got != want {
        return Err(format!(
            "tick jobs differ: only on the backend {:?}, only in the reference {:?}",
            got.difference(&want).collect::<Vec<_>>(),
            want.difference(&got).collect::<Vec<_>>()
        ));
    }
    let rows = |rows: Vec<jq_core::periodic::PeriodicInfo>| -> Vec<_> {
        rows.into_iter()
            .filter(|r| r.name.starts_with(&case))
            .map(|r| (r.name, r.spec, r.zone, r.cursor, r.missed, r.last_missed))
            .collect()
    };
    let got_rows = rows(storage.require_periodic().expect("periodic").periodic().await.map_err(|e| e.to_string())?);
    let want_rows = rows(model.require_periodic().expect("periodic").periodic().await.map_err(|e| e.to_string())?);
    if got_rows != want_rows {
        return Err(format!("periodic job rows differ:\n backend   {got_rows:?}\n reference {want_rows:?}"));
    }
    Ok(())
}
