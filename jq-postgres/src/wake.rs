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
//!
//! A connection that went silent (no FIN, no RST) would leave it waiting
//! forever for a notification that cannot come: after the response timeout
//! without one, it pings the server (`SELECT 1`) and, when the ping gets no
//! answer within the response timeout either, drops the connection and
//! reconnects. So a dead listening connection is noticed within twice the
//! response timeout (20 s by default), and the pool polls meanwhile.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jq_core::storage::WorkSignal;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Inner;
use crate::error::map_sqlx;
use crate::failover::{Hosts, checked};
use crate::headroom::Headroom;
use crate::liveness::Cuts;

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The running listener, if any.
#[derive(Debug, Default)]
pub(crate) struct Wake {
    running: Mutex<Option<(watch::Sender<u64>, JoinHandle<()>)>>,
    /// The log already says that workers poll (no listener behind a
    /// transaction pooler).
    said_polling: AtomicBool,
}

/// Where the wake-up listener connects.
#[derive(Clone)]
pub(crate) enum Listen {
    /// With the pool's connect options.
    Pool,
    /// To a URL of its own: PostgreSQL directly, past a transaction pooler.
    Direct(Arc<PgConnectOptions>),
    /// Nowhere: behind a transaction pooler without a listen URL, where a
    /// `LISTEN` would hold a server connection the pooler hands to others
    /// between transactions. Workers poll.
    Off,
}

// Hand-written: connect options carry the password.
impl std::fmt::Debug for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Pool => f.write_str("Pool"),
            Listen::Direct(o) => write!(f, "Direct({}:{})", o.get_host(), o.get_port()),
            Listen::Off => f.write_str("Off"),
        }
    }
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
/// `None` outside a tokio runtime (nothing could run the listener), and
/// behind a transaction pooler without a listen URL.
pub(crate) fn subscribe(inner: &Inner) -> Option<WorkSignal> {
    let options = match &inner.listen {
        Listen::Pool => inner.pool.connect_options(),
        Listen::Direct(options) => options.clone(),
        Listen::Off => {
            if !inner.wake.said_polling.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    schema = inner.schema,
                    "PostgreSQL behind a transaction pooler without a listen URL: no LISTEN wake-ups, workers poll \
                     for new jobs (WorkerPool::poll_interval); set PostgresConfig::listen_url (or \
                     jq::ConnectOptions::listen_url) to a direct URL for prompt wake-ups"
                );
            }
            return None;
        }
    };
    let mut running = inner.wake.running.lock().ok()?;
    if let Some((tx, task)) = running.as_ref()
        && !task.is_finished()
    {
        return Some(tx.subscribe());
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let (tx, rx) = watch::channel(0u64);
    let link = Link {
        options,
        channel: inner.channel.clone(),
        timeout: inner.response_timeout,
        cuts: inner.cuts.clone(),
        headroom: inner.headroom.clone(),
        hosts: matches!(inner.listen, Listen::Pool).then(|| inner.hosts.clone()),
    };
    let task = runtime.spawn(run(link, tx.clone()));
    *running = Some((tx, task));
    Some(rx)
}

fn bump(tx: &watch::Sender<u64>) {
    tx.send_modify(|n| *n = n.wrapping_add(1));
}

/// Where and how to listen.
struct Link {
    options: Arc<PgConnectOptions>,
    channel: String,
    /// The response timeout: how long without a message before a ping,
    /// and how long the ping (or the LISTEN) may take.
    timeout: Duration,
    cuts: Arc<Cuts>,
    /// Says when a pool timeout means the server has no slot left.
    headroom: Arc<Headroom>,
    /// With the pool's options: the hosts, whose current one each new
    /// connection goes to (it follows a failover).
    hosts: Option<Arc<Hosts>>,
}

/// Listens until every receiver is gone, reconnecting with backoff.
async fn run(link: Link, tx: watch::Sender<u64>) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        match listen(&link, &tx, &mut backoff).await {
            Ok(()) => return,
            Err(error) => {
                let error = link.headroom.explain(error).await;
                tracing::warn!(%error, channel = link.channel, ?backoff, "jq wake-up listener lost its connection; polling until it is back");
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
/// the connection failed, went silent, or could not be re-established.
async fn listen(link: &Link, tx: &watch::Sender<u64>, backoff: &mut Duration) -> jq_core::Result<()> {
    let (options, pool) = match &link.hosts {
        Some(hosts) => {
            let options = hosts.aim(&link.options);
            let pool = checked(hosts, link.cuts.guard(PgPoolOptions::new()), &options);
            (options, pool)
        }
        None => ((*link.options).clone(), link.cuts.guard(PgPoolOptions::new())),
    };
    let pool = pool
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(2).min(link.timeout))
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy_with(options);
    let mut listener = PgListener::connect_with(&pool).await.map_err(map_sqlx)?;
    link.cuts.timed(link.timeout, async { listener.listen(&link.channel).await.map_err(map_sqlx) }).await?;
    *backoff = FIRST_BACKOFF;
    // Work may have arrived while no one listened.
    bump(tx);
    loop {
        tokio::select! {
            _ = tx.closed() => return Ok(()),
            message = listener.try_recv() => match message.map_err(map_sqlx)? {
                Some(_) => {
                    // One bump for everything already buffered.
                    while listener.next_buffered().is_some() {}
                    bump(tx);
                }
                // Lost and re-established (LISTEN included) by sqlx.
                None => bump(tx),
            },
            // Nothing heard for a while: is anyone there? A notification
            // arriving meanwhile is buffered by the listener.
            _ = tokio::time::sleep(link.timeout) => {
                link.cuts
                    .timed(link.timeout, async {
                        sqlx::query("SELECT 1").execute(&mut listener).await.map(drop).map_err(map_sqlx)
                    })
                    .await?;
                if listener.next_buffered().is_some() {
                    while listener.next_buffered().is_some() {}
                    bump(tx);
                }
            }
        }
    }
}
