//! Failover: following the primary when it moves.
//!
//! After a failover (Patroni, Aurora, RDS, a promoted streaming replica)
//! the connections jq holds lead to a server that is gone, or to the old
//! primary, now read-only, which answers every write with SQLSTATE 25006
//! (read_only_sql_transaction) while its pings succeed. sqlx's pool drops a
//! connection that fails its ping, not one that answers read-only: left so,
//! a worker keeps writing to a demoted primary forever (Laravel #53115). And
//! sqlx takes one host; it knows neither libpq's multi-host URLs nor
//! `target_session_attrs`. So:
//!
//! - a URL may list several hosts, as libpq's do
//!   (`postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write`);
//!   [`Hosts`] keeps them in order, and the one the pools connect to;
//! - with `target_session_attrs=read-write` (or `primary`), every new
//!   connection asks the server whether it takes writes
//!   ([`Hosts::writable`]): one that does not is replaced, in the same
//!   connect, by one to the first host that does, or refused;
//! - a call that met 25006 makes every connection opened before it
//!   suspect (`liveness::Cuts`), so none of them is used again; a call that
//!   met 25006 or a server that is gone, on a URL of several hosts, starts
//!   a search ([`Hosts::search`]): the first host in order that answers
//!   (and takes writes, if asked) becomes the pools' host, and the
//!   connections to the old one are dropped.
//!
//! Nothing here decides a claim from a replica: every statement still runs
//! on the one primary jq found; a replica only ever refuses.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use jq_core::Error;
use jq_core::storage::take_query_param;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};

use crate::PostgresError;
use crate::liveness::Cuts;

/// The query parameter naming what a session must be.
const TARGET_SESSION_ATTRS: &str = "target_session_attrs";

/// How long a search goes on looking for a primary before it gives up
/// (the next failed call starts another).
const SEARCH_FOR: Duration = Duration::from_secs(60);
/// Between two rounds of a search that found nothing, in its first
/// [`SEARCH_QUICKLY`]: a promotion takes a moment.
const SEARCH_PAUSE: Duration = Duration::from_millis(100);
/// How long a search rounds every [`SEARCH_PAUSE`]; after that, every
/// [`SEARCH_PAUSE_LATER`], so that a search meeting a server with no
/// connection slot left adds little to its load.
const SEARCH_QUICKLY: Duration = Duration::from_secs(3);
/// Between two rounds after [`SEARCH_QUICKLY`].
const SEARCH_PAUSE_LATER: Duration = Duration::from_secs(1);

/// The pause after a round of a search begun `elapsed` ago.
fn pause_after(elapsed: Duration) -> Duration {
    if elapsed < SEARCH_QUICKLY { SEARCH_PAUSE } else { SEARCH_PAUSE_LATER }
}

/// A URL split by host: one URL per host, and what a session must be.
#[derive(Debug)]
pub(crate) struct Split {
    /// One URL per host, in the order given; each has the whole of the
    /// original's user, database and parameters.
    pub(crate) urls: Vec<String>,
    /// True with `target_session_attrs=read-write` or `=primary`.
    pub(crate) read_write: bool,
}

/// Splits a libpq-style URL with several hosts
/// (`postgres://user@h1:5432,h2:5433/db?...`), and takes
/// `target_session_attrs` out of it (sqlx does not know it). A URL of one
/// host gives one URL.
pub(crate) fn split(url: &str) -> Result<Split, PostgresError> {
    let invalid = |reason: String| PostgresError::InvalidUrl(sqlx::Error::Configuration(reason.into()));
    let (url, attrs) = take_query_param(url, TARGET_SESSION_ATTRS);
    let read_write = match attrs.as_deref() {
        None | Some("any") => false,
        Some("read-write" | "primary") => true,
        Some(other) => {
            return Err(invalid(format!(
                "target_session_attrs={other}: jq writes on every call, so it takes `read-write` (or `primary`) \
                 or `any`, never a standby"
            )));
        }
    };
    let Some((scheme, rest)) = url.split_once("://") else { return Ok(Split { urls: vec![url], read_write }) };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostlist) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    if !hostlist.contains(',') {
        return Ok(Split { urls: vec![url], read_write });
    }
    let mut urls = Vec::new();
    for host in hostlist.split(',') {
        if host.is_empty() {
            return Err(invalid(format!("the host list {hostlist:?} has an empty entry")));
        }
        urls.push(format!("{scheme}://{userinfo}{host}{tail}"));
    }
    Ok(Split { urls, read_write })
}

/// The hosts of a storage's URL and the one its pools connect to; shared
/// by the storage's pools, the wake-up listener and independent handles.
#[derive(Debug)]
pub(crate) struct Hosts {
    /// (host, port) in the URL's order.
    list: Vec<(String, u16)>,
    /// Sessions must take writes (`target_session_attrs=read-write`).
    read_write: bool,
    /// How long a connect or a check of a host may take (the response
    /// timeout).
    timeout: Duration,
    /// The index in `list` of the host the pools connect to.
    current: AtomicUsize,
    /// Bumped each time `current` changes.
    generation: AtomicUsize,
    /// A search is under way.
    searching: AtomicBool,
}

impl Hosts {
    /// The hosts of `options`, one per host of the URL (`options[0]` is the
    /// first host's).
    /// `timeout` bounds each connect and check of a host.
    pub(crate) fn new(options: &[PgConnectOptions], read_write: bool, timeout: Duration) -> Arc<Hosts> {
        let list = options.iter().map(|o| (o.get_host().to_owned(), o.get_port())).collect();
        Arc::new(Hosts {
            list,
            read_write,
            timeout,
            current: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            searching: AtomicBool::new(false),
        })
    }

    /// True when sessions must take writes.
    pub(crate) fn read_write(&self) -> bool {
        self.read_write
    }

    /// True when there is more than one host to choose from.
    pub(crate) fn several(&self) -> bool {
        self.list.len() > 1
    }

    /// How many times the host changed.
    pub(crate) fn generation(&self) -> usize {
        self.generation.load(Ordering::Acquire)
    }

    /// `options` aimed at host `index`.
    fn at(&self, options: &PgConnectOptions, index: usize) -> PgConnectOptions {
        match self.list.get(index) {
            Some((host, port)) => options.clone().host(host).port(*port),
            None => options.clone(),
        }
    }

    /// `options` aimed at the current host.
    pub(crate) fn aim(&self, options: &PgConnectOptions) -> PgConnectOptions {
        self.at(options, self.current.load(Ordering::Acquire))
    }

    /// Points `pool`'s new connections at the current host.
    pub(crate) fn follow(&self, pool: &PgPool) {
        let options = pool.connect_options();
        let (host, port) = (options.get_host(), options.get_port());
        let aimed = self.aim(&options);
        if aimed.get_host() != host || aimed.get_port() != port {
            pool.set_connect_options(aimed);
        }
    }

    /// `host:port` of every host, in the URL's order.
    pub(crate) fn names(&self) -> Vec<String> {
        (0..self.list.len()).map(|i| self.name(i)).collect()
    }

    /// `host:port` of host `index`.
    fn name(&self, index: usize) -> String {
        self.list.get(index).map(|(h, p)| format!("{h}:{p}")).unwrap_or_default()
    }

    /// Makes host `index` the current one.
    fn choose(&self, index: usize) {
        let before = self.current.swap(index, Ordering::AcqRel);
        if before != index {
            self.generation.fetch_add(1, Ordering::AcqRel);
            tracing::warn!(
                from = self.name(before),
                to = self.name(index),
                "PostgreSQL failover: jq's connections now go to {}, the first host of the URL that {}",
                self.name(index),
                if self.read_write { "takes writes" } else { "answers" }
            );
        }
    }

    /// True when the server of `conn` takes writes: not in recovery (a
    /// standby) and not `transaction_read_only` (libpq's read-write test).
    pub(crate) async fn writable(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
        sqlx::query_scalar::<_, bool>(
            "SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off'",
        )
        .fetch_one(conn)
        .await
    }

    /// A connection with `options` to host `index` that fits (answers, and
    /// takes writes when asked), within `timeout`.
    async fn try_host(&self, options: &PgConnectOptions, index: usize) -> Option<PgConnection> {
        let mut conn = tokio::time::timeout(self.timeout, self.at(options, index).connect()).await.ok()?.ok()?;
        if !self.read_write {
            return Some(conn);
        }
        match tokio::time::timeout(self.timeout, Self::writable(&mut conn)).await {
            Ok(Ok(true)) => Some(conn),
            _ => {
                let _ = tokio::time::timeout(self.timeout, conn.close()).await;
                None
            }
        }
    }

    /// One round over the hosts in the URL's order: the first that fits
    /// becomes the current host, and its connection is returned.
    pub(crate) async fn find(&self, options: &PgConnectOptions) -> Option<PgConnection> {
        for index in 0..self.list.len() {
            if let Some(conn) = self.try_host(options, index).await {
                self.choose(index);
                return Some(conn);
            }
        }
        None
    }

    /// After a connect to a server that does not take writes (with
    /// `target_session_attrs=read-write`): a connection to the first host
    /// that does, looked for in rounds for up to the response timeout (a promotion
    /// takes a moment; the caller's acquire timeout may end it sooner), or
    /// an error that makes the pool try again.
    pub(crate) async fn replace(&self, options: &PgConnectOptions) -> Result<PgConnection, sqlx::Error> {
        let began = Instant::now();
        loop {
            if let Some(conn) = self.find(options).await {
                return Ok(conn);
            }
            if began.elapsed() >= self.timeout {
                break;
            }
            tokio::time::sleep(pause_after(began.elapsed())).await;
        }
        Err(sqlx::Error::Configuration(
            format!(
                "no host of {:?} takes writes now (target_session_attrs=read-write): a failover may be under way; \
                 jq tries again",
                self.names()
            )
            .into(),
        ))
    }

    /// The check of a new connection `conn` made with `options`: with
    /// `target_session_attrs=read-write`, a server that does not take
    /// writes has `conn` replaced by a connection to the first host that
    /// does, or is an error (the pool closes it and tries again).
    pub(crate) async fn ensure(&self, conn: &mut PgConnection, options: &PgConnectOptions) -> Result<(), sqlx::Error> {
        if !self.read_write {
            return Ok(());
        }
        if tokio::time::timeout(self.timeout, Self::writable(conn)).await.map_err(|_| timed_out(self.timeout))?? {
            return Ok(());
        }
        let found = self.replace(options).await?;
        let old = std::mem::replace(conn, found);
        let _ = tokio::time::timeout(self.timeout, old.close()).await;
        Ok(())
    }

    /// Looks for the primary in the background, unless a search is under
    /// way: rounds over the hosts until one fits or [`SEARCH_FOR`] is out.
    /// When the host changes, `pools` follow it and every connection opened
    /// before is dropped (`cuts`).
    pub(crate) fn search(self: &Arc<Self>, options: PgConnectOptions, pools: Vec<PgPool>, cuts: Arc<Cuts>) {
        if !self.several() || self.searching.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.searching.store(false, Ordering::Release);
            return;
        };
        let hosts = self.clone();
        runtime.spawn(async move {
            let began = Instant::now();
            let before = hosts.generation();
            while began.elapsed() < SEARCH_FOR {
                if let Some(conn) = hosts.find(&options).await {
                    let _ = tokio::time::timeout(hosts.timeout, conn.close()).await;
                    break;
                }
                tokio::time::sleep(pause_after(began.elapsed())).await;
            }
            if hosts.generation() != before {
                cuts.cut();
            }
            for pool in &pools {
                hosts.follow(pool);
            }
            hosts.searching.store(false, Ordering::Release);
        });
    }
}

/// The error of a check that got no answer within `timeout`.
fn timed_out(timeout: Duration) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer within {timeout:?} to the read-write check"),
    ))
}

/// `pool` with the check of every new connection ([`Hosts::ensure`]) when
/// sessions must take writes; as it was otherwise. `options` are the
/// pool's connect options (a replacement connection is made with them).
pub(crate) fn checked(hosts: &Arc<Hosts>, pool: PgPoolOptions, options: &PgConnectOptions) -> PgPoolOptions {
    if !hosts.read_write() {
        return pool;
    }
    let (hosts, options) = (hosts.clone(), options.clone());
    pool.after_connect(move |conn, _| {
        let (hosts, options) = (hosts.clone(), options.clone());
        Box::pin(async move { hosts.ensure(conn, &options).await })
    })
}

/// What a failed call says about the server it ran on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sign {
    /// It answered read-only (SQLSTATE 25006): a standby, or a demoted
    /// primary.
    ReadOnly,
    /// It is gone or unreachable: the connection broke, the server shut
    /// down, or no connection could be had.
    Gone,
}

/// What `error` (a storage call's) says about the server, if anything.
pub(crate) fn sign(error: &Error) -> Option<Sign> {
    let Error::Unavailable { source, .. } = error else { return None };
    if let Some(e) = source.downcast_ref::<PostgresError>() {
        return match e {
            PostgresError::ReadOnly { .. } => Some(Sign::ReadOnly),
            _ => None,
        };
    }
    let e = source.downcast_ref::<sqlx::Error>()?;
    match e {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut => Some(Sign::Gone),
        sqlx::Error::Database(db) => db.code().and_then(|c| gone_code(&c).then_some(Sign::Gone)),
        _ => None,
    }
}

/// SQLSTATE codes of a server that went away: connection exceptions
/// (class 08) and shutdowns (57P01 admin, 57P02 crash, 57P03 cannot
/// connect now: starting, or shutting down).
fn gone_code(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_of_several_hosts_is_split_and_loses_its_session_attrs() {
        let s = split("postgres://u:p@h1:5432,h2:5433/db?target_session_attrs=read-write&application_name=x").unwrap();
        assert!(s.read_write);
        assert_eq!(
            s.urls,
            ["postgres://u:p@h1:5432/db?application_name=x", "postgres://u:p@h2:5433/db?application_name=x"]
        );
        let one = split("postgres://h1/db").unwrap();
        assert_eq!((one.urls.as_slice(), one.read_write), (&["postgres://h1/db".to_owned()][..], false));
        let any = split("postgresql://h1,h2?target_session_attrs=any").unwrap();
        assert_eq!(
            (any.urls.as_slice(), any.read_write),
            (&["postgresql://h1".to_owned(), "postgresql://h2".to_owned()][..], false)
        );
        assert!(split("postgres://h1,h2/db?target_session_attrs=standby").is_err());
        assert!(split("postgres://h1,,h2/db").is_err());
    }

    #[test]
    fn signs_are_read_by_code() {
        assert!(gone_code("08006") && gone_code("57P01") && gone_code("57P03"));
        assert!(!gone_code("57014") && !gone_code("40001") && !gone_code("25006"));
        assert_eq!(sign(&crate::error::map_sqlx(sqlx::Error::PoolTimedOut)), Some(Sign::Gone));
        assert_eq!(sign(&crate::error::map_sqlx(sqlx::Error::RowNotFound)), None);
    }
}
