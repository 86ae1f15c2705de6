//! Runs the built `jqctl` against Redis (feature `redis`), each test under a
//! fresh key prefix (`?prefix=` in the URL). The server comes from
//! `JQ_REDIS_URL` (default `redis://127.0.0.1:6379`); without one the tests
//! skip, saying so once, or fail under `JQ_REQUIRE_SERVICES=1`
//! (`jq_testkit::services`).

#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::sync::atomic::{AtomicU32, Ordering};

use common::{Store, refused};

fn server_url() -> String {
    jq_testkit::services::redis_url()
}

/// A fresh key prefix; its keys are deleted by [`cleanup`] when the test
/// passed. `None` (skip) when no server answers.
fn setup() -> Option<Store> {
    jq_testkit::services::redis()?;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let prefix = format!("jqctl_{}_{}_{nanos}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let s = Store::with_url(format!("{}?prefix={prefix}", server_url()));
    let out = s.cmd().arg("stats").output().unwrap();
    assert!(
        out.status.success(),
        "Redis at {} is not usable; run scripts/start-services.sh (or set JQ_REDIS_URL): {}",
        server_url(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(s)
}

/// Deletes the test's keys (best effort: redis-cli may be missing).
fn cleanup(s: &Store) {
    let prefix = s.url.rsplit_once("prefix=").map(|(_, p)| p.to_owned()).unwrap();
    let script = format!("redis-cli -u \"$1\" --scan --pattern '{prefix}:*' | xargs -r redis-cli -u \"$1\" DEL");
    let _ = std::process::Command::new("sh").args(["-c", &script, "sh", &server_url()]).output();
}

macro_rules! redis_scenarios {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            let Some(s) = setup() else { return };
            common::scenarios::$name(&s);
            cleanup(&s);
        }
    )*};
}

redis_scenarios!(
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
    assert!(s.ok(&["migrate"]).contains("nothing to do"));
    refused(&s, &["stats", "--url", "redis://127.0.0.1?prefix=a{b"], 2, "invalid key prefix");
    cleanup(&s);
}

#[test]
fn an_unreachable_server_exits_1_and_says_so() {
    let s = Store::with_url("redis://127.0.0.1:1".to_owned());
    let out = s.cmd().args(["enqueue", "k", "{}"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect to Redis at redis://127.0.0.1:1"));
}

/// The password of `--url` never reaches the terminal (or the log it is
/// copied into).
#[test]
fn the_password_of_the_url_is_never_printed() {
    let s = Store::with_url("redis://:s3cret-pw@127.0.0.1:1".to_owned());
    let out = s.cmd().args(["enqueue", "k", "{}"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("redis://:***@127.0.0.1:1") && !stderr.contains("s3cret"), "{stderr}");
    let s = Store::with_url("rediss://:s3cret-pw@127.0.0.1:1/%%".to_owned());
    let out = s.cmd().args(["stats"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && !stderr.contains("s3cret"), "{stderr}");
}
