//! Helpers and backend-independent scenarios for the tests that run the
//! built `jqctl` (against SQLite in `cli.rs`, PostgreSQL in `postgres.rs`).
//!
//! The worker scenarios run a real worker process; they wait for job states by
//! polling `jqctl get --json` with a bounded deadline (the worker is another
//! process: there is no clock to inject), then stop it with SIGTERM.

// Each test binary uses a different subset of the helpers.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::prelude::*;
use predicates::prelude::*;
use serde_json::Value;

/// How long a worker test waits for a job to reach a state.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Where one test's jobs live, and a temp dir for its files.
pub struct Store {
    /// Files of the test (the SQLite file, payload files, worker output).
    pub dir: tempfile::TempDir,
    /// The backend URL every command gets in JQ_URL.
    pub url: String,
}

impl Store {
    /// A fresh SQLite file in a temp dir.
    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("jq.db").display());
        Store { dir, url }
    }

    /// A temp dir for files, and `url` for the jobs.
    pub fn with_url(url: String) -> Self {
        Store { dir: tempfile::tempdir().unwrap(), url }
    }

    /// The SQLite file of [`Store::sqlite`].
    pub fn db(&self) -> PathBuf {
        self.dir.path().join("jq.db")
    }

    pub fn cmd(&self) -> Command {
        let mut cmd = Command::cargo_bin("jqctl").unwrap();
        cmd.env("JQ_URL", &self.url).env_remove("RUST_LOG").current_dir(self.dir.path());
        cmd
    }

    /// Runs `args`, asserts success, returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().unwrap();
        assert!(out.status.success(), "jqctl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs `args` with `--json`, asserts success, parses stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        serde_json::from_str(&self.ok(&all)).unwrap()
    }

    pub fn enqueue(&self, args: &[&str]) -> String {
        let mut all = vec!["enqueue"];
        all.extend_from_slice(args);
        self.ok(&all).trim().to_owned()
    }

    pub fn state(&self, id: &str) -> String {
        self.json(&["get", id])["state"].as_str().unwrap().to_owned()
    }

    pub fn total_jobs(&self) -> u64 {
        self.json(&["stats"])["total"]["total"].as_u64().unwrap()
    }

    /// Polls until job `id` is in `state`, or panics with the job after DEADLINE.
    pub fn wait_for_state(&self, id: &str, state: &str) -> Value {
        let start = Instant::now();
        loop {
            let job = self.json(&["get", id]);
            if job["state"] == state {
                return job;
            }
            assert!(start.elapsed() < DEADLINE, "job {id} did not become {state} within {DEADLINE:?}: {job:#}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn worker(&self, args: &[&str]) -> Worker {
        let child = self.cmd().arg("worker").args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        Worker(Some(child))
    }
}

/// A worker process; killed if the test fails before stopping it.
pub struct Worker(pub Option<Child>);

impl Worker {
    /// Sends SIGTERM and waits (bounded) for a clean exit; returns its output.
    pub fn stop(mut self) -> Output {
        let child = self.0.take().unwrap();
        let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
        assert!(status.success());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(child.wait_with_output()));
        let out = rx.recv_timeout(DEADLINE).expect("worker did not exit after SIGTERM").unwrap();
        assert!(out.status.success(), "worker exited with {}: {}", out.status, String::from_utf8_lossy(&out.stderr));
        out
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `args`, expects exit `code` and `needle` in stderr, and nothing on stdout.
pub fn refused(s: &Store, args: &[&str], code: i32, needle: &str) {
    let out = s.cmd().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "jqctl {args:?}: {stderr}");
    assert!(stderr.contains(needle), "jqctl {args:?}: {needle:?} not in {stderr}");
    assert!(out.stdout.is_empty(), "jqctl {args:?} printed {:?}", String::from_utf8_lossy(&out.stdout));
}

/// Scenarios every backend passes; each takes a store with no jobs.
pub mod scenarios {
    use super::*;

    pub fn enqueue_then_get(s: &Store) {
        let id = s.enqueue(&[
            "send_email",
            r#"{"to":"a@example.com","n":12345678901234567890}"#,
            "--queue",
            "mail",
            "--priority",
            "high",
            "--max-attempts",
            "3",
        ]);
        let job = s.json(&["get", &id]);
        assert_eq!(job["id"], id.as_str());
        assert_eq!(job["queue"], "mail");
        assert_eq!(job["kind"], "send_email");
        assert_eq!(job["state"], "pending");
        assert_eq!(job["priority"], "high");
        assert_eq!(job["attempts"], 0);
        assert_eq!(job["max_attempts"], 3);
        assert_eq!(job["errors"], serde_json::json!([]));
        // The payload is reproduced as stored, big integer included.
        let raw = s.ok(&["get", &id, "--json"]);
        assert!(raw.contains("12345678901234567890"), "{raw}");

        let human = s.ok(&["get", &id]);
        for needle in ["send_email", "pending", "0 of 3", "a@example.com", "errors       none"] {
            assert!(human.contains(needle), "{needle:?} missing from:\n{human}");
        }
    }

    pub fn enqueue_reads_payload_from_file_and_stdin_and_delays(s: &Store) {
        std::fs::write(s.dir.path().join("p.json"), r#"{"from":"file"}"#).unwrap();
        let from_file = s.enqueue(&["k", "@p.json"]);
        assert_eq!(s.json(&["get", &from_file])["payload"]["from"], "file");

        let out = assert_cmd::Command::from_std(s.cmd())
            .args(["enqueue", "k", "-"])
            .write_stdin(r#"{"from":"stdin"}"#)
            .output()
            .unwrap();
        assert!(out.status.success());
        let from_stdin = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        assert_eq!(s.json(&["get", &from_stdin])["payload"]["from"], "stdin");

        let delayed = s.enqueue(&["k", "--delay", "1h"]);
        assert_eq!(s.state(&delayed), "scheduled");
        let at = s.enqueue(&["k", "--run-at", "2999-01-01T00:00:00Z", "--max-attempts", "1"]);
        let job = s.json(&["get", &at]);
        assert_eq!(job["state"], "scheduled");
        assert_eq!(job["max_attempts"], 1);
        assert!(job["run_at"].as_str().unwrap().starts_with("2999-01-01T00:00:00"));
    }

    pub fn unique_key_returns_the_live_job(s: &Store) {
        let first = s.json(&["enqueue", "k", "--unique-key", "report-42"]);
        assert_eq!(first["created"], true);
        let out = s.cmd().args(["enqueue", "k", "--unique-key", "report-42"]).output().unwrap();
        assert!(out.status.success());
        assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), first["id"].as_str().unwrap());
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains("already has unique key") && stderr.contains("nothing new was stored"), "{stderr}");
        assert_eq!(s.total_jobs(), 1);
        // Another queue is another namespace.
        let other = s.json(&["enqueue", "k", "--unique-key", "report-42", "--queue", "other"]);
        assert_eq!(other["created"], true);
    }

    /// --debounce and --replace give the waiting job of the key the new
    /// payload; --unique-for keeps the key taken; the flags need
    /// --unique-key (clap refuses them without it).
    pub fn unique_rules_from_the_command_line(s: &Store) {
        let first = s.json(&["enqueue", "k", r#"{"v":1}"#, "--unique-key", "doc", "--debounce", "1h"]);
        assert_eq!(first["created"], true);
        let id = first["id"].as_str().unwrap().to_owned();
        assert_eq!(s.state(&id), "scheduled", "runs after its window");
        let out =
            s.cmd().args(["enqueue", "k", r#"{"v":2}"#, "--unique-key", "doc", "--debounce", "1h"]).output().unwrap();
        assert!(out.status.success());
        assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), id);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains("took this payload"), "{stderr}");
        assert_eq!(s.json(&["get", &id])["payload"]["v"], 2);
        s.ok(&["enqueue", "k", r#"{"v":3}"#, "--unique-key", "doc", "--replace"]);
        let job = s.json(&["get", &id]);
        assert_eq!(
            (job["payload"]["v"].as_u64(), job["state"].as_str()),
            (Some(3), Some("pending")),
            "replaced, due now"
        );
        let period = s.json(&["enqueue", "k", "--unique-key", "daily", "--unique-for", "1d"]);
        s.ok(&["cancel", period["id"].as_str().unwrap()]);
        let again = s.json(&["enqueue", "k", "--unique-key", "daily", "--unique-for", "1d"]);
        assert_eq!((again["created"].as_bool(), again["id"].as_str()), (Some(false), period["id"].as_str()));
        assert_eq!(s.total_jobs(), 2);
        for flags in [&["--debounce", "1s"][..], &["--unique-for", "1s"], &["--replace"]] {
            let out = s.cmd().args(["enqueue", "k"]).args(flags).output().unwrap();
            assert_eq!(out.status.code(), Some(2), "{flags:?} without --unique-key");
        }
        assert_eq!(s.total_jobs(), 2);
    }

    pub fn list_and_stats_agree(s: &Store) {
        let mut ids = Vec::new();
        for queue in ["a", "a", "a", "b", "b"] {
            ids.push(s.enqueue(&["k", "--queue", queue]));
        }
        s.enqueue(&["other", "--queue", "b", "--delay", "1h"]);
        s.ok(&["cancel", &ids[0]]);

        let stats = s.json(&["stats"]);
        let all = s.json(&["list"]);
        let all = all.as_array().unwrap();
        assert_eq!(all.len(), 6);
        assert_eq!(stats["total"]["total"], 6);
        for queue in ["a", "b"] {
            for state in jq::State::ALL.map(jq::State::as_str) {
                let listed = s.json(&["list", "--queue", queue, "--state", state]).as_array().unwrap().len();
                assert_eq!(stats["queues"][queue][state], listed as u64, "queue {queue} state {state}");
            }
        }
        assert_eq!(stats["queues"]["a"]["cancelled"], 1);
        assert_eq!(stats["queues"]["b"]["scheduled"], 1);

        // Filters and paging.
        assert_eq!(s.json(&["list", "--kind", "other"]).as_array().unwrap().len(), 1);
        let page1 = s.json(&["list", "--limit", "4"]);
        let last = page1[3]["id"].as_str().unwrap().to_owned();
        let page2 = s.json(&["list", "--limit", "4", "--after", &last]);
        assert_eq!(page2.as_array().unwrap().len(), 2);
        assert!(page2[0]["id"].as_str().unwrap() > last.as_str(), "ids ascend");

        // The tables show the same.
        let table = s.ok(&["stats"]);
        assert!(table.contains("QUEUE") && table.contains("(all)"), "{table}");
        let out = s.cmd().args(["list", "--limit", "4"]).output().unwrap();
        assert!(String::from_utf8(out.stderr).unwrap().contains(&format!("--after {last}")));
        assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 5, "header and 4 rows");
    }

    pub fn cancel_says_what_happened(s: &Store) {
        let id = s.enqueue(&["k"]);
        assert!(s.ok(&["cancel", &id]).contains(&format!("cancelled {id}")));
        assert!(s.ok(&["cancel", &id]).contains("already cancelled"), "sending it again is safe");
        let again = s.json(&["cancel", &id]);
        assert_eq!((again["answer"].as_str(), again["state"].as_str()), (Some("finished"), Some("cancelled")));
        let done = s.enqueue(&["k"]);
        let worker = s.worker(&["--exec", "true"]);
        s.wait_for_state(&done, "completed");
        worker.stop();
        s.cmd()
            .args(["cancel", &done])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(format!("job {done} is completed: too late to cancel")));
    }

    /// Two OS processes: `jqctl worker --exec` runs a command that starts a
    /// grandchild and waits; `jqctl cancel` from another process stops it.
    /// The job ends Cancelled, not retried, and no process of the command
    /// is left.
    pub fn cancel_stops_a_running_command_and_its_children(s: &Store) {
        let pids = s.dir.path().join("pids");
        let script = format!("sleep 300 & echo $! > {p}.grandchild; echo $$ > {p}.child; wait", p = pids.display());
        let worker = s.worker(&["--stop-grace", "3s", "--exec", "sh", "-c", &script]);
        let id = s.enqueue(&["long", "--max-attempts", "3"]);
        s.wait_for_state(&id, "running");
        let read_pid = |suffix: &str| -> Option<u32> {
            std::fs::read_to_string(s.dir.path().join(format!("pids.{suffix}"))).ok()?.trim().parse().ok()
        };
        let start = Instant::now();
        let (child, grandchild) = loop {
            if let (Some(c), Some(g)) = (read_pid("child"), read_pid("grandchild")) {
                break (c, g);
            }
            assert!(start.elapsed() < DEADLINE, "the command did not start its grandchild");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(alive(child) && alive(grandchild));

        let asked = Instant::now();
        let said = s.ok(&["cancel", &id, "--reason", "runaway"]);
        assert!(said.contains("cancel requested"), "{said}");
        let job = s.wait_for_state(&id, "cancelled");
        assert!(asked.elapsed() < Duration::from_secs(10), "cancelled after {:?}", asked.elapsed());
        assert_eq!(job["attempts"], 1, "not retried: {job:#}");
        assert_eq!(job["errors"].as_array().map(Vec::len), Some(0), "a cancel is no failure: {job:#}");
        assert_eq!(job["cancel_requested"]["reason"], "runaway");
        let start = Instant::now();
        while alive(child) || alive(grandchild) {
            assert!(start.elapsed() < DEADLINE, "a process of the command survived the cancel");
            std::thread::sleep(Duration::from_millis(20));
        }
        worker.stop();
    }

    /// True while process `pid` exists and is not a zombie (an exited
    /// process whose parent, maybe init in a container, has not reaped it).
    fn alive(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
            Err(_) => false,
        }
    }

    pub fn failing_job_ends_dead_and_dead_retry_brings_it_back(s: &Store) {
        let id = s.enqueue(&["flaky", r#"{"n":1}"#, "--max-attempts", "2"]);
        let worker =
            s.worker(&["--concurrency", "2", "--exec", "sh", "-c", "echo boom on attempt $JQ_JOB_ATTEMPT >&2; exit 1"]);
        let job = s.wait_for_state(&id, "dead");
        worker.stop();

        assert_eq!(job["attempts"], 2);
        let errors = job["errors"].as_array().unwrap();
        assert_eq!(errors.len(), 2, "{job:#}");
        for (i, e) in errors.iter().enumerate() {
            assert_eq!(e["attempt"], i + 1);
            let message = e["message"].as_str().unwrap();
            assert!(
                message.contains("exit code 1") && message.contains(&format!("boom on attempt {}", i + 1)),
                "{message}"
            );
            assert!(e["at"].is_string());
        }
        let human = s.ok(&["get", &id]);
        assert!(human.contains("attempt 2 at") && human.contains("boom on attempt 2"), "{human}");

        let dead = s.json(&["dead", "list"]);
        assert_eq!(dead.as_array().unwrap().len(), 1);
        assert!(s.ok(&["dead", "list"]).contains("boom on attempt 2"));

        assert!(s.ok(&["dead", "retry", &id]).contains("pending"));
        let job = s.json(&["get", &id]);
        assert_eq!(job["state"], "pending");
        assert_eq!(job["max_attempts"], 3, "a retried job gets one more attempt");
        assert_eq!(job["errors"].as_array().unwrap().len(), 2, "errors are kept");
        s.cmd().args(["dead", "retry", &id]).assert().code(2).stderr(predicate::str::contains("cannot retry"));
    }

    pub fn dead_retry_all_retries_only_dead_jobs_of_the_queue(s: &Store) {
        let a = s.enqueue(&["k", "--queue", "a", "--max-attempts", "1"]);
        let b = s.enqueue(&["k", "--queue", "b", "--max-attempts", "1"]);
        let keep = s.enqueue(&["k", "--queue", "a", "--delay", "1h"]);
        let worker = s.worker(&["-q", "a", "-q", "b", "--", "sh", "-c", "exit 78"]);
        s.wait_for_state(&a, "dead");
        s.wait_for_state(&b, "dead");
        worker.stop();
        assert_eq!(s.json(&["dead", "retry", "--all", "--queue", "a"])["retried"], 1);
        assert_eq!(s.state(&a), "pending");
        assert_eq!(s.state(&b), "dead");
        assert_eq!(s.state(&keep), "scheduled");
        assert!(s.ok(&["dead", "retry", "--all"]).contains("retried 1 dead job(s)"));
        assert_eq!(s.state(&b), "pending");
    }

    /// A command that writes a NUL to stderr and exits 78, among 20 that
    /// succeed: every job settles, the bad one Dead with the NUL recorded
    /// as U+FFFD. *On PostgreSQL the settle batch holding it was refused
    /// and sent again forever: 19 completed and it never became Dead.*
    pub fn a_nul_in_a_commands_stderr_is_recorded(s: &Store) {
        let good: Vec<String> = (0..20).map(|i| s.enqueue(&["good", &format!(r#"{{"n":{i}}}"#)])).collect();
        let bad = s.enqueue(&["bad", "{}"]);
        let script = r#"if [ "$JQ_JOB_KIND" = bad ]; then printf 'before\000after' >&2; exit 78; fi"#;
        let worker = s.worker(&["--concurrency", "8", "--exec", "sh", "-c", script]);
        let dead = s.wait_for_state(&bad, "dead");
        for id in &good {
            s.wait_for_state(id, "completed");
        }
        worker.stop();
        let message = dead["errors"][0]["message"].as_str().unwrap_or_default().to_owned();
        assert!(message.contains("exit code 78") && message.contains("before\u{FFFD}after"), "{message:?}");
    }

    pub fn worker_runs_the_command_with_payload_and_environment(s: &Store) {
        let out_dir = s.dir.path().join("out");
        std::fs::create_dir(&out_dir).unwrap();
        let ok = s.enqueue(&["resize", r#"{"image":"cat.png"}"#, "--queue", "media", "--max-attempts", "4"]);
        let permanent = s.enqueue(&["poison", "{}", "--queue", "media", "--max-attempts", "5"]);
        let slow = s.enqueue(&["slow", "{}", "--queue", "media", "--max-attempts", "1"]);
        let script = r#"
            case "$JQ_JOB_KIND" in
              resize) cat > "$OUT/$JQ_JOB_ID.payload"; env | grep '^JQ_JOB_' | sort > "$OUT/$JQ_JOB_ID.env" ;;
              poison) echo "cannot decode" >&2; exit 78 ;;
              slow) sleep 30 ;;
            esac"#;
        let worker = {
            let mut cmd = s.cmd();
            cmd.env("OUT", &out_dir)
                .args([
                    "worker",
                    "--queue",
                    "media",
                    "--concurrency",
                    "3",
                    "--timeout",
                    "1s",
                    "--exec",
                    "sh",
                    "-c",
                    script,
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            Worker(Some(cmd.spawn().unwrap()))
        };
        s.wait_for_state(&ok, "completed");
        let poisoned = s.wait_for_state(&permanent, "dead");
        let timed_out = s.wait_for_state(&slow, "dead");
        let out = worker.stop();

        let payload = std::fs::read_to_string(out_dir.join(format!("{ok}.payload"))).unwrap();
        assert_eq!(payload, r#"{"image":"cat.png"}"#);
        let env = std::fs::read_to_string(out_dir.join(format!("{ok}.env"))).unwrap();
        for line in [
            format!("JQ_JOB_ID={ok}"),
            "JQ_JOB_KIND=resize".into(),
            "JQ_JOB_QUEUE=media".into(),
            "JQ_JOB_ATTEMPT=1".into(),
            "JQ_JOB_MAX_ATTEMPTS=4".into(),
        ] {
            assert!(env.lines().any(|l| l == line), "{line:?} missing from:\n{env}");
        }

        assert_eq!(poisoned["attempts"], 1, "exit 78 fails for good, with attempts left");
        let message = poisoned["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains("exit code 78 (permanent failure)") && message.contains("cannot decode"), "{message}");
        let message = timed_out["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains("timed out after 1s"), "{message}");

        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("shutting down") && stderr.contains("worker stopped"), "{stderr}");
    }

    pub fn purge_removes_only_what_it_says(s: &Store) {
        let cancelled: Vec<String> = (0..3).map(|_| s.enqueue(&["k"])).collect();
        let pending = s.enqueue(&["k"]);
        let scheduled = s.enqueue(&["k", "--delay", "1h"]);
        for id in &cancelled[..2] {
            s.ok(&["cancel", id]);
        }
        // Finished just now: not older than a week.
        assert_eq!(s.json(&["purge", "--state", "cancelled", "--older-than", "7d"])["purged"], 0);
        assert_eq!(s.json(&["purge", "--state", "completed", "--older-than", "0s"])["purged"], 0);
        let out = s.ok(&["purge", "--state", "cancelled", "--older-than", "0s"]);
        assert!(out.starts_with("purged 2 cancelled job(s)"), "{out}");
        for id in &cancelled[..2] {
            s.cmd().args(["get", id]).assert().code(2).stderr(predicate::str::contains("not found"));
        }
        assert_eq!(s.state(&cancelled[2]), "pending");
        assert_eq!(s.state(&pending), "pending");
        assert_eq!(s.state(&scheduled), "scheduled");
        assert_eq!(s.total_jobs(), 3);
        s.cmd()
            .args(["purge", "--state", "pending", "--older-than", "0s"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("only completed, dead or cancelled"));
    }

    /// A running worker holds the "maintenance" role (`jqctl leaders`
    /// names it) and hands it back when it stops.
    pub fn leaders_shows_the_maintaining_worker(s: &Store) {
        let none = s.json(&["leaders"]);
        assert_eq!(none, serde_json::json!([]), "no role held before any worker runs");
        let worker = s.worker(&["--name", "the-maintainer", "--exec", "true"]);
        let deadline = Instant::now() + DEADLINE;
        let held = loop {
            let leaders = s.json(&["leaders"]);
            if let Some(held) = leaders.as_array().and_then(|a| a.first()).cloned() {
                break held;
            }
            assert!(Instant::now() < deadline, "the worker never took the maintenance role");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!((held["role"].as_str(), held["holder"].as_str()), (Some("maintenance"), Some("the-maintainer")));
        assert_eq!(held["expired"], serde_json::json!(false));
        let table = s.ok(&["leaders"]);
        assert!(table.contains("ROLE") && table.contains("the-maintainer"), "{table}");
        worker.stop();
        assert_eq!(s.json(&["leaders"]), serde_json::json!([]), "the stopped worker resigned");
    }

    /// `periodic list` shows what a pool declared (next tick by the stored
    /// expression and zone), `periodic trigger` stores a request the next round of
    /// a declaring pool serves with one job, and an unknown name is bad
    /// input. The pool here is the library's `PeriodicRunner`, as a worker pool
    /// runs it: only code declares periodic jobs.
    pub fn cron_list_and_run(s: &Store) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let client = rt.block_on(jq::connect(&s.url)).unwrap();
        let nightly = jq::periodic::Periodic::cron("nightly", "30 2 * * *")
            .unwrap()
            .zone("Europe/Berlin")
            .unwrap()
            .job_with("reports", |tick| {
                jq::NewJob::builder("report", jq::Payload::of(&serde_json::json!({ "tick": tick })).unwrap())
            })
            .unwrap();
        let runner = jq::periodic::PeriodicRunner::new(vec![nightly]).unwrap();
        rt.block_on(runner.run_once(client.storage())).unwrap();

        let list = s.json(&["periodic", "list"]);
        let row = &list[0];
        assert_eq!((row["name"].as_str(), row["expression"].as_str()), (Some("nightly"), Some("30 2 * * *")));
        assert_eq!((row["zone"].as_str(), row["queue"].as_str()), (Some("Europe/Berlin"), Some("reports")));
        assert!(row["next_tick"].is_string() && row["last_job"].is_null(), "{row}");
        assert_eq!((row["orphaned"].as_bool(), row["missed"].as_u64()), (Some(false), Some(0)));
        let table = s.ok(&["periodic", "list"]);
        assert!(table.contains("NEXT TICK") && table.contains("nightly") && table.contains("declared"), "{table}");

        refused(s, &["periodic", "trigger", "nope"], 2, "not found");
        assert!(s.ok(&["periodic", "trigger", "nightly"]).contains("triggered"));
        assert!(s.json(&["periodic", "list"])[0]["triggered_at"].is_string());
        let round = rt.block_on(runner.run_once(client.storage())).unwrap();
        assert_eq!(round.jobs, 1, "one job for the trigger");
        let row = s.json(&["periodic", "list"])[0].clone();
        assert!(row["triggered_at"].is_null(), "{row}");
        assert_eq!(row["last_job_state"].as_str(), Some("pending"), "{row}");
        let id = row["last_job"].as_str().unwrap().to_owned();
        assert_eq!(s.json(&["get", &id])["kind"].as_str(), Some("report"));
    }

    /// `queue pause` stops a running worker from starting the queue's jobs
    /// (and `queue list` shows it has seen the pause), enqueue still works,
    /// `queue resume` lets them run; `queue limit` sets, keeps and lifts
    /// limits; bad limits are refused.
    pub fn queue_pause_resume_and_limit(s: &Store) {
        let paused = s.json(&["queue", "pause", "mail"]);
        assert_eq!(paused["paused"], serde_json::json!(true), "{paused:#}");
        let id = s.enqueue(&["--queue", "mail", "send", "{}"]);
        let worker = s.worker(&["--queue", "mail", "--name", "the-pauser", "--exec", "true"]);
        let deadline = Instant::now() + DEADLINE;
        loop {
            let list = s.json(&["queue", "list"]);
            let mail = list.as_array().and_then(|a| a.iter().find(|q| q["queue"] == "mail")).cloned();
            let mail = mail.unwrap_or_else(|| panic!("queue list shows mail: {list:#}"));
            let seen = mail["seen_pause"].as_array().cloned().unwrap_or_default();
            if seen.iter().any(|w| w.as_str().is_some_and(|w| w.contains("the-pauser"))) {
                assert_eq!(mail["waiting"], serde_json::json!(1), "{mail:#}");
                break;
            }
            assert!(Instant::now() < deadline, "the worker never met the pause: {mail:#}");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(s.state(&id), "pending", "a worker that has seen the pause started nothing");
        let table = s.ok(&["queue", "list"]);
        assert!(table.contains("paused since") && table.contains("1 of 1"), "{table}");
        s.ok(&["queue", "resume", "mail"]);
        s.wait_for_state(&id, "completed");
        worker.stop();

        let limited = s.json(&["queue", "limit", "mail", "--concurrency", "2", "--rate", "100/s"]);
        assert_eq!(
            (limited["concurrency"].clone(), limited["rate"].clone()),
            (serde_json::json!(2), serde_json::json!("100/1s"))
        );
        let kept = s.json(&["queue", "limit", "mail", "--rate", "none"]);
        assert_eq!(
            (kept["concurrency"].clone(), kept["rate"].clone()),
            (serde_json::json!(2), serde_json::Value::Null)
        );
        let table = s.ok(&["queue", "list"]);
        let row = table.lines().find(|l| l.starts_with("mail ")).unwrap_or_default();
        assert!(row.contains("active") && !row.contains("paused"), "{table}");
        refused(s, &["queue", "limit", "mail", "--concurrency", "0"], 2, "above 0");
        refused(s, &["queue", "limit", "mail", "--rate", "10/d"], 2, "N/PERIOD");
        // A window no backend can store (PostgreSQL's claims failed on it).
        refused(s, &["queue", "limit", "mail", "--rate", "1/99999999h"], 2, "100 years");
        assert_eq!(s.json(&["queue", "limit", "mail", "--rate", "1/876600h"])["rate"], serde_json::json!("1/876600h"));
        refused(s, &["queue", "pause", "a b"], 2, "invalid");
    }
    /// Keyed jobs from the shell: `enqueue --key`, `get` shows it, `queue
    /// key-limit` sets the default and an override (a flag not given keeps
    /// its value), `queue keys` reports the busiest keys with the limits
    /// they follow, `queue key-clear` brings a key back to the default.
    pub fn queue_keys_limits_and_report(s: &Store) {
        let acme: Vec<String> =
            (0..3).map(|_| s.enqueue(&["--queue", "hooks", "--key", "acme", "post", "{}"])).collect();
        s.enqueue(&["--queue", "hooks", "--key", "bob", "post", "{}"]);
        assert_eq!(s.json(&["get", &acme[0]])["key"], serde_json::json!("acme"));
        assert!(s.ok(&["get", &acme[0]]).contains("acme"));

        let set = s.json(&["queue", "key-limit", "hooks", "--concurrency", "1"]);
        assert_eq!(set["default"]["concurrency"], serde_json::json!(1), "{set:#}");
        let set = s.json(&["queue", "key-limit", "hooks", "--key", "acme", "--concurrency", "3", "--rate", "100/s"]);
        let kept = s.json(&["queue", "key-limit", "hooks", "--key", "acme", "--rate", "none"]);
        assert_eq!(set["overrides"][0]["rate"], serde_json::json!("100/1s"), "{set:#}");
        assert_eq!(
            (kept["overrides"][0]["concurrency"].clone(), kept["overrides"][0]["rate"].clone()),
            (serde_json::json!(3), serde_json::Value::Null),
            "{kept:#}"
        );

        let report = s.json(&["queue", "keys", "hooks"]);
        let busiest = report["busiest"].as_array().cloned().unwrap_or_default();
        assert_eq!(busiest.len(), 2, "{report:#}");
        assert_eq!(
            (busiest[0]["key"].clone(), busiest[0]["pending"].clone()),
            (serde_json::json!("acme"), serde_json::json!(3))
        );
        assert_eq!(busiest[0]["concurrency"], serde_json::json!(3), "acme follows its override: {report:#}");
        assert_eq!(busiest[0]["overridden"], serde_json::json!(true));
        assert_eq!(busiest[1]["concurrency"], serde_json::json!(1), "bob follows the default: {report:#}");
        let top = s.json(&["queue", "keys", "hooks", "--top", "1"]);
        assert_eq!(top["busiest"].as_array().map(Vec::len), Some(1), "{top:#}");
        let table = s.ok(&["queue", "keys", "hooks"]);
        assert!(table.contains("acme") && table.contains("override") && table.contains("default"), "{table}");

        let cleared = s.json(&["queue", "key-clear", "hooks", "acme"]);
        assert_eq!(cleared["overrides"], serde_json::json!([]), "{cleared:#}");
        let report = s.json(&["queue", "keys", "hooks"]);
        assert_eq!(report["busiest"][0]["concurrency"], serde_json::json!(1), "acme follows the default again");
        refused(s, &["enqueue", "post", "{}", "--key", ""], 2, "key");
        refused(s, &["queue", "key-limit", "hooks", "--concurrency", "0"], 2, "above 0");
    }
    /// The dashboard's binary-level guarantees: it will not bind a public
    /// address without a token, it serves the store's queues, read-only hides
    /// the actions, and a token locks every page.
    pub fn serve_dashboard_guards_its_address(s: &Store) {
        refused(s, &["serve", "--listen", "0.0.0.0:0"], 2, "needs a token");
        refused(s, &["serve", "--token", " "], 2, "token is empty");
        refused(s, &["serve", "--allowed-host", "https://jobs.example.com/"], 2, "not a URL");
        s.enqueue(&["ping", "{}", "--queue", "web"]);

        let addr = free_addr();
        let mut server = s
            .cmd()
            .args(["serve", "--listen", &addr, "--read-only", "--allowed-host", "jobs.example.com"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let page =
            get_until(&addr, "/", |head, _| head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"));
        // A page that rebound attacker.example to 127.0.0.1 names its own host.
        let rebound = get_as(&addr, "/", "attacker.example");
        let rebound_with_port = get_as(&addr, "/", &addr.replace("127.0.0.1", "attacker.example"));
        let other_port = get_as(&addr, "/", "localhost:1");
        let proxied = get_as(&addr, "/", "jobs.example.com");
        let localhost = get_as(&addr, "/", &addr.replace("127.0.0.1", "localhost"));
        let _ = server.kill();
        let _ = server.wait();
        assert!(page.contains("data-queue=\"web\""), "{page}");
        assert!(page.contains("read-only") && !page.contains("method=\"post\""), "{page}");
        assert_eq!(status(&rebound), Some("421"), "{rebound}");
        assert!(!rebound.contains("data-queue"), "nothing of the store: {rebound}");
        assert_eq!(status(&rebound_with_port), Some("421"), "{rebound_with_port}");
        assert_eq!(status(&other_port), Some("421"), "the port is the bound one: {other_port}");
        assert_eq!(status(&proxied), Some("200"), "{proxied}");
        assert_eq!(status(&localhost), Some("200"), "{localhost}");

        let addr = free_addr();
        let mut server = s
            .cmd()
            .args(["serve", "--listen", &addr])
            .env("JQ_DASHBOARD_TOKEN", "s3cret\n")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let denied = get_until(&addr, "/", |head, _| head.starts_with("HTTP/1."));
        let bearer = request(&addr, &format!("GET / HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer s3cret\r\n\r\n"));
        let _ = server.kill();
        let _ = server.wait();
        assert_eq!(status(&denied), Some("401"), "{denied}");
        assert_eq!(status(&bearer), Some("200"), "the token's newline is trimmed: {bearer}");
    }

    /// `jqctl serve` serves the HTTP API under /api/v1/ beside the
    /// dashboard, with the dashboard's token for everything and
    /// `--read-token` for reads only; a job enqueued through it is the
    /// store's.
    pub fn serve_http_api_beside_the_dashboard(s: &Store) {
        refused(s, &["serve", "--read-token", " "], 2, "token is empty");
        let addr = free_addr();
        let mut server = s
            .cmd()
            .args(["serve", "--listen", &addr, "--token", "full", "--read-token", "read"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let post = |token: &str, body: &str| {
            request(
                &addr,
                &format!(
                    "POST /api/v1/jobs HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
                     Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                ),
            )
        };
        let denied = get_until(&addr, "/api/v1/stats", |head, _| head.starts_with("HTTP/1."));
        let job = r#"{"kind": "ping", "payload": {"n": 1}, "queue": "web"}"#;
        let stored = post("full", job);
        let read_only = post("read", job);
        let bad = post("full", r#"{"kind": "ping", "payload": {}, "queue": "a b"}"#);
        let get = |path: &str, token: &str| {
            request(&addr, &format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"))
        };
        let stats = get("/api/v1/stats", "read");
        let document = get("/api/v1/openapi.json", "read");
        let dashboard = get("/", "full");
        let _ = server.kill();
        let _ = server.wait();
        assert_eq!(status(&denied), Some("401"), "{denied}");
        assert_eq!(status(&stored), Some("200"), "{stored}");
        assert_eq!(status(&read_only), Some("403"), "{read_only}");
        assert_eq!(status(&bad), Some("400"), "{bad}");
        assert!(bad.contains(r#""field":"queue""#), "{bad}");
        assert_eq!(status(&stats), Some("200"), "{stats}");
        assert!(stats.contains(r#""web":{"waiting":0,"scheduled":0,"pending":1"#), "{stats}");
        assert!(document.contains("\"openapi\""), "{document}");
        assert!(dashboard.contains("data-queue=\"web\""), "{dashboard}");
        let id = stored.rsplit(r#""id":""#).next().unwrap().split('"').next().unwrap();
        let shown = s.ok(&["get", id]);
        assert!(shown.contains("ping"), "{shown}");
    }

    /// `jqctl metrics` serves the store's gauges, and `jqctl worker
    /// --metrics-listen` the worker's counters: equal to the jobs it ran.
    pub fn metrics_endpoints_serve_gauges_and_counters(s: &Store) {
        let ids: Vec<String> =
            (0..3).map(|i| s.enqueue(&["ping", &format!("{{\"n\":{i}}}"), "--queue", "mq"])).collect();
        s.enqueue(&["ping", "{}", "--queue", "mq", "--delay", "1h"]);
        let addr = free_addr();
        let mut server = s
            .cmd()
            .args(["metrics", "--listen", &addr, "--interval", "1s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A sample sets the state counts, then each queue's oldest pending age:
        // wait for both, or a scrape in between sees only the first.
        let gauges =
            scrape_until(&addr, |body| body.contains("jq_jobs{") && body.contains("jq_oldest_pending_age_seconds{"));
        let _ = server.kill();
        let _ = server.wait();
        assert_eq!(sample(&gauges, "jq_jobs", &[("queue", "mq"), ("state", "pending")]), 3.0, "{gauges}");
        assert_eq!(sample(&gauges, "jq_jobs", &[("queue", "mq"), ("state", "scheduled")]), 1.0, "{gauges}");
        assert_eq!(sample(&gauges, "jq_jobs", &[("queue", "mq"), ("state", "completed")]), 0.0, "{gauges}");
        assert!(sample(&gauges, "jq_oldest_pending_age_seconds", &[("queue", "mq")]) >= 0.0, "{gauges}");

        let addr = free_addr();
        let worker = s.worker(&["--queue", "mq", "--concurrency", "2", "--metrics-listen", &addr, "--exec", "true"]);
        for id in &ids {
            s.wait_for_state(id, "completed");
        }
        // Counted right after the store answers the settlement, which
        // `get` may see first: wait for the count, then check the rest.
        let labels = [("queue", "mq"), ("kind", "ping")];
        let counters = scrape_until(&addr, |body| {
            body.contains("jq_jobs_completed_total{") && sample(body, "jq_jobs_completed_total", &labels) == 3.0
        });
        assert_eq!(sample(&counters, "jq_jobs_completed_total", &labels), 3.0, "{counters}");
        assert_eq!(sample(&counters, "jq_jobs_started_total", &labels), 3.0, "{counters}");
        assert_eq!(sample(&counters, "jq_job_run_duration_seconds_count", &labels), 3.0, "{counters}");
        worker.stop();
    }

    /// `jqctl workflow show` lists the steps with their states and edges, and
    /// `jqctl get` shows a step's parents, children and result.
    pub fn workflow_show_and_get_show_the_graph_and_the_result(s: &Store) {
        use jq::storage::{ClaimRequest, Outcome, Settlement, Storage};
        use jq::workflow::{Step, Workflow};

        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (wid, a, b) = runtime.block_on(async {
            let client = jq::connect(&s.url).await.unwrap();
            let job =
                |kind: &str| jq::NewJob::builder(kind, jq::Payload::of(&()).unwrap()).queue("flow").build().unwrap();
            let stored = client
                .enqueue_workflow(
                    Workflow::new()
                        .step(Step::new("fetch", job("fetch")))
                        .step(Step::new("use", job("use")).after(["fetch"])),
                )
                .await
                .unwrap();
            let (a, b) = (stored.job("fetch").unwrap(), stored.job("use").unwrap());
            let queue = jq::QueueName::new("flow").unwrap();
            let request = ClaimRequest::new(vec![queue], 10, std::time::Duration::from_secs(30), "test");
            let claimed = client.storage().claim(&request).await.unwrap().jobs;
            let lease = claimed[0].lease_ref().unwrap();
            let result = jq::Payload::from_json(r#"{"bytes":42}"#).unwrap();
            client.storage().settle(vec![Settlement { lease, outcome: Outcome::AckWith { result } }]).await.unwrap();
            (stored.id, a, b)
        });
        let shown = s.json(&["workflow", "show", &wid.to_string()]);
        assert_eq!(shown["finished"], false);
        assert_eq!(shown["steps"][0]["name"], "fetch");
        assert_eq!(shown["steps"][0]["state"], "completed");
        assert_eq!(shown["steps"][1]["state"], "pending");
        assert_eq!(shown["steps"][1]["after"][0], "fetch");
        let text = s.ok(&["workflow", "show", &wid.to_string()]);
        assert!(text.contains("use") && text.contains("fetch") && text.contains("not finished"), "{text}");

        let first = s.json(&["get", &a.to_string()]);
        assert_eq!(first["result"]["bytes"], 42);
        assert_eq!(first["links"]["children"][0], b.to_string());
        let second = s.json(&["get", &b.to_string()]);
        assert_eq!(second["links"]["parents"][0]["id"], a.to_string());
        assert_eq!(second["links"]["step"], "use");
        let text = s.ok(&["get", &a.to_string()]);
        assert!(text.contains("children") && text.contains("\"bytes\": 42"), "{text}");
        refused(s, &["workflow", "show", "0190c3a2-7b1e-7c3d-9a4f-2b8e1d6f0a11"], 2, "not found");
    }
}

/// A local address nobody listens on (the port is free once the probe closes).
fn free_addr() -> String {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string()
}

/// GET /metrics until the body satisfies `ready` (the server started, its
/// first sample taken), bounded by DEADLINE.
fn scrape_until(addr: &str, ready: impl Fn(&str) -> bool) -> String {
    let response = get_until(addr, "/metrics", |_, body| ready(body));
    response.split_once("\r\n\r\n").map_or(response.as_str(), |(_, body)| body).to_owned()
}

/// The status code of an HTTP response.
fn status(response: &str) -> Option<&str> {
    response.split_whitespace().nth(1)
}

/// Sends `request` (a whole HTTP/1.0 request) to `addr`; the whole response.
fn request(addr: &str, request: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// `GET path` naming `host` in the Host header; the whole response.
fn get_as(addr: &str, path: &str, host: &str) -> String {
    request(addr, &format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n"))
}

/// GET `path` over HTTP/1.0 until `ready(head, body)`, bounded by DEADLINE;
/// returns the whole response.
fn get_until(addr: &str, path: &str, ready: impl Fn(&str, &str) -> bool) -> String {
    use std::io::{Read, Write};
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Ok(mut stream) = std::net::TcpStream::connect(addr) {
            let mut response = String::new();
            let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
            if stream.write_all(request.as_bytes()).is_ok() && stream.read_to_string(&mut response).is_ok() {
                let (head, body) = response.split_once("\r\n\r\n").unwrap_or((response.as_str(), ""));
                if ready(head, body) {
                    return response;
                }
            }
        }
        assert!(Instant::now() < deadline, "http://{addr}{path} never served what the test waits for");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The value of the series `name` with exactly these labels.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut want: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    want.sort();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let Some((n, rest)) = series.split_once('{') else { continue };
        let mut got: Vec<String> = rest.trim_end_matches('}').split(',').map(str::to_owned).collect();
        got.sort();
        if n == name && got == want {
            return value.parse().unwrap();
        }
    }
    panic!("no {name}{labels:?} in:\n{text}");
}
