//! A three-node Redis Cluster on free loopback ports, started by a test
//! binary (`redis-server --cluster-enabled yes`, then `redis-cli --cluster
//! create`). The servers are children of a small shell watchdog that stops
//! them and removes their directory when the test process exits (statics
//! are never dropped), and [`Cluster`]'s `Drop` stops them too when it does
//! run.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running three-node cluster.
pub struct Cluster {
    /// The nodes' own ports.
    pub ports: Vec<u16>,
    watchdogs: Vec<Child>,
    _dir: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for w in &mut self.watchdogs {
            let _ = w.kill();
            let _ = w.wait();
        }
        for port in &self.ports {
            let _ = Command::new("redis-cli").args(["-p", &port.to_string(), "shutdown", "nosave"]).output();
        }
    }
}

/// A port that is free, and whose cluster bus port (+10,000) is free too.
pub fn free_port(taken: &[u16]) -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if port < 55_000 && !taken.contains(&port) && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// Runs `redis-cli -p port args...` and returns its output.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run redis-cli ({e}); run scripts/start-services.sh to install Redis"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Three free ports for the nodes of a cluster.
pub fn free_ports() -> Vec<u16> {
    let mut ports = Vec::new();
    for _ in 0..3 {
        let p = free_port(&ports);
        ports.push(p);
    }
    ports
}

/// Starts a cluster on free ports.
pub fn start() -> Cluster {
    start_on(free_ports(), None)
}

/// Starts a cluster on `ports`. With `announce`, node `i` tells clients
/// to reach it at port `announce[i]` of 127.0.0.1 (a proxy there, which
/// must be forwarding already: `redis-cli --cluster create` goes through
/// it) instead of its own port; the nodes still talk to each other
/// directly.
pub fn start_on(ports: Vec<u16>, announce: Option<&[u16]>) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let parent = std::process::id();
    let mut watchdogs = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let announced = match announce {
            Some(announce) => format!(
                "--cluster-announce-ip 127.0.0.1 --cluster-announce-port {} --cluster-announce-bus-port {}",
                announce[i],
                port + 10_000
            ),
            None => String::new(),
        };
        // redis-server in the background; the shell waits for this test
        // process to end, then stops it (a watchdog for the static cluster).
        let script = format!(
            "redis-server --cluster-enabled yes --port {port} --bind 127.0.0.1 --cluster-config-file nodes-{port}.conf \
             {announced} --dir '{dir}' --save '' --appendonly no --daemonize no --loglevel warning >'{dir}/{port}.log' 2>&1 &
             pid=$!
             while kill -0 {parent} 2>/dev/null && kill -0 $pid 2>/dev/null; do sleep 0.2; done
             kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf '{dir}'",
            dir = dir.path().display()
        );
        let child = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start sh");
        watchdogs.push(child);
    }
    // process start-up, not job timing
    let deadline = Instant::now() + Duration::from_secs(20);
    for port in &ports {
        while redis_cli(*port, &["ping"]).trim() != "PONG" {
            assert!(
                Instant::now() < deadline,
                "redis-server --cluster-enabled on port {port} did not start (is redis-server installed? run \
                 scripts/start-services.sh); log in {}",
                dir.path().display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let out = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(&nodes)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli --cluster create");
    assert!(out.status.success(), "cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
    for port in &ports {
        while !redis_cli(*port, &["cluster", "info"]).contains("cluster_state:ok") {
            assert!(Instant::now() < deadline, "cluster on port {port} never reached cluster_state:ok");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Cluster { ports, watchdogs, _dir: dir }
}
