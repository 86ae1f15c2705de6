//! Chaos per backend: worker processes SIGKILLed at random, the server
//! crashed and restarted once, then the checker reads the audit trail and
//! the store. Short by default; `JQ_CHAOS_SOAK=1` for the long run.
//!
//! The tests of this file run one at a time (they share two cores with
//! everything else, and a starved worker only makes noise).

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;
use std::sync::Mutex;

use jq_chaos::Backend;
use jq_chaos::scenario::{ChaosPlan, Env, run_chaos};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn chaos(backend: Backend) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut env = Env::start(backend).await.unwrap_or_else(|e| {
            panic!("cannot start a private {} server: {e}; run scripts/start-services.sh", backend.name())
        });
        let plan = ChaosPlan::from_env();
        let worker = Path::new(env!("CARGO_BIN_EXE_jq-chaos-worker"));
        let outcome = run_chaos(&mut env, worker, &plan).await;
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => panic!("chaos {} could not run: {e}; evidence in {}", backend.name(), env.keep().display()),
        };
        println!("{outcome}");
        let problems = outcome.problems();
        if !problems.is_empty() {
            let dir = env.keep();
            panic!(
                "chaos {} failed:\n  {}\nevidence (audit trail, worker logs) in {}",
                backend.name(),
                problems.join("\n  "),
                dir.display()
            );
        }
    });
}

#[test]
fn chaos_sqlite() {
    chaos(Backend::Sqlite);
}

#[test]
fn chaos_postgres() {
    jq_testkit::needs!(postgres_programs);
    chaos(Backend::Postgres);
}

#[test]
fn chaos_redis() {
    jq_testkit::needs!(redis_programs);
    chaos(Backend::Redis);
}
