//! The Lua scripts, each the library in `lua/common/` followed by its own
//! file; enqueue's library is only the parts that store new jobs.

use std::sync::LazyLock;

use redis::Script;

/// A script's source and its SHA1 (`redis::Script` hides the source).
pub(crate) struct Lua {
    pub(crate) code: &'static str,
    pub(crate) script: Script,
}

/// The library every script starts with, its parts in this order: each
/// uses only what the parts before it define (a Lua local is seen only
/// below its definition), so the order is fixed.
macro_rules! common {
    () => {
        concat!(
            include_str!("lua/common/core.lua"),
            include_str!("lua/common/base.lua"),
            include_str!("lua/common/workflows.lua"),
            include_str!("lua/common/rotation.lua"),
            include_str!("lua/common/moves.lua"),
            include_str!("lua/common/store.lua"),
        )
    };
}

macro_rules! script {
    ($name:ident, $file:literal) => {
        pub(crate) static $name: LazyLock<Lua> = LazyLock::new(|| {
            let code = concat!(common!(), include_str!($file));
            Lua { code, script: Script::new(code) }
        });
    };
}

/// Enqueue and the enqueue of a lone job, the scripts whose library is
/// only the parts they use: every call of a script runs its library's
/// definitions first, and an enqueue does little more than that otherwise.
pub(crate) static ENQUEUE: LazyLock<Lua> = LazyLock::new(|| {
    let code = concat!(
        include_str!("lua/common/core.lua"),
        include_str!("lua/common/store.lua"),
        include_str!("lua/enqueue.lua"),
    );
    Lua { code, script: Script::new(code) }
});
/// See [`ENQUEUE`].
pub(crate) static ENQUEUE_MANY: LazyLock<Lua> = LazyLock::new(|| {
    let code = concat!(include_str!("lua/common/core.lua"), include_str!("lua/enqueue_many.lua"));
    Lua { code, script: Script::new(code) }
});
/// See [`ENQUEUE`].
pub(crate) static ENQUEUE_ONE: LazyLock<Lua> = LazyLock::new(|| {
    let code = concat!(include_str!("lua/common/core.lua"), include_str!("lua/enqueue_one.lua"));
    Lua { code, script: Script::new(code) }
});
script!(ENQUEUE_RULES, "lua/enqueue_rules.lua");
script!(CLAIM, "lua/claim.lua");
script!(SETTLE, "lua/settle.lua");
script!(HEARTBEAT, "lua/heartbeat.lua");
script!(PROMOTE, "lua/promote.lua");
script!(RECOVER, "lua/recover.lua");
script!(RETRY, "lua/retry.lua");
script!(CANCEL, "lua/cancel.lua");
script!(PURGE, "lua/purge.lua");
script!(LIST, "lua/list.lua");
script!(PEEK, "lua/peek.lua");
script!(CLAIM_EARLIER, "lua/claim_earlier.lua");
script!(ELECT, "lua/elect.lua");
script!(RESIGN, "lua/resign.lua");
script!(FIRE, "lua/fire.lua");
script!(TRIGGER, "lua/trigger.lua");
script!(SEAL, "lua/seal.lua");
script!(CONTROL, "lua/control.lua");
script!(GET, "lua/get.lua");
script!(CANCEL_REQUEST, "lua/cancel_request.lua");
script!(PROGRESS, "lua/progress.lua");
script!(WORKFLOW_ENQUEUE, "lua/workflow_enqueue.lua");
script!(WORKFLOW_READ, "lua/workflow_read.lua");
script!(KEY_LIMITS, "lua/key_limits.lua");
script!(DURABLE, "lua/durable.lua");
script!(DURABLE_READ, "lua/durable_read.lua");

/// Every script, for `SCRIPT LOAD` at connect and after a NOSCRIPT.
pub(crate) fn all() -> [&'static Lua; 29] {
    [
        &ENQUEUE,
        &ENQUEUE_MANY,
        &ENQUEUE_ONE,
        &ENQUEUE_RULES,
        &CLAIM,
        &SETTLE,
        &HEARTBEAT,
        &PROMOTE,
        &RECOVER,
        &RETRY,
        &CANCEL,
        &PURGE,
        &LIST,
        &PEEK,
        &CLAIM_EARLIER,
        &ELECT,
        &RESIGN,
        &FIRE,
        &TRIGGER,
        &SEAL,
        &CONTROL,
        &GET,
        &CANCEL_REQUEST,
        &PROGRESS,
        &WORKFLOW_ENQUEUE,
        &WORKFLOW_READ,
        &KEY_LIMITS,
        &DURABLE,
        &DURABLE_READ,
    ]
}

/// `EVALSHA <sha> <numkeys> <keys...>`; the caller appends ARGV.
pub(crate) fn call(lua: &Lua, keys: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(lua.script.get_hash()).arg(keys.len());
    for key in keys {
        cmd.arg(key);
    }
    cmd
}
