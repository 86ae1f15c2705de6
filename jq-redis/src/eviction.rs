//! The server's `maxmemory-policy`, checked at connect: a Redis that evicts
//! keys when its memory is full would drop jobs without an error, so jq
//! refuses it ([`crate::RedisError::Evicting`]).
//!
//! Read with `CONFIG GET maxmemory-policy`; where CONFIG is renamed away or
//! not permitted (managed services, ACLs), from `INFO memory`'s
//! `maxmemory_policy`. On Cluster, every primary is asked. When neither can
//! be read, a warning says so and the connect goes on: jq cannot check
//! what it cannot see.

use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, FromRedisValue, RedisResult};

use crate::error::RedisError;
use crate::liveness::Conn;

/// The one policy that never drops a key.
pub(crate) const SAFE_POLICY: &str = "noeviction";

/// Refuses a server (or a cluster primary) whose policy evicts keys.
pub(crate) async fn check(conn: &Conn) -> Result<(), RedisError> {
    let nodes = match conn.is_cluster() {
        false => vec![None],
        true => primaries(conn).await.map_err(RedisError::Setup)?.into_iter().map(Some).collect(),
    };
    for node in nodes {
        let shown = node.as_ref().map(|(host, port)| format!("{host}:{port}"));
        match policy(conn, node).await? {
            Some(policy) if policy == SAFE_POLICY => {}
            Some(policy) => return Err(RedisError::Evicting { policy, node: shown }),
            None => tracing::warn!(
                node = shown.as_deref().unwrap_or("the server"),
                "cannot read Redis's maxmemory-policy (CONFIG GET and INFO were refused): make sure it is \
                 noeviction, or jobs are lost when memory fills"
            ),
        }
    }
    Ok(())
}

/// The policy of the server or of `node`; None when it cannot be read.
async fn policy(conn: &Conn, node: Option<(String, u16)>) -> Result<Option<String>, RedisError> {
    let mut config = redis::cmd("CONFIG");
    config.arg("GET").arg("maxmemory-policy");
    match run::<Vec<String>>(conn, &node, config).await {
        Ok(pair) => {
            if let [_, policy] = pair.as_slice() {
                return Ok(Some(policy.to_ascii_lowercase()));
            }
        }
        Err(e) if crate::error::is_transient(&e) => return Err(RedisError::Setup(e)),
        // CONFIG renamed away, or not permitted: INFO tells too.
        Err(_) => {}
    }
    let mut info = redis::cmd("INFO");
    info.arg("memory");
    match run::<String>(conn, &node, info).await {
        Ok(text) => Ok(parse_info(&text)),
        Err(e) if crate::error::is_transient(&e) => Err(RedisError::Setup(e)),
        Err(_) => Ok(None),
    }
}

/// `maxmemory_policy` of an `INFO memory` reply.
fn parse_info(text: &str) -> Option<String> {
    text.lines().find_map(|line| line.strip_prefix("maxmemory_policy:")).map(|p| p.trim().to_ascii_lowercase())
}

/// Runs `cmd` on the server, or on the cluster node `node`.
async fn run<T: FromRedisValue>(conn: &Conn, node: &Option<(String, u16)>, cmd: Cmd) -> RedisResult<T> {
    match node {
        None => cmd.query_async(&mut conn.clone()).await,
        Some((host, port)) => {
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host: host.clone(), port: *port });
            let value = conn.cluster().await?.route_command(cmd, routing).await?;
            redis::from_redis_value(value).map_err(Into::into)
        }
    }
}

/// The primaries of the cluster, from `CLUSTER NODES` (failed ones left out).
pub(crate) async fn primaries(conn: &Conn) -> RedisResult<Vec<(String, u16)>> {
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut conn.clone()).await?;
    Ok(parse_primaries(&nodes))
}

/// The `host:port` of each primary in a `CLUSTER NODES` reply.
pub(crate) fn parse_primaries(nodes: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else { continue };
        if !flags.contains("master") || flags.contains("fail") {
            continue;
        }
        let addr = addr.split('@').next().unwrap_or(addr);
        let Some((host, port)) = addr.rsplit_once(':') else { continue };
        let Ok(port) = port.parse::<u16>() else { continue };
        out.push((host.to_owned(), port));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_is_read_from_info() {
        let info = "# Memory\r\nused_memory:1\r\nmaxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\nlazyfree:0\r\n";
        assert_eq!(parse_info(info).as_deref(), Some("allkeys-lru"));
        assert_eq!(parse_info("# Memory\r\nused_memory:1\r\n"), None);
    }

    #[test]
    fn primaries_are_read_from_cluster_nodes() {
        let nodes = "a 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460\n\
                     b 127.0.0.1:7001@17001 slave a 0 0 1 connected\n\
                     c 127.0.0.1:7002@17002 master,fail - 0 0 2 connected\n\
                     d 127.0.0.1:7003@17003 master - 0 0 3 connected 5461-16383\n";
        assert_eq!(parse_primaries(nodes), vec![("127.0.0.1".to_owned(), 7000), ("127.0.0.1".to_owned(), 7003)]);
    }
}
