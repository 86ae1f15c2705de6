//! Durable jobs under SIGKILL: 1,000 jobs of 20 steps each (the
//! `JQ_CHAOS_DURABLE_JOBS` variable sets another count) on one SQLite file,
//! run by three `jq-chaos-durable-worker` processes of which one is
//! SIGKILLed at random every 100 to 400 ms and started again. Then, for
//! every job: it completed; its journal holds its 20 steps in order; no
//! step's body ran after the step's checkpoint (each effect's instant is
//! before its checkpoint's: a replay never ran a recorded step again); and
//! its result is what its journal recorded (the replays returned the
//! recorded values, not new ones). A step's body may run more than once
//! only when a kill came between its effect and its checkpoint; the run
//! prints how often that happened.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use jq_core::storage::{Storage, StorageExt};
use jq_core::{JobId, NewJob, Payload, State};
use rand::Rng;

const WORKERS: usize = 3;
const STEPS: usize = 20;
/// How far after its checkpoint's recorded instant an effect may be and
/// still be the run that checkpointed it (the instant is taken when the
/// writer runs the command; replays start a lease later).
const SLACK_US: i64 = 200_000;
/// The longest the run may take before the test gives up (a stuck job).
const PATIENCE: Duration = Duration::from_secs(600);

fn spawn(binary: &Path, db: &Path, dir: &Path, n: usize) -> Child {
    Command::new(binary)
        .arg("--sqlite")
        .arg(db)
        .arg("--effects")
        .arg(dir.join(format!("effects-{n}.log")))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn durable_steps_survive_sigkill_and_run_once_per_checkpoint() {
    let jobs: usize = std::env::var("JQ_CHAOS_DURABLE_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000);
    let dir = tempfile::Builder::new().prefix("jq-chaos-durable-").tempdir().unwrap();
    let db = dir.path().join("jobs.db");
    let storage =
        jq_sqlite::SqliteStorage::open(jq_sqlite::SqliteConfig::new(&db).busy_timeout(Duration::from_secs(10)))
            .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let ids: Vec<JobId> = rt.block_on(async {
        let batch: Vec<NewJob> = (0..jobs)
            .map(|n| {
                NewJob::builder("durable-chaos", Payload::of(&serde_json::json!({ "n": n })).unwrap())
                    .queue("durable-chaos")
                    .max_attempts(1_000)
                    .build()
                    .unwrap()
            })
            .collect();
        storage.enqueue(batch).await.unwrap()
    });

    let binary = Path::new(env!("CARGO_BIN_EXE_jq-chaos-durable-worker"));
    let mut workers: Vec<Child> = (0..WORKERS).map(|n| spawn(binary, &db, dir.path(), n)).collect();
    let mut spawned = WORKERS;
    let mut kills = 0u32;
    let started = Instant::now();
    let mut rng = rand::rng();
    loop {
        std::thread::sleep(Duration::from_millis(rng.random_range(100..400)));
        let done = rt.block_on(async {
            let stats = storage.stats().await.unwrap();
            stats.total(State::Completed) + stats.total(State::Dead) + stats.total(State::Cancelled)
        });
        if done as usize == jobs {
            break;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "only {done} of {jobs} jobs finished in {PATIENCE:?}; evidence in {:?}",
            dir.keep()
        );
        let victim = rng.random_range(0..WORKERS);
        // SIGKILL: no shutdown, no release; its leases expire and recover
        // hands its jobs on.
        let _ = workers[victim].kill();
        let _ = workers[victim].wait();
        kills += 1;
        workers[victim] = spawn(binary, &db, dir.path(), spawned);
        spawned += 1;
    }
    for mut worker in workers {
        let _ = worker.kill();
        let _ = worker.wait();
    }

    // Every effect, by (job, step): the instants it ran at.
    let mut effects: HashMap<(String, usize), Vec<i64>> = HashMap::new();
    for n in 0..spawned {
        let Ok(text) = std::fs::read_to_string(dir.path().join(format!("effects-{n}.log"))) else { continue };
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            // A line cut by a kill mid-write has fewer fields: its step
            // ran and was not checkpointed by that run.
            if f.len() == 4
                && let (Ok(step), Ok(at)) = (f[1].parse::<usize>(), f[3].parse::<i64>())
            {
                effects.entry((f[0].to_owned(), step)).or_default().push(at);
            }
        }
    }
    let mut repeated = 0usize;
    let mut problems = Vec::new();
    rt.block_on(async {
        let durable = storage.require_durable().unwrap();
        let completed = storage.stats().await.unwrap().total(State::Completed);
        assert_eq!(completed as usize, jobs, "every job completed (none Dead)");
        for id in &ids {
            let journal = durable.journal(*id).await.unwrap();
            let names: Vec<String> = journal.entries.iter().map(|e| e.name.clone()).collect();
            let expected: Vec<String> = (0..STEPS).map(|s| format!("s{s}")).collect();
            if names != expected {
                problems.push(format!("{id}: journal {names:?}"));
                continue;
            }
            let recorded: Vec<u64> =
                journal.entries.iter().map(|e| e.value.as_ref().unwrap().decode::<u64>().unwrap()).collect();
            let result: Vec<u64> =
                storage.require_workflows().unwrap().result(*id).await.unwrap().unwrap().decode().unwrap();
            if result != recorded {
                problems.push(format!("{id}: result {result:?} is not the journal's {recorded:?}"));
            }
            for (step, entry) in journal.entries.iter().enumerate() {
                let ran = effects.get(&(id.to_string(), step)).cloned().unwrap_or_default();
                if ran.is_empty() {
                    problems.push(format!("{id} step {step}: checkpointed with no effect recorded"));
                }
                // The store's instant of a checkpoint is its writer's for
                // the command; a replay comes only after a lease (1 s) has
                // expired, so an effect more than SLACK after it is one.
                let checkpointed = entry.at.timestamp_micros();
                if let Some(late) = ran.iter().find(|at| **at > checkpointed + SLACK_US) {
                    problems.push(format!(
                        "{id} step {step}: its body ran at {late}, after its checkpoint at {checkpointed}"
                    ));
                }
                repeated += ran.len().saturating_sub(1);
            }
        }
    });
    println!(
        "durable chaos: {jobs} jobs x {STEPS} steps, {kills} SIGKILLs, {repeated} step bodies run again after a kill \
         between effect and checkpoint, in {:?}",
        started.elapsed()
    );
    assert!(kills > 0, "the run must have killed workers");
    assert!(
        problems.is_empty(),
        "{} problems, first: {:?}; evidence in {:?}",
        problems.len(),
        &problems[..problems.len().min(10)],
        dir.keep()
    );
}
