//! Runs the built `jqctl` against PostgreSQL (feature `postgres`), each test
//! in a fresh schema (`?schema=` in the URL). The server comes from
//! `JQ_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`);
//! without one the tests skip, saying so once, or fail under
//! `JQ_REQUIRE_SERVICES=1` (`jq_testkit::services`).

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::sync::atomic::{AtomicU32, Ordering};

use common::{Store, refused};

fn server_url() -> String {
    jq_testkit::services::postgres_url()
}

/// A fresh, migrated schema; dropped by [`cleanup`] when the test passed.
/// `None` (skip) when no server answers.
fn setup() -> Option<Store> {
    jq_testkit::services::postgres()?;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let schema = format!("jqctl_{}_{}_{nanos}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let s = Store::with_url(format!("{}?schema={schema}", server_url()));
    let out = s.cmd().arg("migrate").output().unwrap();
    assert!(
        out.status.success(),
        "PostgreSQL at {} is not usable; run scripts/start-services.sh (or set JQ_POSTGRES_URL): {}",
        server_url(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(s)
}

/// Drops the test's schema (best effort: psql may be missing).
fn cleanup(s: &Store) {
    let schema = s.url.rsplit_once("schema=").map(|(_, name)| name.to_owned()).unwrap();
    let _ = std::process::Command::new("psql")
        .args([server_url().as_str(), "-q", "-c", &format!("DROP SCHEMA IF EXISTS {schema} CASCADE")])
        .output();
}

macro_rules! postgres_scenarios {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            let Some(s) = setup() else { return };
            common::scenarios::$name(&s);
            cleanup(&s);
        }
    )*};
}

postgres_scenarios!(
    enqueue_then_get,
    workflow_show_and_get_show_the_graph_and_the_result,
    unique_key_returns_the_live_job,
    unique_rules_from_the_command_line,
    list_and_stats_agree,
    cancel_says_what_happened,
    cancel_stops_a_running_command_and_its_children,
    failing_job_ends_dead_and_dead_retry_brings_it_back,
    dead_retry_all_retries_only_dead_jobs_of_the_queue,
    worker_runs_the_command_with_payload_and_environment,
    a_nul_in_a_commands_stderr_is_recorded,
    purge_removes_only_what_it_says,
    leaders_shows_the_maintaining_worker,
    cron_list_and_run,
    queue_pause_resume_and_limit,
    queue_keys_limits_and_report,
    metrics_endpoints_serve_gauges_and_counters,
    serve_dashboard_guards_its_address,
    serve_http_api_beside_the_dashboard,
);

#[test]
fn bad_input_is_refused_and_nothing_stored() {
    let Some(s) = setup() else { return };
    refused(&s, &["enqueue", "k", "{not json"], 2, "payload is not valid JSON");
    refused(&s, &["enqueue", "k", "{}", "--queue", "a b"], 2, "queue name \"a b\" is invalid");
    refused(&s, &["get", "0190c3a2-7b1e-7c3d-9a4f-2b8e1d6f0a11"], 2, "not found");
    assert_eq!(s.total_jobs(), 0);
    cleanup(&s);
}

#[test]
fn migrate_is_idempotent_and_an_unmigrated_schema_says_what_to_do() {
    let Some(s) = setup() else { return };
    assert!(s.ok(&["migrate"]).contains("applied 0 migration(s)"));
    cleanup(&s);
    let fresh = Store::with_url(format!("{}?schema=jqctl_never_migrated", server_url()));
    refused(&fresh, &["stats"], 1, "jqctl migrate");
}

#[test]
fn an_unreachable_server_exits_1_and_says_so() {
    let s = Store::with_url("postgres://postgres@127.0.0.1:1/postgres".to_owned());
    refused(&s, &["enqueue", "k", "{}"], 1, "unavailable");
}

/// The password of `--url` never reaches the terminal.
#[test]
fn the_password_of_the_url_is_never_printed() {
    for url in ["postgres://postgres:s3cret-pw@127.0.0.1:1/postgres", "postgres://u:s3cret-pw@127.0.0.1:x/postgres"] {
        let s = Store::with_url(url.to_owned());
        let out = s.cmd().args(["enqueue", "k", "{}"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && !stderr.contains("s3cret"), "{url}: {stderr}");
    }
}

#[test]
fn a_worker_on_an_unmigrated_schema_stops_by_itself_and_says_what_to_do() {
    jq_testkit::needs!(postgres);
    let fresh = Store::with_url(format!("{}?schema=jqctl_never_migrated", server_url()));
    let mut worker = fresh.worker(&["--exec", "true"]);
    let child = worker.0.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let out = rx.recv_timeout(common::DEADLINE).expect("the worker did not stop by itself").unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("jqctl migrate"), "{stderr}");
}
