//! Whether the servers and programs a test needs are here: the one gate
//! every jq test that needs PostgreSQL, Redis or a headless Chromium goes
//! through.
//!
//! A contributor without those runs `cargo test --workspace
//! --all-features` and gets everything else: a test whose service is
//! missing returns at once, and its test binary says so once on stderr,
//! naming what was skipped and how to enable it:
//!
//! ```text
//! jq: skipping the PostgreSQL tests of jq-postgres (storage): no server answers at 127.0.0.1:5432 (JQ_POSTGRES_URL): Connection refused (os error 111) — run scripts/start-services.sh, or set JQ_REQUIRE_SERVICES=1 to make this an error
//! ```
//!
//! With `JQ_REQUIRE_SERVICES=1` (what `scripts/test.sh` and CI set) a
//! missing service is a failure instead: every test that needs it panics
//! with the reason. Nothing is ever skipped silently.
//!
//! How a test asks:
//!
//! - a conformance or property setup returns `Option<Harness>`
//!   (see [`IntoHarness`](crate::IntoHarness)): `let url = services::postgres()?;`
//!   in an `async fn setup() -> Option<MyHarness>`;
//! - any other test starts with [`needs!`](crate::needs)`(postgres)`, or
//!   `let Some(url) = services::postgres() else { return };` when it wants
//!   the URL.
//!
//! The servers are found where the tests look for them: `JQ_POSTGRES_URL`
//! (default `postgres://postgres@127.0.0.1:5432/postgres`) and
//! `JQ_REDIS_URL` (default `redis://127.0.0.1:6379`). Each is probed once
//! per test binary with a TCP connect that gives up after
//! [`CONNECT_TIMEOUT`]. Programs (for tests that start servers of their
//! own, and the browser) are looked up on `PATH`.

use std::io::Write as _;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::{Once, OnceLock};
use std::time::Duration;

/// The variable that turns a missing service into a failure: set to
/// anything but `0` or the empty string.
pub const REQUIRE_VAR: &str = "JQ_REQUIRE_SERVICES";

/// How long the reachability probe waits for a server to accept a TCP
/// connection: a local server answers in microseconds, and a machine
/// without one refuses at once; this bounds a firewalled address.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// The PostgreSQL server tests use when `JQ_POSTGRES_URL` is not set.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The Redis server tests use when `JQ_REDIS_URL` is not set.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// What to do about a missing service, said after every skip message and
/// every failure.
const HOW_TO_ENABLE: &str = "run scripts/start-services.sh";

/// True when `JQ_REQUIRE_SERVICES` asks for every suite to run.
pub fn required() -> bool {
    std::env::var(REQUIRE_VAR).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `JQ_POSTGRES_URL`, or [`DEFAULT_POSTGRES_URL`]; whether or not a server
/// answers there.
pub fn postgres_url() -> String {
    std::env::var("JQ_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_owned())
}

/// `JQ_REDIS_URL`, or [`DEFAULT_REDIS_URL`]; whether or not a server
/// answers there.
pub fn redis_url() -> String {
    std::env::var("JQ_REDIS_URL").unwrap_or_else(|_| DEFAULT_REDIS_URL.to_owned())
}

/// The PostgreSQL server's URL ([`postgres_url`]) when it accepts
/// connections; otherwise `None` after saying once that the PostgreSQL
/// tests are skipped, or a panic under `JQ_REQUIRE_SERVICES`.
#[track_caller]
pub fn postgres() -> Option<String> {
    static GATE: Gate<String> = Gate::new();
    GATE.check("PostgreSQL", || {
        let url = postgres_url();
        probe(&url, 5432, "JQ_POSTGRES_URL").map(|()| url)
    })
}

/// The Redis server's URL ([`redis_url`]) when it accepts connections;
/// otherwise `None` after saying once that the Redis tests are skipped, or
/// a panic under `JQ_REQUIRE_SERVICES`.
#[track_caller]
pub fn redis() -> Option<String> {
    static GATE: Gate<String> = Gate::new();
    GATE.check("Redis", || {
        let url = redis_url();
        probe(&url, 6379, "JQ_REDIS_URL").map(|()| url)
    })
}

/// Redis's programs, for tests that start servers of their own (a
/// Cluster, a server to crash and restart).
#[derive(Clone, Debug)]
pub struct RedisPrograms {
    /// `redis-server`.
    pub server: PathBuf,
    /// `redis-cli`.
    pub cli: PathBuf,
}

/// `redis-server` and `redis-cli` when both are on `PATH`; otherwise
/// `None` after saying once that the tests starting their own Redis
/// servers are skipped, or a panic under `JQ_REQUIRE_SERVICES`.
#[track_caller]
pub fn redis_programs() -> Option<RedisPrograms> {
    static GATE: Gate<RedisPrograms> = Gate::new();
    GATE.check("Redis Cluster and private Redis server", || {
        Ok(RedisPrograms { server: program("redis-server", &[])?, cli: program("redis-cli", &[])? })
    })
}

/// PostgreSQL's programs, for tests that start a private server.
#[derive(Clone, Debug)]
pub struct PostgresPrograms {
    /// `initdb`.
    pub initdb: PathBuf,
    /// `postgres`, the server.
    pub postgres: PathBuf,
}

/// `initdb` and `postgres` when both are on `PATH` or in Debian's
/// `/usr/lib/postgresql/<version>/bin` (the newest version first);
/// otherwise `None` after saying once that the tests starting their own
/// PostgreSQL servers are skipped, or a panic under `JQ_REQUIRE_SERVICES`.
#[track_caller]
pub fn postgres_programs() -> Option<PostgresPrograms> {
    static GATE: Gate<PostgresPrograms> = Gate::new();
    GATE.check("private PostgreSQL server", || {
        let dirs = postgres_bin_dirs();
        Ok(PostgresPrograms { initdb: program("initdb", &dirs)?, postgres: program("postgres", &dirs)? })
    })
}

/// `pgbouncer`, for tests that start a connection pooler of their own in
/// front of the PostgreSQL server: on `PATH` or in `/usr/sbin` (Debian's
/// package); otherwise `None` after saying once that the pooler tests are
/// skipped, or a panic under `JQ_REQUIRE_SERVICES`.
#[track_caller]
pub fn pgbouncer() -> Option<PathBuf> {
    static GATE: Gate<PathBuf> = Gate::new();
    GATE.check("PgBouncer", || program("pgbouncer", &[PathBuf::from("/usr/sbin")]))
}

/// A headless browser and its WebDriver.
#[derive(Clone, Debug)]
pub struct Chromium {
    /// The browser: `chromium` (Debian's `/usr/bin/chromium`) or `chromium-browser`.
    pub browser: PathBuf,
    /// `chromedriver`.
    pub driver: PathBuf,
}

/// Chromium and chromedriver when both are installed; otherwise `None`
/// after saying once that the browser tests are skipped, or a panic under
/// `JQ_REQUIRE_SERVICES`.
#[track_caller]
pub fn chromium() -> Option<Chromium> {
    static GATE: Gate<Chromium> = Gate::new();
    GATE.check("browser (Chromium)", || {
        let browser = program("chromium", &[]).or_else(|_| program("chromium-browser", &[]))?;
        Ok(Chromium { browser, driver: program("chromedriver", &[])? })
    })
}

/// Skips the rest of the test (a plain `return`) unless every service
/// named is here; see [the module](crate::services).
///
/// ```no_run
/// #[tokio::test]
/// async fn enqueue_then_claim_on_postgres() {
///     jq_testkit::needs!(postgres);
///     // ... the server at jq_testkit::services::postgres_url() answers
/// }
/// ```
///
/// The names are the functions of [`services`](crate::services):
/// `postgres`, `redis`, `redis_programs`, `postgres_programs`, `pgbouncer`,
/// `chromium`. Every one is checked, so the message names each missing service.
#[macro_export]
macro_rules! needs {
    ($($service:ident),+ $(,)?) => {
        if false $(| $crate::services::$service().is_none())+ {
            return;
        }
    };
}

/// One service's probe, made once per test binary, and its message, said
/// once.
struct Gate<T> {
    found: OnceLock<Result<T, String>>,
    told: Once,
}

impl<T: Clone> Gate<T> {
    const fn new() -> Self {
        Gate { found: OnceLock::new(), told: Once::new() }
    }

    /// `suite` names the tests skipped: "the {suite} tests".
    #[track_caller]
    fn check(&self, suite: &str, probe: impl FnOnce() -> Result<T, String>) -> Option<T> {
        let reason = match self.found.get_or_init(probe) {
            Ok(found) => return Some(found.clone()),
            Err(reason) => reason,
        };
        if required() {
            panic!("the {suite} tests must run ({REQUIRE_VAR} is set), but {reason}: {HOW_TO_ENABLE}");
        }
        self.told.call_once(|| {
            // Straight to the process's stderr: the test harness captures
            // eprintln! of a passing test, and this must be seen.
            let message = format!(
                "jq: skipping the {suite} tests{}: {reason} — {HOW_TO_ENABLE}, or set {REQUIRE_VAR}=1 to make this an \
                 error\n",
                test_binary()
            );
            let _ = std::io::stderr().lock().write_all(message.as_bytes());
        });
        None
    }
}

/// `" of PACKAGE (TEST BINARY)"`, from what cargo sets when it runs a
/// test and the executable's name without cargo's hash; empty when
/// neither is known.
fn test_binary() -> String {
    let package = std::env::var("CARGO_PKG_NAME").ok();
    let binary = std::env::current_exe().ok().and_then(|exe| {
        let stem = exe.file_stem()?.to_str()?.to_owned();
        // cargo names test executables `<target>-<16 hex digits>`.
        Some(match stem.rsplit_once('-') {
            Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => name.to_owned(),
            _ => stem,
        })
    });
    match (package, binary) {
        (Some(p), Some(b)) => format!(" of {p} ({b})"),
        (Some(p), None) => format!(" of {p}"),
        (None, Some(b)) => format!(" of {b}"),
        (None, None) => String::new(),
    }
}

/// Ok when something accepts a TCP connection at the host and port of
/// `url` (`default_port` when it names none). A URL whose address this
/// cannot read (a Unix socket) counts as reachable: the test then says
/// itself what is wrong.
fn probe(url: &str, default_port: u16, variable: &str) -> Result<(), String> {
    let Some((host, port)) = host_and_port(url, default_port) else {
        return Ok(());
    };
    let addrs: Vec<SocketAddr> = match (host.as_str(), port).to_socket_addrs() {
        Ok(addrs) => addrs.collect(),
        Err(e) => return Err(format!("cannot resolve {host} ({variable}): {e}")),
    };
    let mut last = None;
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, CONNECT_TIMEOUT) {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    let why = last.map(|e| format!(": {e}")).unwrap_or_default();
    Err(format!("no server answers at {host}:{port} ({variable}){why}"))
}

/// The host and port of a `scheme://[user[:password]@]host[:port][/...]`
/// URL; `None` when it has no host (a Unix socket path).
fn host_and_port(url: &str, default_port: u16) -> Option<(String, u16)> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    if host_port.is_empty() {
        return None;
    }
    // [::1]:5432, or host:port, or host alone.
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => default_port,
    };
    Some((host.to_owned(), port))
}

/// The first executable file called `name` on `PATH`, then in `extra`.
fn program(name: &str, extra: &[PathBuf]) -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra.iter().cloned())
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
        .ok_or_else(|| format!("{name} is not installed (not on PATH)"))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Debian keeps PostgreSQL's server programs off `PATH`, in
/// `/usr/lib/postgresql/<version>/bin`: the newest version first.
pub fn postgres_bin_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| {
            rd.flatten().map(|e| (e.file_name().to_string_lossy().parse().unwrap_or(0), e.path().join("bin"))).collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.into_iter().rev().map(|(_, dir)| dir).collect()
}

#[cfg(test)]
mod tests {
    use super::host_and_port;

    #[test]
    fn addresses_are_read_from_urls() {
        let hp = |url| host_and_port(url, 5432);
        assert_eq!(hp("postgres://postgres@127.0.0.1:5432/postgres"), Some(("127.0.0.1".into(), 5432)));
        assert_eq!(hp("postgres://u:p@db.example:6000/x?schema=a"), Some(("db.example".into(), 6000)));
        assert_eq!(hp("postgres://localhost/db"), Some(("localhost".into(), 5432)));
        assert_eq!(hp("redis://[::1]:6380"), Some(("::1".into(), 6380)));
        assert_eq!(hp("redis://127.0.0.1:6379?prefix=jq"), Some(("127.0.0.1".into(), 6379)));
        assert_eq!(hp("postgres:///db?host=/run/postgresql"), None);
    }
}
