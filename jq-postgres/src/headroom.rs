//! Headroom: noticing, and saying, that the server has no connection left.
//!
//! PostgreSQL refuses a new connection with SQLSTATE 53300
//! (too_many_connections) while its `max_connections` are taken. sqlx's
//! pool retries that refusal inside the acquire, silently, until the
//! acquire timeout, and then reports only "pool timed out". So:
//!
//! - a storage call still waiting after [`LOOK_AFTER`] looks for itself:
//!   one connection of its own (at most one per [`LOOK_EVERY`] per
//!   storage, and only while calls are slow) tells whether the server
//!   refuses for want of a slot. The first refusal of an episode is a
//!   warning that says so and that jq waits and retries;
//! - a pool timeout met while the server refuses so is
//!   [`PostgresError::NoConnectionLeft`] (in the retryable
//!   `Unavailable`), so each retry's warning says why too;
//! - when a look finds a slot again, a line says how long there was none.
//!
//! The call itself is never cut short by the look: it keeps waiting for
//! its connection, and gets one as soon as sqlx's retry finds a free slot.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jq_core::{Error, Result};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

use crate::PostgresError;
use crate::error::BACKEND;
use crate::failover::Hosts;

/// How long a call runs before it looks at the server's slots.
pub(crate) const LOOK_AFTER: Duration = Duration::from_secs(1);
/// The shortest time between two looks of one storage.
pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(1);
/// How long a look's connection may take.
const LOOK_TIMEOUT: Duration = Duration::from_secs(2);

/// What a look found last.
#[derive(Debug, Default)]
struct Seen {
    /// When the last look began.
    looked: Option<Instant>,
    /// Since when the server refuses for want of a slot, and what it said.
    refused: Option<(Instant, String)>,
}

/// A storage's view of the server's connection slots. Its `Debug` leaves
/// the connect options out: they hold the password.
pub(crate) struct Headroom {
    options: Arc<PgConnectOptions>,
    /// Where the pools connect now (the look follows a failover).
    hosts: Arc<Hosts>,
    target: String,
    seen: Mutex<Seen>,
    /// One look at a time.
    looking: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Headroom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Headroom").field("target", &self.target).field("seen", &*self.seen()).finish_non_exhaustive()
    }
}

impl Headroom {
    /// Looks with `options` (the pool's connect options).
    pub(crate) fn new(options: Arc<PgConnectOptions>, hosts: Arc<Hosts>) -> Arc<Headroom> {
        let target =
            format!("{}:{}/{}", options.get_host(), options.get_port(), options.get_database().unwrap_or_default());
        Arc::new(Headroom {
            options,
            hosts,
            target,
            seen: Mutex::new(Seen::default()),
            looking: tokio::sync::Mutex::new(()),
        })
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `call`; when it is slow, looks at the slots meanwhile, and
    /// explains a pool timeout it ends with.
    pub(crate) async fn watch<T>(&self, call: impl Future<Output = Result<T>>) -> Result<T> {
        let mut call = std::pin::pin!(call);
        tokio::select! {
            biased;
            answer = call.as_mut() => return self.answered(answer).await,
            _ = tokio::time::sleep(LOOK_AFTER) => {}
        }
        tokio::select! {
            biased;
            answer = call.as_mut() => return self.answered(answer).await,
            _ = self.look() => {}
        }
        let answer = call.await;
        self.answered(answer).await
    }

    /// After an answer: a pool timeout while the server refuses for want of
    /// a slot becomes [`PostgresError::NoConnectionLeft`]; a success during
    /// a refusal looks again, to say when slots are back.
    async fn answered<T>(&self, answer: Result<T>) -> Result<T> {
        match answer {
            Ok(value) => {
                if self.seen().refused.is_some() {
                    self.look().await;
                }
                Ok(value)
            }
            Err(error) if is_pool_timeout(&error) => Err(self.explain(error).await),
            Err(error) => Err(error),
        }
    }

    /// `error` (a pool timeout) with the reason when the server has no
    /// slot: looks now unless a look is recent.
    pub(crate) async fn explain(&self, error: Error) -> Error {
        if !is_pool_timeout(&error) {
            return error;
        }
        self.look().await;
        match &self.seen().refused {
            Some((_, message)) => Error::Unavailable {
                backend: BACKEND,
                source: Box::new(PostgresError::NoConnectionLeft {
                    target: self.target.clone(),
                    message: message.clone(),
                }),
            },
            None => error,
        }
    }

    /// Opens one connection to see whether the server refuses it for want
    /// of a slot, unless another look is under way or one began within
    /// [`LOOK_EVERY`].
    async fn look(&self) {
        let Ok(_turn) = self.looking.try_lock() else { return };
        {
            let mut seen = self.seen();
            if seen.looked.is_some_and(|at| at.elapsed() < LOOK_EVERY) {
                return;
            }
            seen.looked = Some(Instant::now());
        }
        let refused = match tokio::time::timeout(LOOK_TIMEOUT, self.hosts.aim(&self.options).connect()).await {
            Ok(Ok(conn)) => {
                let _ = tokio::time::timeout(LOOK_TIMEOUT, conn.close()).await;
                None
            }
            Ok(Err(sqlx::Error::Database(db))) if db.code().as_deref() == Some(TOO_MANY_CONNECTIONS) => {
                Some(db.message().to_owned())
            }
            // Unreachable, starting, silent: not this module's to say
            // (the call's own error does).
            _ => return,
        };
        let mut seen = self.seen();
        match (refused, seen.refused.take()) {
            (Some(message), None) => {
                tracing::warn!(
                    server = self.target,
                    said = message,
                    "PostgreSQL has no connection left to give (SQLSTATE 53300 too_many_connections: its \
                     max_connections are taken): jq's calls wait for a free slot and retry until one frees"
                );
                seen.refused = Some((Instant::now(), message));
            }
            (Some(message), Some((since, _))) => seen.refused = Some((since, message)),
            (None, Some((since, _))) => tracing::info!(
                server = self.target,
                without = ?since.elapsed(),
                "PostgreSQL gives connections again"
            ),
            (None, None) => {}
        }
    }
}

/// SQLSTATE too_many_connections.
const TOO_MANY_CONNECTIONS: &str = "53300";

/// True for the retryable error of a pool that found no connection within
/// its acquire timeout.
fn is_pool_timeout(error: &Error) -> bool {
    match error {
        Error::Unavailable { source, .. } => {
            source.downcast_ref::<sqlx::Error>().is_some_and(|e| matches!(e, sqlx::Error::PoolTimedOut))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_pool_timeout_is_explained() {
        assert!(is_pool_timeout(&crate::error::map_sqlx(sqlx::Error::PoolTimedOut)));
        assert!(!is_pool_timeout(&crate::error::map_sqlx(sqlx::Error::PoolClosed)));
        assert!(!is_pool_timeout(&Error::Unavailable { backend: BACKEND, source: "pool timed out".into() }));
    }
}
