//! Claim: one `FOR UPDATE SKIP LOCKED` statement per batch (`sql/claim.sql`),
//! starting each band's walk where this storage's last claim left it
//! (`hints.rs`).
//!
//! The statement runs on connections of its own (`claim_pool`), which plan
//! it once, generically, when they open: its six index walks per queue cost
//! a millisecond to plan, and PostgreSQL would otherwise plan it five times
//! per connection before settling on the generic plan, which was the slow
//! tail of a pool's first seconds. Claims over keyed queues run there too,
//! one autocommit statement each (`sql/claim_keyed.sql`), and those over
//! controlled queues their transaction (`control.rs`).
//!
//! A resend first reads the Running jobs its token holds
//! (`sql/claim_earlier.sql`): an earlier attempt whose answer was lost.
//! Once the statement committed, the claimed jobs are handed over whatever
//! happens next: a row that does not decode is buried, and one that cannot
//! be buried stays Running (logged) until recover buries it.
//!
//! A short claim over controlled or keyed queues says what held back the
//! claimable jobs it left ([`ClaimAnswer::limited`]) from rows of its own
//! statement, with no statement after it; the plain path never does: a
//! short plain claim drained its queues.

use std::sync::Arc;
use std::time::Duration;

use jq_core::storage::{ClaimAnswer, ClaimRequest, Limited};
use jq_core::{Error, Job, Result, Timestamp};
use sqlx::postgres::{PgArguments, PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{PgConnection, PgPool, Postgres, Row};
use uuid::Uuid;

use crate::control::Path;
use crate::error::map_sqlx;
use crate::failover::{Hosts, checked};
use crate::hints::{Key, Starts};
use crate::liveness::Cuts;
use crate::row::{decode_job, rfc3339};
use crate::schema::Sql1;
use crate::{Inner, control};

/// Moves up to `request.limit` claimable jobs to Running and returns them in
/// claim order.
pub(crate) async fn claim(inner: &Inner, request: &ClaimRequest) -> Result<ClaimAnswer> {
    request.check()?;
    if request.limit == 0 || request.queues.is_empty() {
        return Ok(ClaimAnswer::default());
    }
    if request.resend {
        let earlier = earlier(inner, request).await?;
        if !earlier.is_empty() {
            return Ok(ClaimAnswer::jobs(earlier));
        }
    }
    let limit = i32::try_from(request.limit).unwrap_or(i32::MAX);
    let queues: Vec<&str> = request.queues.iter().map(|q| q.as_str()).collect();
    let now = inner.clock.now();
    let expires_at = jq_core::storage::truncate_micros(jq_core::storage::add(now, request.lease));
    match inner.controlled.path(&queues) {
        Path::Controlled => {
            return controlled(inner, request, &queues, now, expires_at).await;
        }
        Path::Keyed => return keyed(inner, request, &queues, limit, now, expires_at).await,
        Path::Plain => {}
    }
    let (ticket, starts) = inner.hints.begin(&queues, now);
    let statement =
        claim_statement(&inner.sql.claim, &queues, limit, now, &request.worker, expires_at, request.token.0, &starts);
    let rows = inner.claims_db().fetch_all(statement).await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            inner.hints.abort(ticket);
            return Err(map_sqlx(e));
        }
    };
    // Rows naming a controlled queue, or one with keyed jobs, mean the
    // statement took nothing: another path claims instead.
    let (marked_controlled, marked_keyed) = marks(&rows);
    if !marked_controlled.is_empty() || !marked_keyed.is_empty() {
        inner.hints.finish(ticket, std::iter::empty());
        inner.controlled.found(&queues, &marked_controlled, &marked_keyed);
        if marked_controlled.is_empty() {
            return keyed(inner, request, &queues, limit, now, expires_at).await;
        }
        return controlled(inner, request, &queues, now, expires_at).await;
    }
    let jobs = decode_and_bury(inner, rows.iter()).await;
    inner
        .hints
        .finish(ticket, jobs.iter().map(|j| (j.queue.as_str(), j.priority, Key { run_at: j.run_at, id: j.id.0 })));
    let mut jobs = jobs;
    sort(&mut jobs);
    Ok(ClaimAnswer::jobs(jobs))
}

/// What held back the claimable jobs a short controlled claim left, from
/// its statement's report rows (`sql/claim_controlled.sql`, `held`): the
/// strongest of its queues' reasons ([`Limited::merge`]), or `None` when no
/// queue has a claimable job left that a limit held back.
fn limited_of(rows: &[PgRow]) -> Option<Limited> {
    let mut limited = None;
    for row in rows.iter().filter(|row| matches!(row.try_get::<Option<String>, _>("held"), Ok(Some(_)))) {
        let flag = |column: &str| matches!(row.try_get::<Option<bool>, _>(column), Ok(Some(true)));
        let rate_until: Option<Timestamp> = row.try_get("rate_until").ok().flatten();
        let (keyed_left, plain_left) = (flag("keyed_left"), flag("plain_left"));
        let held = if !(keyed_left || plain_left) {
            None
        } else if flag("concurrency_limited") {
            Some(Limited::Concurrency)
        } else if let Some(until) = rate_until {
            Some(Limited::Rate { until })
        } else if keyed_left {
            // A key's limits: which of them is not read here.
            Some(Limited::Concurrency)
        } else {
            None
        };
        limited = Limited::merge(limited, held);
    }
    limited
}

/// The claim statement with its arguments, one place for the claim and the
/// warm-up of [`claim_pool`]: a prepared statement is cached by its text
/// with the parameter types of its first use, so both must bind the same.
#[allow(clippy::too_many_arguments)] // the statement's eight parameters, named
fn claim_statement<'q>(
    sql: &Sql1,
    queues: &'q [&'q str],
    limit: i32,
    now: Timestamp,
    worker: &'q str,
    expires_at: Timestamp,
    token: Uuid,
    starts: &'q Starts,
) -> sqlx::query::Query<'q, Postgres, PgArguments> {
    sql.query()
        .bind(queues)
        .bind(limit)
        .bind(now)
        .bind(worker)
        .bind(expires_at)
        .bind(token)
        .bind(&starts.run_ats)
        .bind(&starts.ids)
}

/// The pool the claim statement runs on: `size` connections opened with
/// `options` on demand, each set to `plan_cache_mode = force_generic_plan`
/// (only the claim runs there; `list`'s catch-all filters elsewhere want
/// custom plans) and warmed when it opens by one run of the claim over no
/// queue, which prepares the statement and builds its plan without taking
/// or writing anything. A warm-up that fails is left to the claim itself to
/// report (a missing schema, say).
/// The pool's connections are dropped after a cut (`liveness.rs`), like
/// the main pool's. Behind a transaction pooler (`pooled`) a connection
/// has no server connection of its own to set or warm: the claim is
/// planned where it runs, every time.
pub(crate) fn claim_pool(
    options: &PgConnectOptions,
    size: u32,
    acquire_timeout: Duration,
    claim: &Sql1,
    cuts: &Arc<Cuts>,
    pooled: bool,
    hosts: &Arc<Hosts>,
) -> PgPool {
    let pool = cuts
        .guard(PgPoolOptions::new())
        .max_connections(size.max(1))
        .acquire_timeout(acquire_timeout)
        .test_before_acquire(false);
    if pooled {
        return checked(hosts, pool, options).connect_lazy_with(options.clone());
    }
    let options = options.clone().options([("plan_cache_mode", "force_generic_plan")]);
    let claim = claim.clone();
    let (hosts, template) = (hosts.clone(), options.clone());
    pool.after_connect(move |conn, _| {
        let (claim, hosts, template) = (claim.clone(), hosts.clone(), template.clone());
        Box::pin(async move {
            // A standby is replaced before the claim is planned on it.
            hosts.ensure(conn, &template).await?;
            warm(conn, &claim).await;
            Ok(())
        })
    })
    .connect_lazy_with(options)
}

/// Runs the claim once over no queue: prepared, planned, nothing taken.
async fn warm(conn: &mut PgConnection, claim: &Sql1) {
    let now = jq_core::Clock::system().now();
    let starts = Starts::default();
    let result = claim_statement(claim, &[], 0, now, "", now, Uuid::nil(), &starts).fetch_all(&mut *conn).await;
    if let Err(error) = result {
        tracing::debug!(%error, "could not warm a claim connection; its first claim plans the statement");
    }
}

/// The queues named by a claim statement's marker rows: those found
/// controlled (the `controlled` column), those found keyed (`keyed`).
fn marks(rows: &[PgRow]) -> (Vec<String>, Vec<String>) {
    let named = |column: &str| -> Vec<String> {
        rows.iter().filter_map(|row| row.try_get::<Option<String>, _>(column).ok().flatten()).collect()
    };
    (named("controlled"), named("keyed"))
}

/// True for a row of a claimed job (not a marker row: `marks`).
fn is_job(row: &PgRow) -> bool {
    ["controlled", "keyed"].iter().all(|column| matches!(row.try_get::<Option<String>, _>(*column), Ok(None)))
}

/// The claim of queues with keyed jobs, none controlled: one autocommit
/// statement on the claims' connections (`sql/claim_keyed.sql`), which
/// takes the key locks itself. When it finds a queue controlled after all,
/// it takes nothing, and the claim goes to the controlled path.
///
/// The statement's marker rows also say, after a short claim, whether a
/// claimable keyed job is left (`keyed_due`): held back by its key's
/// limits ([`Limited::Concurrency`]: which of them is not read here),
/// answered without another statement.
async fn keyed(
    inner: &Inner,
    request: &ClaimRequest,
    queues: &[&str],
    limit: i32,
    now: Timestamp,
    expires_at: Timestamp,
) -> Result<ClaimAnswer> {
    let statement = inner
        .sql
        .claim_keyed
        .query()
        .bind(queues)
        .bind(limit)
        .bind(now)
        .bind(&request.worker)
        .bind(expires_at)
        .bind(request.token.0);
    let rows = inner.claims_db().fetch_all(statement).await.map_err(map_sqlx)?;
    let (marked_controlled, marked_keyed) = marks(&rows);
    inner.controlled.found(queues, &marked_controlled, &marked_keyed);
    if !marked_controlled.is_empty() {
        return controlled(inner, request, queues, now, expires_at).await;
    }
    let due = rows.iter().any(|row| matches!(row.try_get::<Option<bool>, _>("keyed_due"), Ok(Some(true))));
    let mut jobs = decode_and_bury(inner, rows.iter().filter(|row| is_job(row))).await;
    sort(&mut jobs);
    let limited = (jobs.len() < request.limit && due).then_some(Limited::Concurrency);
    Ok(ClaimAnswer { jobs, limited })
}

/// The claim of queues one of which has a control, in its locked
/// transaction (`control.rs`); a short one with what held back the jobs
/// it left, reported by the same statement ([`limited_of`]).
async fn controlled(
    inner: &Inner,
    request: &ClaimRequest,
    queues: &[&str],
    now: jq_core::Timestamp,
    expires_at: jq_core::Timestamp,
) -> Result<ClaimAnswer> {
    let (rows, controlled, keyed) = control::claim_rows(inner, request, queues, now, expires_at).await?;
    inner.controlled.found(queues, &controlled, &keyed);
    let is_job = |row: &&PgRow| matches!(row.try_get::<Option<String>, _>("held"), Ok(None));
    let mut jobs = decode_and_bury(inner, rows.iter().filter(is_job)).await;
    sort(&mut jobs);
    let limited = if jobs.len() < request.limit { limited_of(&rows) } else { None };
    Ok(ClaimAnswer { jobs, limited })
}

/// The jobs of claimed rows. A row that does not decode is buried (the
/// claim committed: the others are handed over whatever happens).
async fn decode_and_bury<'r>(inner: &Inner, rows: impl Iterator<Item = &'r PgRow>) -> Vec<Job> {
    let mut jobs = Vec::new();
    let mut corrupt = Vec::new();
    for row in rows {
        match decode_job(row) {
            Ok(job) => jobs.push(job),
            Err(e) => corrupt.push((row, e)),
        }
    }
    for (row, e) in corrupt {
        if let Err(bury_error) = bury(inner, row, &e).await {
            // The statement committed: the others are ours anyway.
            tracing::error!(error = %bury_error, "could not move the corrupt job to Dead; recover will");
        }
    }
    jobs
}

/// Claim order (RETURNING has none).
fn sort(jobs: &mut [Job]) {
    jobs.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.run_at.cmp(&b.run_at)).then(a.id.cmp(&b.id)));
}

/// The Running jobs `request.token` holds: what an earlier attempt of this
/// claim took. Rows that do not decode are left for recover.
async fn earlier(inner: &Inner, request: &ClaimRequest) -> Result<Vec<Job>> {
    let rows = inner.db().fetch_all(inner.sql.claim_earlier.query().bind(request.token.0)).await.map_err(map_sqlx)?;
    let mut jobs: Vec<Job> = rows.iter().filter_map(|row| decode_job(row).ok()).collect();
    sort(&mut jobs);
    if !jobs.is_empty() {
        tracing::info!(jobs = jobs.len(), "a resent claim returns what its first attempt took");
    }
    Ok(jobs)
}

/// A claimed row that does not decode can never run: it goes to Dead with
/// the reason, instead of coming back after every lease expiry.
async fn bury(inner: &Inner, row: &PgRow, error: &Error) -> Result<()> {
    let Ok(id) = row.try_get::<Uuid, _>(0) else {
        tracing::error!(%error, "claimed a job whose id cannot be read; it stays Running until recovered");
        return Ok(());
    };
    tracing::error!(%id, %error, "claimed a corrupt job; moving it to dead");
    let now = inner.clock.now();
    let statement =
        inner.sql.bury.query().bind(id).bind(now).bind(rfc3339(now)).bind(error.to_string()).bind(&inner.channel);
    inner.db().execute(statement).await.map_err(map_sqlx)?;
    Ok(())
}
