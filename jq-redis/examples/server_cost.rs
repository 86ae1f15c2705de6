//! Where Redis spends its time per job, independent of client noise: runs
//! the storage operations the benchmark uses and reads the server's own
//! accounting (`INFO commandstats`, microseconds spent in `EVALSHA`) around
//! each phase. Then two drain passes (claims of 16 and of 128, the size the
//! bench's drain asks for) read the server's CPU time (`INFO cpu`) and every
//! command's time only around the whole pass: the CPU time counts the I/O
//! too, so it compares with `scripts/raw-limits.sh`'s drain commands sent
//! without Lua.
//!
//! ```text
//! cargo run --release -p jq-redis --example server_cost
//! cargo run --release -p jq-redis --example server_cost -- --drain 128 [--jobs N] [--singles N] [--gate] [--fanin | --keyed]
//! ```
//!
//! `--drain N` runs only the drain pass of N per claim, over `--jobs`
//! jobs (default 20,000; a few hundred show a small queue, whose hashes
//! Redis keeps as listpacks searched from the front). With `--gate` it
//! prints `ready` before enqueueing the pass's jobs, `enqueued` after,
//! `drained` after the pass and `done` at the end, and waits for a line on
//! stdin after each but the last: `scripts/redis-instructions.sh` counts the server's
//! instructions between them under callgrind, figures that, unlike time,
//! repeat from one sitting to the next. With `--fanin` the pass's jobs are
//! the members of one fan-in (a workflow `Batch` with one callback after
//! all of them, as the bench's `fanin`), stored by one `enqueue_workflow`,
//! and the pass drains the callback too. With `--keyed` they are keyed as
//! the bench's `keyed` drain keys them (job i's key is `k<i mod 10,000>`,
//! every key limited to one Running job); the pass acks each claim before
//! the next, so a claim meets no Running job of its own pass. With
//! `--singles N` the pass then enqueues N plain jobs into the same
//! queue one call each (as the bench's single enqueue) between a `singles`
//! mark (waiting for a line too) and `done`.
//!
//! Uses `JQ_REDIS_URL` (default `redis://127.0.0.1:6379`) under a random
//! prefix that it deletes at the end. The figures include other clients'
//! scripts running meanwhile, so run it on a quiet server.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jq_core::storage::{ClaimRequest, Outcome, Settlement, Storage, StorageExt, WorkflowStorage};
use jq_core::workflow::Batch;
use jq_core::{NewJob, Payload, QueueName};
use jq_redis::{RedisConfig, RedisStorage};

const JOBS: usize = 20_000;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `(calls, usec)` of every command in `INFO commandstats`, by name.
async fn command_stats(conn: &mut redis::aio::MultiplexedConnection) -> Result<BTreeMap<String, (u64, u64)>, BoxError> {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(conn).await?;
    let mut stats = BTreeMap::new();
    for line in info.lines() {
        if let Some((name, rest)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) {
            let field = |name: &str| -> u64 {
                rest.split(',').find_map(|kv| kv.strip_prefix(name)).and_then(|v| v.parse().ok()).unwrap_or(0)
            };
            stats.insert(name.to_owned(), (field("calls="), field("usec=")));
        }
    }
    Ok(stats)
}

/// The server process's CPU time so far (`INFO cpu`, user + system), in
/// microseconds: unlike commandstats it includes reading requests and
/// writing replies, so it compares plain commands with scripts fairly.
async fn server_cpu_usec(conn: &mut redis::aio::MultiplexedConnection) -> Result<f64, BoxError> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await?;
    let seconds: f64 = info
        .lines()
        .filter_map(|l| l.strip_prefix("used_cpu_user:").or_else(|| l.strip_prefix("used_cpu_sys:")))
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum();
    Ok(seconds * 1e6)
}

async fn evalsha_usec(conn: &mut redis::aio::MultiplexedConnection) -> Result<(u64, u64), BoxError> {
    Ok(command_stats(conn).await?.get("evalsha").copied().unwrap_or((0, 0)))
}

/// `n` jobs of queue "bench" (payloads numbered from 0 in each batch, as
/// the figures in BENCHMARKS.md were taken); with `keys_from`, keyed as the
/// bench's keyed drain keys them, counting from there: job i's key is
/// `k<i mod 10,000>`.
fn jobs(n: usize, keys_from: Option<usize>) -> Result<Vec<NewJob>, BoxError> {
    (0..n)
        .map(|i| {
            let b = NewJob::builder("bench_noop", Payload::from_json(format!(r#"{{"n":{i}}}"#))?).queue("bench");
            let b = match keys_from {
                Some(from) => b.key(format!("k{}", (from + i) % 10_000)),
                None => b,
            };
            b.build().map_err(Into::into)
        })
        .collect()
}

/// What a drain pass drains: plain jobs, the members of one fan-in, or
/// keyed jobs (see the module doc).
#[derive(Clone, Copy, PartialEq)]
enum Pass {
    Plain,
    Fanin,
    Keyed,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var("JQ_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let prefix = format!("jqcost:{}", uuid::Uuid::new_v4().simple());
    let args: Vec<String> = std::env::args().collect();
    // Under callgrind a server is tens of times slower, and stops while
    // it writes a profile: calls must not time out then.
    let timeout =
        if args.iter().any(|a| a == "--gate") { Duration::from_secs(600) } else { jq_redis::DEFAULT_RESPONSE_TIMEOUT };
    let s = RedisStorage::connect(RedisConfig::new(url.clone()).prefix(prefix).response_timeout(timeout)).await?;
    let mut conn = redis::Client::open(url.as_str())?.get_multiplexed_async_connection().await?;
    if let Some(batch) = args.iter().position(|a| a == "--drain").and_then(|i| args.get(i + 1)) {
        let gate = args.iter().any(|a| a == "--gate");
        let pass = if args.iter().any(|a| a == "--fanin") {
            Pass::Fanin
        } else if args.iter().any(|a| a == "--keyed") {
            Pass::Keyed
        } else {
            Pass::Plain
        };
        let jobs = match args.iter().position(|a| a == "--jobs").and_then(|i| args.get(i + 1)) {
            Some(n) => n.parse()?,
            None => JOBS,
        };
        let singles = match args.iter().position(|a| a == "--singles").and_then(|i| args.get(i + 1)) {
            Some(n) => n.parse()?,
            None => 0,
        };
        drain_pass(&s, &mut conn, batch.parse()?, jobs, gate, pass).await?;
        if singles > 0 {
            single_pass(&s, singles, gate).await?;
        }
        gate_at("done", gate)?;
        s.delete_all_keys().await?;
        return Ok(());
    }
    let report = |name: &str, before: (u64, u64), after: (u64, u64), wall: Duration, per: usize| {
        let (calls, usec) = (after.0 - before.0, after.1 - before.1);
        println!(
            "{name:<28} {calls:>6} calls  {:>8.1} us/call  {:>6.2} us/job server  {:>8.0} jobs/s wall",
            usec as f64 / calls.max(1) as f64,
            usec as f64 / per as f64,
            per as f64 / wall.as_secs_f64()
        );
    };

    // The floor of one awaited round trip from this runtime: PING through a
    // multiplexed connection like the storage's.
    let (t, cpu) = (Instant::now(), client_cpu_ns());
    for _ in 0..5000 {
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
    }
    println!(
        "{:<28} {:>8.1} us per awaited PING (client floor), {:.1} us client CPU",
        "ping",
        t.elapsed().as_secs_f64() * 1e6 / 5000.0,
        (client_cpu_ns() - cpu) as f64 / 1e3 / 5000.0
    );

    // The same through a ConnectionManager, which the storage's calls go
    // through on a single server.
    let mut manager = redis::aio::ConnectionManager::new(redis::Client::open(url.as_str())?).await?;
    let (t, cpu) = (Instant::now(), client_cpu_ns());
    for _ in 0..5000 {
        let _: String = redis::cmd("PING").query_async(&mut manager).await?;
    }
    println!(
        "{:<28} {:>8.1} us per awaited PING, {:.1} us client CPU",
        "ping (ConnectionManager)",
        t.elapsed().as_secs_f64() * 1e6 / 5000.0,
        (client_cpu_ns() - cpu) as f64 / 1e3 / 5000.0
    );

    let batches: Vec<Vec<NewJob>> = (0..JOBS / 1000).map(|_| jobs(1000, None)).collect::<Result<_, _>>()?;
    let b = evalsha_usec(&mut conn).await?;
    let (t, cpu) = (Instant::now(), client_cpu_ns());
    for batch in batches {
        s.enqueue(batch).await?;
    }
    let wall = t.elapsed();
    let cpu = client_cpu_ns() - cpu;
    report("enqueue (batches of 1000)", b, evalsha_usec(&mut conn).await?, wall, JOBS);
    println!("{:<28} {:>8.2} us client CPU per job", "", cpu as f64 / 1e3 / JOBS as f64);

    let singles = jobs(5000, None)?;
    let b = evalsha_usec(&mut conn).await?;
    let (t, cpu) = (Instant::now(), client_cpu_ns());
    for job in singles {
        s.enqueue_one(job).await?;
    }
    let wall = t.elapsed();
    let cpu = client_cpu_ns() - cpu;
    report("enqueue (single)", b, evalsha_usec(&mut conn).await?, wall, 5000);
    println!("{:<28} {:>8.1} us client CPU per call", "", cpu as f64 / 1e3 / 5000.0);

    let request = ClaimRequest::new(vec![QueueName::new("bench")?], 16, Duration::from_secs(30), "cost");
    let (mut claim_wall, mut settle_wall) = (Duration::ZERO, Duration::ZERO);
    let (mut claim_usec, mut settle_usec) = ((0, 0), (0, 0));
    let mut done = 0;
    loop {
        let b = evalsha_usec(&mut conn).await?;
        let t = Instant::now();
        let request = ClaimRequest { token: jq_core::storage::LeaseToken::new(), ..request.clone() };
        let claimed = s.claim(&request).await?.jobs;
        claim_wall += t.elapsed();
        let a = evalsha_usec(&mut conn).await?;
        claim_usec = (claim_usec.0 + a.0 - b.0, claim_usec.1 + a.1 - b.1);
        if claimed.is_empty() {
            break;
        }
        let batch: Vec<Settlement> = claimed
            .iter()
            .filter_map(|j| j.lease_ref())
            .map(|lease| Settlement { lease, outcome: Outcome::Ack })
            .collect();
        done += batch.len();
        let b = evalsha_usec(&mut conn).await?;
        let t = Instant::now();
        s.settle(batch).await?;
        settle_wall += t.elapsed();
        let a = evalsha_usec(&mut conn).await?;
        settle_usec = (settle_usec.0 + a.0 - b.0, settle_usec.1 + a.1 - b.1);
    }
    report("claim (16 at a time)", (0, 0), claim_usec, claim_wall, done);
    report("settle (16 acks at a time)", (0, 0), settle_usec, settle_wall, done);
    for batch in [16, 128] {
        drain_pass(&s, &mut conn, batch, JOBS, false, Pass::Plain).await?;
    }
    s.delete_all_keys().await?;
    Ok(())
}

/// Enqueues `n` plain jobs of queue "bench" one call each, after the
/// `singles` mark (see the module doc), and prints their rate.
async fn single_pass(s: &RedisStorage, n: usize, gate: bool) -> Result<(), BoxError> {
    let singles = jobs(n, None)?;
    gate_at("singles", gate)?;
    let t = Instant::now();
    for job in singles {
        s.enqueue_one(job).await?;
    }
    println!("single enqueues, {n}   {:>8.0} jobs/s wall", n as f64 / t.elapsed().as_secs_f64());
    Ok(())
}

/// The CPU time this process's threads have used so far, in nanoseconds
/// (the first field of each thread's `/proc/self/task/*/schedstat`; 0
/// where that is missing): what a call costs the client, apart from
/// waiting for the server.
fn client_cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// With `gate`, prints `mark` and waits for a line on stdin (see the
/// module doc); the last mark, `done`, only prints.
fn gate_at(mark: &str, gate: bool) -> Result<(), BoxError> {
    if gate {
        println!("{mark}");
        if mark != "done" {
            std::io::stdin().read_line(&mut String::new())?;
        }
    }
    Ok(())
}

/// Enqueues `total` jobs, then claims and acks them `batch` at a time
/// with the server's statistics read only before and after the whole pass,
/// and prints what the pass cost the server per job: its CPU time, then the
/// commands the scripts called (Redis counts those too; the rest of
/// EVALSHA's time is Lua itself). The bench's drain claims about 128 jobs
/// per call. `gate`: see the module doc. `pass`: plain jobs, the members
/// of one fan-in (whose callback the pass drains too), or keyed jobs.
async fn drain_pass(
    s: &RedisStorage,
    conn: &mut redis::aio::MultiplexedConnection,
    batch: usize,
    total: usize,
    gate: bool,
    pass: Pass,
) -> Result<(), BoxError> {
    let chunks: Vec<Vec<NewJob>> = (0..total)
        .step_by(1000)
        .map(|start| jobs((total - start).min(1000), (pass == Pass::Keyed).then_some(start)))
        .collect::<Result<_, _>>()?;
    if pass == Pass::Keyed {
        let one = jq_core::QueueLimits { concurrency: Some(1), rate: None };
        s.require_keys()?.set_key_limits(&QueueName::new("bench")?, None, &one).await?;
    }
    let plan = if pass == Pass::Fanin {
        let callback = jobs(1, None)?.into_iter().next().ok_or("no callback job")?;
        Some(Batch::new(chunks.concat(), callback).plan()?)
    } else {
        None
    };
    gate_at("ready", gate)?;
    if let Some(plan) = &plan {
        s.enqueue_workflow(plan).await?;
    } else {
        for chunk in chunks {
            s.enqueue(chunk).await?;
        }
    }
    let request = ClaimRequest::new(vec![QueueName::new("bench")?], batch, Duration::from_secs(30), "cost");
    let before = command_stats(conn).await?;
    let cpu_before = server_cpu_usec(conn).await?;
    gate_at("enqueued", gate)?;
    let t = Instant::now();
    let mut done = 0;
    loop {
        let request = ClaimRequest { token: jq_core::storage::LeaseToken::new(), ..request.clone() };
        let claimed = s.claim(&request).await?.jobs;
        if claimed.is_empty() {
            break;
        }
        done += claimed.len();
        s.settle(
            claimed
                .iter()
                .filter_map(|j| j.lease_ref())
                .map(|lease| Settlement { lease, outcome: Outcome::Ack })
                .collect(),
        )
        .await?;
    }
    let wall = t.elapsed();
    gate_at("drained", gate)?;
    let cpu = server_cpu_usec(conn).await? - cpu_before;
    let after = command_stats(conn).await?;
    let per_job = |usec: f64| usec / done.max(1) as f64;
    println!(
        "drain pass{}, {batch:>3} at a time   {:>6.2} us/job server CPU  {:>8.0} jobs/s wall",
        match pass {
            Pass::Plain => "",
            Pass::Fanin => " (fan-in)",
            Pass::Keyed => " (keyed)",
        },
        per_job(cpu),
        done as f64 / wall.as_secs_f64()
    );
    for (name, (calls, usec)) in &after {
        let (calls0, usec0) = before.get(name).copied().unwrap_or((0, 0));
        if name != "info" && *calls > calls0 {
            println!("  {name:<16} {:>7} calls  {:>6.2} us/job", calls - calls0, per_job((usec - usec0) as f64));
        }
    }
    Ok(())
}
