//! The unique rules (the contract's "Unique rules"): debounce, unique for
//! a period, replace; each under the test clock, and the racy ones with 8
//! producers on 8 connections.

use std::collections::HashSet;
use std::time::Duration;

use jq_core::storage::{Storage, StorageExt, add};
use jq_core::{Error, Job, JobBuilder, JobFilter, JobId, ManualClock, NewJob, Payload, State, UniqueRule};

use super::support::{MICRO, build, builder, claim, claim_one, enqueue_all, get, lease, list_all, queue, same_json};
use crate::Harness;

const WINDOW: Duration = Duration::from_secs(10);
const PRODUCERS: usize = 8;

/// A job of `queue` with unique key `key` and payload `{"n": n}`.
fn keyed(queue: &str, key: &str, n: usize) -> JobBuilder {
    builder(queue, n).unique_key(key)
}

fn payload(n: usize) -> Payload {
    Payload::from_json(format!(r#"{{"n":{n}}}"#)).expect("valid JSON")
}

/// Every job of `queue`.
async fn all_of<S: Storage>(storage: &S, name: &str) -> Vec<Job> {
    list_all(storage, JobFilter { queue: Some(queue(name)), ..JobFilter::default() }).await
}

/// Trailing debounce: enqueues within the window become one job, which
/// takes the last payload and runs once the key was quiet for the window;
/// its other fields stay as the first enqueue stored them.
pub async fn debounce_keeps_the_last_payload_and_runs_after_quiet<H: Harness>(h: &H) {
    let clock = ManualClock::starting_now();
    let storage = h.connect(clock.clock()).await;
    let first = build(keyed("deb", "doc-7", 0).max_attempts(3).debounce(WINDOW), &clock);
    let id = enqueue_all(&storage, vec![first.clone()]).await[0];
    let created = clock.now();
    let job = get(&storage, id).await;
    assert_eq!((job.state, job.run_at), (State::Scheduled, add(created, WINDOW)), "runs a window after");

    for n in 1..=3 {
        clock.advance(Duration::from_secs(4));
        let again = build(keyed("deb", "doc-7", n).debounce(WINDOW), &clock);
        let answer = storage.enqueue_one(again.clone()).await.expect("enqueue");
        assert_eq!(answer, id, "enqueue {n} answers the waiting job");
        assert!(matches!(storage.get(again.id).await, Err(Error::NotFound { .. })), "enqueue {n} stores nothing new");
        let job = get(&storage, id).await;
        assert!(same_json(&job.payload, &payload(n)), "enqueue {n}: the last payload wins, got {:?}", job.payload);
        assert_eq!(job.run_at, add(clock.now(), WINDOW), "enqueue {n}: the window starts again");
        assert_eq!((job.created_at, job.max_attempts, job.attempts), (created, 3, 0), "enqueue {n}: the rest is kept");
    }
    clock.advance(WINDOW - MICRO);
    assert!(claim(&storage, &["deb"], 5, "w").await.is_empty(), "not before the key was quiet for the window");
    clock.advance(MICRO);
    let run = claim_one(&storage, "deb", "w").await;
    assert_eq!(run.id, id);
    assert!(same_json(&run.payload, &payload(3)));
    storage.ack(lease(&run)).await.expect("ack");
    assert_eq!(all_of(&storage, "deb").await.len(), 1, "one run for four enqueues");

    // A batch: the second job of the key debounces into the first.
    let (a, b) = (
        build(keyed("deb", "batch", 10).debounce(WINDOW), &clock),
        build(keyed("deb", "batch", 11).debounce(WINDOW), &clock),
    );
    let ids = storage.enqueue(vec![a.clone(), b]).await.expect("enqueue");
    assert_eq!(ids, vec![a.id, a.id]);
    assert!(same_json(&get(&storage, a.id).await.payload, &payload(11)));
}

/// A steady stream of debounced enqueues cannot postpone the job past
/// `max_delay` after its first enqueue: then it is due, and a worker takes
/// it; an enqueue after that (the job Running) stores a new job for after
/// it and leaves the running one as it is.
pub async fn debounce_max_delay_bounds_a_steady_stream<H: Harness>(h: &H) {
    let clock = ManualClock::starting_now();
    let storage = h.connect(clock.clock()).await;
    let max = Duration::from_secs(25);
    let rule = |n: usize, clock: &ManualClock| build(keyed("stream", "k", n).debounce(WINDOW).max_delay(max), clock);
    let id = enqueue_all(&storage, vec![rule(0, &clock)]).await[0];
    let created = clock.now();
    for n in 1..=4 {
        clock.advance(Duration::from_secs(5));
        assert_eq!(storage.enqueue_one(rule(n, &clock)).await.expect("enqueue"), id);
        let job = get(&storage, id).await;
        let expected = add(clock.now(), WINDOW).min(add(created, max));
        assert_eq!(job.run_at, expected, "enqueue {n}: the window, capped at max_delay after the first");
    }
    // 20 s in: the next enqueue would move it to 30 s, past the cap.
    assert_eq!(get(&storage, id).await.run_at, add(created, max));
    clock.advance(Duration::from_secs(5));
    assert_eq!(storage.enqueue_one(rule(5, &clock)).await.expect("enqueue"), id);
    let job = get(&storage, id).await;
    assert_eq!((job.state, job.run_at), (State::Pending, add(created, max)), "due at the cap, whatever follows");
    let run = claim_one(&storage, "stream", "w").await;
    assert_eq!(run.id, id);
    assert!(same_json(&run.payload, &payload(5)));

    // Running: never changed; the next enqueue is a new job beside it.
    let after = rule(6, &clock);
    assert_eq!(storage.enqueue_one(after.clone()).await.expect("enqueue"), after.id, "a new job for after the run");
    assert_eq!(get(&storage, id).await, run, "the running job is left as it is");
    let next = get(&storage, after.id).await;
    assert_eq!((next.state, next.run_at), (State::Scheduled, add(clock.now(), WINDOW)));
    clock.advance(Duration::from_secs(1));
    assert_eq!(storage.enqueue_one(rule(7, &clock)).await.expect("enqueue"), after.id, "debounces into the new job");
    assert!(same_json(&get(&storage, after.id).await.payload, &payload(7)));
    let plain = build(keyed("stream", "k", 8), &clock);
    assert_eq!(storage.enqueue_one(plain).await.expect("enqueue"), id.min(after.id), "plain: the smallest live id");
    storage.ack(lease(&run)).await.expect("ack");
    assert_eq!(get(&storage, after.id).await.state, State::Scheduled, "the key's waiting job outlives the run");
}

/// 8 producers on 8 connections debounce one key at once: exactly one
/// job is stored, every enqueue answers its id, and its payload is one of
/// theirs.
pub async fn debounce_under_concurrent_producers<H: Harness>(h: &H) {
    const EACH: usize = 6;
    let clock = ManualClock::starting_now();
    let storage = h.connect(clock.clock()).await;
    let mut tasks = Vec::new();
    for p in 0..PRODUCERS {
        let conn = h.connect(clock.clock()).await;
        let clock = clock.clone();
        tasks.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for i in 0..EACH {
                let job = build(keyed("race", "k", p * EACH + i).debounce(WINDOW), &clock);
                answers.push(conn.enqueue_one(job).await.expect("enqueue"));
            }
            answers
        }));
    }
    let mut answers: HashSet<JobId> = HashSet::new();
    for task in tasks {
        answers.extend(task.await.expect("producer"));
    }
    let stored = all_of(&storage, "race").await;
    assert_eq!(stored.len(), 1, "one job for {} enqueues: {stored:?}", PRODUCERS * EACH);
    assert_eq!(answers, HashSet::from([stored[0].id]), "every enqueue answers the one job");
    let n = stored[0].payload.as_str();
    assert!((0..PRODUCERS * EACH).any(|i| same_json(&stored[0].payload, &payload(i))), "a producer's payload: {n}");
    assert_eq!((stored[0].state, stored[0].run_at), (State::Scheduled, add(clock.now(), WINDOW)));
}

/// Unique for a period: while a job of the key was created less than the
/// period ago, whatever its state (Completed, Dead, Cancelled too), or a
/// live one holds it, nothing is stored and the holder's id answers; once
/// the period has passed and no live job holds it, the job is stored.
pub async fn unique_period_counts_finished_jobs<H: Harness>(h: &H) {
    let clock = ManualClock::starting_now();
    let storage = h.connect(clock.clock()).await;
    let period = Duration::from_secs(60);
    let rule = |key: &str, n: usize, clock: &ManualClock| build(keyed("per", key, n).unique_for(period), clock);
    let first = rule("k", 0, &clock);
    let id = enqueue_all(&storage, vec![first]).await[0];
    assert_eq!(get(&storage, id).await.state, State::Pending, "stored as given: runs at once");
    let job = claim_one(&storage, "per", "w").await;
    storage.ack(lease(&job)).await.expect("ack");
    clock.advance(period - MICRO);
    let dropped = rule("k", 1, &clock);
    assert_eq!(storage.enqueue_one(dropped.clone()).await.expect("enqueue"), id, "a finished job within the period");
    assert!(matches!(storage.get(dropped.id).await, Err(Error::NotFound { .. })));
    clock.advance(MICRO);
    let next = rule("k", 2, &clock);
    assert_eq!(storage.enqueue_one(next.clone()).await.expect("enqueue"), next.id, "the period has passed");

    // A live holder blocks past the period, as a plain unique key.
    clock.advance(period * 2);
    assert_eq!(storage.enqueue_one(rule("k", 3, &clock)).await.expect("enqueue"), next.id, "live: still held");

    // Cancelled and Dead jobs count within the period too.
    let cancelled = enqueue_all(&storage, vec![rule("c", 0, &clock)]).await[0];
    storage.cancel(cancelled).await.expect("cancel");
    assert_eq!(storage.enqueue_one(rule("c", 1, &clock)).await.expect("enqueue"), cancelled);
    let dead =
        enqueue_all(&storage, vec![build(keyed("per", "d", 0).max_attempts(1).unique_for(period), &clock)]).await[0];
    let job = claim(&storage, &["per"], 5, "w").await.into_iter().find(|j| j.id == dead).expect("claimed");
    storage.bury(lease(&job), "poison").await.expect("bury");
    assert_eq!(storage.enqueue_one(rule("d", 1, &clock)).await.expect("enqueue"), dead);
    // Leading debounce is the same rule: the first runs, the rest within the window drop.
    let lead = build(keyed("per", "lead", 0).debounce_leading(WINDOW), &clock);
    assert_eq!(lead.unique_rule, Some(UniqueRule::Period(WINDOW)));
    assert_eq!(storage.enqueue_one(lead.clone()).await.expect("enqueue"), lead.id);
    assert_eq!(get(&storage, lead.id).await.state, State::Pending, "the leading enqueue runs at once");
    let plain = build(keyed("per", "lead", 1), &clock);
    assert_eq!(storage.enqueue_one(plain).await.expect("enqueue"), lead.id);
}

/// 8 producers on 8 connections enqueue one key for a period at once,
/// three times: with nothing stored (one job is stored), within the period
/// of that job once Completed (nothing is), and after it (one more is).
pub async fn unique_period_under_concurrent_producers<H: Harness>(h: &H) {
    const EACH: usize = 4;
    let period = Duration::from_secs(60);
    let clock = ManualClock::starting_now();
    let storage = h.connect(clock.clock()).await;
    let mut conns = Vec::new();
    for _ in 0..PRODUCERS {
        conns.push(h.connect(clock.clock()).await);
    }
    let round = |round: usize| {
        let mut tasks = Vec::new();
        for (p, conn) in conns.iter().enumerate() {
            let conn = conn.clone();
            let clock = clock.clone();
            tasks.push(tokio::spawn(async move {
                let mut answers = Vec::new();
                for i in 0..EACH {
                    let job = build(keyed("prace", "k", round * 100 + p * EACH + i).unique_for(period), &clock);
                    answers.push(conn.enqueue_one(job).await.expect("enqueue"));
                }
                answers
            }));
        }
        async move {
            let mut answers: HashSet<JobId> = HashSet::new();
            for task in tasks {
                answers.extend(task.await.expect("producer"));
            }
            answers
        }
    };
    let answers = round(0).await;
    let stored = all_of(&storage, "prace").await;
    assert_eq!(stored.len(), 1, "one job for {} enqueues: {stored:?}", PRODUCERS * EACH);
    let first = stored[0].id;
    assert_eq!(answers, HashSet::from([first]));
    let job = claim_one(&storage, "prace", "w").await;
    storage.ack(lease(&job)).await.expect("ack");

    clock.advance(period / 2);
    assert_eq!(round(1).await, HashSet::from([first]), "the Completed job holds the key for its period");
    assert_eq!(all_of(&storage, "prace").await.len(), 1);

    clock.advance(period / 2);
    let answers = round(2).await;
    let stored = all_of(&storage, "prace").await;
    assert_eq!(stored.len(), 2, "one more job once the period passed: {stored:?}");
    let second = stored.iter().map(|j| j.id).find(|id| *id != first).expect("a second job");
    assert_eq!(answers, HashSet::from([second]));
}

/// Replace: a waiting job of the key (Scheduled or Pending) takes the new
/// payload and run time and keeps its id and the rest; a running one is
/// never changed, and the enqueue stores a new job beside it.
pub async fn replace_changes_a_waiting_job_only<H: Harness>(h: &H) {
    let clock = ManualClock::starting_now();
    let storage = h.connect(clock.clock()).await;
    let first = build(keyed("rep", "k", 0).delay(Duration::from_secs(60)).max_attempts(4), &clock);
    let id = enqueue_all(&storage, vec![first]).await[0];
    let created = clock.now();
    clock.advance(Duration::from_secs(1));
    let later = build(keyed("rep", "k", 1).delay(Duration::from_secs(5)).replace(), &clock);
    assert_eq!(storage.enqueue_one(later.clone()).await.expect("enqueue"), id);
    assert!(matches!(storage.get(later.id).await, Err(Error::NotFound { .. })));
    let job = get(&storage, id).await;
    assert!(same_json(&job.payload, &payload(1)));
    assert_eq!((job.state, job.run_at), (State::Scheduled, add(clock.now(), Duration::from_secs(5))));
    assert_eq!((job.created_at, job.max_attempts), (created, 4), "the rest is kept");

    let now = build(keyed("rep", "k", 2).replace(), &clock);
    assert_eq!(storage.enqueue_one(now).await.expect("enqueue"), id);
    let job = get(&storage, id).await;
    assert_eq!((job.state, job.run_at), (State::Pending, clock.now()), "no run time: now, so Pending");
    assert!(same_json(&job.payload, &payload(2)));
    let back = build(keyed("rep", "k", 3).delay(Duration::from_secs(30)).replace(), &clock);
    assert_eq!(storage.enqueue_one(back).await.expect("enqueue"), id);
    assert_eq!(get(&storage, id).await.state, State::Scheduled, "a Pending job can be put back to Scheduled");
    clock.advance(Duration::from_secs(30));

    let run = claim_one(&storage, "rep", "w").await;
    assert!(same_json(&run.payload, &payload(3)));
    let beside = build(keyed("rep", "k", 4).replace(), &clock);
    assert_eq!(storage.enqueue_one(beside.clone()).await.expect("enqueue"), beside.id, "stored beside the run");
    assert_eq!(get(&storage, id).await, run, "the running job is left as it is");
    let (a, b) = (build(keyed("rep", "k", 5).replace(), &clock), build(keyed("rep", "k", 6).replace(), &clock));
    assert_eq!(storage.enqueue(vec![a, b]).await.expect("enqueue"), vec![beside.id, beside.id]);
    assert!(same_json(&get(&storage, beside.id).await.payload, &payload(6)), "batch order: the last one wins");

    // Finished holders do not count: a new job is stored.
    storage.ack(lease(&run)).await.expect("ack");
    let job = claim_one(&storage, "rep", "w").await;
    storage.ack(lease(&job)).await.expect("ack");
    let fresh = build(keyed("rep", "k", 7).replace(), &clock);
    assert_eq!(storage.enqueue_one(fresh.clone()).await.expect("enqueue"), fresh.id);
}

/// A rule needs a unique key and takes bounded windows; a debounced job
/// takes no run time of its own; a keyed job takes no rule. Each is
/// refused with `InvalidInput` by the builder and by enqueue, and nothing
/// of the batch is stored.
pub async fn unique_rules_refuse_bad_input<H: Harness>(h: &H) {
    let clock = ManualClock::starting_now();
    let storage = h.connect(clock.clock()).await;
    assert!(builder("bad", 0).debounce(WINDOW).build_at(clock.now()).is_err(), "no unique key");
    assert!(builder("bad", 0).unique_key("k").max_delay(WINDOW).build_at(clock.now()).is_err(), "no debounce");
    assert!(keyed("bad", "k", 0).delay(WINDOW).debounce(WINDOW).build_at(clock.now()).is_err(), "a delay");
    let good = build(builder("bad", 0), &clock);
    let forged: [NewJob; 4] = [
        NewJob { unique_key: None, unique_rule: Some(UniqueRule::Replace), ..build(builder("bad", 1), &clock) },
        NewJob { unique_rule: Some(UniqueRule::Period(Duration::ZERO)), ..build(keyed("bad", "k", 2), &clock) },
        NewJob {
            unique_rule: Some(UniqueRule::Debounce { window: WINDOW, max_delay: None }),
            run_at: Some(clock.now()),
            ..build(keyed("bad", "k", 3), &clock)
        },
        NewJob {
            key: Some("tenant".into()),
            unique_rule: Some(UniqueRule::Replace),
            ..build(keyed("bad", "k", 4), &clock)
        },
    ];
    for bad in forged {
        let got = storage.enqueue(vec![good.clone(), bad.clone()]).await;
        // A backend without keys refuses the keyed one as such.
        let keyed_refused = bad.key.is_some() && matches!(got, Err(Error::Unsupported { .. }));
        assert!(matches!(got, Err(Error::InvalidInput { .. })) || keyed_refused, "{bad:?}: {got:?}");
        assert!(all_of(&storage, "bad").await.is_empty(), "nothing of the batch is stored");
    }
}
