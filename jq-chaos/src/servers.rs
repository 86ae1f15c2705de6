//! Private PostgreSQL and Redis servers: started from the installed
//! binaries in a temporary folder on a free port, so a test can kill and
//! restart them without disturbing any other test or engineer.
//!
//! PostgreSQL refuses to run as root: when we are root, `initdb` and
//! `postgres` run as the `postgres` OS user (the folder is chowned to it).
//! A crash is simulated with SIGQUIT to the postmaster (what `pg_ctl -m
//! immediate` sends: no checkpoint, crash recovery at the next start).
//! Redis runs with `appendonly yes`, `appendfsync always`; a crash is a
//! SIGKILL, and the restart replays the append-only file.

use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

/// What to say when a server binary is missing.
pub const INSTALL_HINT: &str = "run scripts/start-services.sh (it installs PostgreSQL and Redis)";

/// A free TCP port on 127.0.0.1 (free when asked; the server binds it next).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0)
}

/// Sends `signal` to `pid`; a process already gone is not an error.
pub fn signal(pid: u32, signal: Signal) {
    if let Ok(raw) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(raw), signal);
    }
}

/// Waits up to `patience` for `child` to exit; SIGKILLs it after that.
/// Returns true when it exited on its own.
pub fn wait_or_kill(child: &mut Child, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// Finds an executable named `name` on `PATH` or in `extra` folders.
fn find_binary(name: &str, extra: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).chain(extra.iter().map(PathBuf::from)).map(|dir| dir.join(name)).find(|p| p.is_file())
}

fn postgres_bin_dirs() -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| rd.flatten().map(|e| e.path().join("bin").display().to_string()).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs.reverse();
    dirs
}

/// uid and gid of an OS user, from /etc/passwd.
fn os_user(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.first() == Some(&name) && f.len() > 3).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn wait_port(port: u16, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A new temporary folder for a server, owned by the `postgres` OS user
/// when we are root (PostgreSQL refuses to run as root), and that user.
fn server_dir(prefix: &str) -> Result<(TempDir, Option<(u32, u32)>), String> {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().map_err(|e| e.to_string())?;
    let user = if is_root() {
        let user =
            os_user("postgres").ok_or("running as root and there is no `postgres` OS user to run PostgreSQL as")?;
        std::os::unix::fs::chown(dir.path(), Some(user.0), Some(user.1)).map_err(|e| e.to_string())?;
        Some(user)
    } else {
        None
    };
    Ok((dir, user))
}

/// A private PostgreSQL server. Stopped (immediately) when dropped.
#[derive(Debug)]
pub struct PgServer {
    dir: TempDir,
    port: u16,
    postgres: PathBuf,
    user: Option<(u32, u32)>,
    child: Option<Child>,
    max_connections: u32,
    /// More `-c name=value` settings of the command line.
    settings: Vec<String>,
    /// How many times it was restarted.
    pub restarts: u32,
}

impl PgServer {
    /// The `max_connections` of [`PgServer::start`].
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 200;

    /// Runs `initdb` into a new temporary folder and starts `postgres` on a
    /// free port. Panics with [`INSTALL_HINT`] when the binaries are missing.
    pub fn start() -> Result<PgServer, String> {
        PgServer::start_with(PgServer::DEFAULT_MAX_CONNECTIONS)
    }

    /// [`PgServer::start`] with `max_connections` of the caller's choice
    /// (a scenario that takes every slot wants few).
    pub fn start_with(max_connections: u32) -> Result<PgServer, String> {
        PgServer::start_configured(max_connections, Vec::new())
    }

    /// A primary for a streaming replica ([`PgServer::replica_of`]):
    /// `wal_level = replica` and WAL senders; with `synchronous`, every
    /// commit waits for a standby to have flushed it
    /// (`synchronous_standby_names = '*'`): nothing may be written before
    /// the replica streams.
    pub fn start_primary(synchronous: bool) -> Result<PgServer, String> {
        let mut settings = vec!["wal_level=replica".to_owned(), "max_wal_senders=4".to_owned()];
        if synchronous {
            settings.push("synchronous_standby_names=*".to_owned());
        }
        PgServer::start_configured(PgServer::DEFAULT_MAX_CONNECTIONS, settings)
    }

    /// A streaming replica of `primary` (a hot standby): `pg_basebackup -R`
    /// into a new temporary folder, started on a free port.
    pub fn replica_of(primary: &PgServer) -> Result<PgServer, String> {
        let extra = postgres_bin_dirs();
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let Some(basebackup) = find_binary("pg_basebackup", &extra) else {
            panic!("pg_basebackup not found: {INSTALL_HINT}");
        };
        let (dir, user) = server_dir("jq-chaos-replica")?;
        // The primary listens before it takes connections ("the database
        // system is starting up"): try again for a while.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let _ = std::fs::remove_dir_all(dir.path().join("data"));
            let log = File::create(dir.path().join("basebackup.log")).map_err(|e| e.to_string())?;
            let mut cmd = Command::new(&basebackup);
            cmd.args(["-h", "127.0.0.1", "-p", &primary.port.to_string(), "-U", "postgres", "-D"])
                .arg(dir.path().join("data"))
                .args(["-R", "-X", "stream", "--checkpoint=fast", "--no-sync"]);
            cmd.current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(log.try_clone().map_err(|e| e.to_string())?)
                .stderr(log);
            if let Some((uid, gid)) = user {
                cmd.uid(uid).gid(gid);
            }
            let status = cmd.status().map_err(|e| format!("pg_basebackup: {e}"))?;
            if status.success() {
                break;
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(dir.path().join("basebackup.log")).unwrap_or_default();
                return Err(format!("pg_basebackup failed ({status}): {log}"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let mut server = PgServer {
            dir,
            port: free_port(),
            postgres: primary.postgres.clone(),
            user,
            child: None,
            max_connections: primary.max_connections,
            settings: Vec::new(),
            restarts: 0,
        };
        server.spawn()?;
        Ok(server)
    }

    fn start_configured(max_connections: u32, settings: Vec<String>) -> Result<PgServer, String> {
        let extra = postgres_bin_dirs();
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let (Some(initdb), Some(postgres)) = (find_binary("initdb", &extra), find_binary("postgres", &extra)) else {
            panic!("PostgreSQL binaries (initdb, postgres) not found: {INSTALL_HINT}");
        };
        let (dir, user) = server_dir("jq-chaos-pg")?;
        let data = dir.path().join("data");
        let log = File::create(dir.path().join("initdb.log")).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&initdb);
        cmd.arg("-D").arg(&data).args(["-U", "postgres", "--auth=trust", "--no-locale", "-E", "UTF8", "--no-sync"]);
        cmd.current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        if let Some((uid, gid)) = user {
            cmd.uid(uid).gid(gid);
        }
        let status = cmd.status().map_err(|e| format!("initdb: {e}"))?;
        if !status.success() {
            let log = std::fs::read_to_string(dir.path().join("initdb.log")).unwrap_or_default();
            return Err(format!("initdb failed ({status}): {log}"));
        }
        let mut server =
            PgServer { dir, port: free_port(), postgres, user, child: None, max_connections, settings, restarts: 0 };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.dir.path().join("postgres.log"))
            .map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&self.postgres);
        cmd.arg("-D").arg(self.dir.path().join("data")).arg("-p").arg(self.port.to_string());
        cmd.arg("-k").arg(self.dir.path());
        cmd.args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=on"]);
        cmd.arg("-c").arg(format!("max_connections={}", self.max_connections));
        for setting in &self.settings {
            cmd.arg("-c").arg(setting);
        }
        cmd.current_dir(self.dir.path()).stdin(Stdio::null());
        cmd.stdout(log.try_clone().map_err(|e| e.to_string())?).stderr(log);
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        self.child = Some(cmd.spawn().map_err(|e| format!("postgres: {e}"))?);
        if !wait_port(self.port, Duration::from_secs(30)) {
            return Err(format!("postgres did not listen on port {}: see {}", self.port, self.log_path().display()));
        }
        Ok(())
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// Immediate shutdown, as a crash: SIGQUIT to the postmaster (no
    /// checkpoint; the next start runs crash recovery).
    pub fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), Signal::SIGQUIT);
            wait_or_kill(&mut child, Duration::from_secs(10));
        }
    }

    /// Starts it again on the same data folder and port.
    pub fn start_again(&mut self) -> Result<(), String> {
        self.restarts += 1;
        self.spawn()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.crash();
    }
}

/// A private Redis server with an fsync-always append-only file. Killed
/// when dropped.
#[derive(Debug)]
pub struct RedisServer {
    dir: TempDir,
    port: u16,
    binary: PathBuf,
    child: Option<Child>,
    /// How many times it was restarted.
    pub restarts: u32,
}

impl RedisServer {
    /// Starts `redis-server` on a free port in a new temporary folder.
    /// Panics with [`INSTALL_HINT`] when the binary is missing.
    pub fn start() -> Result<RedisServer, String> {
        let Some(binary) = find_binary("redis-server", &[]) else {
            panic!("redis-server not found: {INSTALL_HINT}");
        };
        let dir = tempfile::Builder::new().prefix("jq-chaos-redis").tempdir().map_err(|e| e.to_string())?;
        let mut server = RedisServer { dir, port: free_port(), binary, child: None, restarts: 0 };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log = self.dir.path().join("redis.log");
        let mut cmd = Command::new(&self.binary);
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", ""]);
        cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        cmd.arg("--dir").arg(self.dir.path()).arg("--logfile").arg(&log);
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        self.child = Some(cmd.spawn().map_err(|e| format!("redis-server: {e}"))?);
        if !wait_port(self.port, Duration::from_secs(30)) {
            return Err(format!("redis did not listen on port {}: see {}", self.port, log.display()));
        }
        Ok(())
    }

    /// `redis://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The data folder (append-only files, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// SIGKILL: a crash with no chance to save anything.
    pub fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same folder (replaying the append-only file)
    /// and port.
    pub fn start_again(&mut self) -> Result<(), String> {
        self.restarts += 1;
        self.spawn()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.crash();
    }
}

/// Whichever private server a backend needs (none for SQLite).
#[derive(Debug)]
pub enum Server {
    /// SQLite has no server.
    None,
    /// PostgreSQL.
    Postgres(PgServer),
    /// Redis.
    Redis(RedisServer),
}

impl Server {
    /// Crashes the server, waits `down`, and starts it again. Returns false
    /// when there is no server.
    pub fn crash_and_restart(&mut self, down: Duration) -> Result<bool, String> {
        match self {
            Server::None => Ok(false),
            Server::Postgres(s) => {
                s.crash();
                std::thread::sleep(down);
                s.start_again().map(|()| true)
            }
            Server::Redis(s) => {
                s.crash();
                std::thread::sleep(down);
                s.start_again().map(|()| true)
            }
        }
    }

    /// Restarts so far.
    pub fn restarts(&self) -> u32 {
        match self {
            Server::None => 0,
            Server::Postgres(s) => s.restarts,
            Server::Redis(s) => s.restarts,
        }
    }
}
