//! A server that goes away and comes back: operations fail with the
//! retryable `Error::Unavailable` meanwhile, and the same storage handle
//! carries on once the server is back (the connection manager reconnects).
//! A server slow to answer: a call waits up to the configured response
//! timeout. Each test runs its own throwaway redis-server on a free
//! loopback port, so blocking it slows no other test.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use jq_core::storage::{Storage, StorageExt};
use jq_core::{Error, ManualClock, NewJob, Payload, State};
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

/// A throwaway redis-server on a free port with a data directory of its
/// own (append-only file on), stopped and removed when dropped.
struct ScratchServer {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl ScratchServer {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("jq-redis-{tag}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port();
        let child = Some(start(port, &dir));
        ScratchServer { dir, port, child }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server (no shutdown: what the AOF holds is what survives).
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Starts it again on the same port and data directory.
    fn restart(&mut self) {
        self.kill();
        self.child = Some(start(self.port, &self.dir));
    }
}

impl Drop for ScratchServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_gives_unavailable_then_recovers() {
    jq_testkit::needs!(redis_programs);
    let mut server = ScratchServer::new("restart");
    let clock = ManualClock::starting_now();
    let s = RedisStorage::connect(RedisConfig::new(server.url()).prefix("jqtest").clock(clock.clock())).await.unwrap();
    let job = |n: usize| {
        NewJob::builder("test", Payload::from_json(format!(r#"{{"n":{n}}}"#)).unwrap()).build_at(clock.now()).unwrap()
    };
    let id = s.enqueue_one(job(0)).await.unwrap();

    server.kill();
    match s.enqueue_one(job(1)).await {
        Err(e @ Error::Unavailable { .. }) => assert!(e.is_retryable()),
        other => panic!("expected Unavailable while the server is down, got {other:?}"),
    }

    // same port, same data directory: the AOF brings the first job back
    server.restart();
    let mut result = s.get(id).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while matches!(result, Err(Error::Unavailable { .. })) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        result = s.get(id).await;
    }
    assert_eq!(result.unwrap().state, State::Pending);
    s.enqueue_one(job(2)).await.unwrap();
    assert_eq!(s.stats().await.unwrap().total(State::Pending), 2);
}

/// Keeps the server busy in one script for `micros` and returns when the
/// script started and ended, in the server's microseconds since the epoch.
async fn block_server(url: String, micros: u64) -> (u64, u64) {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut conn =
        redis::Client::open(url).unwrap().get_multiplexed_async_connection_with_config(&config).await.unwrap();
    let script = "local function now() local t = redis.call('TIME') return t[1] * 1000000 + t[2] end \
                  local start = now() local t = start repeat t = now() until t - start >= tonumber(ARGV[1]) \
                  return { start, t }";
    let (start, end): (u64, u64) =
        redis::cmd("EVAL").arg(script).arg(0).arg(micros).query_async(&mut conn).await.unwrap();
    (start, end)
}

fn micros_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64
}

/// The redis crate gives up on a reply after 500 ms unless told otherwise,
/// which failed a large enqueue whose script went on to store every job.
/// jq waits up to its own response timeout (10 s by default), and a shorter
/// configured one still fails the call as `Unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reply_is_awaited_up_to_the_response_timeout() {
    jq_testkit::needs!(redis_programs);
    let server = ScratchServer::new("slow");
    let url = server.url();
    let patient = RedisStorage::connect(RedisConfig::new(url.clone()).prefix("jqtest")).await.unwrap();
    let hasty = RedisStorage::connect(
        RedisConfig::new(url.clone()).prefix("jqtest").response_timeout(Duration::from_millis(200)),
    )
    .await
    .unwrap();
    let job =
        |n: usize| NewJob::builder("test", Payload::from_json(format!(r#"{{"n":{n}}}"#)).unwrap()).build().unwrap();

    let blocker = tokio::spawn(block_server(url, 1_500_000));
    // give the blocking script time to start (checked below, not assumed)
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = micros_now();
    let (patient_result, hasty_result) = tokio::join!(patient.enqueue_one(job(0)), hasty.enqueue_one(job(1)));
    let (started, ended) = blocker.await.unwrap();
    assert!(
        started < sent && ended > sent + 1_000_000,
        "the calls must be sent while the server is blocked (blocked {started}..{ended}, sent at {sent})"
    );
    let id = patient_result.expect("a reply within the default response timeout");
    match hasty_result {
        Err(e @ Error::Unavailable { .. }) => assert!(e.is_retryable()),
        other => panic!("expected Unavailable after a 200 ms response timeout, got {other:?}"),
    }
    assert_eq!(patient.get(id).await.unwrap().state, State::Pending);
}
