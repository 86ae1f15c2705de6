//! The layout marker `P:layout` ([`keys`](crate::keys), "The layout
//! marker"), checked by every connect: a prefix holds the key layout the
//! marker names, and a build refuses one it does not know, as PostgreSQL's
//! refuses a schema migrated by a newer build.

use crate::Conn;
use crate::error::RedisError;
use crate::keys::{self, Keys};

/// The key layout this build reads and writes: 0.1's.
pub const LAYOUT: u32 = 1;

/// Checks the marker of `keys`' prefix, and writes it on a prefix that has
/// none. Only then, on a prefix seen for the first time (or emptied by
/// `FLUSHDB` or `delete_all_keys`), does it look for the jobs of a
/// development build: one `EXISTS` per registered queue.
pub(crate) async fn check(conn: &Conn, keys: &Keys) -> Result<(), RedisError> {
    let conn = &mut conn.clone();
    let marker = keys.layout();
    let prefix = || keys.prefix().to_owned();
    let mut found: Option<String> =
        redis::cmd("GET").arg(&marker).query_async(conn).await.map_err(RedisError::Setup)?;
    if found.is_none() {
        if let Some(queue) = development_queue(conn, keys).await? {
            return Err(RedisError::DevelopmentLayout { prefix: prefix(), queue });
        }
        let set: Option<String> =
            redis::cmd("SET").arg(&marker).arg(LAYOUT).arg("NX").query_async(conn).await.map_err(RedisError::Setup)?;
        if set.is_some() {
            return Ok(());
        }
        // Another process wrote it meanwhile: check what it wrote.
        found = redis::cmd("GET").arg(&marker).query_async(conn).await.map_err(RedisError::Setup)?;
    }
    match found.as_deref().map(str::parse::<u32>) {
        None => Ok(()),
        Some(Ok(LAYOUT)) => Ok(()),
        Some(Ok(n)) if n > LAYOUT => Err(RedisError::LayoutTooNew { prefix: prefix(), found: n, known: LAYOUT }),
        Some(_) => Err(RedisError::UnknownLayout { prefix: prefix(), found: found.unwrap_or_default() }),
    }
}

/// The first registered queue that holds the key of a development build's
/// layout (`<base>v2:states`: every job of that layout had a field there),
/// or None.
async fn development_queue(conn: &mut Conn, keys: &Keys) -> Result<Option<String>, RedisError> {
    let mut names: Vec<String> =
        redis::cmd("SMEMBERS").arg(keys.registry()).query_async(conn).await.map_err(RedisError::Setup)?;
    names.retain(|n| keys::queue_name(n).is_some());
    names.sort();
    // One command per queue: on Cluster each is in its own slot.
    for name in names {
        let key = format!("{}v2:states", keys.base(&name));
        let exists: bool = redis::cmd("EXISTS").arg(&key).query_async(conn).await.map_err(RedisError::Setup)?;
        if exists {
            return Ok(Some(name));
        }
    }
    Ok(None)
}
