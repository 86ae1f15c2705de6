//! The keyed scenario, on a backend with `Capability::Keys`
//! (skipped, with a message, on the others): [`KEYED_JOBS`] no-op jobs over
//! [`KEYS`] distinct keys, each key limited to one Running job (the
//! queue's default key limit), drained by the drain's pool (concurrency
//! [`DRAIN_CONCURRENCY`]) from pool start until the last ack is durable;
//! against the plain drain of [`KEYED_JOBS`] no-op jobs without a key by
//! the same pool in the same run. Each run on fresh, empty storage.

use std::future::Future;

use jq_core::storage::{Storage, StorageExt};
use jq_core::{NewJob, QueueLimits};

use crate::scenarios::{BATCH_SIZE, DRAIN_CONCURRENCY, Noop, enqueue_noops, median, run_pool};
use crate::{BoxError, Fresh, Row};

/// Jobs of each drain.
pub const KEYED_JOBS: usize = 20_000;
/// Distinct keys of the keyed drain: two jobs each.
pub const KEYS: usize = 10_000;

/// `runs` runs, each a plain drain then the keyed drain, on storage from
/// `fresh`; the rows, or a skip message on a backend without keys.
pub async fn keyed<S, F, Fut>(backend: &str, runs: usize, mut fresh: F) -> Result<Vec<Row>, BoxError>
where
    S: Storage,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Fresh<S>, BoxError>>,
{
    let mut all = Vec::with_capacity(runs);
    for run in 1..=runs {
        let first = fresh().await?;
        if let Err(e) = first.storage.require_keys() {
            first.measure(|_| async { Ok(()) }).await?;
            eprintln!("keyed: skipped on {backend}: {e}");
            return Ok(vec![("keyed".to_owned(), "skipped: no keys capability".to_owned())]);
        }
        let plain = first
            .measure(|s| async move {
                enqueue_noops(&*s, KEYED_JOBS).await?;
                let drained = run_pool(s, KEYED_JOBS, None).await?;
                Ok(KEYED_JOBS as f64 / drained.total.as_secs_f64())
            })
            .await?;
        let keyed = fresh()
            .await?
            .measure(|s| async move {
                enqueue_keyed(&*s).await?;
                let drained = run_pool(s, KEYED_JOBS, None).await?;
                Ok(KEYED_JOBS as f64 / drained.total.as_secs_f64())
            })
            .await?;
        eprintln!(
            "keyed run {run}/{runs}: plain drain {plain:.0}/s, keyed {keyed:.0}/s ({:.0}%)",
            100.0 * keyed / plain
        );
        all.push((plain, keyed));
    }
    let plain = median(all.iter().map(|r| r.0).collect());
    let keyed = median(all.iter().map(|r| r.1).collect());
    let ratio = median(all.iter().map(|r| r.1 / r.0).collect());
    Ok(vec![
        (
            format!("plain drain ({KEYED_JOBS} no-op jobs, concurrency {DRAIN_CONCURRENCY})"),
            format!("{plain:.0} jobs/s"),
        ),
        (
            format!("keyed drain ({KEYED_JOBS} jobs over {KEYS} keys, 1 running per key), median ratio to plain"),
            format!("{keyed:.0} jobs/s ({:.0}%)", 100.0 * ratio),
        ),
    ])
}

/// Stores [`KEYED_JOBS`] no-op jobs, job `n` with key `k{n % KEYS}`, in
/// batches of [`BATCH_SIZE`], after limiting every key of their queue to
/// one Running job.
async fn enqueue_keyed<S: Storage>(storage: &S) -> Result<(), BoxError> {
    let jobs: Vec<NewJob> = (0..KEYED_JOBS)
        .map(|n| NewJob::typed(&Noop { n }).key(format!("k{}", n % KEYS)).build())
        .collect::<Result<_, _>>()?;
    if let Some(first) = jobs.first() {
        let limits = QueueLimits { concurrency: Some(1), rate: None };
        storage.require_keys()?.set_key_limits(&first.queue, None, &limits).await?;
    }
    let mut jobs = jobs.into_iter();
    loop {
        let batch: Vec<NewJob> = jobs.by_ref().take(BATCH_SIZE).collect();
        if batch.is_empty() {
            return Ok(());
        }
        storage.enqueue(batch).await?;
    }
}
