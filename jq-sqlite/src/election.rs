//! Named roles ([`RoleStorage::elect`](jq_core::storage::RoleStorage::elect)): one row per
//! held role in `leaders`, written by one upsert on the writer.

use jq_core::storage::{Election, Leader, LeaseToken};
use jq_core::storage::{add, from_micros};
use jq_core::{Result, Timestamp};
use rusqlite::{Connection, params};

use crate::error::{db, is_decoding};
use crate::row::blob;

const ELECT: &str = include_str!("sql/elect.sql");
const RESIGN: &str = include_str!("sql/resign.sql");
const LEADERS: &str = include_str!("sql/leaders.sql");

/// Takes or renews `election.role`; true when it is now held with the
/// election's token. Runs on the writer.
pub(crate) fn elect(conn: &Connection, election: &Election, now: Timestamp) -> Result<bool> {
    let expires_at = add(now, election.ttl).timestamp_micros();
    let changed = conn
        .prepare_cached(ELECT)
        .map_err(db)?
        .execute(params![election.role, blob(&election.token.0), election.holder, now.timestamp_micros(), expires_at])
        .map_err(db)?;
    Ok(changed == 1)
}

/// Frees `role` when `token` holds it. Runs on the writer.
pub(crate) fn resign(conn: &Connection, role: &str, token: LeaseToken) -> Result<()> {
    conn.prepare_cached(RESIGN).map_err(db)?.execute(params![role, blob(&token.0)]).map_err(db)?;
    Ok(())
}

/// Every held role.
pub(crate) fn leaders(conn: &Connection) -> Result<Vec<Leader>> {
    let mut stmt = conn.prepare_cached(LEADERS).map_err(db)?;
    let mut rows = stmt.query([]).map_err(db)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next().map_err(db)? {
        let leader = (|| Ok(Leader { role: r.get(0)?, holder: r.get(1)?, expires_at: from_micros(r.get(2)?) }))();
        match leader {
            Ok(leader) => out.push(leader),
            Err(error) if is_decoding(&error) => {
                tracing::error!(%error, "leaders skips a role row that cannot be decoded")
            }
            Err(error) => return Err(db(error)),
        }
    }
    Ok(out)
}
