//! Liveness: how a connection that went silent is noticed and replaced.
//!
//! A server that vanished without FIN or RST (a failover, a NAT that forgot
//! the connection) leaves a socket that neither answers nor fails. Every
//! call waits at most [`RedisConfig::response_timeout`](crate::RedisConfig::response_timeout)
//! for its reply, but the redis crate treats a timeout as retryable on the
//! same connection: its `ConnectionManager` reconnects only when the socket
//! fails, and a cluster connection retries on the same node connection. So
//! every later call would wait out the timeout on the same dead socket.
//!
//! [`Conn`] holds the connection (a `ConnectionManager`, or a
//! `ClusterConnection`) and drops it when a call on it times out; the next
//! call opens a new one. The sockets also carry TCP keepalive and, on
//! Linux, `TCP_USER_TIMEOUT` ([`RedisConfig::keepalive`](crate::RedisConfig::keepalive)),
//! so the kernel fails a dead connection that is idle or has unacknowledged
//! data, which the redis crate then replaces by itself.
//!
//! A connection lost or refused makes the call look whether the server
//! has connections left to give (`headroom.rs`).
//!
//! A timed-out call may have been applied: the storage contract covers the
//! resend (a claim resent with its token, a settlement that finds the job
//! settled, an enqueue of the same ids).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value};

use crate::headroom::Headroom;

/// How to open a connection.
#[derive(Clone)]
pub(crate) enum Dial {
    Single(redis::Client, ConnectionManagerConfig),
    Cluster(ClusterClient),
}

/// An open connection: one self-reconnecting multiplexed connection to a
/// single server, or a cluster connection that routes each command by its
/// first key's slot. An enum rather than a trait object: static dispatch on
/// the hot path.
#[derive(Clone)]
pub(crate) enum Raw {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// The storage's connection, replaced when a call on it timed out. Cheap
/// to clone: clones share it.
#[derive(Clone)]
pub(crate) struct Conn {
    link: Arc<Link>,
}

struct Link {
    dial: Dial,
    /// Bounds opening a connection, retries included.
    connect_timeout: Duration,
    /// The connection and its generation; `None` once dropped, until the
    /// next call opens another.
    current: Mutex<(u64, Option<Raw>)>,
    /// One caller at a time opens a connection; the others wait for it.
    opening: tokio::sync::Mutex<()>,
    /// Whether the server has connections left to give (`headroom.rs`).
    headroom: Headroom,
}

impl Conn {
    /// Opens the first connection now, so that a wrong address fails the
    /// storage's `connect` at once.
    pub(crate) async fn open(dial: Dial, connect_timeout: Duration) -> RedisResult<Conn> {
        let conn = Conn::lazy(dial, connect_timeout);
        conn.raw().await?;
        Ok(conn)
    }

    /// A connection opened by the first call that needs it.
    pub(crate) fn lazy(dial: Dial, connect_timeout: Duration) -> Conn {
        Conn {
            link: Arc::new(Link {
                connect_timeout,
                current: Mutex::new((0, None)),
                opening: tokio::sync::Mutex::new(()),
                headroom: Headroom::new(match &dial {
                    Dial::Single(client, _) => Some(client.get_connection_info().addr()),
                    Dial::Cluster(_) => None,
                }),
                dial,
            }),
        }
    }

    /// Another connection of the same kind to the same server, opened on
    /// first use (by the runtime that uses it).
    pub(crate) fn independent(&self) -> Conn {
        Conn::lazy(self.link.dial.clone(), self.link.connect_timeout)
    }

    /// True on Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.link.dial, Dial::Cluster(_))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, Option<Raw>)> {
        self.link.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection now and its generation, opening one if there is none.
    pub(crate) async fn raw(&self) -> RedisResult<(u64, Raw)> {
        if let (generation, Some(raw)) = &*self.lock() {
            return Ok((*generation, raw.clone()));
        }
        let _opening = self.link.opening.lock().await;
        let generation = match &*self.lock() {
            (generation, Some(raw)) => return Ok((*generation, raw.clone())),
            (generation, None) => *generation,
        };
        // Bounded as a whole: the manager's own attempts, retried, and a
        // cluster's discovery could each take longer.
        let opening = async {
            match &self.link.dial {
                Dial::Single(client, config) => {
                    ConnectionManager::new_with_config(client.clone(), config.clone()).await.map(Raw::Single)
                }
                Dial::Cluster(client) => client.get_async_connection().await.map(Raw::Cluster),
            }
        };
        let raw = match tokio::time::timeout(self.link.connect_timeout, opening).await {
            Ok(raw) => raw?,
            Err(_) => {
                return Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection to Redis within {:?}", self.link.connect_timeout),
                )));
            }
        };
        let mut current = self.lock();
        if current.0 == generation {
            current.1 = Some(raw.clone());
        }
        Ok((generation, raw))
    }

    /// The cluster connection, for commands routed to one node.
    pub(crate) async fn cluster(&self) -> RedisResult<ClusterConnection> {
        match self.raw().await?.1 {
            Raw::Cluster(c) => Ok(c),
            Raw::Single(_) => Err(RedisError::from((ErrorKind::Client, "not a Redis Cluster connection"))),
        }
    }

    /// After a call on connection `generation` answered: a timeout drops
    /// that connection (once), so the next call opens a new one.
    fn after<T>(&self, generation: u64, answer: &RedisResult<T>) {
        let Err(error) = answer else { return };
        if !error.is_timeout() {
            return;
        }
        let mut current = self.lock();
        if current.0 == generation {
            current.0 = generation.wrapping_add(1);
            if current.1.take().is_some() {
                tracing::warn!(%error, "no answer from Redis within the response timeout: dropping the connection; the next call opens a new one");
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut raw) = match self.raw().await {
                Ok(raw) => raw,
                Err(error) => return self.link.headroom.answered(Err(error)).await,
            };
            let answer = match &mut raw {
                Raw::Single(c) => c.req_packed_command(cmd).await,
                Raw::Cluster(c) => c.req_packed_command(cmd).await,
            };
            self.after(generation, &answer);
            self.link.headroom.answered(answer).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut raw) = match self.raw().await {
                Ok(raw) => raw,
                Err(error) => return self.link.headroom.answered(Err(error)).await,
            };
            let answer = match &mut raw {
                Raw::Single(c) => c.req_packed_commands(pipeline, offset, count).await,
                Raw::Cluster(c) => c.req_packed_commands(pipeline, offset, count).await,
            };
            self.after(generation, &answer);
            self.link.headroom.answered(answer).await
        })
    }

    fn get_db(&self) -> i64 {
        match &self.link.dial {
            Dial::Single(client, _) => client.get_connection_info().redis_settings().db(),
            Dial::Cluster(_) => 0,
        }
    }
}

/// `base` with TCP keepalive after `idle` (probes a ninth of it apart; the
/// system's count, 9 on Linux) and, on Linux, a user timeout of twice
/// `idle`: the kernel then fails a dead connection within about twice
/// `idle`, idle or not.
pub(crate) fn tcp_settings(base: &redis::io::tcp::TcpSettings, idle: Option<Duration>) -> redis::io::tcp::TcpSettings {
    let settings = base.clone();
    let Some(idle) = idle else { return settings };
    let keepalive = socket2::TcpKeepalive::new().with_time(idle);
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "macos", target_os = "freebsd", windows))]
    let keepalive = keepalive.with_interval((idle / 9).max(Duration::from_secs(1)));
    let settings = settings.set_keepalive(keepalive);
    #[cfg(target_os = "linux")]
    let settings = settings.set_user_timeout(idle * 2);
    settings
}
