//! Load per backend: concurrent producers and one worker process for a
//! fixed time (10 s; `JQ_CHAOS_SOAK=1`: 5 min), the worker's resident memory
//! sampled every 250 ms. No errors, every job Completed, and no gross
//! memory growth; the figures are printed (measured, not asserted finely).

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;
use std::sync::Mutex;

use jq_chaos::Backend;
use jq_chaos::scenario::{Env, LoadPlan, run_load};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn load(backend: Backend) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut env = Env::start(backend).await.unwrap_or_else(|e| {
            panic!("cannot start a private {} server: {e}; run scripts/start-services.sh", backend.name())
        });
        let worker = Path::new(env!("CARGO_BIN_EXE_jq-chaos-worker"));
        let outcome = match run_load(&mut env, worker, &LoadPlan::from_env()).await {
            Ok(o) => o,
            Err(e) => panic!("load {} could not run: {e}; evidence in {}", backend.name(), env.keep().display()),
        };
        println!("{outcome}");
        let problems = outcome.problems();
        if !problems.is_empty() {
            let dir = env.keep();
            panic!("load {} failed:\n  {}\nevidence in {}", backend.name(), problems.join("\n  "), dir.display());
        }
    });
}

#[test]
fn load_sqlite() {
    load(Backend::Sqlite);
}

#[test]
fn load_postgres() {
    jq_testkit::needs!(postgres_programs);
    load(Backend::Postgres);
}

#[test]
fn load_redis() {
    jq_testkit::needs!(redis_programs);
    load(Backend::Redis);
}
