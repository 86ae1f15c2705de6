//! Claim: one `FOR UPDATE SKIP LOCKED` statement per batch (`sql/claim.sql`),
//! starting each band's walk where this storage's last claim left it
//! (`hints.rs`).
//!
//! A resend first reads the Running jobs its token holds
//! (`sql/claim_earlier.sql`): an earlier attempt whose answer was lost.
//! Once the statement committed, the claimed jobs are handed over whatever
//! happens next: a row that does not decode is buried, and one that cannot
//! be buried stays Running (logged) until recover buries it.

use jq_core::{ClaimRequest, Error, Job, Result};
use sqlx::Row;
use uuid::Uuid;

use crate::error::map_sqlx;
use crate::hints::Key;
use crate::row::{decode_job, rfc3339};
use crate::{Inner, control};

/// Moves up to `request.limit` claimable jobs to Running and returns them in
/// claim order.
pub(crate) async fn claim(inner: &Inner, request: &ClaimRequest) -> Result<Vec<Job>> {
    if request.limit == 0 || request.queues.is_empty() {
        return Ok(Vec::new());
    }
    if request.resend {
        let earlier = earlier(inner, request).await?;
        if !earlier.is_empty() {
            return Ok(earlier);
        }
    }
    let limit = i32::try_from(request.limit).unwrap_or(i32::MAX);
    let queues: Vec<&str> = request.queues.iter().map(|q| q.as_str()).collect();
    let now = inner.clock.now();
    let expires_at = jq_core::clock::truncate_micros(jq_core::clock::add(now, request.lease));
    if inner.controlled.any(&queues) {
        return controlled(inner, request, &queues, now, expires_at).await;
    }
    let (ticket, starts) = inner.hints.begin(&queues, now);
    let rows = sqlx::query(inner.sql.claim.q())
        .bind(&queues)
        .bind(limit)
        .bind(now)
        .bind(&request.worker)
        .bind(expires_at)
        .bind(request.token.0)
        .bind(&starts.run_ats)
        .bind(&starts.ids)
        .fetch_all(&inner.pool)
        .await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            inner.hints.abort(ticket);
            return Err(map_sqlx(e));
        }
    };
    // Rows naming a controlled queue (the `controlled` column) mean the statement took
    // nothing: the locked path claims instead.
    let marked: Vec<String> =
        rows.iter().filter_map(|row| row.try_get::<Option<String>, _>("controlled").ok().flatten()).collect();
    if !marked.is_empty() {
        inner.hints.finish(ticket, std::iter::empty());
        inner.controlled.found(&queues, &marked);
        return controlled(inner, request, &queues, now, expires_at).await;
    }
    let jobs = decode_and_bury(inner, &rows).await;
    inner
        .hints
        .finish(ticket, jobs.iter().map(|j| (j.queue.as_str(), j.priority, Key { run_at: j.run_at, id: j.id.0 })));
    let mut jobs = jobs;
    sort(&mut jobs);
    Ok(jobs)
}

/// The claim of queues one of which has a control, in its locked
/// transaction (`control.rs`).
async fn controlled(
    inner: &Inner,
    request: &ClaimRequest,
    queues: &[&str],
    now: jq_core::Timestamp,
    expires_at: jq_core::Timestamp,
) -> Result<Vec<Job>> {
    let (rows, found) = control::claim_rows(inner, request, queues, now, expires_at).await?;
    inner.controlled.found(queues, &found);
    let mut jobs = decode_and_bury(inner, &rows).await;
    sort(&mut jobs);
    Ok(jobs)
}

/// The jobs of claimed rows. A row that does not decode is buried (the
/// claim committed: the others are handed over whatever happens).
async fn decode_and_bury(inner: &Inner, rows: &[sqlx::postgres::PgRow]) -> Vec<Job> {
    let mut jobs = Vec::with_capacity(rows.len());
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
    let rows = sqlx::query(inner.sql.claim_earlier.q())
        .bind(request.token.0)
        .fetch_all(&inner.pool)
        .await
        .map_err(map_sqlx)?;
    let mut jobs: Vec<Job> = rows.iter().filter_map(|row| decode_job(row).ok()).collect();
    sort(&mut jobs);
    if !jobs.is_empty() {
        tracing::info!(jobs = jobs.len(), "a resent claim returns what its first attempt took");
    }
    Ok(jobs)
}

/// A claimed row that does not decode can never run: it goes to Dead with
/// the reason, instead of coming back after every lease expiry.
async fn bury(inner: &Inner, row: &sqlx::postgres::PgRow, error: &Error) -> Result<()> {
    let Ok(id) = row.try_get::<Uuid, _>(0) else {
        tracing::error!(%error, "claimed a job whose id cannot be read; it stays Running until recovered");
        return Ok(());
    };
    tracing::error!(%id, %error, "claimed a corrupt job; moving it to dead");
    let now = inner.clock.now();
    sqlx::query(inner.sql.bury.q())
        .bind(id)
        .bind(now)
        .bind(rfc3339(now))
        .bind(error.to_string())
        .execute(&inner.pool)
        .await
        .map_err(map_sqlx)?;
    Ok(())
}
