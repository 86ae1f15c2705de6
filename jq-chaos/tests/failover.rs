//! PostgreSQL failover during a drain (private servers): a primary and its
//! streaming replica, jq connected to both by one multi-host URL with
//! `target_session_attrs=read-write`; mid-drain the replica falls 300 ms
//! behind, the primary crashes and the replica is promoted (or the primary
//! is made read-only with jq's connections open, then the replica
//! promoted). jq notices the server gone or read-only (SQLSTATE 25006),
//! finds the new primary and goes on; no worker exits.
//!
//! - synchronous replication: nothing acknowledged is lost (lost = 0),
//!   every repeated run is explained by the lease rule;
//! - asynchronous replication: what the failover undid (enqueues and acks
//!   of the last instants) is counted and printed; every job the new
//!   primary has completes, every repeated run is explained.
//!
//! The times (crash to promotion, promotion to the first ack on the new
//! primary) and the counts are printed (`--nocapture`), never asserted.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;
use std::sync::Mutex;

use jq_chaos::failover::{FailoverPlan, Fall, PgPair, Replication, Route, run_failover};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn failover(replication: Replication, fall: Fall, route: Route) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let _ = tracing_subscriber::fmt().with_env_filter("warn").with_ansi(false).with_test_writer().try_init();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let worker = Path::new(env!("CARGO_BIN_EXE_jq-chaos-worker"));
        let mut pair = PgPair::start(replication).await.unwrap_or_else(|e| {
            panic!("cannot start a private primary and replica: {e}; run scripts/start-services.sh")
        });
        let dir = tempfile::Builder::new().prefix("jq-chaos-failover").tempdir().unwrap();
        let (env, outcome) = match run_failover(&mut pair, fall, route, dir, worker, &FailoverPlan::ci()).await {
            Ok(o) => o,
            Err(e) => panic!(
                "failover drain ({}, {}) could not run: {e}; primary log {}, replica log {}",
                replication.name(),
                fall.name(),
                pair.primary.log_path().display(),
                pair.replica.log_path().display()
            ),
        };
        println!("{outcome}");
        let problems = outcome.problems();
        if !problems.is_empty() {
            let dir = env.keep();
            panic!(
                "failover drain ({}, {}) failed:\n  {}\nevidence (audit trail, worker logs) in {}",
                replication.name(),
                fall.name(),
                problems.join("\n  "),
                dir.display()
            );
        }
    });
}

#[test]
fn failover_synchronous_crash() {
    jq_testkit::needs!(postgres_programs);
    failover(Replication::Synchronous, Fall::Crash, Route::Hosts);
}

#[test]
fn failover_asynchronous_crash() {
    jq_testkit::needs!(postgres_programs);
    failover(Replication::Asynchronous, Fall::Crash, Route::Hosts);
}

/// The old primary stays up, read-only, with jq's connections open: each
/// write on them answers SQLSTATE 25006 until jq drops them.
#[test]
fn failover_synchronous_demote() {
    jq_testkit::needs!(postgres_programs);
    failover(Replication::Synchronous, Fall::Demote, Route::Hosts);
}

/// The same through one address the operator moves to the new primary
/// (a single-host URL): the connections left on the read-only old primary
/// answer 25006 and are dropped; new ones reach the new primary.
#[test]
fn failover_synchronous_demote_through_a_moved_address() {
    jq_testkit::needs!(postgres_programs);
    failover(Replication::Synchronous, Fall::Demote, Route::Proxy);
}
