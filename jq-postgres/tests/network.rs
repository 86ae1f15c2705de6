//! PostgreSQL on a hostile network: connections that go silent
//! (no FIN, no RST), through `jq_testkit::proxy::Proxy`, and handlers that
//! block their runtime's threads.

mod common;

use std::net::SocketAddr;

use common::Fixture;
use jq_core::Clock;
use jq_postgres::{PostgresConfig, PostgresStorage};
use jq_testkit::network::{self, RESPONSE_TIMEOUT};
use jq_testkit::proxy::Proxy;

/// The server's address, from the test URL.
fn server() -> SocketAddr {
    let url = common::url();
    let options: sqlx::postgres::PgConnectOptions = url.parse().expect("postgres url");
    let host = if options.get_host() == "localhost" { "127.0.0.1" } else { options.get_host() };
    format!("{host}:{}", options.get_port()).parse().expect("server address")
}

/// A handle on `schema` whose connections pass `proxy`, with the short
/// response timeout of the network checks.
async fn through(proxy: &Proxy, schema: &str) -> PostgresStorage {
    let url = common::url();
    let options: sqlx::postgres::PgConnectOptions = url.parse().expect("postgres url");
    let server = format!("{}:{}", options.get_host(), options.get_port());
    assert!(url.contains(&server), "the test URL names its host and port: {url}");
    let config = PostgresConfig::new(url.replacen(&server, &proxy.addr().to_string(), 1))
        .schema(schema)
        .max_connections(common::MAX_CONNECTIONS)
        .acquire_timeout(RESPONSE_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT);
    PostgresStorage::connect(config).await.unwrap_or_else(|e| common::unreachable(e))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_survives_connections_that_go_silent_and_shutdown_is_bounded() {
    jq_testkit::needs!(postgres);
    let fixture = Fixture::new().await;
    let proxy = Proxy::start(server()).await.expect("proxy");
    let direct = fixture.connect(Clock::system()).await;
    network::a_drain_survives_silent_connections(
        std::slice::from_ref(&proxy),
        through(&proxy, &fixture.schema).await,
        &direct,
    )
    .await;
    fixture.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_calls_are_bounded_while_the_connections_are_silent() {
    jq_testkit::needs!(postgres);
    let fixture = Fixture::new().await;
    let proxy = Proxy::start(server()).await.expect("proxy");
    network::calls_are_bounded_while_silent(std::slice::from_ref(&proxy), &through(&proxy, &fixture.schema).await)
        .await;
    fixture.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wake_up_listener_replaces_a_silent_connection() {
    jq_testkit::needs!(postgres);
    let fixture = Fixture::new().await;
    let proxy = Proxy::start(server()).await.expect("proxy");
    let direct = fixture.connect(Clock::system()).await;
    network::the_wake_up_listener_reconnects(
        std::slice::from_ref(&proxy),
        &through(&proxy, &fixture.schema).await,
        &direct,
    )
    .await;
    fixture.cleanup().await;
}

#[test]
fn handlers_blocking_every_runtime_thread_keep_their_leases() {
    jq_testkit::needs!(postgres);
    let setup = tokio::runtime::Runtime::new().expect("runtime");
    let fixture = setup.block_on(Fixture::new());
    let schema = fixture.schema.clone();
    jq_testkit::blocking::blocking_handlers_keep_their_leases(move || {
        let schema = schema.clone();
        async move { common::connect(&schema, Clock::system()).await }
    });
    setup.block_on(fixture.cleanup());
}
