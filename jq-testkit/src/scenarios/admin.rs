//! Admin operations: get, list, stats, retry, cancel, purge.

use std::collections::BTreeMap;
use std::time::Duration;

use jq_core::storage::minute_of;
use jq_core::storage::{Storage, StorageExt};
use jq_core::{Error, JobFilter, JobId, State, Throughput};

use super::support::{
    LEASE, build, builder, claim, claim_one, enqueue_all, enqueue_mixed, get, jobs, lease, list_all, manual_clock,
    queue, stats, stats_as_listed,
};
use crate::Harness;

/// get follows a job through its life: lease while Running, errors after a
/// nack, finished_at once terminal.
pub async fn get_returns_the_job<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let id = enqueue_all(&storage, vec![build(builder("q", 0).max_attempts(3), &clock)]).await[0];
    let claimed = claim_one(&storage, "q", "w").await;
    let running = get(&storage, id).await;
    assert_eq!(running, claimed, "get shows what claim returned");
    clock.advance(Duration::from_secs(1));
    storage.nack(lease(&claimed), "first failure", Duration::ZERO).await.expect("nack");
    let failed = get(&storage, id).await;
    assert_eq!(failed.errors.len(), 1);
    assert_eq!(failed.errors[0].message, "first failure");
    assert_eq!(failed.errors[0].at, clock.now());
    assert_eq!(failed.created_at, running.created_at);
    let again = claim_one(&storage, "q", "w").await;
    clock.advance(Duration::from_secs(1));
    storage.ack(lease(&again)).await.expect("ack");
    let done = get(&storage, id).await;
    assert_eq!(done.state, State::Completed);
    assert_eq!(done.finished_at, Some(clock.now()));
    assert_eq!(done.attempts, 2);
    assert!(done.lease.is_none());
    assert_eq!(done.errors, failed.errors, "errors are kept after success");
}

/// list filters by queue, state and kind, in ascending id order, and pages
/// with `after` across several pages; limit 0 means the default page size.
pub async fn list_filters_and_pages<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let mut all = Vec::new();
    for i in 0..25 {
        let q = if i % 2 == 0 { "q1" } else { "q2" };
        let kind = if i % 3 == 0 { "a" } else { "b" };
        let payload = jq_core::Payload::from_json(format!("{i}")).expect("JSON");
        all.push(build(jq_core::NewJob::builder(kind, payload).queue(q), &clock));
    }
    let ids = enqueue_mixed(h, &storage, all.clone()).await;
    // The two oldest q1 jobs become Running.
    let running: Vec<JobId> = claim(&storage, &["q1"], 2, "w").await.into_iter().map(|j| j.id).collect();
    assert_eq!(running, vec![ids[0], ids[2]]);

    let page = |after: Option<JobId>, limit: usize| JobFilter { after, limit, ..JobFilter::default() };
    let mut seen = Vec::new();
    let mut after = None;
    let mut sizes = Vec::new();
    loop {
        let p = storage.list(&page(after, 7)).await.expect("list");
        sizes.push(p.len());
        let Some(last) = p.last() else { break };
        after = Some(last.id);
        seen.extend(p.iter().map(|j| j.id));
    }
    assert_eq!(sizes, vec![7, 7, 7, 4, 0]);
    assert_eq!(seen, ids, "pages cover every job once, in ascending id order");

    let expect = |pred: &dyn Fn(usize, &jq_core::NewJob) -> bool| -> Vec<JobId> {
        all.iter().enumerate().filter(|(i, j)| pred(*i, j)).map(|(_, j)| j.id).collect()
    };
    let q1 = JobFilter { queue: Some(queue("q1")), limit: 3, ..JobFilter::default() };
    let got: Vec<JobId> = list_all(&storage, q1).await.into_iter().map(|j| j.id).collect();
    assert_eq!(got, expect(&|_, j| j.queue.as_str() == "q1"));

    let kind_a = JobFilter { kind: Some("a".into()), limit: 2, ..JobFilter::default() };
    let got: Vec<JobId> = list_all(&storage, kind_a).await.into_iter().map(|j| j.id).collect();
    assert_eq!(got, expect(&|_, j| j.kind == "a"));

    let running_filter = JobFilter { state: Some(State::Running), ..JobFilter::default() };
    let got: Vec<JobId> = list_all(&storage, running_filter).await.into_iter().map(|j| j.id).collect();
    assert_eq!(got, running);

    let combined = JobFilter {
        queue: Some(queue("q1")),
        state: Some(State::Pending),
        kind: Some("a".into()),
        limit: 1,
        ..JobFilter::default()
    };
    let got: Vec<JobId> = list_all(&storage, combined).await.into_iter().map(|j| j.id).collect();
    assert_eq!(got, expect(&|i, j| j.queue.as_str() == "q1" && j.kind == "a" && i != 0 && i != 2));

    let none = JobFilter { queue: Some(queue("nowhere")), ..JobFilter::default() };
    assert!(storage.list(&none).await.expect("list").is_empty());

    let bulk = enqueue_all(&storage, jobs(&clock, "bulk", 120)).await;
    let first = storage.list(&JobFilter { queue: Some(queue("bulk")), ..JobFilter::default() }).await.expect("list");
    assert_eq!(first.len(), JobFilter::DEFAULT_LIMIT, "limit 0 means the default page size");
    assert_eq!(first.iter().map(|j| j.id).collect::<Vec<_>>(), bulk[..JobFilter::DEFAULT_LIMIT].to_vec());
}

/// throughput counts the jobs that reached Completed or Dead per queue and
/// minute of their finish; cancelled, running, pending and retried jobs are
/// not counted; `since` leaves the minutes before its own out; and it
/// agrees with the reference tally over `list`.
pub async fn throughput_counts_finished_jobs_per_minute<H: Harness>(h: &H) {
    let clock = manual_clock();
    let t0 = minute_of(clock.now());
    let at = |secs: u64| t0 + chrono::TimeDelta::seconds(secs as i64);
    clock.set(at(5));
    let storage = h.connect(clock.clock()).await;
    // Claims `outcomes.len()` jobs of `q` and acks (true) or kills (false) each.
    async fn finish<S: Storage>(storage: &S, q: &str, outcomes: &[bool]) -> Vec<JobId> {
        let claimed = claim(storage, &[q], outcomes.len(), "w").await;
        assert_eq!(claimed.len(), outcomes.len());
        for (job, ok) in claimed.iter().zip(outcomes) {
            if *ok {
                storage.ack(lease(job)).await.expect("ack");
            } else {
                storage.bury(lease(job), "failed").await.expect("bury");
            }
        }
        claimed.iter().map(|j| j.id).collect()
    }
    // Minute 0.
    enqueue_all(&storage, jobs(&clock, "t1", 3)).await;
    enqueue_all(&storage, jobs(&clock, "t2", 1)).await;
    finish(&storage, "t1", &[true, true, false]).await;
    finish(&storage, "t2", &[true]).await;
    // Minute 1, its last second.
    clock.set(at(119));
    enqueue_all(&storage, jobs(&clock, "t1", 1)).await;
    enqueue_all(&storage, jobs(&clock, "t2", 2)).await;
    finish(&storage, "t1", &[true]).await;
    let t2_dead = finish(&storage, "t2", &[false, false]).await;
    // Minute 3: one dead, one left running, one cancelled, one pending.
    clock.set(at(181));
    let t1 = enqueue_all(&storage, jobs(&clock, "t1", 4)).await;
    let claimed = claim(&storage, &["t1"], 2, "w").await;
    storage.bury(lease(&claimed[0]), "failed").await.expect("bury");
    let untouched: Vec<JobId> = t1.iter().copied().filter(|id| !claimed.iter().any(|j| j.id == *id)).collect();
    storage.cancel(untouched[0]).await.expect("cancel");
    // A dead job given another try is not dead any more.
    storage.retry(t2_dead[0]).await.expect("retry");

    let minute = |m: i64| t0 + chrono::TimeDelta::minutes(m);
    let row = |queue: &str, m: i64, completed: u64, dead: u64| Throughput {
        queue: queue.to_owned(),
        minute: minute(m),
        completed,
        dead,
    };
    let everything =
        storage.require_throughput().expect("throughput").throughput(minute(-60)).await.expect("throughput");
    assert_eq!(
        everything,
        vec![row("t1", 0, 2, 1), row("t1", 1, 1, 0), row("t1", 3, 0, 1), row("t2", 0, 1, 0), row("t2", 1, 0, 1)]
    );
    assert_eq!(
        everything,
        Throughput::tally(&list_all(&storage, JobFilter::default()).await, minute(-60)),
        "agrees with list"
    );
    let since = storage.require_throughput().expect("throughput").throughput(at(70)).await.expect("throughput");
    assert_eq!(
        since,
        vec![row("t1", 1, 1, 0), row("t1", 3, 0, 1), row("t2", 1, 0, 1)],
        "since rounds down to its minute"
    );
    assert!(
        storage.require_throughput().expect("throughput").throughput(minute(4)).await.expect("throughput").is_empty()
    );
}

/// stats count every job by queue and state, and agree with list for every
/// queue and state.
pub async fn stats_agree_with_list<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    for q in ["s1", "s2"] {
        let scheduled = build(builder(q, 0).delay(Duration::from_secs(3600)), &clock);
        let mut batch = vec![scheduled];
        batch.extend(jobs(&clock, q, 6));
        let ids = enqueue_all(&storage, batch).await;
        let claimed = claim(&storage, &[q], 4, "w").await;
        assert_eq!(claimed.len(), 4);
        storage.ack(lease(&claimed[0])).await.expect("ack");
        storage.bury(lease(&claimed[1]), "bad").await.expect("bury");
        storage.cancel(ids[6]).await.expect("cancel");
    }
    // s3: only completed jobs.
    let c = enqueue_all(&storage, jobs(&clock, "s3", 1)).await;
    let j = claim_one(&storage, "s3", "w").await;
    assert_eq!(j.id, c[0]);
    storage.ack(lease(&j)).await.expect("ack");

    let s = stats(&storage).await;
    let mut expected = BTreeMap::new();
    for q in ["s1", "s2"] {
        let mut counts = jq_core::StateCounts::default();
        counts.set(State::Scheduled, 1);
        counts.set(State::Pending, 1);
        counts.set(State::Running, 2);
        counts.set(State::Completed, 1);
        counts.set(State::Dead, 1);
        counts.set(State::Cancelled, 1);
        expected.insert(q.to_owned(), counts);
    }
    let mut s3 = jq_core::StateCounts::default();
    s3.set(State::Completed, 1);
    expected.insert("s3".to_owned(), s3);
    assert_eq!(s.queues, expected);

    for (q, counts) in &s.queues {
        for state in State::ALL {
            let filter = JobFilter { queue: Some(queue(q)), state: Some(state), limit: 2, ..JobFilter::default() };
            let listed = list_all(&storage, filter).await;
            assert_eq!(listed.len() as u64, counts.get(state), "stats and list disagree on {q}/{state}");
            assert!(listed.iter().all(|j| j.state == state && j.queue.as_str() == q));
        }
    }
    let everything = list_all(&storage, JobFilter::default()).await;
    assert_eq!(everything.len() as u64, s.queues.values().map(|c| c.total()).sum::<u64>());
}

/// retry moves Dead -> Pending (run_at now, errors kept, one more attempt
/// allowed); any other state is InvalidState.
pub async fn retry_dead_job<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let id = enqueue_all(&storage, vec![build(builder("q", 0).max_attempts(2), &clock)]).await[0];
    for _ in 0..2 {
        let job = claim_one(&storage, "q", "w").await;
        storage.nack(lease(&job), "boom", Duration::ZERO).await.expect("nack");
    }
    assert_eq!(get(&storage, id).await.state, State::Dead);
    clock.advance(Duration::from_secs(5));
    storage.retry(id).await.expect("retry a Dead job");
    let job = get(&storage, id).await;
    assert_eq!(job.state, State::Pending);
    assert_eq!(job.run_at, clock.now());
    assert_eq!(job.finished_at, None);
    assert!(job.lease.is_none());
    assert_eq!(job.errors.len(), 2, "errors are kept");
    assert_eq!(job.attempts, 2);
    assert_eq!(job.max_attempts, 3, "one more attempt");
    let r = storage.retry(id).await;
    assert!(matches!(r, Err(Error::InvalidState { id: e, state: State::Pending, operation: "retry" }) if e == id));

    let again = claim_one(&storage, "q", "w").await;
    assert_eq!(again.attempts, 3);
    let r = storage.retry(id).await;
    assert!(matches!(r, Err(Error::InvalidState { state: State::Running, .. })), "{r:?}");
    storage.ack(lease(&again)).await.expect("ack");
    let r = storage.retry(id).await;
    assert!(matches!(r, Err(Error::InvalidState { id: e, state: State::Completed, operation: "retry" }) if e == id));
    assert_eq!(get(&storage, id).await.state, State::Completed);

    // A job buried with attempts to spare keeps its max_attempts.
    let spare = enqueue_all(&storage, vec![build(builder("p", 0).max_attempts(5), &clock)]).await[0];
    let job = claim_one(&storage, "p", "w").await;
    storage.bury(lease(&job), "poison").await.expect("bury");
    storage.retry(spare).await.expect("retry");
    let job = get(&storage, spare).await;
    assert_eq!((job.state, job.max_attempts, job.attempts), (State::Pending, 5, 1));
}

/// cancel moves Pending and Scheduled jobs to Cancelled (never claimed
/// afterwards); a Running or finished job is InvalidState.
pub async fn cancel_pending_and_scheduled<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let pending = build(builder("q", 0), &clock);
    let scheduled = build(builder("q", 1).delay(Duration::from_secs(60)), &clock);
    let running = build(builder("r", 2), &clock);
    let (p, s, r) = (pending.id, scheduled.id, running.id);
    enqueue_mixed(h, &storage, vec![pending, scheduled, running]).await;
    let claimed = claim_one(&storage, "r", "w").await;
    assert_eq!(claimed.id, r);

    clock.advance(Duration::from_secs(1));
    storage.cancel(p).await.expect("cancel Pending");
    storage.cancel(s).await.expect("cancel Scheduled");
    for id in [p, s] {
        let job = get(&storage, id).await;
        assert_eq!(job.state, State::Cancelled);
        assert_eq!(job.finished_at, Some(clock.now()));
    }
    let result = storage.cancel(r).await;
    assert!(
        matches!(result, Err(Error::InvalidState { id, state: State::Running, operation: "cancel" }) if id == r),
        "{result:?}"
    );
    assert_eq!(get(&storage, r).await.token(), claimed.token(), "a refused cancel changes nothing");
    let result = storage.cancel(p).await;
    assert!(matches!(result, Err(Error::InvalidState { state: State::Cancelled, operation: "cancel", .. })));

    clock.advance(Duration::from_secs(120));
    assert_eq!(storage.promote().await.expect("promote"), 0, "a cancelled job is not promoted");
    assert!(claim(&storage, &["q"], 10, "w").await.is_empty(), "a cancelled job is never claimed");
    storage.ack(lease(&claimed)).await.expect("ack");
}

/// purge deletes only jobs of the given terminal state that finished
/// strictly before the cutoff.
pub async fn purge_removes_only_old_terminal<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let ids = enqueue_all(&storage, jobs(&clock, "q", 5)).await;
    // At t0: one Completed, one Dead, one Cancelled.
    let a = claim_one(&storage, "q", "w").await;
    storage.ack(lease(&a)).await.expect("ack");
    let b = claim_one(&storage, "q", "w").await;
    storage.bury(lease(&b), "bad").await.expect("bury");
    storage.cancel(ids[2]).await.expect("cancel");
    let t0 = clock.now();
    // At t1: another Completed; ids[4] stays Pending.
    clock.advance(Duration::from_secs(3600));
    let t1 = clock.now();
    let c = claim_one(&storage, "q", "w").await;
    storage.ack(lease(&c)).await.expect("ack");
    assert_eq!((a.id, b.id, c.id), (ids[0], ids[1], ids[3]));

    assert_eq!(storage.purge(State::Completed, t1).await.expect("purge"), 1, "only the one finished before t1");
    assert!(matches!(storage.get(a.id).await, Err(Error::NotFound { .. })));
    assert_eq!(get(&storage, c.id).await.state, State::Completed, "finished_at == cutoff is kept");
    assert_eq!(storage.purge(State::Completed, t1).await.expect("purge"), 0);
    assert_eq!(storage.purge(State::Cancelled, t0).await.expect("purge"), 0, "not older than the cutoff");
    assert_eq!(get(&storage, ids[2]).await.state, State::Cancelled);
    assert_eq!(storage.purge(State::Dead, t1).await.expect("purge"), 1);
    assert!(matches!(storage.get(b.id).await, Err(Error::NotFound { .. })));
    assert_eq!(get(&storage, ids[2]).await.state, State::Cancelled);
    assert_eq!(get(&storage, ids[4]).await.state, State::Pending);
    let s = stats(&storage).await;
    assert_eq!(
        (s.total(State::Completed), s.total(State::Dead), s.total(State::Cancelled), s.total(State::Pending)),
        (1, 0, 1, 1)
    );
}

/// stats count exactly after every transition into, out of and between the
/// states, each checked against `list`: enqueue, claim, ack, nack to
/// Scheduled and to Dead, bury, release, cancel of a Pending and of a
/// Scheduled job, retry, promote, recover to Pending and to Dead, and a
/// purge of each finished state. Backends that count finished jobs apart
/// from the jobs themselves (PostgreSQL, SQLite) must keep the counts in
/// step with each of these.
pub async fn stats_count_every_transition<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let c = |state: State, s: &jq_core::Stats| s.queues.get("c").map_or(0, |q| q.get(state));
    let mut batch = jobs(&clock, "c", 6);
    batch.push(build(builder("c", 6).max_attempts(1), &clock));
    batch.push(build(builder("c", 7).max_attempts(1), &clock));
    batch.push(build(builder("c", 8).delay(Duration::from_secs(60)), &clock));
    batch.push(build(builder("c", 9).delay(Duration::from_secs(60)), &clock));
    let ids = enqueue_all(&storage, batch).await;
    enqueue_all(&storage, jobs(&clock, "d", 2)).await;
    let s = stats_as_listed(&storage, "enqueue").await;
    assert_eq!((c(State::Pending, &s), c(State::Scheduled, &s)), (8, 2));

    let running = claim(&storage, &["c"], 8, "w").await;
    assert_eq!(running.len(), 8);
    let by_id = |id: JobId| running.iter().find(|j| j.id == id).expect("claimed");
    stats_as_listed(&storage, "claim").await;
    storage.ack(lease(by_id(ids[0]))).await.expect("ack");
    stats_as_listed(&storage, "ack").await;
    storage.nack(lease(by_id(ids[1])), "again", Duration::from_secs(10)).await.expect("nack");
    stats_as_listed(&storage, "nack to Scheduled").await;
    assert_eq!(storage.nack(lease(by_id(ids[6])), "last", Duration::ZERO).await.expect("nack"), State::Dead);
    stats_as_listed(&storage, "nack to Dead").await;
    storage.bury(lease(by_id(ids[2])), "poison").await.expect("bury");
    stats_as_listed(&storage, "bury").await;
    storage.release(lease(by_id(ids[3]))).await.expect("release");
    let s = stats_as_listed(&storage, "release").await;
    assert_eq!((c(State::Completed, &s), c(State::Dead, &s), c(State::Running, &s)), (1, 2, 3));

    storage.cancel(ids[3]).await.expect("cancel Pending");
    stats_as_listed(&storage, "cancel of a Pending job").await;
    storage.cancel(ids[8]).await.expect("cancel Scheduled");
    let s = stats_as_listed(&storage, "cancel of a Scheduled job").await;
    assert_eq!(c(State::Cancelled, &s), 2);
    storage.retry(ids[2]).await.expect("retry");
    let s = stats_as_listed(&storage, "retry").await;
    assert_eq!((c(State::Dead, &s), c(State::Pending, &s)), (1, 1));

    // ids[4], ids[5] and ids[7] are still Running: their leases expire;
    // ids[7] has no attempt left and dies.
    clock.advance(LEASE);
    assert_eq!(storage.recover().await.expect("recover"), 3);
    let s = stats_as_listed(&storage, "recover").await;
    assert_eq!((c(State::Running, &s), c(State::Dead, &s), c(State::Pending, &s)), (0, 2, 3));
    clock.advance(Duration::from_secs(60));
    assert_eq!(storage.promote().await.expect("promote"), 2, "the nacked job and ids[9] are due");
    stats_as_listed(&storage, "promote").await;

    clock.advance(Duration::from_secs(1));
    let cutoff = clock.now();
    for (state, n) in [(State::Completed, 1), (State::Dead, 2), (State::Cancelled, 2)] {
        assert_eq!(storage.purge(state, cutoff).await.expect("purge"), n, "purge of {state}");
        let s = stats_as_listed(&storage, &format!("purge of {state}")).await;
        assert_eq!(c(state, &s), 0);
    }
    let s = stats_as_listed(&storage, "every purge").await;
    assert_eq!((c(State::Pending, &s), s.total(State::Pending)), (5, 7));
}

/// Jobs finished in every state and queue, more than one batch of a
/// backend's purge (10,000 rows per statement or script on PostgreSQL,
/// Redis and SQLite): one `purge` call deletes them all, batch after batch,
/// leaves the jobs finished at or after the cut-off and those of other
/// states, and the counts follow.
pub async fn purge_deletes_every_batch_until_none_is_left<H: Harness>(h: &H) {
    const OLD: usize = 10_250;
    const ROUND: usize = 1_000;
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let mut queues = Vec::new();
    for q in ["p1", "p2"] {
        enqueue_all(&storage, (0..OLD / 2).map(|i| build(builder(q, i), &clock)).collect()).await;
        queues.push(q);
    }
    let mut done = 0;
    while done < OLD {
        let taken = claim(&storage, &queues, ROUND, "w").await;
        assert!(!taken.is_empty(), "every old job is claimable");
        done += taken.len();
        let batch = taken
            .iter()
            .map(|j| jq_core::storage::Settlement { lease: lease(j), outcome: jq_core::storage::Outcome::Ack })
            .collect();
        let settled = storage.settle(batch).await.expect("settle");
        assert!(settled.iter().all(|r| matches!(r, Ok(State::Completed))), "every ack applies");
    }
    // One more completed job at the cut-off, and one dead one before it.
    let late = enqueue_all(&storage, jobs(&clock, "p1", 2)).await;
    let dead = claim_one(&storage, "p1", "w").await;
    storage.bury(lease(&dead), "kept: another state").await.expect("bury");
    clock.advance(Duration::from_secs(1));
    let cutoff = clock.now();
    let kept = claim_one(&storage, "p1", "w").await;
    storage.ack(lease(&kept)).await.expect("ack");
    assert_eq!((dead.id, kept.id), (late[0], late[1]));

    let purged = storage.purge(State::Completed, cutoff).await.expect("purge");
    assert_eq!(purged, OLD as u64, "one call deletes every batch");
    assert_eq!(storage.purge(State::Completed, cutoff).await.expect("purge"), 0, "nothing is left");
    assert_eq!(get(&storage, kept.id).await.state, State::Completed, "finished at the cut-off: kept");
    assert_eq!(get(&storage, dead.id).await.state, State::Dead, "another state: kept");
    let s = stats_as_listed(&storage, "a purge of many batches").await;
    assert_eq!((s.total(State::Completed), s.total(State::Dead), s.queues.len()), (1, 1, 1));
}
