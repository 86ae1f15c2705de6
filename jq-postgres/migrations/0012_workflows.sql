-- Migration 12: workflows (results and dependencies).
--
-- `flow` says whether a job takes part in a workflow: bit 1 = it has
-- children. Only such a job's changes of state run the trigger below (its
-- WHEN clause), so the drain of plain jobs runs no statement more. A
-- constant default adds the column without rewriting the table.
ALTER TABLE {schema}.jobs ADD COLUMN flow smallint NOT NULL DEFAULT 0;

CREATE TABLE {schema}.workflows (
    id         uuid        PRIMARY KEY,
    created_at timestamptz NOT NULL
);

-- One row per step: its place, and how many parents it still waits for
-- (the job is Waiting while above zero). Goes with its job on purge.
CREATE TABLE {schema}.job_nodes (
    id           uuid    PRIMARY KEY REFERENCES {schema}.jobs (id) ON DELETE CASCADE,
    workflow     uuid    NOT NULL,
    position     integer NOT NULL,
    step         text    NOT NULL,
    unfinished   integer NOT NULL,
    cancelled_by uuid
);
CREATE UNIQUE INDEX job_nodes_workflow ON {schema}.job_nodes (workflow, position);

-- One row per edge; `released` once the parent is done with for this child
-- (completed, or failed under run_anyway), so that it counts once.
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
-- acks read no wider rows. Goes with its job on purge.
CREATE TABLE {schema}.job_results (
    id     uuid PRIMARY KEY REFERENCES {schema}.jobs (id) ON DELETE CASCADE,
    result text NOT NULL
);

-- The rules of the contract's "Workflows", run in the statement that
-- changes a parent's state, so in its transaction: no poller, no window.
--
-- A job that became terminal: each child whose edge is open is released
-- (parent Completed, or failed under run_anyway; the last release makes it
-- Pending at the parent's finished_at, the statement's now, or leaves it
-- Scheduled when its run_at is later), or cancelled (parent Dead or
-- Cancelled, child Waiting under cancel), naming the parent. A cancelled
-- child's own update runs this again: the cascade goes down.
--
-- A job retried out of Dead, or brought back from Cancelled: the children
-- a failure cancelled (job_nodes.cancelled_by set) come back to Waiting
-- (and theirs, by the same trigger) once no parent of theirs is failed
-- under cancel any more. A cancelled child reports its first failed parent
-- in step order (computed when read), whatever order failures came in.
--
-- Concurrent acks of two parents of one child both decrement its node
-- row: the row lock orders them, and exactly one sees zero.
CREATE FUNCTION {schema}.jq_flow() RETURNS trigger LANGUAGE plpgsql AS $flow$
DECLARE
    e record;
    left_over integer;
    other uuid;
    now_at timestamptz;
BEGIN
    IF NEW.state IN ('completed', 'dead', 'cancelled') AND OLD.state NOT IN ('completed', 'dead', 'cancelled') THEN
        now_at := coalesce(NEW.finished_at, clock_timestamp());
        FOR e IN
            SELECT d.child, d.on_failure, j.state AS child_state, j.queue AS child_queue, j.run_at AS child_run_at
            FROM {schema}.job_deps AS d JOIN {schema}.jobs AS j ON j.id = d.child
            WHERE d.parent = NEW.id AND NOT d.released
            ORDER BY d.child
        LOOP
            IF NEW.state = 'completed' OR e.on_failure = 'run_anyway' THEN
                UPDATE {schema}.job_deps SET released = true WHERE parent = NEW.id AND child = e.child;
                UPDATE {schema}.job_nodes SET unfinished = unfinished - 1 WHERE id = e.child
                    RETURNING unfinished INTO left_over;
                IF left_over = 0 THEN
                    UPDATE {schema}.jobs
                    SET state = CASE WHEN run_at <= now_at THEN 'pending' ELSE 'scheduled' END,
                        run_at = greatest(run_at, now_at)
                    WHERE id = e.child AND state = 'waiting';
                    IF FOUND AND e.child_run_at <= now_at THEN
                        PERFORM pg_notify('jq_wake_' || TG_TABLE_SCHEMA, '');
                    END IF;
                END IF;
            ELSIF e.child_state = 'waiting' THEN
                UPDATE {schema}.job_nodes SET cancelled_by = NEW.id WHERE id = e.child;
                UPDATE {schema}.jobs SET state = 'cancelled', finished_at = now_at
                WHERE id = e.child AND state = 'waiting';
                IF FOUND THEN
                    INSERT INTO {schema}.job_counts AS c (queue, state, shard, n)
                    VALUES (e.child_queue, 'cancelled', floor(random() * 16)::int2, 1)
                    ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
                END IF;
            END IF;
        END LOOP;
    ELSIF (OLD.state = 'dead' AND NEW.state = 'pending') OR (OLD.state = 'cancelled' AND NEW.state = 'waiting') THEN
        FOR e IN
            SELECT d.child, j.queue AS child_queue
            FROM {schema}.job_deps AS d
            JOIN {schema}.job_nodes AS n ON n.id = d.child
            JOIN {schema}.jobs AS j ON j.id = d.child
            WHERE d.parent = NEW.id AND j.state = 'cancelled' AND n.cancelled_by IS NOT NULL
            ORDER BY d.child
        LOOP
            SELECT d.parent INTO other
            FROM {schema}.job_deps AS d JOIN {schema}.jobs AS p ON p.id = d.parent
            WHERE d.child = e.child AND NOT d.released AND d.on_failure = 'cancel'
              AND p.state IN ('dead', 'cancelled')
            ORDER BY d.position
            LIMIT 1;
            IF other IS NULL THEN
                UPDATE {schema}.job_nodes SET cancelled_by = NULL WHERE id = e.child;
                UPDATE {schema}.jobs SET state = 'waiting', finished_at = NULL
                WHERE id = e.child AND state = 'cancelled';
                INSERT INTO {schema}.job_counts AS c (queue, state, shard, n)
                VALUES (e.child_queue, 'cancelled', floor(random() * 16)::int2, -1)
                ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
            END IF;
        END LOOP;
    END IF;
    RETURN NULL;
END
$flow$;

CREATE TRIGGER jq_flow AFTER UPDATE OF state ON {schema}.jobs
    FOR EACH ROW WHEN ((NEW.flow & 1) <> 0 AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION {schema}.jq_flow();

-- Waiting jobs by queue, for stats and the list of queues: a Waiting job is
-- in no other index of live jobs (the claim index holds Pending and
-- Scheduled, the lease index Running), and counting them from the table
-- would read every finished job. Plain jobs never enter it.
CREATE INDEX jobs_waiting_on_parents ON {schema}.jobs (queue) WHERE state = 'waiting';
