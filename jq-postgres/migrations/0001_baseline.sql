-- Migration 1, the baseline of 0.1: jq's tables, their indexes and
-- constraints. No function: those are src/functions/*.sql, which `migrate`
-- installs after the migrations (src/schema.rs says how they are
-- versioned). A released migration is never edited (a test holds each
-- one's checksum, and `migrate` refuses a schema whose recorded checksum
-- differs): a change of the schema is a new file.
--
-- `{schema}` is replaced by the configured (quoted) schema name before this
-- runs, so two applications can keep separate queues in one database.
--
-- Index design: every index the hot paths use is partial, so finished jobs
-- (which can number millions) never sit in the claim, promote or recover
-- indexes. And each predicate is one no statement's state guard implies by
-- mistake: statements that change jobs found by id (settle, heartbeat,
-- retry) also guard on the state, and statistics gathered while no job was
-- in some state (the usual case: ANALYZE sees a table of completed jobs)
-- estimate an index of that state at one row, so a generic plan would walk
-- every job of it instead of looking the ids up. The lease index is keyed on
-- what is set exactly while Running (the lease), the finished one on what
-- is set exactly in the terminal states (finished_at), so a state guard
-- does not imply their predicates, while the statements they serve do.
-- src/schema/plan_tests.rs checks the plans.

-- One row per job. Columns added since the first version come last, in the
-- order they came: a statement's `RETURNING j.*` and the functions' `SETOF
-- jobs` read them so.
CREATE TABLE {schema}.jobs (
    id               uuid        PRIMARY KEY,
    queue            text        NOT NULL,
    kind             text        NOT NULL,
    -- JSON text exactly as enqueued (jsonb would reformat it); cast to jsonb to query it.
    payload          text        NOT NULL,
    priority         smallint    NOT NULL,
    state            text        NOT NULL,
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL,
    run_at           timestamptz NOT NULL,
    created_at       timestamptz NOT NULL,
    -- Set exactly in the terminal states (jobs_finished's predicate).
    finished_at      timestamptz,
    -- The lease: set exactly while Running (jobs_lease_expiry's predicate).
    lease_token      uuid,
    lease_worker     text,
    lease_expires_at timestamptz,
    -- [{"attempt": n, "at": "<rfc3339>", "message": "..."}], oldest first.
    errors           jsonb       NOT NULL DEFAULT '[]',
    unique_key       text,
    -- An operator's retry moves a Dead job back to Pending even when a newer
    -- live job of its queue holds the same unique key (the contract's retry
    -- is "Dead -> Pending"). Every enqueued job takes the shared nil slot,
    -- so concurrent enqueuers of one key serialise on jobs_unique and never
    -- both insert; a job retried while another live job holds its key takes
    -- a slot of its own (its id) instead. Enqueue looks for any live job of
    -- the key, whichever slot it has, before inserting.
    key_slot         uuid        NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    -- The W3C trace context of the span that enqueued the job
    -- (`traceparent`, then a space and `tracestate` when there is one), so
    -- the span of each run links to it; NULL outside a trace.
    trace            text,
    -- The job's own limit per attempt (NULL: the kind's or the pool's).
    timeout_ms       bigint,
    -- A cancel request (docs/CONTRACT.md, "Cancelling a running job"):
    -- stored on the job and reported by every heartbeat of its lease.
    cancel_requested_at timestamptz,
    cancel_reason    text,
    -- The JSON text its handler last reported.
    progress         text,
    -- Whether the job takes part in a workflow: bit 1 = it has children,
    -- bit 2 = it is a workflow step (every job with children is one). The
    -- statements that change states pass only the rows with these bits to
    -- the workflow functions, so the drain of plain jobs runs no statement
    -- more.
    flow             smallint    NOT NULL DEFAULT 0,
    -- The job's key (docs/CONTRACT.md, "Keyed jobs"), NULL for a plain job.
    -- COLLATE "C": the rotation walks keys in byte order, whatever the
    -- database's collation.
    key              text        COLLATE "C"
);

-- Claim walks this per asked queue in claim order and stops at the limit.
-- The state is included so stats count the waiting jobs per queue and
-- state from it alone (an index-only scan), at a few bytes per entry
-- rather than a second index written by every enqueue; a list of one
-- queue's waiting jobs by id reads that queue's entries and keeps the
-- first page. `key IS NULL`: the plain claim's walk never meets a keyed
-- job (the predicate, not a row filter).
CREATE INDEX jobs_claim ON {schema}.jobs (queue, priority DESC, run_at, id) INCLUDE (state)
    WHERE state IN ('pending', 'scheduled') AND key IS NULL;

-- Promote: due Scheduled jobs.
CREATE INDEX jobs_scheduled ON {schema}.jobs (run_at) WHERE state = 'scheduled';

-- Recover: expired leases; recover's `lease_expires_at <= $1` implies the
-- predicate. Also the Running jobs stats count.
CREATE INDEX jobs_lease_expiry ON {schema}.jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;

-- Uniqueness among live jobs of a queue; enqueue's ON CONFLICT names it, so
-- concurrent enqueuers of one key serialise on this index and never both
-- insert (key_slot says how a retried job shares a key).
CREATE UNIQUE INDEX jobs_unique ON {schema}.jobs (queue, unique_key, key_slot)
    WHERE unique_key IS NOT NULL AND state IN ('scheduled', 'pending', 'running');

-- Purge and retention: finished jobs by state and age. purge's
-- `finished_at < $2` implies the predicate, so a generic plan (the state a
-- parameter) can use it.
CREATE INDEX jobs_finished ON {schema}.jobs (state, finished_at) WHERE finished_at IS NOT NULL;

-- Waiting workflow steps by queue, for stats and the list of queues: a
-- Waiting job is in no other index of live jobs (the claim index holds
-- Pending and Scheduled, the lease index Running), and counting them from
-- the table would read every finished job. Plain jobs never enter it.
CREATE INDEX jobs_waiting_on_parents ON {schema}.jobs (queue) WHERE state = 'waiting';

-- The keyed waiting jobs by (queue, priority, key, run_at, id): the
-- rotation's skip scan (the next key after a cursor is one seek, that
-- key's head another) and the plain claim's existence probe. Plain jobs are
-- never in it.
CREATE INDEX jobs_keyed ON {schema}.jobs (queue, priority DESC, key, run_at, id) INCLUDE (state)
    WHERE key IS NOT NULL AND state IN ('pending', 'scheduled');

-- A key's Running jobs (its concurrency), bounded by the key's slots.
CREATE INDEX jobs_key_running ON {schema}.jobs (queue, key)
    WHERE key IS NOT NULL AND state = 'running';

-- Named roles (RoleStorage::elect), e.g. "maintenance": the one worker
-- pool per schema that runs promote, recover and retention. One row per
-- held role: the holder's token (it renews with it), its name for
-- operators, and when the role is free unless renewed (the storage's
-- clock, like every instant jq writes). Resigning deletes the row. A
-- handful of rows, written a few times a minute: the primary key is all.
CREATE TABLE {schema}.leaders (
    role       text        PRIMARY KEY,
    token      uuid        NOT NULL,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL
);

-- Periodic jobs (PeriodicStorage::fire): one row per periodic job, its
-- cursor (the last tick handled, run or skipped), what operators read
-- (`jqctl periodic list`), and a pending trigger (triggered_at). A step
-- moves the cursor with a compare-and-set on it in the same transaction
-- that inserts the tick's jobs. A handful of rows, written once per tick:
-- the primary key is all.
CREATE TABLE {schema}.periodic_jobs (
    name          text        PRIMARY KEY,
    queue         text        NOT NULL,
    spec          text        NOT NULL,
    zone          text        NOT NULL,
    cursor        timestamptz NOT NULL,
    last_job      uuid,
    missed        bigint      NOT NULL DEFAULT 0,
    last_missed   timestamptz,
    declared_at   timestamptz NOT NULL,
    triggered_at  timestamptz
);

-- Queue controls (ControlStorage::set_paused, set_limits, queues): one row
-- per queue with a pause or a limit; the row is deleted once its pause and
-- limits are all cleared. A queue without a row has no control, and its
-- claims keep the one-statement path (sql/claim.sql, which only looks this
-- table up by primary key). Claims of a controlled queue lock its row (FOR
-- UPDATE), so they serialise per queue and count what earlier ones
-- committed. rate_period in microseconds.
CREATE TABLE {schema}.queue_controls (
    queue       text        PRIMARY KEY,
    paused_at   timestamptz,
    concurrency integer,
    rate_limit  integer,
    rate_period bigint
);

-- The rate limit's sliding log: n starts of the queue at instant `at`, one
-- row per claim that started jobs of a rate-limited queue; the claim
-- deletes the rows that left the window.
CREATE TABLE {schema}.queue_starts (
    queue text        NOT NULL,
    at    timestamptz NOT NULL,
    n     integer     NOT NULL
);
CREATE INDEX queue_starts_window ON {schema}.queue_starts (queue, at);

-- Which claimers met a control: each worker's latest claim that asked for
-- a controlled queue, and whether the queue was paused then.
CREATE TABLE {schema}.queue_seen (
    queue   text        NOT NULL,
    worker  text        NOT NULL,
    seen_at timestamptz NOT NULL,
    paused  boolean     NOT NULL,
    PRIMARY KEY (queue, worker)
);

-- Counters of finished jobs, so stats and the list of queues cost the same
-- whatever the number of finished jobs (a dashboard refreshes both every
-- few seconds). Finished jobs (Completed, Dead, Cancelled) are counted
-- here, per queue and state; live ones, few by comparison, from the
-- partial indexes that hold only them.
--
-- Every statement that moves a job into or out of a finished state
-- (settle, bury, cancel, retry, recover, purge) adds its change here in the
-- same statement, one row per (queue, state) it changed, aggregated over
-- its whole batch, on one of 16 shards picked per statement: concurrent
-- settlers of one queue then seldom wait on the same row, and a queue's
-- count is the sum of its shards. Shards may hold negative numbers (a purge
-- on another shard than the acks); only the sum means something. No
-- trigger: a trigger would run for claims and heartbeats too, the hot path
-- that never changes these counts. The workflow functions count the
-- children they cancel or revive on shard 16, which no statement picks
-- (src/functions/jq_flow_finished.sql says why).
--
-- Rows are never deleted: one per (queue, finished state, shard) ever
-- used, at most 49 per queue (16 per finished state, and shard 16's
-- Cancelled).
CREATE TABLE {schema}.job_counts (
    queue text     NOT NULL,
    state text     NOT NULL,
    shard smallint NOT NULL,
    n     bigint   NOT NULL,
    PRIMARY KEY (queue, state, shard)
);

-- Workflows (docs/CONTRACT.md, "Workflows"): one row per workflow stored.
CREATE TABLE {schema}.workflows (
    id         uuid        PRIMARY KEY,
    created_at timestamptz NOT NULL
);

-- One row per step: its place, and how many parents it still waits for
-- (the job is Waiting while above zero). No foreign key on jobs: one would
-- put internal row triggers on `jobs` (an UPDATE trigger that re-reads
-- every updated row's old version, a DELETE trigger that probes per purged
-- job) and lock each step's job as it is stored. A node and its job are
-- stored by one statement (the workflow's), and the purge statement
-- deletes both.
CREATE TABLE {schema}.job_nodes (
    id           uuid    PRIMARY KEY,
    workflow     uuid    NOT NULL,
    position     integer NOT NULL,
    step         text    NOT NULL,
    unfinished   integer NOT NULL,
    cancelled_by uuid
);
CREATE UNIQUE INDEX job_nodes_workflow ON {schema}.job_nodes (workflow, position);

-- One row per edge; `released` once the parent is done with for this child
-- under run_anyway (a Completed parent's state says so already), so that
-- it counts once.
CREATE TABLE {schema}.job_deps (
    parent     uuid    NOT NULL,
    child      uuid    NOT NULL,
    position   integer NOT NULL,
    on_failure text    NOT NULL,
    released   boolean NOT NULL DEFAULT false,
    PRIMARY KEY (parent, child)
);
CREATE INDEX job_deps_child ON {schema}.job_deps (child, position);

-- Results stored with their ack, apart from the jobs so that claims and
-- acks read no wider rows. Stored by its job's ack, deleted by the purge
-- of its job (no foreign key, as job_nodes).
CREATE TABLE {schema}.job_results (
    id     uuid PRIMARY KEY,
    result text NOT NULL
);

-- Each workflow's steps counted per state, so that `workflow(id)` reads a
-- few rows instead of every step: moved by the statements that change a
-- step's state, through jq_flow_moved and jq_workflow_count
-- (src/functions/), once per statement. A workflow's count of a state is
-- the sum of its rows over shards, as in job_counts: each session writes
-- on shard pg_backend_pid() % 16. Shards may go negative (a step claimed
-- on one shard, settled on another); only sums mean anything. A row is
-- kept when its sum comes back to zero: at most seven states times sixteen
-- shards per workflow, and a purged workflow stays known (its `workflows`
-- row) with no step counted.
CREATE TABLE {schema}.workflow_counts (
    workflow uuid     NOT NULL,
    state    text     NOT NULL,
    shard    smallint NOT NULL,
    n        bigint   NOT NULL,
    PRIMARY KEY (workflow, state, shard)
);

-- Key limits (KeyStorage::set_key_limits): per queue, the default every
-- key follows (key '', which no job key can be: keys are 1 to 255 bytes)
-- and the overrides. rate_period in microseconds.
CREATE TABLE {schema}.key_limits (
    queue       text    NOT NULL,
    key         text    COLLATE "C" NOT NULL,
    concurrency integer,
    rate_limit  integer,
    rate_period bigint,
    PRIMARY KEY (queue, key)
);

-- Per (queue, priority) the key the rotation served last.
CREATE TABLE {schema}.key_cursors (
    queue    text     NOT NULL,
    priority smallint NOT NULL,
    key      text     COLLATE "C" NOT NULL,
    PRIMARY KEY (queue, priority)
);

-- The per-(queue, key) log of starts for rate limits, as queue_starts.
CREATE TABLE {schema}.key_starts (
    queue text        NOT NULL,
    key   text        COLLATE "C" NOT NULL,
    at    timestamptz NOT NULL,
    n     integer     NOT NULL
);
CREATE INDEX key_starts_window ON {schema}.key_starts (queue, key, at);
