//! The model-based property suite: random sequences of operations run on
//! the backend under test and on a fresh [`MemoryStorage`] (the reference
//! model) side by side, on one shared manual clock, compared after every
//! step.
//!
//! What is compared: the ids each claim takes, every per-item result of
//! complete and heartbeat, counts of promote and recover, get, stats, and
//! the full list of jobs after each step (lease tokens are random, so each
//! side's tokens are mapped to the claim that issued them before
//! comparing; payloads are compared as JSON values). Both sides get the
//! same claim tokens (a claim's token is the caller's), so a lease is known
//! by its job id and token.
//!
//! What is checked on the backend besides: no job lost (every stored id is
//! listed), stats agree with list after every step, a Running job holds exactly the lease of its latest claim (no
//! job held by two valid leases), a claim takes only Pending/Scheduled jobs
//! that are due, `attempts <= max_attempts`, and `errors` has one entry per
//! failed attempt, numbered 1, 2, .... At the end every job is driven to a
//! terminal state and must get there.
//!
//! Claim order is fully determined by (priority, run_at, id) and ids are
//! UUID v7 made once for both sides, so both sides must claim the same ids.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::future::Future;
use std::time::Duration;

use jq_core::storage::{ClaimRequest, LeaseRef, LeaseToken, Outcome, Settlement, Storage};
use jq_core::{Error, Job, JobFilter, JobId, ManualClock, NewJob, Payload, Priority, QueueName, State};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRng, TestRunner};

use crate::__private::harness;
use crate::{Harness, IntoHarness, MemoryStorage};

/// Cases per run unless `PROPTEST_CASES` says otherwise: about 10 s on
/// the PostgreSQL backend on 2 cores, a few seconds on the others. Every
/// CI run draws new sequences, so more cases per run find rare orderings
/// sooner (a shared unique key on Redis surfaced once in many runs of 24).
pub const DEFAULT_CASES: u32 = 64;

/// The lease every simulated worker claims and heartbeats with.
const LEASE: Duration = Duration::from_secs(10);
/// The unit of time of the generated operations: half a lease, so advances
/// land exactly on lease expiries and run_at instants (the `<=` boundaries).
const HALF: Duration = Duration::from_secs(5);
const QUEUES: [&str; 2] = ["m0", "m1"];
const WORKERS: usize = 3;

/// One job of a generated enqueue batch.
#[derive(Clone, Debug)]
pub struct EnqueueSpec {
    /// Index into the two queues.
    pub queue: usize,
    /// Index into [`Priority::ALL`].
    pub priority: usize,
    /// run_at relative to now in half-leases (negative: in the past; 0: none).
    pub delay: i8,
    /// 1 to 4.
    pub max_attempts: u32,
    /// One of a small set of keys, or none.
    pub unique_key: Option<u8>,
    /// Stored with this trace context (one of three), or none.
    pub trace: Option<u8>,
    /// With a unique key, its rule ([`unique_rule`]), or none.
    pub rule: Option<u8>,
}

/// Rule `n` of the generated enqueues, in half-leases: a debounce with and
/// without a max delay, a period, a replace.
fn unique_rule(n: u8) -> jq_core::UniqueRule {
    use jq_core::UniqueRule;
    match n % 4 {
        0 => UniqueRule::Debounce { window: HALF * 2, max_delay: Some(HALF * 3) },
        1 => UniqueRule::Debounce { window: HALF, max_delay: None },
        2 => UniqueRule::Period(HALF * 8),
        _ => UniqueRule::Replace,
    }
}

/// Which lease an operation presents.
#[derive(Clone, Debug)]
pub enum Pick {
    /// One a live simulated worker still holds (possibly stale in truth).
    Held(Index),
    /// Any lease ever issued (mostly stale).
    Any(Index),
    /// A made-up token on a known job id.
    Forged(Index),
}

/// What a settlement does; delays in half-leases.
#[derive(Clone, Debug)]
pub enum OutcomeSpec {
    /// Outcome::Ack.
    Ack,
    /// Outcome::Nack with this delay.
    Retry(u8),
    /// Outcome::Bury.
    Fail,
    /// Outcome::Release with this delay.
    Release(u8),
}

/// One generated operation.
#[derive(Clone, Debug)]
pub enum Op {
    /// Enqueue a batch.
    Enqueue(Vec<EnqueueSpec>),
    /// Claim from queue set 0 (m0), 1 (m1) or 2 (both).
    Claim {
        /// The simulated worker, 0..3.
        worker: usize,
        /// 0..=5.
        limit: usize,
        /// Which queues.
        queues: usize,
    },
    /// One complete batch.
    Complete(Vec<(Pick, OutcomeSpec)>),
    /// One heartbeat batch.
    Heartbeat(Vec<Pick>),
    /// The worker sends its last claim again (`resend`, same token), as
    /// after a lost answer.
    Resend(usize),
    /// Move the clock by this many half-leases.
    Advance(u32),
    /// promote().
    Promote,
    /// recover().
    Recover,
    /// A worker dies and forgets its leases.
    Crash(usize),
    /// get() of a known id.
    Get(Index),
    /// stats().
    Stats,
    /// cancel() of a known id.
    Cancel(Index),
    /// retry() (admin) of a known id.
    Retry(Index),
    /// purge() of a terminal state (index into Completed, Dead, Cancelled)
    /// finished more than this many half-leases ago.
    Purge(usize, u32),
}

fn enqueue_spec() -> impl Strategy<Value = EnqueueSpec> {
    (
        (0..QUEUES.len(), 0..4usize, -2i8..=3, 1u32..=4),
        (prop::option::of(0u8..3), prop::option::of(0u8..3), prop::option::weighted(0.5, 0u8..4)),
    )
        .prop_map(|((queue, priority, delay, max_attempts), (unique_key, trace, rule))| EnqueueSpec {
            queue,
            priority,
            delay,
            max_attempts,
            unique_key,
            trace,
            rule,
        })
}

/// Trace context `n`: with and without a `tracestate`.
fn trace_context(n: u8) -> jq_core::TraceContext {
    let parent = format!("00-{:032x}-{:016x}-01", u128::from(n) + 1, u64::from(n) + 1);
    let state = n.is_multiple_of(2).then(|| format!("jq=t{n},other=x"));
    jq_core::TraceContext::new(&parent, state.as_deref()).unwrap_or_else(|_| jq_core::TraceContext::from_stored(parent))
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![
        6 => any::<Index>().prop_map(Pick::Held),
        3 => any::<Index>().prop_map(Pick::Any),
        1 => any::<Index>().prop_map(Pick::Forged),
    ]
}

fn outcome() -> impl Strategy<Value = OutcomeSpec> {
    prop_oneof![
        4 => Just(OutcomeSpec::Ack),
        3 => (0u8..=2).prop_map(OutcomeSpec::Retry),
        1 => Just(OutcomeSpec::Fail),
        2 => (0u8..=2).prop_map(OutcomeSpec::Release),
    ]
}

/// The generator of one operation.
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop::collection::vec(enqueue_spec(), 1..=3).prop_map(Op::Enqueue),
        4 => (0..WORKERS, 0usize..=5, 0usize..3).prop_map(|(worker, limit, queues)| Op::Claim { worker, limit, queues }),
        1 => (0..WORKERS).prop_map(Op::Resend),
        4 => prop::collection::vec((pick(), outcome()), 1..=3).prop_map(Op::Complete),
        1 => prop::collection::vec(pick(), 1..=2).prop_map(Op::Heartbeat),
        2 => (0u32..=6).prop_map(Op::Advance),
        1 => Just(Op::Promote),
        2 => Just(Op::Recover),
        1 => (0..WORKERS).prop_map(Op::Crash),
        1 => any::<Index>().prop_map(Op::Get),
        1 => Just(Op::Stats),
        1 => any::<Index>().prop_map(Op::Cancel),
        1 => any::<Index>().prop_map(Op::Retry),
        1 => (0usize..3, 0u32..=2).prop_map(|(s, ago)| Op::Purge(s, ago)),
    ]
}

/// Runs the property suite against harnesses made by `setup` (one fresh
/// harness per case; cleaned up only when the case passed), on one
/// multi-thread runtime. Panics with the smallest failing sequence found.
pub fn check<H, F, Fut>(setup: F)
where
    H: Harness,
    F: Fn() -> Fut,
    Fut: Future,
    Fut::Output: IntoHarness<Harness = H>,
{
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_CASES);
    run(TestRunner::new(config(cases)), setup);
}

/// [`check`] with `cases` cases drawn from a fixed seed: the same
/// sequences on every run. For tests that must find a known bug every
/// time (a suite's own mutation tests), where [`check`]'s fresh random
/// sequences would find it only most of the time.
pub fn check_deterministic<H, F, Fut>(cases: u32, setup: F)
where
    H: Harness,
    F: Fn() -> Fut,
    Fut: Future,
    Fut::Output: IntoHarness<Harness = H>,
{
    let config = config(cases);
    let rng = TestRng::deterministic_rng(config.rng_algorithm);
    run(TestRunner::new_with_rng(config, rng), setup);
}

fn config(cases: u32) -> Config {
    Config { cases, max_shrink_iters: 512, failure_persistence: None, ..Config::default() }
}

fn run<H, F, Fut>(mut runner: TestRunner, setup: F)
where
    H: Harness,
    F: Fn() -> Fut,
    Fut: Future,
    Fut::Output: IntoHarness<Harness = H>,
{
    let runtime = crate::__private::runtime();
    let strategy = prop::collection::vec(op(), 1..50);
    let result = runner.run(&strategy, |ops| {
        runtime.block_on(async {
            let h = harness(setup()).await.expect("the backend was reachable when the test began");
            match run_case(&h, &ops).await {
                Ok(()) => {
                    h.cleanup().await;
                    Ok(())
                }
                Err(message) => Err(TestCaseError::fail(message)),
            }
        })
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, ops)) => {
            let steps: Vec<String> = ops.iter().enumerate().map(|(i, op)| format!("  {i}: {op:?}")).collect();
            panic!(
                "the backend disagrees with the reference model: {reason}\nsmallest failing sequence:\n{}",
                steps.join("\n")
            )
        }
        Err(TestError::Abort(reason)) => panic!("property suite aborted: {reason}"),
    }
}

/// A comparable form of an error: its variant and the fields that matter.
#[derive(Debug, PartialEq, Eq)]
enum ErrKey {
    LeaseLost(JobId),
    NotFound(JobId),
    InvalidState(JobId, State, &'static str),
    InvalidInput,
    Other(String),
}

fn err_key(e: &Error) -> ErrKey {
    match e {
        Error::LeaseLost { id } => ErrKey::LeaseLost(*id),
        Error::NotFound { id } => ErrKey::NotFound(*id),
        Error::InvalidState { id, state, operation } => ErrKey::InvalidState(*id, *state, operation),
        Error::InvalidInput { .. } => ErrKey::InvalidInput,
        other => ErrKey::Other(other.to_string()),
    }
}

fn key<T>(r: &jq_core::Result<T>) -> Result<&T, ErrKey> {
    r.as_ref().map_err(err_key)
}

/// A lease handed out by a claim: the job and the claim's token.
type Issued = LeaseRef;

struct Case<'a, S> {
    backend: &'a S,
    model: MemoryStorage,
    clock: ManualClock,
    /// False when the backend refuses enqueue batches over several queues
    /// ([`Harness::cross_queue_batches`]): batches are then split per queue.
    cross_queue_batches: bool,
    issued: Vec<Issued>,
    /// Position in `issued` of each lease.
    tokens: HashMap<(JobId, LeaseToken), usize>,
    /// Each worker's last claim, for [`Op::Resend`].
    last_claim: [Option<ClaimRequest>; WORKERS],
    /// Per job, the lease of its latest claim.
    latest: HashMap<JobId, usize>,
    held: [Vec<usize>; WORKERS],
    /// Every id ever offered to enqueue (stored or deduplicated).
    known: Vec<JobId>,
    /// Every id enqueue returned.
    stored: Vec<JobId>,
    /// The backend's jobs after the previous step.
    before: BTreeMap<JobId, Job>,
    step: usize,
    log: String,
}

macro_rules! same {
    ($case:expr, $backend:expr, $model:expr, $what:expr) => {{
        let (b, m) = (&$backend, &$model);
        if b != m {
            return Err($case.fail(format!("{}: backend {:?}, model {:?}", $what, b, m)));
        }
    }};
}

async fn run_case<H: Harness>(h: &H, ops: &[Op]) -> Result<(), String> {
    let clock = ManualClock::starting_now();
    let backend = h.connect(clock.clock()).await;
    let mut case = Case {
        backend: &backend,
        model: MemoryStorage::new().clock(clock.clock()),
        clock,
        cross_queue_batches: h.cross_queue_batches(),
        issued: Vec::new(),
        tokens: HashMap::new(),
        last_claim: Default::default(),
        latest: HashMap::new(),
        held: Default::default(),
        known: Vec::new(),
        stored: Vec::new(),
        before: BTreeMap::new(),
        step: 0,
        log: String::new(),
    };
    for (step, op) in ops.iter().enumerate() {
        case.step = step;
        let _ = writeln!(case.log, "step {step}: {op:?}");
        case.apply(op).await?;
        case.compare_all().await?;
    }
    case.drain().await
}

impl<S: Storage> Case<'_, S> {
    fn fail(&self, what: String) -> String {
        format!("{what}\nat step {} (clock {}) of:\n{}", self.step, self.clock.now(), self.log)
    }

    fn pick_known(&self, index: &Index) -> JobId {
        if self.known.is_empty() { JobId(uuid::Uuid::nil()) } else { *index.get(&self.known) }
    }

    /// The lease an operation presents (both sides know the same ones).
    fn resolve(&self, pick: &Pick) -> LeaseRef {
        let held: Vec<usize> = self.held.iter().flatten().copied().collect();
        let issued = match pick {
            Pick::Held(i) if !held.is_empty() => Some(*i.get(&held)),
            Pick::Held(i) | Pick::Any(i) if !self.issued.is_empty() => Some(i.index(self.issued.len())),
            _ => None,
        };
        match (issued, pick) {
            (Some(n), _) => self.issued[n],
            (None, Pick::Held(i) | Pick::Any(i) | Pick::Forged(i)) => {
                LeaseRef { id: self.pick_known(i), token: LeaseToken::new() }
            }
        }
    }

    fn forget(&mut self, lease: &LeaseRef) {
        if let Some(n) = self.tokens.get(&(lease.id, lease.token)) {
            for held in &mut self.held {
                held.retain(|h| h != n);
            }
        }
    }

    /// The job with its payload canonical and its token replaced by the
    /// number of its lease, so both sides compare equal.
    fn normalize(&self, job: &Job) -> Result<Job, String> {
        let mut job = job.clone();
        let canonical = serde_json::from_str::<serde_json::Value>(job.payload.as_str())
            .map(|v| v.to_string())
            .unwrap_or_else(|_| job.payload.as_str().to_owned());
        job.payload = Payload::from_stored(canonical);
        if let Some(lease) = job.lease.as_mut() {
            let n = self
                .tokens
                .get(&(job.id, lease.token))
                .ok_or_else(|| self.fail(format!("job {} holds a token no claim returned: {lease:?}", job.id)))?;
            lease.token = LeaseToken(uuid::Uuid::from_u128(*n as u128 + 1));
        }
        Ok(job)
    }

    /// Sends `request` (from `worker`) to both sides and checks the answers.
    async fn claim(&mut self, worker: usize, request: ClaimRequest) -> Result<(), String> {
        let b = self.backend.claim(&request).await;
        let m = self.model.claim(&request).await;
        let (b, m) = match (b, m) {
            (Ok(b), Ok(m)) => (b, m),
            (b, m) => {
                same!(self, key(&b).map(|a| a.jobs.len()), key(&m).map(|a| a.jobs.len()), "claim result");
                return Ok(());
            }
        };
        // Whether a limit held jobs back; which one is the backend's to
        // tell apart (a backend may answer Concurrency for a rate).
        same!(self, b.limited.is_some(), m.limited.is_some(), "claim held back by a limit");
        let (mut b, mut m) = (b.jobs, m.jobs);
        b.sort_by_key(|j| j.id);
        m.sort_by_key(|j| j.id);
        let b_ids: Vec<JobId> = b.iter().map(|j| j.id).collect();
        let m_ids: Vec<JobId> = m.iter().map(|j| j.id).collect();
        same!(self, b_ids, m_ids, "claimed ids");
        if b.len() > request.limit {
            return Err(self.fail(format!("claim returned {} jobs for limit {}", b.len(), request.limit)));
        }
        let now = self.clock.now();
        for (bj, mj) in b.iter().zip(&m) {
            let Some(token) = bj.token() else {
                return Err(self.fail(format!("claimed job {} has no lease", bj.id)));
            };
            if token != request.token {
                return Err(self.fail(format!("claimed job {} does not hold the claim's token", bj.id)));
            }
            let prev = self.before.get(&bj.id);
            let earlier = self.tokens.get(&(bj.id, token)).copied();
            let running = prev.is_some_and(|p| p.state == State::Running);
            match earlier {
                // An earlier attempt of this claim took it: only a resend
                // may return it, and only while that lease still holds it.
                Some(n) if running => {
                    if !request.resend || self.latest.get(&bj.id) != Some(&n) {
                        return Err(self.fail(format!("claim of {} repeated an earlier lease: {prev:?}", bj.id)));
                    }
                    if !self.held[worker].contains(&n) {
                        self.held[worker].push(n);
                    }
                }
                // A resend whose token held nothing claims as usual, so it
                // may take again a job it took and that was handed back.
                Some(_) if !request.resend => {
                    return Err(self.fail(format!("claim of {} repeated an earlier token", bj.id)));
                }
                _ => {
                    match prev {
                        Some(p) if p.state == State::Pending => {}
                        Some(p) if p.state == State::Scheduled && p.run_at <= now => {}
                        _ => {
                            return Err(self.fail(format!("claimed job {} that was not claimable: {prev:?}", bj.id)));
                        }
                    }
                    if bj.run_at > now {
                        return Err(self.fail(format!("job {} claimed before its run_at", bj.id)));
                    }
                    let n = self.issued.len();
                    self.issued.push(LeaseRef { id: bj.id, token });
                    self.tokens.insert((bj.id, token), n);
                    self.latest.insert(bj.id, n);
                    self.held[worker].push(n);
                }
            }
            let bn = self.normalize(bj)?;
            let mn = self.normalize(mj)?;
            same!(self, bn, mn, "claimed job");
        }
        self.last_claim[worker] = Some(request);
        Ok(())
    }

    /// Enqueues on both sides: one batch, or one per queue when the
    /// backend refuses batches over several queues.
    async fn enqueue(&mut self, jobs: Vec<NewJob>) -> Result<(), String> {
        let batches: Vec<Vec<NewJob>> = if self.cross_queue_batches {
            vec![jobs]
        } else {
            let mut by_queue: BTreeMap<String, Vec<NewJob>> = BTreeMap::new();
            for job in jobs {
                by_queue.entry(job.queue.as_str().to_owned()).or_default().push(job);
            }
            by_queue.into_values().collect()
        };
        for jobs in batches {
            let b = self.backend.enqueue(jobs.clone()).await;
            let m = self.model.enqueue(jobs).await;
            same!(self, key(&b), key(&m), "enqueue result");
            if let Ok(ids) = m {
                self.stored.extend(ids);
            }
        }
        Ok(())
    }

    async fn apply(&mut self, op: &Op) -> Result<(), String> {
        let step = self.step;
        match op {
            Op::Enqueue(specs) => {
                let now = self.clock.now();
                let mut jobs = Vec::new();
                for (i, spec) in specs.iter().enumerate() {
                    let payload =
                        Payload::from_json(format!(r#"{{"step":{step},"i":{i}}}"#)).map_err(|e| e.to_string())?;
                    let mut b = NewJob::builder("model", payload)
                        .queue(QUEUES[spec.queue])
                        .priority(Priority::ALL[spec.priority])
                        .max_attempts(spec.max_attempts);
                    let rule = spec.rule.filter(|_| spec.unique_key.is_some()).map(unique_rule);
                    let debounced = matches!(rule, Some(jq_core::UniqueRule::Debounce { .. }));
                    if debounced {
                        // A debounced job's run time is its window's end.
                    } else if spec.delay > 0 {
                        b = b.delay(HALF * spec.delay as u32);
                    } else if spec.delay < 0 {
                        b = b.run_at(now - chrono::Duration::from_std(HALF * (-spec.delay) as u32).unwrap_or_default());
                    }
                    b = b.trace(spec.trace.map(trace_context));
                    if let Some(k) = spec.unique_key {
                        b = b.unique_key(format!("key-{k}"));
                    }
                    let mut job = b.build_at(now).map_err(|e| e.to_string())?;
                    job.unique_rule = rule;
                    jobs.push(job);
                }
                self.known.extend(jobs.iter().map(|j| j.id));
                self.enqueue(jobs).await?;
            }
            Op::Claim { worker, limit, queues } => {
                let names: &[&str] = match queues {
                    0 => &QUEUES[..1],
                    1 => &QUEUES[1..],
                    _ => &QUEUES,
                };
                let queues = names.iter().filter_map(|q| QueueName::new(*q).ok()).collect();
                let request = ClaimRequest::new(queues, *limit, LEASE, format!("worker-{worker}"));
                self.claim(*worker, request).await?;
            }
            Op::Resend(worker) => {
                if let Some(earlier) = &self.last_claim[*worker] {
                    let request = ClaimRequest { resend: true, ..earlier.clone() };
                    self.claim(*worker, request).await?;
                }
            }
            Op::Complete(items) => {
                let mut bb = Vec::new();
                let mut mb = Vec::new();
                for (pick, spec) in items {
                    let lease = self.resolve(pick);
                    self.forget(&lease);
                    let outcome = match spec {
                        OutcomeSpec::Ack => Outcome::Ack,
                        OutcomeSpec::Retry(d) => {
                            Outcome::Nack { error: format!("failed at step {step}"), delay: HALF * u32::from(*d) }
                        }
                        OutcomeSpec::Fail => Outcome::Bury { error: format!("buried at step {step}") },
                        OutcomeSpec::Release(d) => Outcome::Release { delay: HALF * u32::from(*d) },
                    };
                    bb.push(Settlement { lease, outcome: outcome.clone() });
                    mb.push(Settlement { lease, outcome });
                }
                let b = self.backend.settle(bb).await.map_err(|e| self.fail(format!("complete failed: {e}")))?;
                let m = self.model.settle(mb).await.map_err(|e| e.to_string())?;
                let b: Vec<_> = b.iter().map(key).collect();
                let m: Vec<_> = m.iter().map(key).collect();
                same!(self, b, m, "complete results");
            }
            Op::Heartbeat(picks) => {
                let leases: Vec<LeaseRef> = picks.iter().map(|p| self.resolve(p)).collect();
                let b = self.backend.heartbeat(&leases, LEASE).await.map(|mut v| {
                    v.lost.sort();
                    v.cancel.sort();
                    v
                });
                let m = self.model.heartbeat(&leases, LEASE).await.map(|mut v| {
                    v.lost.sort();
                    v.cancel.sort();
                    v
                });
                same!(self, key(&b), key(&m), "heartbeat lost ids");
            }
            Op::Advance(n) => self.clock.advance(HALF * *n),
            Op::Promote => {
                let (b, m) = (self.backend.promote().await, self.model.promote().await);
                same!(self, key(&b), key(&m), "promote count");
            }
            Op::Recover => {
                let (b, m) = (self.backend.recover().await, self.model.recover().await);
                same!(self, key(&b), key(&m), "recover count");
            }
            Op::Crash(w) => self.held[*w].clear(),
            Op::Get(i) => {
                let id = self.pick_known(i);
                let b = self.backend.get(id).await;
                let m = self.model.get(id).await;
                let b = match &b {
                    Ok(j) => Ok(self.normalize(j)?),
                    Err(e) => Err(err_key(e)),
                };
                let m = match &m {
                    Ok(j) => Ok(self.normalize(j)?),
                    Err(e) => Err(err_key(e)),
                };
                same!(self, b, m, format!("get {id}"));
            }
            Op::Stats => {
                let (b, m) = (self.backend.stats().await, self.model.stats().await);
                same!(self, key(&b), key(&m), "stats");
            }
            Op::Cancel(i) => {
                let id = self.pick_known(i);
                let (b, m) = (self.backend.cancel(id).await, self.model.cancel(id).await);
                same!(self, key(&b), key(&m), format!("cancel {id}"));
            }
            Op::Retry(i) => {
                let id = self.pick_known(i);
                let (b, m) = (self.backend.retry(id).await, self.model.retry(id).await);
                same!(self, key(&b), key(&m), format!("retry {id}"));
            }
            Op::Purge(s, ago) => {
                let state = [State::Completed, State::Dead, State::Cancelled][*s];
                let cutoff = self.clock.now() - chrono::Duration::from_std(HALF * *ago).unwrap_or_default();
                let (b, m) = (self.backend.purge(state, cutoff).await, self.model.purge(state, cutoff).await);
                same!(self, key(&b), key(&m), format!("purge {state} before {cutoff}"));
                // Purged jobs are gone on purpose; "no loss" covers the rest.
                let remaining: std::collections::HashSet<JobId> =
                    self.list_all(&self.model).await?.into_iter().map(|j| j.id).collect();
                self.stored.retain(|id| remaining.contains(id));
            }
        }
        Ok(())
    }

    async fn list_all<T: Storage>(&self, storage: &T) -> Result<Vec<Job>, String> {
        let mut filter = JobFilter { limit: 50, ..JobFilter::default() };
        let mut all: Vec<Job> = Vec::new();
        loop {
            let page = storage.list(&filter).await.map_err(|e| self.fail(format!("list failed: {e}")))?;
            let Some(last) = page.last() else { break };
            filter.after = Some(last.id);
            all.extend(page);
        }
        Ok(all)
    }

    /// Compares every job of both sides and checks the invariants on the
    /// backend's.
    async fn compare_all(&mut self) -> Result<(), String> {
        let b = self.list_all(self.backend).await?;
        let m = self.list_all(&self.model).await?;
        if !b.windows(2).all(|w| w[0].id < w[1].id) {
            return Err(self.fail("list is not in ascending id order".into()));
        }
        let bn = b.iter().map(|j| self.normalize(j)).collect::<Result<Vec<_>, _>>()?;
        let mn = m.iter().map(|j| self.normalize(j)).collect::<Result<Vec<_>, _>>()?;
        if bn != mn {
            let diff: Vec<String> = bn
                .iter()
                .zip(&mn)
                .filter(|(x, y)| x != y)
                .take(3)
                .map(|(x, y)| format!("backend {x:?}\n  model {y:?}"))
                .collect();
            return Err(self.fail(format!(
                "jobs differ ({} on the backend, {} in the model):\n{}",
                bn.len(),
                mn.len(),
                diff.join("\n")
            )));
        }
        let by_id: BTreeMap<JobId, Job> = b.into_iter().map(|j| (j.id, j)).collect();
        for id in &self.stored {
            if !by_id.contains_key(id) {
                return Err(self.fail(format!("job {id} was lost")));
            }
        }
        for job in by_id.values() {
            self.check_job(job)?;
        }
        // After every step, not only at Op::Stats: backends that count
        // finished jobs apart from the jobs (PostgreSQL, SQLite) must keep
        // the counts in step with every operation that moves a job.
        let mut listed = jq_core::Stats::default();
        for job in by_id.values() {
            listed.queues.entry(job.queue.as_str().to_owned()).or_default().add(job.state, 1);
        }
        let counted = self.backend.stats().await.map_err(|e| self.fail(format!("stats failed: {e}")))?;
        if counted != listed {
            return Err(self.fail(format!("stats disagree with list: stats {counted:?}, list {listed:?}")));
        }
        self.before = by_id;
        Ok(())
    }

    fn check_job(&self, job: &Job) -> Result<(), String> {
        if job.attempts > job.max_attempts {
            return Err(self.fail(format!("job {} has {} attempts of {}", job.id, job.attempts, job.max_attempts)));
        }
        let unfinished = u32::from(matches!(job.state, State::Running | State::Completed));
        if job.errors.len() as u32 + unfinished != job.attempts {
            return Err(self.fail(format!("job {}: errors do not match failed attempts: {job:?}", job.id)));
        }
        if job.errors.iter().enumerate().any(|(i, e)| e.attempt as usize != i + 1) {
            return Err(self.fail(format!("job {}: errors are not numbered 1, 2, ...: {:?}", job.id, job.errors)));
        }
        if (job.state == State::Running) != job.lease.is_some() {
            return Err(self.fail(format!("job {}: a lease iff Running: {job:?}", job.id)));
        }
        if job.state.is_terminal() != job.finished_at.is_some() {
            return Err(self.fail(format!("job {}: finished_at iff terminal: {job:?}", job.id)));
        }
        if let Some(token) = job.token() {
            let holder = self.tokens.get(&(job.id, token));
            if holder.is_none() || holder != self.latest.get(&job.id) {
                return Err(self.fail(format!("job {} is held by a lease other than its latest claim's", job.id)));
            }
        }
        Ok(())
    }

    /// Workers run and time passes until every job is terminal.
    async fn drain(&mut self) -> Result<(), String> {
        let _ = writeln!(self.log, "drain");
        let all_queues: Vec<QueueName> = QUEUES.iter().filter_map(|q| QueueName::new(*q).ok()).collect();
        for round in 0..20 {
            self.step += 1;
            if self.before.values().all(|j| j.state.is_terminal()) {
                return Ok(());
            }
            self.clock.advance(LEASE * 4);
            let (b, m) = (self.backend.recover().await, self.model.recover().await);
            same!(self, key(&b), key(&m), format!("drain round {round}: recover"));
            let (b, m) = (self.backend.promote().await, self.model.promote().await);
            same!(self, key(&b), key(&m), format!("drain round {round}: promote"));
            let request = ClaimRequest::new(all_queues.clone(), 1000, LEASE, "drainer");
            let mut b = self.backend.claim(&request).await.map_err(|e| self.fail(format!("claim failed: {e}")))?.jobs;
            let mut m = self.model.claim(&request).await.map_err(|e| e.to_string())?.jobs;
            b.sort_by_key(|j| j.id);
            m.sort_by_key(|j| j.id);
            same!(
                self,
                b.iter().map(|j| j.id).collect::<Vec<_>>(),
                m.iter().map(|j| j.id).collect::<Vec<_>>(),
                "drain claim"
            );
            let mut bb = Vec::new();
            let mut mb = Vec::new();
            for (bj, mj) in b.iter().zip(&m) {
                if let (Some(bl), Some(ml)) = (bj.lease_ref(), mj.lease_ref()) {
                    let n = self.issued.len();
                    self.issued.push(bl);
                    self.tokens.insert((bl.id, bl.token), n);
                    self.latest.insert(bj.id, n);
                    bb.push(Settlement { lease: bl, outcome: Outcome::Ack });
                    mb.push(Settlement { lease: ml, outcome: Outcome::Ack });
                }
            }
            let br = self.backend.settle(bb).await.map_err(|e| self.fail(format!("complete failed: {e}")))?;
            let mr = self.model.settle(mb).await.map_err(|e| e.to_string())?;
            let br: Vec<_> = br.iter().map(key).collect();
            let mr: Vec<_> = mr.iter().map(key).collect();
            same!(self, br, mr, "drain acks");
            self.compare_all().await?;
        }
        let stuck: Vec<&Job> = self.before.values().filter(|j| !j.state.is_terminal()).collect();
        if stuck.is_empty() {
            Ok(())
        } else {
            Err(self.fail(format!("jobs never reached a terminal state: {stuck:?}")))
        }
    }
}
