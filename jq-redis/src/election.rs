//! Named roles ([`RoleStorage::elect`](jq_core::storage::RoleStorage::elect)): one hash per
//! role in its own slot, taken or renewed by `lua/elect.lua`, freed by
//! `lua/resign.lua`. The role registry `P:roles` (another slot) is written
//! first, as the queue registry is, so `leaders` can find every role.

use jq_core::Result;
use jq_core::storage::from_micros;
use jq_core::storage::{Election, Leader, LeaseToken};

use crate::{Inner, duration_micros, scripts};

/// Takes or renews `election.role`; true when it is now held with the
/// election's token.
pub(crate) async fn elect(s: &Inner, election: &Election) -> Result<bool> {
    election.check()?;
    let now = s.now_micros();
    let mut cmd = scripts::call(&scripts::ELECT, &[s.keys.role(&election.role)]);
    cmd.arg(now)
        .arg(election.token.to_string())
        .arg(&election.holder)
        .arg(now.saturating_add(duration_micros(election.ttl)));
    let mut register = redis::cmd("SADD");
    register.arg(s.keys.roles()).arg(&election.role);
    let won: i64 = if s.is_cluster() {
        let _: i64 = s.query(&register).await?;
        s.query(&cmd).await?
    } else {
        let mut pipe = redis::pipe();
        pipe.add_command(register).ignore().add_command(cmd);
        let (won,): (i64,) = s.query_pipe(&pipe).await?;
        won
    };
    Ok(won == 1)
}

/// Frees `role` when `token` holds it.
pub(crate) async fn resign(s: &Inner, role: &str, token: LeaseToken) -> Result<()> {
    jq_core::storage::check_role(role)?;
    let mut cmd = scripts::call(&scripts::RESIGN, &[s.keys.role(role)]);
    cmd.arg(token.to_string());
    let _: i64 = s.query(&cmd).await?;
    Ok(())
}

/// Every held role, by name.
pub(crate) async fn leaders(s: &Inner) -> Result<Vec<Leader>> {
    let mut roles: Vec<String> = s.query(redis::cmd("SMEMBERS").arg(s.keys.roles())).await?;
    roles.sort();
    let cmds = roles
        .iter()
        .map(|role| {
            let mut cmd = redis::cmd("HMGET");
            cmd.arg(s.keys.role(role)).arg("holder").arg("expires_at");
            cmd
        })
        .collect();
    let held: Vec<(Option<String>, Option<String>)> = s.query_each(cmds).await?;
    Ok(roles
        .into_iter()
        .zip(held)
        .filter_map(|(role, held)| match held {
            (Some(holder), Some(expires_at)) => {
                // An expiry that is not a number counts as expired (elect.lua).
                let expires_at = from_micros(expires_at.parse().unwrap_or(i64::MIN));
                Some(Leader { role, holder, expires_at })
            }
            _ => None, // resigned
        })
        .collect())
}
