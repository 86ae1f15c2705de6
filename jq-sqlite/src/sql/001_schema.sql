-- Schema version 1: every table and index of jq's SQLite store, as 0.1
-- released it. A released version is never edited (tests/schema.rs holds
-- its checksum): a change of the schema is a new version, 002_*.sql.
--
-- Instants are INTEGER microseconds since the Unix epoch (the storage's
-- clock, never SQLite's). Ids and lease tokens are 16-byte UUID BLOBs.

-- The jobs. A rowid table (not WITHOUT ROWID) keeps interior pages small;
-- `seq` is the rowid, `id` the job's UUID v7. `errors` is a JSON array of
-- {"attempt": n, "at": micros, "message": text}, oldest first.
--
-- `trace`: the W3C trace context of the span that enqueued the job
-- (`traceparent`, then a space and `tracestate` when there is one), so the
-- span of each run links to it; NULL outside a trace.
--
-- Stopping running jobs (docs/CONTRACT.md, "Cancelling a running job"): a
-- cancel request is stored on the job (cancel_requested_at,
-- cancel_reason) and reported by every heartbeat of its lease; `progress`
-- holds the JSON its handler last reported; `timeout_ms` the job's own
-- limit per attempt (NULL: the kind's or the pool's).
--
-- `flow` tells the statements that finish a job whether it takes part in
-- a workflow, so a job without one costs nothing more: bit 1 = it has
-- children (settle looks for them), bit 2 = it is a step of a workflow
-- (purge removes its node, and its state changes move its workflow's
-- counts), bit 4 = it has a result (purge removes it).
--
-- `key` (docs/CONTRACT.md, "Keyed jobs") groups the jobs of a queue that
-- share per-key limits; NULL for a plain job. `keyed_wait` is the job's
-- key while a keyed job waits to run (Pending or Scheduled), NULL
-- otherwise and always NULL for a plain job: the key itself, so that a
-- statement sets it to `key` (NULL for a plain job) with no CASE, and the
-- enqueue binds the key once more. Every statement that moves a keyed job
-- into Pending or Scheduled sets it (enqueue, a workflow step's insert and
-- wake, nack, release, recover, an operator's retry); the keyed claim's
-- take and an operator's cancel clear it; promote (Scheduled to Pending)
-- keeps it. Every reader repeats its state terms, so a marker left on a
-- job in another state is passed over, never taken.
--
-- The columns keep the order the store's statements were measured with
-- (BENCHMARKS.md); row.rs decodes the columns its queries name
-- (row::COLUMNS), never `SELECT *`.
CREATE TABLE jobs (
    seq              INTEGER PRIMARY KEY,
    id               BLOB    NOT NULL UNIQUE,
    queue            TEXT    NOT NULL,
    kind             TEXT    NOT NULL,
    payload          TEXT    NOT NULL,
    priority         INTEGER NOT NULL,
    state            TEXT    NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    run_at           INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    finished_at      INTEGER,
    lease_token      BLOB,
    lease_worker     TEXT,
    lease_expires_at INTEGER,
    errors           TEXT    NOT NULL DEFAULT '[]',
    unique_key       TEXT,
    trace            TEXT,
    timeout_ms       INTEGER,
    cancel_requested_at INTEGER,
    cancel_reason    TEXT,
    progress         TEXT,
    flow             INTEGER NOT NULL DEFAULT 0,
    key              TEXT,
    keyed_wait       TEXT
);

-- Partial-index conditions are evaluated on every insert and update:
-- lists of three or more in `IN (...)` build a temporary b-tree each time,
-- so they are written as OR chains, and queries repeat them verbatim so
-- that SQLite sees they imply the index's condition.
--
-- Unique-key lookups among live jobs only (not UNIQUE: a retried Dead job
-- may legitimately share its key with a newer live job).
CREATE INDEX jobs_unique ON jobs (queue, unique_key)
    WHERE unique_key IS NOT NULL AND (state = 'scheduled' OR state = 'pending' OR state = 'running');

-- The maintenance paths (promote, recover, purge), each partial so that it
-- holds only the rows its task looks at. jobs_lease holds every Running
-- job: a key's Running jobs (its concurrency slots, held by their leases)
-- are read from it, once per claim that needs them, with no index of
-- their own (see jobs_keyed_waiting below for why).
CREATE INDEX jobs_due ON jobs (run_at) WHERE state = 'scheduled';
CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX jobs_finished ON jobs (state, finished_at)
    WHERE (state = 'completed' OR state = 'dead' OR state = 'cancelled');

-- Claim walks these two in claim order and stops at its limit: Pending
-- jobs in one walk, due Scheduled jobs in one range scan per priority (so
-- that a million jobs scheduled for tomorrow are never walked through).
-- Both are partial, so finished jobs never slow a claim down, and hold
-- plain jobs only, so a claim's plain walk never steps over a keyed job.
CREATE INDEX jobs_plain_pending ON jobs (queue, priority DESC, run_at, id) WHERE state = 'pending' AND key IS NULL;
CREATE INDEX jobs_plain_scheduled ON jobs (queue, priority DESC, run_at, id) WHERE state = 'scheduled' AND key IS NULL;

-- The keyed jobs waiting to run, by queue, priority and key, each key's
-- in claim order: the rotation is a skip scan of it (the next key after
-- the cursor is one seek, and its head is the first row found), and a
-- claim tells whether a queue has any keyed job at all with one probe.
--
-- Indexed by the marker `keyed_wait`, which only keyed statements write,
-- not by `state`: SQLite opens a write cursor on every index whose columns
-- or WHERE name a column an UPDATE sets, and the claim's and the ack's
-- UPDATEs set `state`, so an index whose WHERE named `state` would cost
-- every plain job's claim and ack a cursor opened and closed though no
-- plain job is ever in it (BENCHMARKS.md, the keyed drain). No
-- plain statement of the hot paths sets `keyed_wait` nor a column of this
-- index.
CREATE INDEX jobs_keyed_waiting ON jobs (queue, priority DESC, key, run_at, id) WHERE keyed_wait IS NOT NULL;

-- Named roles (RoleStorage::elect). One row per role held: the holder's
-- token (16-byte UUID BLOB), its name for operators, and when the role is
-- free unless renewed. Resigning deletes the row. A handful of rows: no
-- index besides the key.
CREATE TABLE leaders (
    role       TEXT    PRIMARY KEY,
    token      BLOB    NOT NULL,
    holder     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);

-- Periodic jobs (PeriodicStorage::fire). One row per periodic job: its
-- cursor (the last tick handled), what operators read, and an operator's
-- trigger (`triggered_at`, NULL when none is pending). last_job a 16-byte
-- UUID BLOB. A handful of rows: no index besides the key.
CREATE TABLE periodic_jobs (
    name          TEXT    PRIMARY KEY,
    queue         TEXT    NOT NULL,
    spec          TEXT    NOT NULL,
    zone          TEXT    NOT NULL,
    cursor        INTEGER NOT NULL,
    last_job      BLOB,
    missed        INTEGER NOT NULL DEFAULT 0,
    last_missed   INTEGER,
    declared_at   INTEGER NOT NULL,
    triggered_at  INTEGER
);

-- Queue controls (ControlStorage::set_paused, set_limits, queues). A
-- queue without a row here has no control, and the claim reads this table
-- by primary key once per asked queue.
--
-- queue_controls: one row per queue with a pause or a limit; a row whose
-- pause and limits are all cleared is deleted. rate_period in
-- microseconds.
CREATE TABLE queue_controls (
    queue       TEXT    PRIMARY KEY,
    paused_at   INTEGER,
    concurrency INTEGER,
    rate_limit  INTEGER,
    rate_period INTEGER
) WITHOUT ROWID;

-- The rate limit's sliding log: n starts of the queue at instant `at`, one
-- row per claim that started jobs of a rate-limited queue. The claim
-- deletes the rows that left the window.
CREATE TABLE queue_starts (
    queue TEXT    NOT NULL,
    at    INTEGER NOT NULL,
    n     INTEGER NOT NULL
);
CREATE INDEX queue_starts_window ON queue_starts (queue, at);

-- Which claimers met a control: each worker's latest claim that asked for
-- a controlled queue, and whether it was paused then (for operators).
CREATE TABLE queue_seen (
    queue   TEXT    NOT NULL,
    worker  TEXT    NOT NULL,
    seen_at INTEGER NOT NULL,
    paused  INTEGER NOT NULL,
    PRIMARY KEY (queue, worker)
) WITHOUT ROWID;

-- Counters of finished jobs, so that stats and the list of queues cost
-- the same whatever the number of finished jobs. Finished jobs (Completed,
-- Dead, Cancelled) are counted here per queue and state; live ones
-- (Scheduled, Pending, Running) are counted from the jobs through the
-- partial indexes that hold only them.
--
-- The statements that move a job into or out of a finished state (settle,
-- the burial of a corrupt job, recover, retry, cancel, purge) tell the
-- writer the queue of each job they changed (an ack by a probe of the id
-- index right after it, the others by RETURNING), and the writer adds them
-- up per queue and state and writes the sums here in the same transaction
-- (counts.rs): one row write per queue and state per call, not per job.
-- No triggers, and no RETURNING on the ack: SQLite runs both as triggers,
-- and they cost the drain much of its rate (BENCHMARKS.md).
CREATE TABLE job_counts (
    queue TEXT    NOT NULL,
    state TEXT    NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (queue, state)
) WITHOUT ROWID;

-- Workflows (results and dependencies). One row per stored workflow: a
-- resend of the same workflow finds it.
CREATE TABLE workflows (
    id         BLOB    PRIMARY KEY,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;
-- One row per step: its place, and how many parents it still waits for
-- (the job is Waiting while above zero), kept by the statements that
-- finish its parents, in their transaction.
CREATE TABLE job_nodes (
    id           BLOB    PRIMARY KEY,
    workflow     BLOB    NOT NULL,
    position     INTEGER NOT NULL,
    step         TEXT    NOT NULL,
    unfinished   INTEGER NOT NULL,
    cancelled_by BLOB
) WITHOUT ROWID;
CREATE UNIQUE INDEX job_nodes_workflow ON job_nodes (workflow, position);
-- One row per edge; `released` once the parent is done with for this
-- child (completed, or failed under run_anyway), so it counts once.
CREATE TABLE job_deps (
    parent     BLOB    NOT NULL,
    child      BLOB    NOT NULL,
    position   INTEGER NOT NULL,
    on_failure TEXT    NOT NULL,
    released   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (parent, child)
) WITHOUT ROWID;
CREATE INDEX job_deps_child ON job_deps (child, position);
-- Results stored with their ack, apart from the jobs so that the claim
-- and ack paths read no wider rows.
CREATE TABLE job_results (
    id     BLOB PRIMARY KEY,
    result TEXT NOT NULL
) WITHOUT ROWID;

-- The counts of each workflow's steps per state, so that `workflow(id)`
-- (its counts, and whether it is finished) reads one range of this table
-- instead of every step of the workflow (docs/CONTRACT.md, "Workflows";
-- Redis keeps the same summary in a hash).
--
-- Kept like job_counts: every writer call that changes the state of a
-- step (a job whose `flow` has bit 2) adds up, per workflow and state,
-- what it moved (one out of the old state, one into the new) and writes
-- one sum per workflow and state before it returns, in its transaction
-- (counts.rs). A plain job costs nothing more: the statements that change
-- a job's state learn whether it is a step from `flow`, which they already
-- read, and only steps look up their workflow (one probe of job_nodes'
-- primary key). No triggers: SQLite opens a statement journal for every
-- UPDATE of a table with triggers, and they cost every plain job
-- (BENCHMARKS.md).
--
-- A purged step leaves the counts (its workflow stays known, in
-- `workflows`). A row whose count went back to zero stays, and is skipped
-- by the readers.
CREATE TABLE workflow_counts (
    workflow BLOB    NOT NULL,
    state    TEXT    NOT NULL,
    n        INTEGER NOT NULL,
    PRIMARY KEY (workflow, state)
) WITHOUT ROWID;

-- The workflows with Scheduled steps: promote reads the due steps among
-- the jobs it moves only when one exists (promote_steps.sql), so a store
-- without such steps promotes only jobs.
CREATE INDEX workflow_counts_scheduled ON workflow_counts (workflow) WHERE state = 'scheduled' AND n > 0;

-- Per-key limits (docs/CONTRACT.md, "Keyed jobs"): one row per queue and
-- key with limits of its own (an override; all NULL = this key
-- unlimited), and one with key '' for the queue's default (a real key is
-- 1 to 255 bytes, never ''). rate_period in microseconds. No row: no
-- limit.
CREATE TABLE key_limits (
    queue       TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    concurrency INTEGER,
    rate_limit  INTEGER,
    rate_period INTEGER,
    PRIMARY KEY (queue, key)
) WITHOUT ROWID;

-- The rotation's cursor of each (queue, priority): the key it served
-- last. No row: before every key.
CREATE TABLE key_cursors (
    queue    TEXT    NOT NULL,
    priority INTEGER NOT NULL,
    key      TEXT    NOT NULL,
    PRIMARY KEY (queue, priority)
) WITHOUT ROWID;

-- Each rate-limited key's sliding log: n starts of (queue, key) at
-- instant `at`, one row per claim that started jobs of it. The claim
-- deletes the rows that left the window; a change of limits deletes the
-- logs of keys left without a rate.
CREATE TABLE key_starts (
    queue TEXT    NOT NULL,
    key   TEXT    NOT NULL,
    at    INTEGER NOT NULL,
    n     INTEGER NOT NULL
);
CREATE INDEX key_starts_window ON key_starts (queue, key, at);
