-- Migration 13: each workflow's counts per state, kept in the statements
-- that change its jobs, so `workflow(id)` reads a few rows instead of
-- every job of the workflow.
--
-- `workflow` on a job names the workflow it is a step of (NULL for a plain
-- job): the trigger below aggregates a statement's changes from the job
-- rows alone, with no join, and still knows a purged job's workflow after
-- its node went with it (ON DELETE CASCADE runs before a statement-level
-- trigger). A column without a default adds no byte to existing rows.
ALTER TABLE {schema}.jobs ADD COLUMN workflow uuid;

-- ALTER TABLE holds the jobs exclusively until this migration commits: no
-- writer of an older build changes a step while it is counted.
UPDATE {schema}.jobs AS j SET workflow = n.workflow
FROM {schema}.job_nodes AS n
WHERE n.id = j.id;

-- One row per (workflow, shard): the workflow's counts are the sums over
-- its shards (at most 16 rows). A transaction writes the shard of its
-- connection (backend pid mod 16), so the concurrent settlers and claimers
-- of one big workflow seldom wait on the same row, and one transaction
-- never holds two shards of a workflow (no lock-order cycle between two
-- of them over one workflow). Shards may hold negative numbers (a job
-- claimed on one shard and acked on another); only the sum means something.
-- Rows go only with the schema: a workflow stays known after its jobs are
-- purged (all zeros).
CREATE TABLE {schema}.workflow_counts (
    workflow  uuid     NOT NULL,
    shard     smallint NOT NULL,
    scheduled bigint   NOT NULL DEFAULT 0,
    pending   bigint   NOT NULL DEFAULT 0,
    running   bigint   NOT NULL DEFAULT 0,
    completed bigint   NOT NULL DEFAULT 0,
    dead      bigint   NOT NULL DEFAULT 0,
    cancelled bigint   NOT NULL DEFAULT 0,
    waiting   bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (workflow, shard)
);

INSERT INTO {schema}.workflow_counts
    (workflow, shard, scheduled, pending, running, completed, dead, cancelled, waiting)
SELECT w.id, 0,
       count(*) FILTER (WHERE j.state = 'scheduled'),
       count(*) FILTER (WHERE j.state = 'pending'),
       count(*) FILTER (WHERE j.state = 'running'),
       count(*) FILTER (WHERE j.state = 'completed'),
       count(*) FILTER (WHERE j.state = 'dead'),
       count(*) FILTER (WHERE j.state = 'cancelled'),
       count(*) FILTER (WHERE j.state = 'waiting')
FROM {schema}.workflows AS w
LEFT JOIN {schema}.jobs AS j ON j.workflow = w.id
GROUP BY w.id;

-- After every UPDATE and DELETE of jobs, once per statement: the changes
-- of state of workflow steps, aggregated per workflow, added to its shard.
-- Once per statement, not per row: a settle of 500 members of one fan-in
-- writes its counts row once, not 500 times. Every path that changes a
-- step's state (claim, settle, heartbeat loss and recover, promote,
-- cancel, retry, the jq_flow cascade, purge) goes through here, with no
-- code of its own. A statement on plain jobs only pays for the transition
-- tables and one scan of them (`workflow IS NOT NULL` finds nothing).
-- The enqueue of a workflow writes its first row itself
-- (sql/workflow_enqueue.sql): no INSERT trigger taxes plain enqueues.
--
-- It also releases, once per statement, the children of the parents the
-- statement completed (migration 12's jq_flow now leaves completed parents
-- to it, see below): each child's count of unfinished parents goes down
-- by the number of its parents completed here, in one update of its node
-- row, and a child that reaches zero while Waiting becomes Pending (or
-- Scheduled, its run_at kept when later). The fan-in of 10,000 members into
-- one callback thus writes the callback's node once per settle statement,
-- not once per member, and holds its lock for one update, not from the
-- first member's row to the end of the statement. Concurrent statements
-- that complete its last parents still serialise on that row: exactly one
-- sees zero. Row triggers run before this one: a child that a failed
-- parent of the same statement cancelled is left Cancelled (its edge from
-- a completed parent is still released, as before).
CREATE FUNCTION {schema}.jq_flow_counts() RETURNS trigger LANGUAGE plpgsql AS $counts$
DECLARE
    slot smallint := (pg_backend_pid() % 16)::smallint;
    woke boolean;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NOT EXISTS (SELECT 1 FROM new_jobs WHERE workflow IS NOT NULL) THEN
            RETURN NULL;
        END IF;
        WITH done AS (
            SELECT n.id, coalesce(n.finished_at, clock_timestamp()) AS at
            FROM new_jobs AS n JOIN old_jobs AS o ON o.id = n.id
            WHERE (n.flow & 1) <> 0 AND n.state = 'completed' AND o.state <> 'completed'
        ),
        released AS (
            UPDATE {schema}.job_deps AS d SET released = true
            FROM done
            WHERE d.parent = done.id AND NOT d.released
            RETURNING d.child, done.at
        ),
        per_child AS (
            SELECT child, count(*)::integer AS n, max(at) AS at FROM released GROUP BY child
        ),
        counted AS (
            -- Children in id order, the same in every statement.
            UPDATE {schema}.job_nodes AS nd SET unfinished = nd.unfinished - p.n
            FROM (SELECT * FROM per_child ORDER BY child) AS p
            WHERE nd.id = p.child
            RETURNING nd.id, nd.unfinished, p.at
        ),
        wake AS (
            UPDATE {schema}.jobs AS j
            SET state = CASE WHEN j.run_at <= c.at THEN 'pending' ELSE 'scheduled' END,
                run_at = greatest(j.run_at, c.at)
            FROM counted AS c
            WHERE j.id = c.id AND c.unfinished = 0 AND j.state = 'waiting'
            RETURNING j.state
        )
        SELECT coalesce(bool_or(state = 'pending'), false) INTO woke FROM wake;
        IF woke THEN
            PERFORM pg_notify('jq_wake_' || TG_TABLE_SCHEMA, '');
        END IF;
        INSERT INTO {schema}.workflow_counts AS c
            (workflow, shard, scheduled, pending, running, completed, dead, cancelled, waiting)
        SELECT n.workflow, slot,
               count(*) FILTER (WHERE n.state = 'scheduled') - count(*) FILTER (WHERE o.state = 'scheduled'),
               count(*) FILTER (WHERE n.state = 'pending') - count(*) FILTER (WHERE o.state = 'pending'),
               count(*) FILTER (WHERE n.state = 'running') - count(*) FILTER (WHERE o.state = 'running'),
               count(*) FILTER (WHERE n.state = 'completed') - count(*) FILTER (WHERE o.state = 'completed'),
               count(*) FILTER (WHERE n.state = 'dead') - count(*) FILTER (WHERE o.state = 'dead'),
               count(*) FILTER (WHERE n.state = 'cancelled') - count(*) FILTER (WHERE o.state = 'cancelled'),
               count(*) FILTER (WHERE n.state = 'waiting') - count(*) FILTER (WHERE o.state = 'waiting')
        FROM new_jobs AS n JOIN old_jobs AS o ON o.id = n.id
        WHERE n.workflow IS NOT NULL AND n.state <> o.state
        GROUP BY n.workflow
        -- Several workflows in one statement: their rows are locked in id
        -- order, the same in every statement.
        ORDER BY n.workflow
        ON CONFLICT (workflow, shard) DO UPDATE
        SET scheduled = c.scheduled + excluded.scheduled,
            pending = c.pending + excluded.pending,
            running = c.running + excluded.running,
            completed = c.completed + excluded.completed,
            dead = c.dead + excluded.dead,
            cancelled = c.cancelled + excluded.cancelled,
            waiting = c.waiting + excluded.waiting;
    ELSE
        IF NOT EXISTS (SELECT 1 FROM old_jobs WHERE workflow IS NOT NULL) THEN
            RETURN NULL;
        END IF;
        INSERT INTO {schema}.workflow_counts AS c
            (workflow, shard, scheduled, pending, running, completed, dead, cancelled, waiting)
        SELECT o.workflow, slot,
               -count(*) FILTER (WHERE o.state = 'scheduled'),
               -count(*) FILTER (WHERE o.state = 'pending'),
               -count(*) FILTER (WHERE o.state = 'running'),
               -count(*) FILTER (WHERE o.state = 'completed'),
               -count(*) FILTER (WHERE o.state = 'dead'),
               -count(*) FILTER (WHERE o.state = 'cancelled'),
               -count(*) FILTER (WHERE o.state = 'waiting')
        FROM old_jobs AS o
        WHERE o.workflow IS NOT NULL
        GROUP BY o.workflow
        ORDER BY o.workflow
        ON CONFLICT (workflow, shard) DO UPDATE
        SET scheduled = c.scheduled + excluded.scheduled,
            pending = c.pending + excluded.pending,
            running = c.running + excluded.running,
            completed = c.completed + excluded.completed,
            dead = c.dead + excluded.dead,
            cancelled = c.cancelled + excluded.cancelled,
            waiting = c.waiting + excluded.waiting;
    END IF;
    RETURN NULL;
END
$counts$;

-- Completed parents are released by jq_flow_counts above; migration 12's
-- row trigger keeps the rest (failed parents, cancellation down the graph,
-- the operator's retry). Its WHEN leaves out the completion, so the row
-- trigger does not run for it at all.
DROP TRIGGER jq_flow ON {schema}.jobs;
CREATE TRIGGER jq_flow AFTER UPDATE OF state ON {schema}.jobs
    FOR EACH ROW WHEN ((NEW.flow & 1) <> 0 AND OLD.state IS DISTINCT FROM NEW.state AND NEW.state <> 'completed')
    EXECUTE FUNCTION {schema}.jq_flow();

CREATE TRIGGER jq_flow_counts_update AFTER UPDATE ON {schema}.jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.jq_flow_counts();
CREATE TRIGGER jq_flow_counts_delete AFTER DELETE ON {schema}.jobs
    REFERENCING OLD TABLE AS old_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.jq_flow_counts();
