//! Runs the built `jqctl` against a SQLite file in a temp dir.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Store, refused};

/// One `#[test]` per shared scenario, each on a fresh SQLite file.
macro_rules! sqlite_scenarios {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            common::scenarios::$name(&Store::sqlite());
        }
    )*};
}

sqlite_scenarios!(
    enqueue_then_get,
    workflow_show_and_get_show_the_graph_and_the_result,
    enqueue_reads_payload_from_file_and_stdin_and_delays,
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
fn bad_input_is_refused_with_exit_2_and_nothing_stored() {
    let s = Store::sqlite();
    refused(&s, &["enqueue", "k", "{not json"], 2, "payload is not valid JSON");
    refused(&s, &["enqueue", "k", "{}", "--queue", "a b"], 2, "queue name \"a b\" is invalid");
    refused(&s, &["enqueue", "k", "@missing.json"], 2, "cannot read the payload file");
    refused(&s, &["enqueue", "k", "--delay", "-5s"], 2, "negative");
    refused(&s, &["enqueue", "k", "--delay", "soon"], 2, "is not a duration");
    refused(&s, &["enqueue", "k", "--delay", "30"], 2, "no unit");
    refused(&s, &["enqueue", "k", "--run-at", "tomorrow"], 2, "RFC 3339");
    refused(&s, &["enqueue", "k", "--priority", "urgent"], 2, "use low, normal, high or critical");
    refused(&s, &["enqueue", "k", "--max-attempts", "0"], 2, "--max-attempts");
    refused(&s, &["enqueue", "", "{}"], 2, "invalid kind");
    refused(&s, &["purge", "--state", "dead", "--older-than", "-1d"], 2, "negative");
    refused(&s, &["get", "not-an-id"], 2, "is not a job id");
    refused(&s, &["worker", "--exec", "/nonexistent/handler"], 2, "not found");
    refused(&s, &["worker", "--timeout", "0s", "--exec", "true"], 2, "zero");
    // None of these created the database, let alone stored a job.
    assert!(!s.db().exists(), "bad input must not touch the store");

    refused(&s, &["get", "0190c3a2-7b1e-7c3d-9a4f-2b8e1d6f0a11"], 2, "not found");
    refused(&s, &["cancel", "0190c3a2-7b1e-7c3d-9a4f-2b8e1d6f0a11"], 2, "not found");
    refused(&s, &["dead", "retry", "0190c3a2-7b1e-7c3d-9a4f-2b8e1d6f0a11"], 2, "not found");
    assert_eq!(s.total_jobs(), 0);
}

#[test]
fn bad_urls_say_what_to_do() {
    let s = Store::sqlite();
    let missing_dir = s.dir.path().join("no/such/dir/jq.db");
    let mut cmd = s.cmd();
    cmd.env("JQ_URL", format!("sqlite://{}", missing_dir.display())).args(["stats"]);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    assert!(!Path::new(&s.dir.path().join("no")).exists());

    refused(&s, &["stats", "--url", "mysql://localhost/jobs"], 2, "unsupported backend URL");
    #[cfg(not(feature = "postgres"))]
    refused(&s, &["stats", "--url", "postgres://127.0.0.1:1/x"], 2, "--features postgres");
    #[cfg(feature = "postgres")]
    refused(&s, &["stats", "--url", "postgres://postgres@127.0.0.1:1/postgres"], 1, "unavailable");
    #[cfg(not(feature = "redis"))]
    refused(&s, &["stats", "--url", "redis://127.0.0.1:1"], 2, "--features redis");
    #[cfg(feature = "redis")]
    refused(&s, &["stats", "--url", "redis://127.0.0.1:1"], 1, "cannot connect to Redis");
}

#[test]
fn help_explains_exit_codes_and_max_attempts() {
    let s = Store::sqlite();
    let help = s.ok(&["--help"]);
    assert!(help.contains("Exit codes") && help.contains("sqlite://jq.db"), "{help}");
    let help = s.ok(&["enqueue", "--help"]);
    assert!(help.contains("Runs allowed in all") && !help.contains("max-retries"), "{help}");
    let help = s.ok(&["worker", "--help"]);
    assert!(help.contains("JQ_JOB_ATTEMPT") && help.contains("78"), "{help}");
    assert_eq!(s.ok(&["migrate"]).lines().count(), 1);
}

#[test]
fn sigterm_lets_running_commands_finish_or_hands_their_jobs_back() {
    let s = Store::sqlite();
    // Within the grace: the running command finishes and its job completes.
    let quick = s.enqueue(&["k", "--max-attempts", "1"]);
    let worker = s.worker(&["--exec", "sh", "-c", "sleep 1"]);
    s.wait_for_state(&quick, "running");
    worker.stop();
    assert_eq!(s.state(&quick), "completed");

    // Past the grace: the command is killed and the job handed back, its attempt not counted.
    let slow = s.enqueue(&["k", "--max-attempts", "1"]);
    let worker = s.worker(&["--shutdown-grace", "0s", "--exec", "sh", "-c", "sleep 30"]);
    s.wait_for_state(&slow, "running");
    let started = std::time::Instant::now();
    worker.stop();
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "the command was not killed");
    let job = s.json(&["get", &slow]);
    assert_eq!(job["state"], "pending", "{job:#}");
    assert_eq!(job["attempts"], 0, "{job:#}");
    assert_eq!(job["errors"], serde_json::json!([]));
}

/// A durable job whose first run recorded a step and then waits for a
/// signal (written through the library, as a durable handler's run does):
/// `jqctl get` shows the journal and what the job waits for, `jqctl
/// signal` wakes it (Pending), `get --json` lists the signal until it is
/// taken, and a signal to a finished or unknown job is refused (exit 2).
#[test]
fn signal_wakes_a_waiting_job_and_get_shows_its_journal() {
    use jq::durable::{Record, Suspend, Suspended};
    use jq::storage::{ClaimRequest, Outcome, Storage, StorageExt};

    let s = Store::sqlite();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let id = runtime.block_on(async {
        let client = jq::connect(&s.url).await.unwrap();
        let storage = client.storage();
        let job = jq::NewJob::builder("order", jq::Payload::from_json("{}").unwrap()).queue("orders").build().unwrap();
        let id = storage.enqueue_one(job).await.unwrap();
        let request = ClaimRequest::new(vec![jq::QueueName::new("orders").unwrap()], 1, Duration::from_secs(30), "t");
        let lease = storage.claim(&request).await.unwrap().jobs[0].lease_ref().unwrap();
        let durable = storage.require_durable().unwrap();
        durable
            .checkpoint(lease, &Record::step(0, "charge", jq::Payload::from_json("\"ch_1\"").unwrap()))
            .await
            .unwrap();
        let until = jq::storage::add(storage.clock().now(), Duration::from_secs(3_600));
        let wait = Suspend::Wait { index: 1, name: "approved".into(), until };
        assert_eq!(durable.suspend(lease, &wait).await.unwrap(), Suspended::Waiting);
        id.to_string()
    });
    let shown = s.ok(&["get", &id]);
    assert!(shown.contains("journal") && shown.contains("step \"charge\": \"ch_1\""), "{shown}");
    assert!(shown.contains("waits for") && shown.contains("signal \"approved\""), "{shown}");

    assert!(s.ok(&["signal", &id, "approved", "--payload", "{\"by\":\"ops\"}"]).contains("signal \"approved\" sent"));
    assert_eq!(s.state(&id), "pending", "the signal woke the wait");
    let json = s.json(&["get", &id]);
    assert_eq!(json["journal"]["entries"][0]["name"], "charge");
    assert_eq!(json["journal"]["signals"][0]["name"], "approved", "kept until the wait takes it");

    refused(&s, &["signal", &id, "approved", "--payload", "{oops"], 2, "not valid JSON");
    refused(&s, &["signal", "0190c3a2-7b1e-7c3d-9a4f-2b8e1d6f0a11", "approved"], 2, "not found");
    runtime.block_on(async {
        let client = jq::connect(&s.url).await.unwrap();
        let storage = client.storage();
        let request = ClaimRequest::new(vec![jq::QueueName::new("orders").unwrap()], 1, Duration::from_secs(30), "t");
        let lease = storage.claim(&request).await.unwrap().jobs[0].lease_ref().unwrap();
        storage.settle_one(lease, Outcome::Ack).await.unwrap();
    });
    refused(&s, &["signal", &id, "approved"], 2, "cannot signal");
}
