//! [`RedisConfig`]: where the server is and how jq uses it.

use std::time::Duration;

use jq_core::{Clock, DEFAULT_MAX_PAYLOAD_BYTES};

/// How long a command may take before the call fails (see
/// [`RedisConfig::response_timeout`]).
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection may stay idle before TCP keepalive probes it (see
/// [`RedisConfig::keepalive`]).
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(15);

/// How to reach Redis and how to lay jq's keys out in it. Builder-style:
///
/// ```
/// let config = jq_redis::RedisConfig::new("redis://127.0.0.1:6379").prefix("myapp");
/// # let _ = config;
/// ```
#[derive(Clone)]
pub struct RedisConfig {
    pub(crate) url: String,
    /// Seed nodes of a Redis Cluster; empty for a single server.
    pub(crate) cluster_nodes: Vec<String>,
    pub(crate) prefix: String,
    pub(crate) clock: Clock,
    pub(crate) max_payload_bytes: usize,
    pub(crate) response_timeout: Duration,
    pub(crate) keepalive: Option<Duration>,
}

/// Shows the URLs without their passwords.
impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.shown_url())
            .field("prefix", &self.prefix)
            .field("clock", &self.clock)
            .field("max_payload_bytes", &self.max_payload_bytes)
            .field("response_timeout", &self.response_timeout)
            .field("keepalive", &self.keepalive)
            .finish()
    }
}

impl RedisConfig {
    /// The server's URL, or the cluster's seed URLs joined by commas, as
    /// shown in errors and logs: without passwords.
    pub(crate) fn shown_url(&self) -> String {
        if self.cluster_nodes.is_empty() {
            jq_core::storage::redact_url(&self.url)
        } else {
            self.cluster_nodes.iter().map(|n| jq_core::storage::redact_url(n)).collect::<Vec<_>>().join(",")
        }
    }

    /// A config for the server at `url` (`redis://host:port/db`), with the
    /// key prefix `jq`, the system clock and the default payload limit.
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            cluster_nodes: Vec::new(),
            prefix: "jq".to_owned(),
            clock: Clock::system(),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            keepalive: Some(DEFAULT_KEEPALIVE),
        }
    }

    /// A config for a Redis Cluster reached through any of `nodes` (seed
    /// URLs, `redis://host:port`; the others are discovered). Every script
    /// call then touches one queue (one hash slot): a batch over several
    /// queues becomes one call per queue, atomic per queue rather than as a
    /// whole. Wake-ups go through the cluster-wide `PUBLISH`, received on one
    /// node's plain connection.
    pub fn cluster<S: Into<String>>(nodes: impl IntoIterator<Item = S>) -> Self {
        let nodes: Vec<String> = nodes.into_iter().map(Into::into).collect();
        let mut config = RedisConfig::new(nodes.first().cloned().unwrap_or_default());
        config.cluster_nodes = nodes;
        config
    }

    /// True when this config names a Redis Cluster ([`RedisConfig::cluster`]).
    pub fn is_cluster(&self) -> bool {
        !self.cluster_nodes.is_empty()
    }

    /// The prefix of every key jq writes (default `jq`), so that several
    /// applications share one server. It must not contain `{`, `}` or a
    /// newline (checked by [`crate::RedisStorage::connect`]).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Where "now" comes from (default the system clock). Redis's own TIME
    /// is never used, so tests can move time with a `jq_core::ManualClock`.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The largest accepted payload in bytes of JSON (default
    /// `jq_core::DEFAULT_MAX_PAYLOAD_BYTES`, 1 MiB).
    pub fn max_payload_bytes(mut self, n: usize) -> Self {
        self.max_payload_bytes = n;
        self
    }

    /// How long one call waits for the server's reply before it fails with
    /// `jq_core::Error::Unavailable` (default [`DEFAULT_RESPONSE_TIMEOUT`],
    /// 10 s). It bounds how long a silently dead connection stalls a call:
    /// the connection the call timed out on is dropped, and the next call
    /// opens a new one (the wake-up listener pings its own after this long
    /// without a message). It must exceed the longest
    /// script a call runs, or a call fails although its script went on to
    /// finish. An enqueue of 100,000 jobs is one script of about half a
    /// second, and the redis crate's own default of 500 ms made it fail
    /// with every job stored. Whatever the setting, a timed-out call's
    /// outcome is unknown: resend the same jobs (their ids make the resend
    /// store nothing twice), not new ones. Valkey answers BUSY at once
    /// while another client's script runs, where Redis 7 leaves the call
    /// unread: jq sends such a call again, pausing a little longer each
    /// time, until this timeout has passed.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// TCP keepalive on every connection (default [`DEFAULT_KEEPALIVE`],
    /// 15 s; `None` turns it off): a connection idle this long is probed,
    /// a ninth of it apart, and on Linux `TCP_USER_TIMEOUT` fails one whose
    /// sent data stays unacknowledged for twice this long. The
    /// kernel then closes a connection whose peer vanished (no FIN, no RST)
    /// within about twice this, idle or not, and the connection is
    /// replaced. It costs nothing on a healthy connection; the response
    /// timeout covers the cases keepalive cannot see (a proxy or a server
    /// that still acknowledges but no longer answers).
    pub fn keepalive(mut self, idle: Option<Duration>) -> Self {
        self.keepalive = idle;
        self
    }
}
