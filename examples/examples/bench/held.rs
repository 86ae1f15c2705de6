//! PostgreSQL's drain while another session holds a snapshot open (a long
//! report, a session idle in a transaction, a lagging replication slot):
//! every claimed and completed job leaves row versions that nothing may
//! remove until that snapshot ends.

use std::future::Future;

use jq_postgres::PostgresStorage;
use sqlx::Connection;

use crate::scenarios::{enqueue_noops, median, run_pool};
use crate::{BoxError, Fresh, Row};

/// Jobs drained under the held snapshot (and again without it).
pub const HELD_JOBS: usize = 100_000;
/// The early rate is taken over this many jobs.
pub const HELD_MARK: usize = 20_000;

/// One run's figures: jobs/s, and the claim index entries the claims read
/// per drained job (held, clean).
struct Rates {
    first: f64,
    all: f64,
    clean: f64,
    read: (f64, f64),
}

/// Entries of `jobs_claim` that scans of `storage`'s schema have read so
/// far. Each backend sends its counters when it goes idle, at most once a
/// second unless asked: every connection of both pools (the claims' and
/// the rest's) is asked.
async fn claim_index_entries_read(storage: &PostgresStorage) -> Result<i64, BoxError> {
    for pool in [storage.claim_pool(), storage.pool()] {
        let mut held = Vec::new();
        for _ in 0..pool.size() {
            let mut conn = pool.acquire().await?;
            sqlx::query("SELECT pg_stat_force_next_flush()").execute(&mut *conn).await?;
            held.push(conn);
        }
    }
    let pool = storage.pool();
    // Each backend sent its counters before answering the call above.
    let read = sqlx::query_scalar(
        "SELECT coalesce(sum(idx_tup_read), 0)::int8 FROM pg_stat_user_indexes \
         WHERE schemaname = $1 AND indexrelname = 'jobs_claim'",
    )
    .bind(storage.schema())
    .fetch_one(pool)
    .await?;
    Ok(read)
}

/// `runs` times: [`HELD_JOBS`] jobs enqueued, then a second connection opens
/// a REPEATABLE READ transaction and takes its snapshot (a `count(*)` of the
/// jobs), held until the pool has drained them all; then the same drain on
/// a fresh schema without the snapshot. Rows: the rate over the first
/// [`HELD_MARK`] jobs and over all, and the clean drain with the ratio.
pub async fn postgres<F, Fut>(runs: usize, url: &str, mut fresh: F) -> Result<Vec<Row>, BoxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Fresh<PostgresStorage>, BoxError>>,
{
    let mut all = Vec::with_capacity(runs);
    for run in 1..=runs {
        let (first, held, held_read) = fresh()
            .await?
            .measure(|storage| async move {
                enqueue_noops(&*storage, HELD_JOBS).await?;
                let mut snapshot = sqlx::PgConnection::connect(url).await?;
                let take = format!(
                    "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM \"{}\".jobs",
                    storage.schema()
                );
                sqlx::raw_sql(sqlx::AssertSqlSafe(take)).execute(&mut snapshot).await?;
                let before = claim_index_entries_read(&storage).await?;
                let drained = run_pool(storage.clone(), HELD_JOBS, Some(HELD_MARK)).await;
                let read = claim_index_entries_read(&storage).await? - before;
                sqlx::raw_sql("ROLLBACK").execute(&mut snapshot).await?;
                snapshot.close().await?;
                let drained = drained?;
                let first = drained.at_mark.ok_or("held: the mark was never reached")?;
                Ok((
                    HELD_MARK as f64 / first.as_secs_f64(),
                    HELD_JOBS as f64 / drained.total.as_secs_f64(),
                    read as f64 / HELD_JOBS as f64,
                ))
            })
            .await?;
        let (clean, clean_read) = fresh()
            .await?
            .measure(|storage| async move {
                enqueue_noops(&*storage, HELD_JOBS).await?;
                let before = claim_index_entries_read(&storage).await?;
                let drained = run_pool(storage.clone(), HELD_JOBS, None).await?;
                let read = claim_index_entries_read(&storage).await? - before;
                Ok((HELD_JOBS as f64 / drained.total.as_secs_f64(), read as f64 / HELD_JOBS as f64))
            })
            .await?;
        eprintln!(
            "held run {run}/{runs}: first {HELD_MARK} {first:.0}/s, all {HELD_JOBS} {held:.0}/s, \
             {held_read:.2} claim index entries read per job; clean {clean:.0}/s, {clean_read:.2} per job"
        );
        all.push(Rates { first, all: held, clean, read: (held_read, clean_read) });
    }
    let first = median(all.iter().map(|r| r.first).collect());
    let held = median(all.iter().map(|r| r.all).collect());
    let clean = median(all.iter().map(|r| r.clean).collect());
    Ok(vec![
        (format!("drain, snapshot held: first {HELD_MARK} of {HELD_JOBS} jobs"), format!("{first:.0} jobs/s")),
        (
            format!("drain, snapshot held: all {HELD_JOBS} jobs"),
            format!("{held:.0} jobs/s ({:.0}% of clean)", 100.0 * held / clean),
        ),
        (format!("drain of {HELD_JOBS} jobs, no snapshot held (same runs)"), format!("{clean:.0} jobs/s")),
        (
            "claim index entries read per job: held / not held".to_owned(),
            format!(
                "{:.2} / {:.2}",
                median(all.iter().map(|r| r.read.0).collect()),
                median(all.iter().map(|r| r.read.1).collect())
            ),
        ),
    ])
}
