//! Wake-up: a `LISTEN`ing connection that bumps a watch channel on every
//! NOTIFY of this schema's channel.
//!
//! Started by the first `subscribe()`, shared by every clone of the storage,
//! and stopped when the last receiver is dropped or the storage closes. It
//! has a one-connection pool of its own, so it never takes a connection the
//! operations need. When the connection drops, it reconnects with backoff
//! and bumps the signal on every attempt, so subscribers fall back to
//! polling at that pace (the worker pool polls anyway) and look for work
//! missed while it was down.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jq_core::storage::WorkSignal;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Inner;

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The running listener, if any.
#[derive(Debug, Default)]
pub(crate) struct Wake {
    running: Mutex<Option<(watch::Sender<u64>, JoinHandle<()>)>>,
}

impl Wake {
    /// Stops the listener task.
    pub(crate) fn stop(&self) {
        if let Ok(mut running) = self.running.lock()
            && let Some((_, task)) = running.take()
        {
            task.abort();
        }
    }
}

impl Drop for Wake {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A receiver of the wake-up signal, starting the listener if needed.
/// `None` outside a tokio runtime (nothing could run the listener).
pub(crate) fn subscribe(inner: &Inner) -> Option<WorkSignal> {
    let mut running = inner.wake.running.lock().ok()?;
    if let Some((tx, task)) = running.as_ref()
        && !task.is_finished()
    {
        return Some(tx.subscribe());
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let (tx, rx) = watch::channel(0u64);
    let options = inner.pool.connect_options();
    let task = runtime.spawn(run(options, inner.channel.clone(), tx.clone()));
    *running = Some((tx, task));
    Some(rx)
}

fn bump(tx: &watch::Sender<u64>) {
    tx.send_modify(|n| *n = n.wrapping_add(1));
}

/// Listens until every receiver is gone, reconnecting with backoff.
async fn run(options: Arc<PgConnectOptions>, channel: String, tx: watch::Sender<u64>) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        match listen(&options, &channel, &tx, &mut backoff).await {
            Ok(()) => return,
            Err(error) => {
                tracing::warn!(%error, channel, ?backoff, "jq wake-up listener lost its connection; polling until it is back");
                bump(&tx);
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// One connection's life: returns Ok when the receivers are gone, Err when
/// the connection failed and could not be re-established.
async fn listen(
    options: &PgConnectOptions,
    channel: &str,
    tx: &watch::Sender<u64>,
    backoff: &mut Duration,
) -> Result<(), sqlx::Error> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(2))
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy_with(options.clone());
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.listen(channel).await?;
    *backoff = FIRST_BACKOFF;
    // Work may have arrived while no one listened.
    bump(tx);
    loop {
        tokio::select! {
            _ = tx.closed() => return Ok(()),
            message = listener.try_recv() => match message? {
                Some(_) => {
                    // One bump for everything already buffered.
                    while listener.next_buffered().is_some() {}
                    bump(tx);
                }
                // Lost and re-established (LISTEN included) by sqlx.
                None => bump(tx),
            },
        }
    }
}
