//! Named roles ([`RoleStorage::elect`](jq_core::storage::RoleStorage::elect)): one row per
//! held role in `leaders`, taken or renewed by one upsert.

use jq_core::storage::{Election, Leader, LeaseToken};
use jq_core::storage::{add, truncate_micros};
use jq_core::{Result, Timestamp};
use sqlx::Row;

use crate::Inner;
use crate::error::map_sqlx;

/// Takes or renews `election.role`; true when it is now held with the
/// election's token.
pub(crate) async fn elect(inner: &Inner, election: &Election) -> Result<bool> {
    election.check()?;
    let now = inner.clock.now();
    let statement = inner
        .sql
        .elect
        .query()
        .bind(&election.role)
        .bind(election.token.0)
        .bind(&election.holder)
        .bind(now)
        .bind(truncate_micros(add(now, election.ttl)));
    let won = inner.db().fetch_optional(statement).await.map_err(map_sqlx)?;
    Ok(won.is_some())
}

/// Frees `role` when `token` holds it.
pub(crate) async fn resign(inner: &Inner, role: &str, token: LeaseToken) -> Result<()> {
    jq_core::storage::check_role(role)?;
    inner.db().execute(inner.sql.resign.query().bind(role).bind(token.0)).await.map_err(map_sqlx)?;
    Ok(())
}

/// Every held role.
pub(crate) async fn leaders(inner: &Inner) -> Result<Vec<Leader>> {
    let rows = inner.db().fetch_all(inner.sql.leaders.query()).await.map_err(map_sqlx)?;
    rows.iter()
        .map(|row| {
            let expires_at: Timestamp = row.try_get(2)?;
            Ok(Leader { role: row.try_get(0)?, holder: row.try_get(1)?, expires_at })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()
        .map_err(map_sqlx)
}
