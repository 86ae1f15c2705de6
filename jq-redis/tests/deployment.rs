//! A Redis as deployments configure it: one whose `maxmemory-policy`
//! evicts keys (refused at connect, read from `CONFIG GET` or, with CONFIG
//! renamed away, from `INFO memory`), and one with a password (which never
//! shows in an error or in `Debug` output). Each test runs its own
//! throwaway redis-server on a free loopback port, so the shared server's
//! settings are never touched.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use jq_core::storage::{Storage, StorageExt};
use jq_core::{NewJob, Payload};
use jq_redis::{RedisConfig, RedisError, RedisStorage};

/// A redis-server on a free port with `args` added, killed when dropped.
struct Server {
    port: u16,
    child: Child,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let programs = jq_testkit::services::redis_programs().expect("the caller checked (needs!)");
        let child = Command::new(&programs.server)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server ({e}); run scripts/start-services.sh to install it"));
        // process start-up, not job timing
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server on port {port} did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Server { port, child }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn job() -> NewJob {
    NewJob::builder("k", Payload::from_json("{}").unwrap()).build().unwrap()
}

/// A server that evicts keys when full would lose jobs without a word:
/// connect refuses it, naming the setting and the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_evicts_keys_is_refused_at_connect() {
    jq_testkit::needs!(redis_programs);
    let server = Server::start(&["--maxmemory-policy", "allkeys-lru"]);
    let err = RedisStorage::connect(RedisConfig::new(server.url())).await.unwrap_err();
    assert!(matches!(&err, RedisError::Evicting { policy, node: None } if policy == "allkeys-lru"), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("maxmemory-policy allkeys-lru") && msg.contains("maxmemory-policy noeviction"), "{msg}");
}

/// Where CONFIG is renamed away (as managed services do), the policy is
/// read from INFO: still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_config_the_policy_is_read_from_info() {
    jq_testkit::needs!(redis_programs);
    let server = Server::start(&["--maxmemory-policy", "volatile-lru", "--rename-command", "CONFIG", ""]);
    let err = RedisStorage::connect(RedisConfig::new(server.url())).await.unwrap_err();
    assert!(matches!(&err, RedisError::Evicting { policy, .. } if policy == "volatile-lru"), "{err:?}");
}

/// `noeviction` is accepted, read either way, and the store works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_evicts_is_accepted() {
    jq_testkit::needs!(redis_programs);
    for args in [&["--maxmemory-policy", "noeviction"][..], &["--rename-command", "CONFIG", ""][..]] {
        let server = Server::start(args);
        let s = RedisStorage::connect(RedisConfig::new(server.url())).await.unwrap();
        let id = s.enqueue_one(job()).await.unwrap();
        assert_eq!(s.get(id).await.unwrap().id, id, "{args:?}");
    }
}

/// The password of the URL never shows: not in a connect error (refused
/// password, or no server there), not in `Debug` of the config or the
/// storage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_never_shows() {
    jq_testkit::needs!(redis_programs);
    let server = Server::start(&["--requirepass", "s3cret-pw"]);
    let url = format!("redis://:s3cret-pw@127.0.0.1:{}", server.port);
    let config = RedisConfig::new(url.clone());
    assert!(!format!("{config:?}").contains("s3cret"), "{config:?}");
    let s = RedisStorage::connect(config).await.unwrap();
    assert!(!format!("{s:?}").contains("s3cret"), "{s:?}");
    assert!(format!("{s:?}").contains(":***@127.0.0.1"), "{s:?}");
    s.enqueue_one(job()).await.unwrap();

    let wrong = format!("redis://:s3cret-wrong@127.0.0.1:{}", server.port);
    let err = RedisStorage::connect(RedisConfig::new(wrong.clone())).await.unwrap_err();
    assert!(!format!("{err} {err:?}").contains("s3cret"), "{err} {err:?}");
    let closed = "redis://:s3cret-pw@127.0.0.1:1";
    let err = RedisStorage::connect(RedisConfig::new(closed)).await.unwrap_err();
    assert!(matches!(err, RedisError::Connect { .. }), "{err:?}");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("s3cret") && shown.contains("redis://:***@127.0.0.1:1"), "{shown}");
    let cluster = RedisConfig::cluster([closed, "redis://u:s3cret-2@127.0.0.1:2"]);
    let err = RedisStorage::connect(cluster).await.unwrap_err();
    assert!(!format!("{err} {err:?}").contains("s3cret"), "{err} {err:?}");
}
