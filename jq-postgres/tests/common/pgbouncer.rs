//! PgBouncer (Debian's package, installed by scripts/start-services.sh;
//! tests check for it with `jq_testkit::needs!(postgres, pgbouncer)`) in
//! transaction pooling mode, in front of the test server, started by a test
//! binary on a free loopback port with a configuration of its own. Each
//! runs under a small shell watchdog that stops it and removes its
//! directory when the test process exits (statics are never dropped).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sqlx::postgres::PgConnectOptions;

/// A running pgbouncer.
pub struct Bouncer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    _watchdog: Child,
    _dir: tempfile::TempDir,
}

/// How a pgbouncer is configured.
#[derive(Clone, Copy)]
pub struct Setup {
    /// `ignore_startup_parameters = extra_float_digits`, as operators set
    /// it for sqlx clients; without it, PgBouncer's default.
    pub ignore_extra_float_digits: bool,
    /// Server connections per database and user.
    pub pool_size: u32,
}

impl Bouncer {
    /// Starts one in transaction mode in front of the test server.
    pub fn start(setup: Setup) -> Bouncer {
        let server = PgConnectOptions::from_str(&super::url()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let ignore =
            if setup.ignore_extra_float_digits { "ignore_startup_parameters = extra_float_digits" } else { "" };
        let config = format!(
            "[databases]\n\
             * = host={host} port={server_port} user={user}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = any\n\
             pool_mode = transaction\n\
             default_pool_size = {pool}\n\
             max_client_conn = 1000\n\
             {ignore}\n",
            host = server.get_host(),
            server_port = server.get_port(),
            user = server.get_username(),
            pool = setup.pool_size,
        );
        let path = dir.path().join("pgbouncer.ini");
        std::fs::write(&path, config).unwrap();
        // PgBouncer refuses to run as root: as root, it switches to the
        // postgres user, which must be able to read the configuration.
        let as_root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
        let user = if as_root { "-u postgres" } else { "" };
        if as_root {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let parent = std::process::id();
        let bin = jq_testkit::services::pgbouncer().expect("the caller checked for pgbouncer (needs!)");
        let script = format!(
            "{bin} {user} '{config}' >'{dir}/pgbouncer.log' 2>&1 &
             pid=$!
             while kill -0 {parent} 2>/dev/null && kill -0 $pid 2>/dev/null; do sleep 0.2; done
             kill $pid 2>/dev/null; wait $pid 2>/dev/null",
            bin = bin.display(),
            config = path.display(),
            dir = dir.path().display(),
        );
        let watchdog = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start sh");
        // process start-up, not job timing
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            let log = std::fs::read_to_string(dir.path().join("pgbouncer.log")).unwrap_or_default();
            assert!(
                Instant::now() < deadline,
                "pgbouncer did not start on port {port} (is it installed? run scripts/start-services.sh): {log}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Bouncer { port, _watchdog: watchdog, _dir: dir }
    }

    /// The test server's URL with this pgbouncer's port instead.
    pub fn url(&self) -> String {
        let server = PgConnectOptions::from_str(&super::url()).unwrap();
        format!(
            "postgres://{}@127.0.0.1:{}/{}",
            server.get_username(),
            self.port,
            server.get_database().unwrap_or("postgres")
        )
    }
}

/// The pgbouncer most tests share: transaction mode, configured as
/// operators do for sqlx clients (`ignore_startup_parameters =
/// extra_float_digits`), 10 server connections.
pub fn shared() -> &'static Bouncer {
    static SHARED: OnceLock<Bouncer> = OnceLock::new();
    SHARED.get_or_init(|| Bouncer::start(Setup { ignore_extra_float_digits: true, pool_size: 10 }))
}

/// A pgbouncer with PgBouncer's defaults: it refuses `extra_float_digits`.
pub fn strict() -> &'static Bouncer {
    static STRICT: OnceLock<Bouncer> = OnceLock::new();
    STRICT.get_or_init(|| Bouncer::start(Setup { ignore_extra_float_digits: false, pool_size: 10 }))
}

/// A handle's configuration through the shared pgbouncer on `schema`:
/// transaction pooler mode, wake-ups from a direct listen URL.
pub fn config(schema: &str, clock: jq_core::Clock) -> jq_postgres::PostgresConfig {
    jq_postgres::PostgresConfig::new(shared().url())
        .schema(schema)
        .clock(clock)
        .max_connections(super::MAX_CONNECTIONS)
        .transaction_pooler(true)
        .listen_url(super::url())
}

/// The testkit harness through the shared pgbouncer: one fresh schema per
/// scenario, created and migrated through the pooler too.
pub struct PoolerHarness {
    /// The scenario's schema.
    pub schema: String,
}

#[async_trait::async_trait]
impl jq_testkit::Harness for PoolerHarness {
    type Storage = jq_postgres::PostgresStorage;

    async fn connect(&self, clock: jq_core::Clock) -> jq_postgres::PostgresStorage {
        jq_postgres::PostgresStorage::connect(config(&self.schema, clock))
            .await
            .unwrap_or_else(|e| panic!("cannot connect through pgbouncer: {e}"))
    }

    async fn cleanup(&self) {
        super::drop_schema(&self.schema).await;
    }
}

/// The testkit's setup function through the pooler: `None` (skip) without
/// a server or without pgbouncer.
pub async fn harness() -> Option<PoolerHarness> {
    use jq_core::storage::Storage;
    jq_testkit::services::postgres()?;
    jq_testkit::services::pgbouncer()?;
    let schema = format!("jq_test_{}", uuid::Uuid::new_v4().simple());
    let storage = jq_postgres::PostgresStorage::connect(config(&schema, jq_core::Clock::system()))
        .await
        .unwrap_or_else(|e| panic!("cannot connect through pgbouncer: {e}"));
    storage.migrate().await.unwrap_or_else(|e| panic!("migrate {schema} through pgbouncer: {e}"));
    storage.close().await;
    Some(PoolerHarness { schema })
}
