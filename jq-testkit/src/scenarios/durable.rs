//! Durable jobs ([`Capability::Durable`](jq_core::storage::Capability::Durable)):
//! the contract's "Durable jobs". Checkpoints fenced by the lease and kept
//! across an expired lease, sleeps that hold no slot and end at their time
//! (the manual clock), signals sent before and after their wait each taken
//! once, the limits refused alike on every path, and a worker pool that
//! replays a killed run's steps and ends a mismatched one Dead naming the
//! step.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use jq_core::durable::{
    EntryKind, MAX_JOURNAL_BYTES, MAX_SIGNALS, MAX_STEP_RESULT_BYTES, MAX_STEPS, Record, Suspend, Suspended,
};
use jq_core::storage::{DurableLimit, DurableStorage, LeaseRef, Outcome, Storage, StorageExt};
use jq_core::{
    DurableContext, Error, HandlerError, HandlerResult, JobId, JobType, ManualClock, NewJob, Payload, State, Waited,
    WorkerPool,
};
use serde::{Deserialize, Serialize};

use super::support::{LEASE, build, claim, claim_one, enqueue_all, get, lease, manual_clock, payload_of_size, settle};
use crate::Harness;

const QUEUE: &str = "durable";
/// The longest any condition below is waited for.
const PATIENCE: Duration = Duration::from_secs(30);

/// The payload of the pool scenarios' durable jobs.
#[derive(Serialize, Deserialize)]
struct Flow {
    n: u32,
}

impl JobType for Flow {
    const KIND: &'static str = "durable-flow";
    const QUEUE: &'static str = QUEUE;
}

fn flow(clock: &ManualClock, n: u32) -> NewJob {
    build(NewJob::builder(Flow::KIND, Payload::of(&Flow { n }).expect("json")).queue(QUEUE), clock)
}

fn json(value: impl Serialize) -> Payload {
    Payload::of(&value).expect("json")
}

fn durable<S: Storage>(storage: &S) -> &dyn DurableStorage {
    storage.require_durable().expect("the storage declares durable jobs")
}

/// One durable job, enqueued and claimed: its id and lease.
async fn claimed<S: Storage>(storage: &S, clock: &ManualClock) -> (JobId, LeaseRef) {
    let ids = enqueue_all(storage, vec![flow(clock, 0)]).await;
    let job = claim_one(storage, QUEUE, "w1").await;
    assert_eq!(job.id, ids[0]);
    (job.id, lease(&job))
}

/// Polls `check` every 5 ms until it gives `Some`; panics after [`PATIENCE`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {PATIENCE:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn state_of<S: Storage>(storage: &S, id: JobId, state: State) -> Option<()> {
    (storage.get(id).await.ok()?.state == state).then_some(())
}

/// A checkpoint is fenced by the lease and kept across an expired lease:
/// the recovered job's next claim reads it; the stale worker's checkpoint
/// is refused and stores nothing; a resend of the same record changes
/// nothing; another name at a recorded place, or a gap, is a mismatch.
pub async fn durable_step_survives_an_expired_lease_and_stale_writes_are_refused<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let (id, first) = claimed(&storage, &clock).await;
    durable(&storage).checkpoint(first, &Record::step(0, "charge", json("ch_1"))).await.expect("checkpoint");

    clock.advance(LEASE + Duration::from_secs(1));
    assert_eq!(storage.recover().await.expect("recover"), 1, "the killed worker's lease expires");
    let second = claim_one(&storage, QUEUE, "w2").await;
    let second = lease(&second);
    let journal = durable(&storage).journal(id).await.expect("journal");
    assert_eq!(journal.entries.len(), 1, "the step survives the lost lease");
    let entry = &journal.entries[0];
    assert_eq!((entry.index, entry.name.as_str(), entry.kind), (0, "charge", EntryKind::Step));
    assert_eq!(entry.value.as_ref().map(|v| v.decode::<String>().ok()), Some(Some("ch_1".to_owned())));

    let stale = durable(&storage).checkpoint(first, &Record::step(1, "ship", json(1))).await;
    assert!(matches!(stale, Err(Error::LeaseLost { .. })), "the stale worker is refused: {stale:?}");
    durable(&storage).checkpoint(second, &Record::step(0, "charge", json("other"))).await.expect("a resend");
    let mismatch = durable(&storage).checkpoint(second, &Record::step(0, "bill", json(1))).await;
    assert!(
        matches!(&mismatch, Err(Error::JournalMismatch { index: 0, recorded: Some(r), .. }) if r.contains("charge")),
        "another step at a recorded place: {mismatch:?}"
    );
    let gap = durable(&storage).checkpoint(second, &Record::step(2, "later", json(1))).await;
    assert!(matches!(gap, Err(Error::JournalMismatch { index: 2, recorded: None, .. })), "a gap: {gap:?}");
    durable(&storage).checkpoint(second, &Record::step(1, "ship", json(2))).await.expect("next step");
    let journal = durable(&storage).journal(id).await.expect("journal");
    let names: Vec<&str> = journal.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["charge", "ship"], "nothing refused was stored");
    assert_eq!(journal.entries[0].value.as_ref().and_then(|v| v.decode::<String>().ok()).as_deref(), Some("ch_1"));

    settle(&storage, second, Outcome::Ack).await.expect("ack");
    let late = durable(&storage).checkpoint(second, &Record::step(2, "late", json(1))).await;
    assert!(matches!(late, Err(Error::LeaseLost { .. })), "a finished job takes no checkpoint: {late:?}");
    let unknown = durable(&storage).journal(JobId::new()).await;
    assert!(matches!(unknown, Err(Error::NotFound { .. })), "{unknown:?}");
}

/// A sleep ends the run without counting an attempt: the job waits
/// Scheduled with no lease (no claim takes it, so it holds no slot) and is
/// claimable at its instant; the replay's sleep is Due and records nothing
/// more.
pub async fn durable_sleep_holds_no_slot_and_runs_at_its_time<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let (id, first) = claimed(&storage, &clock).await;
    durable(&storage).checkpoint(first, &Record::step(0, "a", json(1))).await.expect("checkpoint");
    let until = jq_core::storage::add(clock.now(), Duration::from_secs(3_600));
    let answer = durable(&storage).suspend(first, &Suspend::Sleep { index: 1, until }).await.expect("sleep");
    assert_eq!(answer, Suspended::Waiting);
    let job = get(&storage, id).await;
    assert_eq!((job.state, job.attempts, job.lease.is_none()), (State::Scheduled, 0, true), "{job:?}");
    assert_eq!(job.run_at, until);
    let again = durable(&storage).checkpoint(first, &Record::step(2, "b", json(1))).await;
    assert!(matches!(again, Err(Error::LeaseLost { .. })), "the sleeping run's lease is gone: {again:?}");
    assert!(claim(&storage, &[QUEUE], 10, "w2").await.is_empty(), "a sleeping job is not claimable");

    clock.advance(Duration::from_secs(3_600));
    let job = claim_one(&storage, QUEUE, "w2").await;
    assert_eq!(job.attempts, 1, "the sleep counted no attempt");
    let second = lease(&job);
    let answer = durable(&storage).suspend(second, &Suspend::Sleep { index: 1, until }).await.expect("replay");
    assert_eq!(answer, Suspended::Due, "the replay's sleep is over");
    let journal = durable(&storage).journal(id).await.expect("journal");
    assert_eq!(journal.entries.len(), 2);
    assert_eq!((journal.entries[1].kind, journal.entries[1].until), (EntryKind::Sleep, Some(until)));
    settle(&storage, second, Outcome::Ack).await.expect("ack");
}

/// A signal sent before the wait is kept and taken by it, once: the
/// wait's resend answers it again, and the next wait of the name finds
/// none and waits.
pub async fn durable_signal_sent_before_the_wait_is_taken_once<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let other = h.connect(clock.clock()).await;
    let ids = enqueue_all(&storage, vec![flow(&clock, 0)]).await;
    durable(&other).signal(ids[0], "approved", &json(true)).await.expect("signal");
    let journal = durable(&storage).journal(ids[0]).await.expect("journal");
    assert_eq!(journal.signals.len(), 1, "kept until a wait takes it: {journal:?}");
    let job = claim_one(&storage, QUEUE, "w1").await;
    let run = lease(&job);
    let until = jq_core::storage::add(clock.now(), Duration::from_secs(60));
    let wait = Suspend::Wait { index: 0, name: "approved".into(), until };
    let answer = durable(&storage).suspend(run, &wait).await.expect("wait");
    assert_eq!(answer, Suspended::Signal(json(true)));
    assert_eq!(durable(&storage).suspend(run, &wait).await.expect("resend"), Suspended::Signal(json(true)));
    let journal = durable(&storage).journal(ids[0]).await.expect("journal");
    assert!(journal.signals.is_empty(), "taken: {journal:?}");
    assert_eq!((journal.entries.len(), journal.entries[0].kind), (1, EntryKind::Signal));
    let next = Suspend::Wait { index: 1, name: "approved".into(), until };
    assert_eq!(durable(&storage).suspend(run, &next).await.expect("second wait"), Suspended::Waiting);
    assert_eq!(get(&storage, ids[0]).await.state, State::Scheduled, "no second signal to take");
}

/// A signal sent after the wait wakes the job (Pending at once) and the
/// replayed wait takes it, once; the wait's timeout is the first run's,
/// whatever a replay asks.
pub async fn durable_signal_sent_after_the_wait_wakes_the_job_once<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let other = h.connect(clock.clock()).await;
    let (id, first) = claimed(&storage, &clock).await;
    let until = jq_core::storage::add(clock.now(), Duration::from_secs(3_600));
    let wait = Suspend::Wait { index: 0, name: "approved".into(), until };
    assert_eq!(durable(&storage).suspend(first, &wait).await.expect("wait"), Suspended::Waiting);
    let job = get(&storage, id).await;
    assert_eq!((job.state, job.run_at, job.attempts), (State::Scheduled, until, 0), "waits until its timeout");
    let journal = durable(&storage).journal(id).await.expect("journal");
    assert_eq!(journal.wait.as_ref().map(|w| (w.name.as_str(), w.until)), Some(("approved", until)));

    durable(&other).signal(id, "other", &json(1)).await.expect("another name");
    assert_eq!(get(&storage, id).await.state, State::Scheduled, "a signal of another name wakes nothing");
    clock.advance(Duration::from_secs(1));
    durable(&other).signal(id, "approved", &json("yes")).await.expect("signal");
    let job = get(&storage, id).await;
    assert_eq!((job.state, job.run_at), (State::Pending, clock.now()), "the signal wakes the wait at once");
    let second = lease(&claim_one(&storage, QUEUE, "w2").await);
    let later = Suspend::Wait { index: 0, name: "approved".into(), until: jq_core::storage::add(clock.now(), LEASE) };
    assert_eq!(durable(&storage).suspend(second, &later).await.expect("replay"), Suspended::Signal(json("yes")));
    let journal = durable(&storage).journal(id).await.expect("journal");
    assert_eq!(journal.wait, None, "the wait is over");
    let left: Vec<&str> = journal.signals.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(left, ["other"], "only the signal of another name is left");

    // A timeout: the first deadline holds across a replay that asks later.
    let deadline = jq_core::storage::add(clock.now(), Duration::from_secs(600));
    let wait = Suspend::Wait { index: 1, name: "shipped".into(), until: deadline };
    assert_eq!(durable(&storage).suspend(second, &wait).await.expect("wait"), Suspended::Waiting);
    clock.advance(Duration::from_secs(600));
    let third = lease(&claim_one(&storage, QUEUE, "w3").await);
    let asks_later =
        Suspend::Wait { index: 1, name: "shipped".into(), until: jq_core::storage::add(clock.now(), LEASE) };
    assert_eq!(durable(&storage).suspend(third, &asks_later).await.expect("replay"), Suspended::TimedOut);
    let journal = durable(&storage).journal(id).await.expect("journal");
    assert_eq!(journal.entries.iter().map(|e| e.kind).collect::<Vec<_>>(), [EntryKind::Signal, EntryKind::Timeout]);
    settle(&storage, third, Outcome::Ack).await.expect("ack");
}

/// A signal to an unknown job is NotFound, to a finished one InvalidState,
/// and one over the step result limit is refused naming it; nothing is
/// stored.
pub async fn durable_signal_to_an_unknown_or_finished_job_is_refused<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let unknown = durable(&storage).signal(JobId::new(), "approved", &json(1)).await;
    assert!(matches!(unknown, Err(Error::NotFound { .. })), "{unknown:?}");
    let (id, run) = claimed(&storage, &clock).await;
    let big = durable(&storage).signal(id, "approved", &payload_of_size(MAX_STEP_RESULT_BYTES + 1)).await;
    assert!(
        matches!(big, Err(Error::DurableLimit { limit: DurableLimit::StepResultBytes, .. })),
        "a payload over the limit: {big:?}"
    );
    assert!(durable(&storage).journal(id).await.expect("journal").signals.is_empty(), "nothing stored");
    settle(&storage, run, Outcome::Ack).await.expect("ack");
    let finished = durable(&storage).signal(id, "approved", &json(1)).await;
    assert!(matches!(finished, Err(Error::InvalidState { state: State::Completed, .. })), "{finished:?}");
}

/// A job holds at most [`MAX_SIGNALS`] signals not taken yet: the next
/// is refused naming the limit and stores nothing; a wait that takes one
/// makes room for one more.
pub async fn durable_signals_not_taken_are_bounded<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let (id, run) = claimed(&storage, &clock).await;
    for i in 0..MAX_SIGNALS {
        durable(&storage).signal(id, "tick", &json(i)).await.expect("under the limit");
    }
    let over = durable(&storage).signal(id, "tick", &json("one more")).await;
    assert!(
        matches!(over, Err(Error::DurableLimit { limit: DurableLimit::Signals, size, max })
            if size == MAX_SIGNALS + 1 && max == MAX_SIGNALS),
        "a signal past the limit: {over:?}"
    );
    // Another name counts against the same limit: it bounds what the job holds.
    let other = durable(&storage).signal(id, "other", &json(1)).await;
    assert!(matches!(other, Err(Error::DurableLimit { limit: DurableLimit::Signals, .. })), "{other:?}");
    assert_eq!(durable(&storage).journal(id).await.expect("journal").signals.len(), MAX_SIGNALS, "nothing stored");
    let until = jq_core::storage::add(clock.now(), LEASE);
    let took = durable(&storage).suspend(run, &Suspend::Wait { index: 0, name: "tick".into(), until }).await;
    assert_eq!(took.expect("wait"), Suspended::Signal(json(0)), "the oldest is taken");
    durable(&storage).signal(id, "tick", &json("room again")).await.expect("a taken signal makes room");
    assert_eq!(durable(&storage).journal(id).await.expect("journal").signals.len(), MAX_SIGNALS);
    settle(&storage, run, Outcome::Ack).await.expect("ack");
}

/// Every limit is refused with the error that names it on every path
/// that grows a journal (checkpoint, sleep, a wait taking a signal), and
/// the refused write stores nothing.
pub async fn durable_limits_are_refused_alike_on_every_path<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    fn is<T>(got: &jq_core::Result<T>, limit: DurableLimit) -> bool {
        matches!(got, Err(Error::DurableLimit { limit: l, .. }) if *l == limit)
    }
    // A step's result.
    let (id, run) = claimed(&storage, &clock).await;
    let got =
        durable(&storage).checkpoint(run, &Record::step(0, "big", payload_of_size(MAX_STEP_RESULT_BYTES + 1))).await;
    assert!(is(&got, DurableLimit::StepResultBytes), "{got:?}");
    durable(&storage)
        .checkpoint(run, &Record::step(0, "fits", payload_of_size(MAX_STEP_RESULT_BYTES)))
        .await
        .expect("at the limit");
    settle(&storage, run, Outcome::Ack).await.expect("ack");
    assert_eq!(durable(&storage).journal(id).await.expect("journal").entries.len(), 1);

    // The journal's bytes.
    let (id, run) = claimed(&storage, &clock).await;
    let chunk = 65_000;
    let mut index = 0u32;
    let mut bytes = 0usize;
    loop {
        let record = Record::step(index, format!("s{index}"), payload_of_size(chunk));
        if bytes + record.bytes() > MAX_JOURNAL_BYTES {
            let got = durable(&storage).checkpoint(run, &record).await;
            assert!(is(&got, DurableLimit::JournalBytes), "{got:?}");
            let until = jq_core::storage::add(clock.now(), LEASE);
            let sleep = durable(&storage).suspend(run, &Suspend::Sleep { index, until }).await;
            assert!(sleep.is_ok(), "a sleep adds a few bytes and fits: {sleep:?}");
            break;
        }
        durable(&storage).checkpoint(run, &record).await.expect("under the limit");
        bytes += record.bytes();
        index += 1;
    }
    assert_eq!(durable(&storage).journal(id).await.expect("journal").entries.len(), index as usize + 1);

    // The journal's entries, through checkpoint, sleep and a wait.
    let (id, run) = claimed(&storage, &clock).await;
    for i in 0..MAX_STEPS as u32 {
        durable(&storage).checkpoint(run, &Record::step(i, format!("s{i}"), json(i))).await.expect("under the limit");
    }
    let next = MAX_STEPS as u32;
    let got = durable(&storage).checkpoint(run, &Record::step(next, "one-more", json(1))).await;
    assert!(is(&got, DurableLimit::Steps), "checkpoint: {got:?}");
    let until = jq_core::storage::add(clock.now(), LEASE);
    let got = durable(&storage).suspend(run, &Suspend::Sleep { index: next, until }).await;
    assert!(is(&got, DurableLimit::Steps), "sleep: {got:?}");
    durable(&storage).signal(id, "go", &json(1)).await.expect("signal");
    let got = durable(&storage).suspend(run, &Suspend::Wait { index: next, name: "go".into(), until }).await;
    assert!(is(&got, DurableLimit::Steps), "a wait taking a signal: {got:?}");
    let journal = durable(&storage).journal(id).await.expect("journal");
    assert_eq!((journal.entries.len(), journal.signals.len()), (MAX_STEPS, 1), "nothing refused was stored or taken");
    assert_eq!(get(&storage, id).await.state, State::Running);
    settle(&storage, run, Outcome::Ack).await.expect("ack");
}

/// Purge takes a job's journal and signals with it.
pub async fn durable_purge_takes_the_journal_with_it<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let (id, run) = claimed(&storage, &clock).await;
    durable(&storage).checkpoint(run, &Record::step(0, "a", json(1))).await.expect("checkpoint");
    durable(&storage).signal(id, "s", &json(1)).await.expect("signal");
    settle(&storage, run, Outcome::Ack).await.expect("ack");
    clock.advance(Duration::from_secs(1));
    assert_eq!(storage.purge(State::Completed, clock.now()).await.expect("purge"), 1);
    let gone = durable(&storage).journal(id).await;
    assert!(matches!(gone, Err(Error::NotFound { .. })), "{gone:?}");
}

/// Counts each step body's runs, per step name.
#[derive(Default)]
struct Effects {
    charge: AtomicU32,
    ship: AtomicU32,
    runs: AtomicU32,
}

/// A worker pool replays a killed run: the step the dead worker recorded
/// returns its result without running, the next one runs once, and a
/// sleep ends the run and resumes at its time (the manual clock).
pub async fn durable_pool_replays_a_killed_run_and_sleeps_to_its_time<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let (id, dead) = claimed(&storage, &clock).await;
    // The killed worker got as far as the first step.
    durable(&storage).checkpoint(dead, &Record::step(0, "charge", json("ch_0"))).await.expect("checkpoint");
    clock.advance(LEASE + Duration::from_secs(1));
    storage.recover().await.expect("recover");

    let effects = Arc::new(Effects::default());
    let seen = effects.clone();
    let handle = WorkerPool::new(storage.clone())
        .maintenance(false)
        .poll_interval(Duration::from_millis(10))
        .register_durable::<Flow, _, _>(move |_flow: Flow, ctx: DurableContext| {
            let effects = seen.clone();
            async move {
                effects.runs.fetch_add(1, Ordering::SeqCst);
                let charge: String = ctx
                    .step("charge", async {
                        effects.charge.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, HandlerError>("ch_new".to_owned())
                    })
                    .await?;
                ctx.sleep(Duration::from_secs(3_600)).await?;
                let shipped: String = ctx
                    .step("ship", async {
                        effects.ship.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, HandlerError>(format!("shipped {charge}"))
                    })
                    .await?;
                match ctx.set_result(&shipped) {
                    // Results are part of workflows; without them the run
                    // still completes.
                    Ok(()) | Err(Error::Unsupported { .. }) => {}
                    Err(e) => return Err(HandlerError::bury(e)),
                }
                HandlerResult::Ok(())
            }
        })
        .start()
        .expect("start");
    eventually("the run to sleep", || state_of(&storage, id, State::Scheduled)).await;
    assert_eq!(effects.charge.load(Ordering::SeqCst), 0, "the recorded step did not run again");
    assert_eq!(get(&storage, id).await.attempts, 1, "the sleep gave its attempt back");
    clock.advance(Duration::from_secs(3_600));
    eventually("the job to complete after its sleep", || state_of(&storage, id, State::Completed)).await;
    handle.shutdown().await.expect("shutdown");
    assert_eq!(
        (
            effects.charge.load(Ordering::SeqCst),
            effects.ship.load(Ordering::SeqCst),
            effects.runs.load(Ordering::SeqCst)
        ),
        (0, 1, 2),
        "each step's body ran once per checkpoint; two runs (before and after the sleep)"
    );
    let result = storage.require_workflows().ok().map(|w| w.result(id));
    if let Some(result) = result {
        let result = result.await.expect("result").and_then(|p| p.decode::<String>().ok());
        assert_eq!(result.as_deref(), Some("shipped ch_0"), "the recorded result was replayed");
    }
    let journal = durable(&storage).journal(id).await.expect("journal");
    let kinds: Vec<EntryKind> = journal.entries.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EntryKind::Step, EntryKind::Sleep, EntryKind::Step]);
}

/// A run whose code asks for something else at a recorded place ends Dead
/// at once with an error naming both steps (never retried), even when
/// the handler swallows the error; a patched handler takes the old way
/// for a run recorded before the patch and the new way for new runs.
pub async fn durable_pool_ends_a_mismatch_dead_and_patches_change_code_safely<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    // Two runs of the old code (charge, then email), killed after both
    // steps: one the renamed code meets, one the patched code meets.
    let ids = enqueue_all(&storage, vec![flow(&clock, 1), flow(&clock, 2)]).await;
    for job in claim(&storage, &[QUEUE], 2, "old").await {
        durable(&storage).checkpoint(lease(&job), &Record::step(0, "charge", json(1))).await.expect("checkpoint");
        durable(&storage).checkpoint(lease(&job), &Record::step(1, "email", json(1))).await.expect("checkpoint");
    }
    clock.advance(LEASE + Duration::from_secs(1));
    storage.recover().await.expect("recover");
    let fresh = enqueue_all(&storage, vec![flow(&clock, 3)]).await[0];

    let ways = Arc::new(std::sync::Mutex::new(Vec::<(u32, &'static str)>::new()));
    let seen = ways.clone();
    let handle = WorkerPool::new(storage.clone())
        .maintenance(false)
        .poll_interval(Duration::from_millis(10))
        .register_durable::<Flow, _, _>(move |flow: Flow, ctx: DurableContext| {
            let ways = seen.clone();
            async move {
                if flow.n == 1 {
                    // The renamed step: swallowing the error changes nothing.
                    let renamed = ctx.step("bill", async { Ok::<_, HandlerError>(1) }).await;
                    assert!(renamed.as_ref().is_err_and(HandlerError::is_bury), "a mismatch is a bury");
                    return HandlerResult::Ok(());
                }
                ctx.step("charge", async { Ok::<_, HandlerError>(1) }).await?;
                let way = if ctx.patched("sms-instead-of-email").await? {
                    ctx.step("sms", async { Ok::<_, HandlerError>(1) }).await?;
                    "new"
                } else {
                    ctx.step("email", async { Ok::<_, HandlerError>(1) }).await?;
                    "old"
                };
                ways.lock().unwrap_or_else(|p| p.into_inner()).push((flow.n, way));
                HandlerResult::Ok(())
            }
        })
        .start()
        .expect("start");
    eventually("the mismatch to end Dead", || state_of(&storage, ids[0], State::Dead)).await;
    eventually("the old run to complete", || state_of(&storage, ids[1], State::Completed)).await;
    eventually("the new run to complete", || state_of(&storage, fresh, State::Completed)).await;
    handle.shutdown().await.expect("shutdown");

    let dead = get(&storage, ids[0]).await;
    assert_eq!(dead.attempts, 2, "Dead at its first replay, never retried: {dead:?}");
    let message = dead.errors.last().map(|e| e.message.clone()).unwrap_or_default();
    assert!(message.contains("\"bill\"") && message.contains("\"charge\""), "the error names the steps: {message}");
    let mut ways = ways.lock().unwrap_or_else(|p| p.into_inner()).clone();
    ways.sort_unstable();
    assert_eq!(ways, [(2, "old"), (3, "new")], "old runs keep their recorded way, new ones take the patch");
    let journal = durable(&storage).journal(fresh).await.expect("journal");
    let kinds: Vec<EntryKind> = journal.entries.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EntryKind::Step, EntryKind::Patch, EntryKind::Step]);
}

/// A worker pool's wait for a signal: the run ends while it waits (the
/// job holds no slot), the signal sent from another connection wakes it
/// and the handler gets the payload; a second job's wait times out at its
/// time and the handler gets the typed timeout.
pub async fn durable_pool_waits_for_a_signal_or_its_timeout<H: Harness>(h: &H) {
    let clock = manual_clock();
    let storage = h.connect(clock.clock()).await;
    let other = h.connect(clock.clock()).await;
    let ids = enqueue_all(&storage, vec![flow(&clock, 1), flow(&clock, 2)]).await;
    let got = Arc::new(std::sync::Mutex::new(Vec::<(u32, Option<bool>)>::new()));
    let seen = got.clone();
    let handle = WorkerPool::new(storage.clone())
        .maintenance(false)
        .concurrency(1)
        .poll_interval(Duration::from_millis(10))
        .register_durable::<Flow, _, _>(move |flow: Flow, ctx: DurableContext| {
            let got = seen.clone();
            async move {
                let waited = ctx.wait_for::<bool>("approved", Duration::from_secs(3_600)).await?;
                let value = match waited {
                    Waited::Signal(v) => Some(v),
                    Waited::TimedOut => None,
                };
                got.lock().unwrap_or_else(|p| p.into_inner()).push((flow.n, value));
                HandlerResult::Ok(())
            }
        })
        .start()
        .expect("start");
    // With one slot, both jobs reach their wait: a waiting job holds none.
    eventually("both jobs to wait", || async {
        let (a, b) = (storage.get(ids[0]).await.ok()?, storage.get(ids[1]).await.ok()?);
        (a.state == State::Scheduled && b.state == State::Scheduled).then_some(())
    })
    .await;
    durable(&other).signal(ids[0], "approved", &json(true)).await.expect("signal");
    eventually("the signalled job to complete", || state_of(&storage, ids[0], State::Completed)).await;
    assert_eq!(get(&storage, ids[1]).await.state, State::Scheduled, "the other one still waits");
    clock.advance(Duration::from_secs(3_600));
    eventually("the other to time out and complete", || state_of(&storage, ids[1], State::Completed)).await;
    handle.shutdown().await.expect("shutdown");
    let mut got = got.lock().unwrap_or_else(|p| p.into_inner()).clone();
    got.sort_unstable();
    assert_eq!(got, [(1, Some(true)), (2, None)], "the signal once, the timeout as a typed value");
    let late = durable(&other).signal(ids[0], "approved", &json(false)).await;
    assert!(matches!(late, Err(Error::InvalidState { .. })), "a finished job refuses signals: {late:?}");
}
