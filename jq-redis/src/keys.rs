//! The key layout in Redis (this crate's "schema").
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
//! | `P:{P:Q}:v2:jobs` | hash | id -> what never changes after enqueue (except max_attempts on an operator's retry): `kind payload priority max_attempts created_at trace` |
//! | `P:{P:Q}:v2:states` | hash | id -> what the job's life changes: `state attempts run_at unique_key lease_expires_at lease_token lease_worker finished_at`, and for a workflow step only a ninth field `flow` (the lease fields empty unless Running; see "Workflows" below) |
//! | `P:{P:Q}:v2:errors` | hash | id -> the job's errors, a JSON array of `{"attempt","at","message"}`; absent while there are none |
//! | `P:{P:Q}:v2:extra` | hash | id -> `timeout_ms cancel_at cancel_reason progress` (the job's own timeout, a cancel request of a running job, the JSON its handler last reported); absent for a job with none of them |
//! | `P:{P:Q}:v2:ready` | sorted set | Pending jobs. Score `-priority`; member `<run_at: 20 digits><id: 32 hex>`, which Redis orders lexicographically within one score: so `ZRANGE 0 n` is claim order (priority desc, run_at, id) exactly, with no precision lost to a packed double |
//! | `P:{P:Q}:v2:scheduled` | sorted set | Scheduled jobs, score run_at |
//! | `P:{P:Q}:v2:leases` | sorted set | Running jobs, score lease expiry |
//! | `P:{P:Q}:v2:done:<state>` | sorted set | Completed / Dead / Cancelled jobs, score finished_at (purge walks it) |
//! | `P:{P:Q}:v2:ids` | sorted set | every job of the queue, score 0, member id: lexicographic = id order, for `list` |
//! | `P:{P:Q}:v2:waiting` | sorted set | Waiting jobs (workflow steps whose parents are not done with), score 0 |
//! | `P:{P:Q}:v2:results` | hash | id -> the result its ack stored (`Outcome::AckWith`), JSON; absent for a job without one |
//! | `P:{P:Q}:v2:nodes` | hash | id -> a workflow step's place: `unfinished cancelled position policy workflow step` (unfinished parents; `1` when a parent's failure cancelled it; its index in step order; `c` cancel or `r` run anyway; the workflow's id; the step's name) |
//! | `P:{P:Q}:v2:parents` | hash | id -> the step's parents in step order, as *refs*: entries joined by NUL, each a job id followed by the base of its queue, or by nothing when that is this queue; absent for a step without parents |
//! | `P:{P:Q}:v2:children` | hash | id -> the step's children in step order, as refs; absent for a step without children |
//! | `P:{P:Q}:v2:released` | hash | `<child id><parent id>` -> `1` for each edge a Dead or Cancelled parent released (run-anyway; the child's keys: its queue). An edge from a Completed parent is released too but not written here: a Completed step never finishes again, and the parent's state says it |
//! | `P:{P:Q}:v2:wf:<W>` | hash | workflow `W`'s summary, in its first step's queue: `steps` (refs of every step in step order) and one count per state name (`waiting`, `pending`, ...) |
//! | `P:{P:Q}:unique` | hash | unique key -> ids of the live (Scheduled, Pending, Running) jobs holding it, ascending, joined by `,`: one id, or several after an operator's retry brought back a Dead job whose key a newer live job held; enqueue answers with the first |
//! | `P:{P:Q}:control` | hash | the queue's control (`ControlStorage::set_paused`, `set_limits`): `paused_at concurrency rate_limit rate_period` (microseconds); absent when nothing is set |
//! | `P:{P:Q}:starts` | sorted set | the rate limit's log: one member `<token>:<id>` per start, score its instant; claim drops those that left the window |
//! | `P:{P:Q}:seen` | hash | worker -> `<instant>:<1 if paused>` of its latest claim that met a control |
//! | `P:{P:Q}:v2:kwait` | sorted set | the queue's keyed Pending jobs (keyed jobs are never in `ready` or `scheduled`), score 0, member `<5000000000 - priority, 11 digits><K>\0<member as in ready>`: so `ZRANGEBYLEX` reads the priorities from the highest, each priority's keys in byte order (a key's members come right after those of every key it is a prefix of: keys hold no NUL), and each key's jobs by (run_at, id), its first one its head (`kwait_member` in `lua/common.lua`) |
//! | `P:{P:Q}:v2:kscheduled` | sorted set | keyed Scheduled jobs, score run_at (promote and claim make the due ones Pending, run_at kept) |
//! | `P:{P:Q}:v2:kpending` | string | how many keyed jobs are Pending (for `stats`) |
//! | `P:{P:Q}:v2:krun` | hash | key -> its Running jobs (expired leases included until recover or a late ack); every move into Running (claim) and out of it (`leave` in `lua/common.lua`, and the ack batch) keeps it. A keyed claim also writes the field `""` (no key is empty) with the long value that keeps `v2:jobs` a hashtable (below): claims and ack batches look up tens of keys at a time, each a walk of a listpack |
//! | `P:{P:Q}:v2:kcursor` | hash | priority (its 11 digits) -> the key the rotation served last there |
//! | `P:{P:Q}:v2:klimits` | hash | key limits: `""` the queue's default, `<K>` key K's override; `concurrency rate_limit rate_period` (microseconds), `""` when none |
//! | `P:{P:Q}:v2:kstarts:<K>` | sorted set | key K's start log while its limits have a rate: member `<token>:<id>`, score its start; claim drops those that left the window |
//! | `P:queues` | set | registry of queue names (its own slot) |
//! | `P:role:{P:role:R}` | hash | the holder of role `R` (`RoleStorage::elect`): `token holder expires_at`; deleted on resign; the role in its own hash tag |
//! | `P:roles` | set | registry of role names ever elected (its own slot), for `leaders` |
//! | `P:{P:Q}:schedule:<name>` | hash | one recurring periodic job whose jobs go to queue `Q` (`PeriodicStorage::fire`): `name queue spec zone cursor last_job missed last_missed declared_at triggered_at` (instants in microseconds); in its queue's slot, so one script moves the cursor and stores the tick's jobs |
//! | `P:schedules` | hash | registry of periodic jobs: name -> queue (its own slot), for `periodic` and `trigger` |
//! | `P:wake` | pub/sub channel | published by the scripts that make a job Pending |
//!
//! A job is in exactly one of `waiting`, `ready` (or `kwait`),
//! `scheduled` (or `kscheduled`), `leases`, `done:*`, the one its `state`
//! names; every script keeps that so.
//!
//! # Keyed jobs
//!
//! A keyed job's state value has a tenth field, its key, after its flow
//! (`""` when it is no workflow step); a plain job's value is as before,
//! so scripts learn a job's key from the value they read anyway. Keyed
//! jobs stay out of `ready` and `scheduled`: a claim costs a queue one
//! `EXISTS` of `v2:kwait` and `v2:kscheduled` more, and only a queue with a
//! keyed job walks its rotation (`rotations()` in `lua/common.lua`): for
//! each priority from the highest, the keys after the cursor in byte order,
//! wrapping around, read a page of `v2:kwait` at a time with `ZRANGEBYLEX`
//! (about two members per job the claim may still take; a full page's last
//! key is read further only when the claim needs more of it, and the next
//! page starts past it, so a deep key costs a page what the claim may take
//! of it), each key checked against its limits and Running count (one
//! `HMGET` of `v2:klimits` and one of `v2:krun` per page, and a
//! rate-limited key's start log when the walk reaches it); the merge with
//! the plain jobs and the other queues' rotations is the contract's. A
//! claim of one queue with no plain job to take, whose keys all follow a
//! default of one Running job without a rate (no override), takes the
//! first member of each key with no Running job in one walk per priority
//! (`K.take_singles`): the same jobs, without the merge's bookkeeping. A
//! claim then removes its jobs from `v2:kwait` with one `ZREM`, and writes
//! the Pending count, the Running counts and the cursors once per claim;
//! an ack batch costs one `HMGET` and
//! one `HSET`/`HDEL` of `v2:krun` for all its keyed jobs. On Redis Cluster a keyed job lives in its queue's
//! slot (the key does not pick one); a claim over several slots merges the
//! queues' peeks, which give keyed jobs their effective run_at.
//!
//! The keyed structures are new keys beside the v2 layout, which did not
//! change: a queue stored by the jq before keyed jobs needs no migration,
//! and its jobs in flight are claimed and settled as they were.
//!
//! `v2:jobs` and `v2:states` also hold a field `""` (no id is empty) whose
//! long value keeps them hashtables: Redis would keep a hash of a few
//! hundred short values as a listpack and search it from the front on every
//! lookup (`HASHTABLE` in `lua/common.lua`).
//!
//! # Workflows
//!
//! A workflow step's state value carries a ninth field, `flow`: `w` (a
//! step) or `c` (a step with children), the workflow's id (32 hex), then the
//! base of the queue holding the workflow's summary when that is not the
//! step's own. Every script already reads the state value of the job it
//! moves, so it learns for free whether the job is a step: a plain job's
//! value keeps its 8 fields and its ack, claim and recover cost what they
//! did (the ack: two string finds more). A step's change moves its count in
//! the summary `v2:wf:<W>` in the same script, and the script that makes a
//! `c` step terminal releases or cancels its children (`finished` of `workflows()` in
//! `lua/common.lua`), so `workflow()` reads the summary, never the steps.
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
//! # Why three hashes per queue, and the `v2:` in their names
//!
//! A claim of 128 jobs reads them with one `HMGET` per hash and writes
//! their states with one `HSET`, and an ack batch the same: with a hash per
//! job (the layout before v2, `P:{P:Q}:job:<id>` listed in `P:{P:Q}:ids`)
//! each job cost commands of its own, and the server spent about 120,000
//! instructions per drained job against about 80,000 now
//! (`scripts/redis-instructions.sh`, BENCHMARKS.md). The job layout's keys
//! carry its version, so a worker of an older jq finds the queues empty
//! instead of popping jobs it cannot read. `RedisStorage::connect` carries a
//! queue's jobs of the older layout over (`lua/migrate.lua`), and recover,
//! which maintenance runs on every queue, carries over what an older
//! producer still stores meanwhile.
//!
//! Ids are written as 32 lowercase hex digits (the simple UUID form), so that
//! byte order, Lua's string order in any locale, and UUID order agree.
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

    /// The common start of every key of `queue`: `P:{P:Q}:`.
    pub fn base(&self, queue: &str) -> String {
        format!("{p}:{{{p}:{queue}}}:", p = self.prefix)
    }

    /// The hash of `queue`'s jobs' fixed fields (id -> packed fields).
    pub fn jobs(&self, queue: &str) -> String {
        format!("{}v2:jobs", self.base(queue))
    }

    /// The hash of `queue`'s jobs' states (id -> packed fields).
    pub fn states(&self, queue: &str) -> String {
        format!("{}v2:states", self.base(queue))
    }

    /// The hash of `queue`'s jobs' errors (id -> JSON array).
    pub fn errors(&self, queue: &str) -> String {
        format!("{}v2:errors", self.base(queue))
    }

    /// The hash of one job in the layout before v2, which
    /// `RedisStorage::connect` carries over (for tests of that).
    pub fn legacy_job(&self, queue: &str, id: JobId) -> String {
        format!("{}job:{}", self.base(queue), id_hex(id))
    }

    /// Every key a script may touch for `queue` (for the slot test and for
    /// operators).
    pub fn queue_keys(&self, queue: &str) -> Vec<String> {
        let base = self.base(queue);
        [
            "v2:jobs",
            "v2:states",
            "v2:errors",
            "v2:extra",
            "v2:ready",
            "v2:scheduled",
            "v2:leases",
            "v2:done:completed",
            "v2:done:dead",
            "v2:done:cancelled",
            "v2:ids",
            "v2:waiting",
            "v2:results",
            "v2:nodes",
            "v2:parents",
            "v2:children",
            "v2:released",
            "unique",
            "control",
            "starts",
            "seen",
            "seen_gc",
            "v2:kscheduled",
            "v2:kwait",
            "v2:kpending",
            "v2:krun",
            "v2:kcursor",
            "v2:klimits",
            "v2:kstarts:some-key",
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
    pub fn schedule(&self, queue: &str, name: &str) -> String {
        format!("{}schedule:{name}", self.base(queue))
    }

    /// The registry of periodic jobs: name -> queue.
    pub fn periodic(&self) -> String {
        format!("{}:schedules", self.prefix)
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
