//! Waking this process's workers once a caller's own transaction, which
//! enqueued jobs with [`SqliteStorage::enqueue_tx`](crate::SqliteStorage::enqueue_tx),
//! has committed; never before, and never for a rollback.
//!
//! SQLite offers two hooks around a commit, and neither is right alone:
//!
//! - the commit hook runs *before* the commit (it may still turn it into a
//!   rollback), so a worker woken from it could look for the jobs before they
//!   are visible;
//! - the WAL hook runs *after* the commit, once the write lock is released,
//!   but rusqlite takes it as a plain `fn` with no state, so it cannot know
//!   whose signal to send.
//!
//! So the commit hook (a closure holding the storage's signal) hands the
//! signal to a thread-local slot, and the WAL hook (called on the same
//! thread, by the same `COMMIT` statement, right after) takes it from there
//! and sends it. The commit hook hands it over once per arming: the next
//! commit of that connection that enqueued nothing wakes no one, and a
//! rollback disarms it. The database is always in WAL mode (jq sets it on
//! the file), so the WAL hook runs for every commit of the caller's
//! connection.
//!
//! Installing the hooks replaces the connection's own commit, rollback and
//! WAL hooks, and SQLite's automatic checkpoint (itself a WAL hook), which
//! [`after_commit`] therefore does the same way SQLite's default does.

use std::cell::RefCell;
use std::os::raw::c_int;
use std::sync::{Arc, Mutex};

use jq_core::Result;
use rusqlite::Connection;
use rusqlite::hooks::Wal;
use tokio::sync::watch;

use crate::error::db;

/// The signal a commit of the caller's connection must send.
type Signal = Arc<watch::Sender<u64>>;

/// SQLite's default automatic checkpoint threshold, in WAL pages.
const AUTO_CHECKPOINT_PAGES: c_int = 1000;

thread_local! {
    /// Handed from the commit hook to the WAL hook of the same commit.
    static COMMITTING: RefCell<Option<Signal>> = const { RefCell::new(None) };
}

/// Arms `conn` so that its next commit sends `signal` after the commit.
pub(crate) fn arm(conn: &Connection, signal: &Signal) -> Result<()> {
    let armed: Arc<Mutex<Option<Signal>>> = Arc::new(Mutex::new(Some(signal.clone())));
    let on_commit = armed.clone();
    conn.commit_hook(Some(move || {
        let signal = on_commit.lock().unwrap_or_else(|p| p.into_inner()).take();
        // Replacing, not adding: a signal left by a commit that then failed
        // belongs to no commit any more.
        COMMITTING.with(|slot| *slot.borrow_mut() = signal);
        false // never veto the commit
    }))
    .map_err(db)?;
    conn.rollback_hook(Some(move || {
        armed.lock().unwrap_or_else(|p| p.into_inner()).take();
    }))
    .map_err(db)?;
    conn.wal_hook(Some(after_commit));
    Ok(())
}

/// The WAL hook: the commit is done and visible; send what the commit hook
/// handed over, then checkpoint like SQLite's default hook would.
fn after_commit(wal: &Wal, pages: c_int) -> rusqlite::Result<()> {
    if let Some(signal) = COMMITTING.with(|slot| slot.borrow_mut().take()) {
        signal.send_modify(|n| *n = n.wrapping_add(1));
    }
    if pages >= AUTO_CHECKPOINT_PAGES {
        // A passive checkpoint, as SQLite's own automatic one; its failure
        // (a reader holds the WAL) is not the committer's error.
        let _ = wal.checkpoint();
    }
    Ok(())
}
