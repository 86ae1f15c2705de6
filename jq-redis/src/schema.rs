//! The key layout in Redis (this crate's "schema"), and the check of
//! the layout marker at connect.
//!
//! With prefix `P` (default `jq`) and a queue `Q`, every key of the queue
//! starts with its *base* `P:{P:Q}:`. The braces are a Redis Cluster hash
//! tag: all keys of one queue, its jobs included, live in one hash slot, so
//! every script (which touches one queue, or on a single server possibly
//! several) only touches keys of that slot.
//!
//! A job is one field, named by its id, in each of three hashes of its
//! queue; each value joins its fields with NUL, `""` for an absent one
//! (instants in microseconds since the epoch):
//!
//! | key | type | content |
//! |---|---|---|
//! | `P:{P:Q}:jobs` | hash | id -> what never changes after enqueue (except max_attempts on an operator's retry): `kind payload priority max_attempts created_at trace` |
//! | `P:{P:Q}:states` | hash | id -> what the job's life changes: `state attempts run_at unique_key lease_expires_at lease_token lease_worker finished_at`, and for a workflow step only a ninth field `flow` (the lease fields empty unless Running; see "Workflows" below) |
//! | `P:{P:Q}:errors` | hash | id -> the job's errors, a JSON array of `{"attempt","at","message"}`; absent while there are none |
//! | `P:{P:Q}:extra` | hash | id -> `timeout_ms cancel_at cancel_reason progress` (the job's own timeout, a cancel request of a running job, the JSON its handler last reported); absent for a job with none of them |
//! | `P:{P:Q}:ready` | sorted set | Pending jobs. Score `-priority`; member `<run_at: 20 digits><id: 32 hex>`, which Redis orders lexicographically within one score: so `ZRANGE 0 n` is claim order (priority desc, run_at, id) exactly, with no precision lost to a packed double |
//! | `P:{P:Q}:scheduled` | sorted set | Scheduled jobs, score run_at |
//! | `P:{P:Q}:leases` | sorted set | Running jobs, score lease expiry |
//! | `P:{P:Q}:done:<state>` | sorted set | Completed / Dead / Cancelled jobs, score finished_at (purge walks it) |
//! | `P:{P:Q}:ids` | sorted set | every job of the queue, score 0, member id: lexicographic = id order, for `list` |
//! | `P:{P:Q}:waiting` | sorted set | Waiting jobs (workflow steps whose parents are not done with), score 0 |
//! | `P:{P:Q}:results` | hash | id -> the result its ack stored (`Outcome::AckWith`), JSON; absent for a job without one |
//! | `P:{P:Q}:nodes` | hash | id -> a workflow step's place: `unfinished cancelled position policy workflow step` (unfinished parents; `1` when a parent's failure cancelled it; its index in step order; `c` cancel or `r` run anyway; the workflow's id; the step's name) |
//! | `P:{P:Q}:parents` | hash | id -> the step's parents in step order, as *refs*: entries joined by NUL, each a job id followed by the base of its queue, or by nothing when that is this queue; absent for a step without parents |
//! | `P:{P:Q}:children` | hash | id -> the step's children in step order, as refs; absent for a step without children |
//! | `P:{P:Q}:released` | hash | `<child id><parent id>` -> `1` for each edge a Dead or Cancelled parent released (run-anyway; the child's keys: its queue). An edge from a Completed parent is released too but not written here: a Completed step never finishes again, and the parent's state says it |
//! | `P:{P:Q}:wf:<W>` | hash | workflow `W`'s summary, in its first step's queue: `steps` (refs of every step in step order) and one count per state name (`waiting`, `pending`, ...) |
//! | `P:{P:Q}:unique` | hash | unique key -> ids of the live (Scheduled, Pending, Running) jobs holding it, ascending, joined by `,`: one id, or several after an operator's retry brought back a Dead job whose key a newer live job held; enqueue answers with the first |
//! | `P:{P:Q}:ucreated` | sorted set | every stored job with a unique key, in any state until purged: score 0, member `<unique key>\0<created_at: 20 digits><id>`, so `ZRANGEBYLEX` reads a key's jobs created since an instant (the unique period; `lua/common/core.lua`); a job without a unique key is not in it |
//! | `P:{P:Q}:control` | hash | the queue's control (`ControlStorage::set_paused`, `set_limits`): `paused_at concurrency rate_limit rate_period` (microseconds); absent when nothing is set |
//! | `P:{P:Q}:starts` | sorted set | the rate limit's log: one member `<token>:<id>` per start, score its instant; claim drops those that left the window |
//! | `P:{P:Q}:seen` | hash | worker -> `<instant>:<1 if paused>` of its latest claim that met a control |
//! | `P:{P:Q}:seen_gc` | string | the instant (microseconds) from which a claim that met a control looks again for `seen` entries of claimers unseen for a day, and drops them: at most once an hour per queue |
//! | `P:{P:Q}:kwait` | sorted set | the queue's keyed Pending jobs (keyed jobs are never in `ready` or `scheduled`), score 0, member `<5000000000 - priority, 11 digits><K>\0<member as in ready>`: so `ZRANGEBYLEX` reads the priorities from the highest, each priority's keys in byte order (a key's members come right after those of every key it is a prefix of: keys hold no NUL), and each key's jobs by (run_at, id), its first one its head (`kwait_member` in `lua/common/base.lua`) |
//! | `P:{P:Q}:kscheduled` | sorted set | keyed Scheduled jobs, score run_at (promote and claim make the due ones Pending, run_at kept) |
//! | `P:{P:Q}:kpending` | string | how many keyed jobs are Pending (for `stats`) |
//! | `P:{P:Q}:krun` | hash | key -> its Running jobs (expired leases included until recover or a late ack); every move into Running (claim) and out of it (`leave` in `lua/common/base.lua`, and the ack batch) keeps it. A keyed claim also writes the field `""` (no key is empty) with the long value that keeps `jobs` a hashtable (below): claims and ack batches look up tens of keys at a time, each a walk of a listpack |
//! | `P:{P:Q}:kcursor` | hash | priority (its 11 digits) -> the key the rotation served last there |
//! | `P:{P:Q}:klimits` | hash | key limits: `""` the queue's default, `<K>` key K's override; `concurrency rate_limit rate_period` (microseconds), `""` when none |
//! | `P:{P:Q}:kstarts:<K>` | sorted set | key K's start log while its limits have a rate: member `<token>:<id>`, score its start; claim drops those that left the window |
//! | `P:{P:Q}:journal:<id>` | list | a durable job's journal, one item per entry by index: `kind name until at value` (`lua/durable.lua`) |
//! | `P:{P:Q}:signals:<id>` | list | a durable job's signals not taken yet, oldest first: `sent_at name payload` |
//! | `P:{P:Q}:jbytes` | hash | id -> the bytes of the job's journal (its limit) |
//! | `P:{P:Q}:waits` | hash | id -> the wait the job is in: `index name until` |
//! | `P:{P:Q}:durable` | hash | id -> `1` for each job with durable keys (purge deletes them) |
//! | `P:queues` | set | registry of queue names (its own slot) |
//! | `P:role:{P:role:R}` | hash | the holder of role `R` (`RoleStorage::elect`): `token holder expires_at`; deleted on resign; the role in its own hash tag |
//! | `P:roles` | set | registry of role names ever elected (its own slot), for `leaders` |
//! | `P:{P:Q}:periodic:<name>` | hash | one periodic job whose jobs go to queue `Q` (`PeriodicStorage::fire`): `name queue spec zone cursor last_job missed last_missed declared_at triggered_at`, with `gen` (its generation) and `moved_to` once it moved to another queue (instants in microseconds; see `periodic.rs`); in its queue's slot, so one script moves the cursor and stores the tick's jobs |
//! | `P:periodic` | hash | registry of periodic jobs: name -> queue (its own slot), for `periodic` and `trigger` |
//! | `P:layout` | string | the layout marker: the number of the key layout the prefix holds, `1` ([`crate::LAYOUT`]; see "The layout marker" below) |
//! | `P:wake` | pub/sub channel | published by the scripts that make a job Pending |
//!
//! A job is in exactly one of `waiting`, `ready` (or `kwait`),
//! `scheduled` (or `kscheduled`), `leases`, `done:*`, the one its `state`
//! names; every script keeps that so.
//!
//! # Keyed jobs
//!
//! A keyed job's state value has a tenth field, its key, after its flow
//! (`""` when it is no workflow step); a plain job's value has no tenth,
//! so scripts learn a job's key from the value they read anyway. Keyed
//! jobs stay out of `ready` and `scheduled`: a claim costs a queue one
//! `EXISTS` of `kwait` and `kscheduled` more, and only a queue with a
//! keyed job walks its rotation (`rotations()` in `lua/common/rotation.lua`): for
//! each priority from the highest, the keys after the cursor in byte order,
//! wrapping around, read a page of `kwait` at a time with `ZRANGEBYLEX`
//! (about two members per job the claim may still take; a full page's last
//! key is read further only when the claim needs more of it, and the next
//! page starts past it, so a deep key costs a page what the claim may take
//! of it), each key checked against its limits and Running count (one
//! `HMGET` of `klimits` and one of `krun` per page, and a
//! rate-limited key's start log when the walk reaches it); the merge with
//! the plain jobs and the other queues' rotations is the contract's. A
//! claim of one queue with no plain job to take, whose keys all follow a
//! default of one Running job without a rate (no override), takes the
//! first member of each key with no Running job in one walk per priority
//! (`K.take_singles`): the same jobs, without the merge's bookkeeping. A
//! claim then removes its jobs from `kwait` with one `ZREM`, and writes
//! the Pending count, the Running counts and the cursors once per claim;
//! an ack batch costs one `HMGET` and
//! one `HSET`/`HDEL` of `krun` for all its keyed jobs. On Redis Cluster a keyed job lives in its queue's
//! slot (the key does not pick one); a claim over several slots merges the
//! queues' peeks, which give keyed jobs their effective run_at.
//!
//! `jobs` and `states` also hold a field `""` (no id is empty) whose
//! long value keeps them hashtables: Redis would keep a hash of a few
//! hundred short values as a listpack and search it from the front on every
//! lookup (`HASHTABLE` in `lua/common/core.lua`).
//!
//! # Workflows
//!
//! A workflow step's state value carries a ninth field, `flow`: `w` (a
//! step) or `c` (a step with children), the workflow's id (32 hex), then the
//! base of the queue holding the workflow's summary when that is not the
//! step's own. Every script already reads the state value of the job it
//! moves, so it learns for free whether the job is a step: a plain job's
//! value has 8 fields, and its ack, claim and recover pay nothing for
//! workflows (the ack: two string finds). A step's change moves its count in
//! the summary `wf:<W>` in the same script, and the script that makes a
//! `c` step terminal releases or cancels its children (`finished` of `workflows()` in
//! `lua/common/workflows.lua`), so `workflow()` reads the summary, never the steps.
//!
//! The scripts derive every key of a workflow from its steps' queues
//! (refs carry the bases), so on a single server a workflow may span any
//! queues. On Redis Cluster all of them must be in one hash slot: one
//! queue, or queues that share a *hash tag*, a leading `{tag}` in the
//! queue name. The base of queue `{t}a` is `P:{P:{t}a}:`, whose hash tag
//! stops at the first closing brace, `P:{t`: the same for `{t}b`, so both
//! queues' keys share a slot. `enqueue_workflow` refuses a plan over several
//! slots with `BatchNotAtomic` before anything is stored. A workflow is
//! found by id as a job is: a probe of every registered queue (`EXISTS` of
//! its summary key).
//!
//! # Why three hashes per queue
//!
//! A claim of 128 jobs reads them with one `HMGET` per hash and writes
//! their states with one `HSET`, and an ack batch the same: with a hash per
//! job each job costs commands of its own, and a drain costs the server
//! far more instructions per job (`scripts/redis-instructions.sh`,
//! BENCHMARKS.md).
//!
//! Ids are written as 32 lowercase hex digits (the simple UUID form), so that
//! byte order, Lua's string order in any locale, and UUID order agree.
//!
//! # The layout marker
//!
//! `P:layout` names the key layout of everything under the prefix: `1`,
//! 0.1's and this build's ([`LAYOUT`]). `RedisStorage::connect` reads it
//! (one `GET`, `check` below) and refuses a prefix whose marker names a newer
//! layout (`RedisError::LayoutTooNew`), or holds something that is not a
//! layout number (`RedisError::UnknownLayout`), before it touches anything,
//! as PostgreSQL refuses a schema a newer build migrated. On a prefix
//! without a marker (new, or emptied by `FLUSHDB` or
//! `RedisStorage::delete_all_keys`) it writes `1` (`SET NX`), unless a
//! registered queue holds the keys of an unreleased development build's
//! layout (`P:{P:Q}:v2:states`): that is `RedisError::DevelopmentLayout`,
//! since nothing released reads or converts those keys. A later build
//! that changes the layout converts a prefix, then writes its own number;
//! where workers of the older build (which read the marker only when they
//! connect) must not touch the converted keys, it also names them anew.
//!
//! # The queue registry and lookups by id
//!
//! Cross-queue operations (promote, recover, stats, list, purge) and the
//! operations that get only a job id (get, retry, cancel, and settlements of
//! jobs this handle did not claim) loop over the registry `P:queues` client
//! side. The registry is written with `SADD` in the same pipeline as, and
//! *before*, the enqueue script (on Cluster, where it lives in another slot,
//! as its own call before it), and queues are never removed from it, so it
//! always names every queue that holds a job (it may name a queue whose
//! enqueue then failed; that queue is simply empty). A handle skips the
//! `SADD` for a queue it added less than a second ago: a busy producer pays
//! one `SADD` a second, and a registry deleted from outside (`FLUSHDB`,
//! `RedisStorage::delete_all_keys`) is written again within a second. A lookup by id costs one
//! pipelined round trip of one command per queue. We chose this over an
//! id -> queue index hash because such an index lives in another slot and
//! could not be written atomically with the job on Redis Cluster, and because
//! it would cost memory and a write per job on the enqueue hot path. Handles
//! also remember the queue of the jobs they claimed, so their settlements
//! and heartbeats need no lookup.

use jq_core::{JobId, QueueName};

use crate::Conn;
use crate::error::RedisError;

/// Builds the keys of one key prefix.
#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// The keys under `prefix`.
    pub fn new(prefix: impl Into<String>) -> Self {
        Keys { prefix: prefix.into() }
    }

    /// The prefix `P`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The common start of every key of `queue`: `P:{P:Q}:`.
    pub fn base(&self, queue: &str) -> String {
        format!("{p}:{{{p}:{queue}}}:", p = self.prefix)
    }

    /// The hash of `queue`'s jobs' fixed fields (id -> packed fields).
    pub fn jobs(&self, queue: &str) -> String {
        format!("{}jobs", self.base(queue))
    }

    /// The hash of `queue`'s jobs' states (id -> packed fields).
    pub fn states(&self, queue: &str) -> String {
        format!("{}states", self.base(queue))
    }

    /// The hash of `queue`'s jobs' errors (id -> JSON array).
    pub fn errors(&self, queue: &str) -> String {
        format!("{}errors", self.base(queue))
    }

    /// Every key a script may touch for `queue` (for the slot test and for
    /// operators).
    pub fn queue_keys(&self, queue: &str) -> Vec<String> {
        let base = self.base(queue);
        [
            "jobs",
            "states",
            "errors",
            "extra",
            "ready",
            "scheduled",
            "leases",
            "done:completed",
            "done:dead",
            "done:cancelled",
            "ids",
            "waiting",
            "results",
            "nodes",
            "parents",
            "children",
            "released",
            "unique",
            "ucreated",
            "control",
            "starts",
            "seen",
            "seen_gc",
            "kscheduled",
            "kwait",
            "kpending",
            "krun",
            "kcursor",
            "klimits",
            "kstarts:some-key",
        ]
        .iter()
        .map(|k| format!("{base}{k}"))
        .collect()
    }

    /// The registry of queue names.
    pub fn registry(&self) -> String {
        format!("{}:queues", self.prefix)
    }

    /// The hash of role `role`, in its own hash slot.
    pub fn role(&self, role: &str) -> String {
        format!("{p}:role:{{{p}:role:{role}}}", p = self.prefix)
    }

    /// The hash of periodic job `name`, whose jobs go to `queue`: in the
    /// queue's slot.
    pub fn periodic_job(&self, queue: &str, name: &str) -> String {
        format!("{}periodic:{name}", self.base(queue))
    }

    /// The registry of periodic jobs: name -> queue.
    pub fn periodic(&self) -> String {
        format!("{}:periodic", self.prefix)
    }

    /// The layout marker: the number of the key layout the prefix holds
    /// ([`crate::LAYOUT`]).
    pub fn layout(&self) -> String {
        format!("{}:layout", self.prefix)
    }

    /// The registry of role names.
    pub fn roles(&self) -> String {
        format!("{}:roles", self.prefix)
    }

    /// The wake-up pub/sub channel.
    pub fn channel(&self) -> String {
        format!("{}:wake", self.prefix)
    }

    /// The pattern matching every key of this prefix (for SCAN).
    pub fn pattern(&self) -> String {
        format!("{}:*", self.prefix)
    }
}

/// A job id as written in keys and members: 32 lowercase hex digits.
pub fn id_hex(id: JobId) -> String {
    id.0.simple().to_string()
}

/// The queue name validated, for keys read back from the registry.
pub(crate) fn queue_name(name: &str) -> Option<QueueName> {
    QueueName::new(name).ok()
}

/// The Redis Cluster hash slot of `key` (CRC16/XMODEM of its hash tag, mod
/// 16384), as `CLUSTER KEYSLOT` computes it.
pub fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let mut tagged = bytes;
    if let Some(open) = bytes.iter().position(|&b| b == b'{')
        && let Some(len) = bytes[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        tagged = &bytes[open + 1..open + 1 + len];
    }
    crc16(tagged) % 16384
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

// The layout marker ("The layout marker" above).

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
    names.retain(|n| queue_name(n).is_some());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // values from the Redis Cluster specification / CLUSTER KEYSLOT
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(slot("foo{{bar}}zap"), slot("{bar"));
    }

    #[test]
    fn queues_sharing_a_hash_tag_share_a_slot() {
        let keys = Keys::new("jq");
        assert_eq!(keys.base("{t}a"), "jq:{jq:{t}a}:");
        assert_eq!(slot(&keys.base("{t}a")), slot(&keys.base("{t}b")));
        assert_eq!(slot(&keys.base("{t}a")), slot("jq:{t"));
        assert_eq!(slot(&keys.base("a")), slot("jq:a"), "an untagged queue keeps its slot");
    }
}
