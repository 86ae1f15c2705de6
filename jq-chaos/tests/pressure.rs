//! Hours under pressure, PostgreSQL (a private server): a steady enqueue
//! rate at half the drain rate through phases of an idle-in-transaction
//! session holding the xmin horizon and of four REPEATABLE READ readers
//! scanning the jobs, with clean time between. Every job runs exactly once;
//! the table per bucket (jobs/s, pickup p50/p99, dead tuples, sizes) and per
//! phase is printed (`--nocapture`), never asserted.
//!
//! The short run takes 75 s (phases of 15 s); `JQ_PRESSURE_PHASE_MINUTES=24`
//! runs the two hours of BENCHMARKS.md (`--release`), `JQ_PRESSURE_RATE`
//! fixes the enqueue rate.

#![allow(clippy::unwrap_used)] // tests may unwrap

use jq_chaos::Backend;
use jq_chaos::pressure::{PressurePlan, run_pressure};
use jq_chaos::scenario::Env;

#[test]
fn pressure_postgres() {
    jq_testkit::needs!(postgres_programs);
    let _ = tracing_subscriber::fmt().with_env_filter("warn").with_ansi(false).with_test_writer().try_init();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let env = Env::start(Backend::Postgres)
            .await
            .unwrap_or_else(|e| panic!("cannot start a private PostgreSQL server: {e}; run scripts/start-services.sh"));
        let outcome = match run_pressure(&env, &PressurePlan::from_env()).await {
            Ok(o) => o,
            Err(e) => panic!("the pressure run could not run: {e}; evidence in {}", env.keep().display()),
        };
        println!("{outcome}");
        let problems = outcome.problems();
        assert!(problems.is_empty(), "pressure postgres: {problems:?}\n{outcome}");
    });
}
