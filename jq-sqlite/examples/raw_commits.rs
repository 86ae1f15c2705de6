//! The ceiling of jq's single enqueue on SQLite, measured without jq: one
//! thread, one connection with the writer's settings (WAL,
//! `synchronous=NORMAL`, a checkpoint every 8,192 pages, a 16 MB page
//! cache), jq's schema (`schema::migrate`), and 20,000 single-row
//! INSERTs of the enqueue statement, each in its own `BEGIN IMMEDIATE` /
//! `COMMIT`. It is the same SQLite library jq links, so what jq's single
//! enqueue adds on top is its own cost: the hand-over to the writer thread
//! and back.
//!
//! ```text
//! cargo run --release -p jq-sqlite --example raw_commits
//! ```
//!
//! `scripts/raw-limits.sh sqlite` runs it.

use std::time::Instant;

use rusqlite::{Connection, params};

const ROWS: usize = 20_000;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), BoxError> {
    let dir = tempfile::tempdir()?;
    let mut conn = Connection::open(dir.path().join("raw.db"))?;
    let _: String = conn.query_row("PRAGMA journal_mode = wal", [], |r| r.get(0))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "cache_size", -16_000)?;
    conn.pragma_update(None, "wal_autocheckpoint", 8192)?;
    jq_sqlite::schema::migrate(&mut conn, &dir.path().join("raw.db"))?;
    let insert = include_str!("../src/sql/enqueue_insert.sql");
    let ids: Vec<[u8; 16]> = (0..ROWS).map(|_| *uuid::Uuid::now_v7().as_bytes()).collect();
    let start = Instant::now();
    for (n, id) in ids.iter().enumerate() {
        let now = 1_763_793_000_000_000 + n as i64;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        conn.prepare_cached(insert)?.execute(params![
            id.as_slice(),
            "bench",
            "bench_noop",
            format!("{{\"n\":{n}}}"),
            1,
            "pending",
            25,
            now,
            now,
            None::<String>,
            None::<String>,
            None::<i64>,
            None::<String>
        ])?;
        conn.execute_batch("COMMIT")?;
    }
    let rate = ROWS as f64 / start.elapsed().as_secs_f64();
    println!("{:<58} {rate:>12.0} /s", "single-row INSERT commits, 1 connection (rusqlite)");
    Ok(())
}
