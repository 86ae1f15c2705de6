//! Drains under connection trouble, per backend (private servers):
//!
//! - a storm: every jq connection ended every 100 ms for a minute
//!   (`pg_terminate_backend`, Redis `CLIENT KILL`);
//! - a starve: every connection slot of the server taken by other clients
//!   for 8 s (PostgreSQL's `max_connections`, Redis's `maxclients`), jq's
//!   connections ended so that it needs new ones, then the slots freed.
//!
//! Each drain completes with nothing lost, every repeated run explained by
//! the lease rule, no worker exits; a starved worker says why it waits.
//! The figures are printed (`--nocapture`), never asserted.
//! `JQ_CHAOS_BASELINE=1` runs each drain without its attack too, for the
//! comparison; `JQ_CHAOS_UPFRONT=1` enqueues every job before the workers
//! start; `JQ_CHAOS_STORM_SECS` sets the storm's length.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;
use std::sync::Mutex;

use jq_chaos::Backend;
use jq_chaos::scenario::Env;
use jq_chaos::servers::PgServer;
use jq_chaos::storm::{Attack, DrainPlan, run_drain};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// PostgreSQL's `max_connections` for the starve: few slots to take. Two
/// workers hold at most 2 x 7 (pool 4, claims 2, listener 1), their
/// heartbeats 2 x 3, the producer 7.
const STARVE_MAX_CONNECTIONS: u32 = 40;

fn baseline() -> bool {
    std::env::var("JQ_CHAOS_BASELINE").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn drain(backend: Backend, plan: DrainPlan, attack: Attack, pg_max_connections: u32) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // The producer's own warnings (its storage is attacked too).
    let _ = tracing_subscriber::fmt().with_env_filter("warn").with_ansi(false).with_test_writer().try_init();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let worker = Path::new(env!("CARGO_BIN_EXE_jq-chaos-worker"));
        let attacks = if baseline() { vec![Attack::None, attack] } else { vec![attack] };
        for attack in attacks {
            let mut env = Env::start_with(backend, pg_max_connections).await.unwrap_or_else(|e| {
                panic!("cannot start a private {} server: {e}; run scripts/start-services.sh", backend.name())
            });
            let outcome = match run_drain(&mut env, worker, &plan, attack).await {
                Ok(o) => o,
                Err(e) => panic!(
                    "drain {} under {} could not run: {e}; evidence in {}",
                    backend.name(),
                    attack.name(),
                    env.keep().display()
                ),
            };
            println!("{outcome}");
            let problems = outcome.problems();
            if !problems.is_empty() {
                let dir = env.keep();
                panic!(
                    "drain {} under {} failed:\n  {}\nevidence (audit trail, worker logs) in {}",
                    backend.name(),
                    attack.name(),
                    problems.join("\n  "),
                    dir.display()
                );
            }
        }
    });
}

#[test]
fn storm_postgres() {
    jq_testkit::needs!(postgres_programs);
    let attack = Attack::storm();
    drain(Backend::Postgres, DrainPlan::for_storm(attack), attack, PgServer::DEFAULT_MAX_CONNECTIONS);
}

#[test]
fn storm_redis() {
    jq_testkit::needs!(redis_programs);
    let attack = Attack::storm();
    drain(Backend::Redis, DrainPlan::for_storm(attack), attack, PgServer::DEFAULT_MAX_CONNECTIONS);
}

#[test]
fn starve_postgres() {
    jq_testkit::needs!(postgres_programs);
    drain(Backend::Postgres, DrainPlan::for_starve(), Attack::starve(), STARVE_MAX_CONNECTIONS);
}

#[test]
fn starve_redis() {
    jq_testkit::needs!(redis_programs);
    drain(Backend::Redis, DrainPlan::for_starve(), Attack::starve(), PgServer::DEFAULT_MAX_CONNECTIONS);
}

/// A storage call on a server with no slot left fails, once its pool's
/// acquire timeout is out, with the retryable `NoConnectionLeft`, which
/// says why; once the slots are freed, calls succeed again.
#[test]
fn starved_postgres_call_says_why() {
    jq_testkit::needs!(postgres_programs);
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        use jq_chaos::Target;
        use jq_chaos::storm::PgHog;
        use jq_core::Error;
        use jq_core::storage::Storage;
        use jq_postgres::{PostgresConfig, PostgresError, PostgresStorage};

        let env = Env::start_with(Backend::Postgres, 20).await.unwrap();
        let Target::Postgres { url, schema } = &env.target else { unreachable!() };
        let config = PostgresConfig::new(url.clone())
            .schema(schema.clone())
            .acquire_timeout(std::time::Duration::from_millis(1500));
        let storage = PostgresStorage::connect(config).await.unwrap();
        storage.stats().await.unwrap();

        let mut hog = PgHog::open(url).await.unwrap();
        let mut said = None;
        // The pool's connections were ended: a call may first meet one of
        // them closed; the next ones find no slot.
        for _ in 0..10 {
            hog.take_all().await.unwrap();
            hog.end_jq().await.unwrap();
            hog.take_all().await.unwrap();
            match storage.stats().await {
                Err(Error::Unavailable { source, .. })
                    if matches!(
                        source.downcast_ref::<PostgresError>(),
                        Some(PostgresError::NoConnectionLeft { .. })
                    ) =>
                {
                    said = Some(source.to_string());
                    break;
                }
                Err(e) => assert!(e.is_retryable(), "a starved call failed with a non-retryable error: {e}"),
                Ok(_) => {}
            }
        }
        let said = said.expect("no call said that the server has no connection left");
        assert!(said.contains("no connection left"), "{said}");
        println!("a starved call says: {said}");

        hog.free().await;
        let mut back = false;
        for _ in 0..10 {
            if storage.stats().await.is_ok() {
                back = true;
                break;
            }
        }
        assert!(back, "no call succeeded after the slots were freed");
    });
}
