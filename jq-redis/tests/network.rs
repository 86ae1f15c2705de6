//! Redis on a hostile network: connections that go silent (no
//! FIN, no RST), through `jq_testkit::proxy::Proxy`, on a single server and
//! on a Redis Cluster whose nodes tell clients to reach them through the
//! proxies; and handlers that block their runtime's threads.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod common;

use std::net::SocketAddr;

use jq_core::Clock;
use jq_redis::{RedisConfig, RedisStorage};
use jq_testkit::network::{self, RESPONSE_TIMEOUT};
use jq_testkit::proxy::Proxy;

/// The single server's `host:port`, as the test URL names it.
fn server() -> String {
    let url = common::url();
    let rest = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// A proxy in front of the single server.
async fn proxy() -> Proxy {
    let addr: SocketAddr = server().replace("localhost", "127.0.0.1").parse().expect("server address");
    Proxy::start(addr).await.expect("proxy")
}

/// A handle on `prefix` whose connections pass `proxy`.
async fn through(proxy: &Proxy, prefix: &str) -> RedisStorage {
    let url = common::url().replacen(&server(), &proxy.addr().to_string(), 1);
    RedisStorage::connect(RedisConfig::new(url).prefix(prefix).response_timeout(RESPONSE_TIMEOUT))
        .await
        .expect("connect through the proxy")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_survives_connections_that_go_silent_and_shutdown_is_bounded() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let proxy = proxy().await;
    let direct = common::connect(&prefix, Clock::system()).await;
    let through = through(&proxy, &prefix).await;
    network::a_drain_survives_silent_connections(std::slice::from_ref(&proxy), through, &direct).await;
    common::drop_prefix(&prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_calls_are_bounded_while_the_connections_are_silent() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let proxy = proxy().await;
    network::calls_are_bounded_while_silent(std::slice::from_ref(&proxy), &through(&proxy, &prefix).await).await;
    common::drop_prefix(&prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wake_up_listener_replaces_a_silent_connection() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let proxy = proxy().await;
    let direct = common::connect(&prefix, Clock::system()).await;
    network::the_wake_up_listener_reconnects(std::slice::from_ref(&proxy), &through(&proxy, &prefix).await, &direct)
        .await;
    common::drop_prefix(&prefix).await;
}

#[test]
fn handlers_blocking_every_runtime_thread_keep_their_leases() {
    jq_testkit::needs!(redis);
    let prefix = common::prefix();
    let connect_prefix = prefix.clone();
    jq_testkit::blocking::blocking_handlers_keep_their_leases(move || {
        let prefix = connect_prefix.clone();
        async move { common::connect(&prefix, Clock::system()).await }
    });
    tokio::runtime::Runtime::new().expect("runtime").block_on(common::drop_prefix(&prefix));
}

/// A three-node cluster whose nodes announce the ports of a proxy each, so
/// every connection of a client (seeds, and the nodes it discovers) passes
/// a proxy; the cluster's own bus does not.
struct ProxiedCluster {
    proxies: Vec<Proxy>,
    _cluster: common::cluster::Cluster,
}

impl ProxiedCluster {
    async fn start() -> ProxiedCluster {
        let ports = tokio::task::spawn_blocking(common::cluster::free_ports).await.expect("ports");
        let mut proxies = Vec::new();
        for port in &ports {
            proxies.push(Proxy::start(SocketAddr::from(([127, 0, 0, 1], *port))).await.expect("proxy"));
        }
        let announce: Vec<u16> = proxies.iter().map(|p| p.addr().port()).collect();
        let cluster = tokio::task::spawn_blocking(move || common::cluster::start_on(ports, Some(&announce)))
            .await
            .expect("start");
        ProxiedCluster { proxies, _cluster: cluster }
    }

    async fn connect(&self, prefix: &str) -> RedisStorage {
        let seeds: Vec<String> = self.proxies.iter().map(|p| format!("redis://{}", p.addr())).collect();
        RedisStorage::connect(RedisConfig::cluster(seeds).prefix(prefix).response_timeout(RESPONSE_TIMEOUT))
            .await
            .expect("connect to the cluster through the proxies")
    }
}

// On the cluster, the observing handle passes the proxies too (the nodes
// announce them): the checks retry its calls while the network is faulty.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_drain_survives_connections_that_go_silent_and_shutdown_is_bounded() {
    jq_testkit::needs!(redis_programs);
    let cluster = ProxiedCluster::start().await;
    let prefix = common::prefix();
    let (through, direct) = (cluster.connect(&prefix).await, cluster.connect(&prefix).await);
    network::a_drain_survives_silent_connections(&cluster.proxies, through, &direct).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_maintenance_calls_are_bounded_while_the_connections_are_silent() {
    jq_testkit::needs!(redis_programs);
    let cluster = ProxiedCluster::start().await;
    let prefix = common::prefix();
    network::calls_are_bounded_while_silent(&cluster.proxies, &cluster.connect(&prefix).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_the_wake_up_listener_replaces_a_silent_connection() {
    jq_testkit::needs!(redis_programs);
    let cluster = ProxiedCluster::start().await;
    let prefix = common::prefix();
    let (through, direct) = (cluster.connect(&prefix).await, cluster.connect(&prefix).await);
    network::the_wake_up_listener_reconnects(&cluster.proxies, &through, &direct).await;
}
