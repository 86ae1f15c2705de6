//! A server that goes away and comes back: operations fail with the
//! retryable `Error::Unavailable` meanwhile, and the same storage handle
//! carries on once the server is back (the connection manager reconnects).
//! Runs its own throwaway redis-server on a free loopback port.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use jq_core::{Error, ManualClock, NewJob, Payload, State, Storage, StorageExt};
use jq_redis::{RedisConfig, RedisStorage};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn start(port: u16, dir: &std::path::Path) -> Child {
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes"])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start redis-server ({e}); run scripts/start-services.sh to install it"));
    // wait until it accepts connections (process start-up, not job timing)
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server on port {port} did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_gives_unavailable_then_recovers() {
    let dir = std::env::temp_dir().join(format!("jq-redis-restart-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let mut server = start(port, &dir);
    let clock = ManualClock::starting_now();
    let url = format!("redis://127.0.0.1:{port}");
    let s = RedisStorage::connect(RedisConfig::new(url).prefix("jqtest").clock(clock.clock())).await.unwrap();
    let job = |n: usize| {
        NewJob::builder("test", Payload::from_json(format!(r#"{{"n":{n}}}"#)).unwrap()).build_at(clock.now()).unwrap()
    };
    let id = s.enqueue_one(job(0)).await.unwrap();

    server.kill().unwrap();
    server.wait().unwrap();
    match s.enqueue_one(job(1)).await {
        Err(e @ Error::Unavailable { .. }) => assert!(e.is_retryable()),
        other => panic!("expected Unavailable while the server is down, got {other:?}"),
    }

    // same port, same data directory: the AOF brings the first job back
    let mut server = start(port, &dir);
    let mut result = s.get(id).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while matches!(result, Err(Error::Unavailable { .. })) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        result = s.get(id).await;
    }
    assert_eq!(result.unwrap().state, State::Pending);
    s.enqueue_one(job(2)).await.unwrap();
    assert_eq!(s.stats().await.unwrap().total(State::Pending), 2);
    server.kill().unwrap();
    server.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
