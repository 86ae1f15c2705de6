-- Migration 13: the rules of the contract's "Workflows" run by the
-- statements that finish or revive a job, no longer by a trigger.
--
-- Migration 12's row trigger `jq_flow` fired only for jobs with children
-- (its WHEN clause), yet having an AFTER UPDATE row trigger on `jobs` at
-- all made PostgreSQL keep the old tuple of every updated row for it: about
-- 5% of the plain drain (BENCHMARKS session 17). The statements that can
-- finish a job (settle, settle with results, bury, cancel, cancel request,
-- recover) now call `jq_flow_finished` once, in a CTE over the rows they
-- changed that have children (`flow & 1`), and an operator's retry calls
-- `jq_flow_revived`: same transaction as the parent's change, so still no
-- poller and no window, and a statement that changed no parent calls
-- nothing.
--
-- Both take whole batches, so a fan-in's last parents finishing in one
-- settle batch decrement their child once by their count, not once each.
-- Their queries run after the calling statement's own changes and see them
-- (a VOLATILE function takes a fresh snapshot per query).
--
-- Their queries look up a batch's parents and children by key, a handful
-- of rows among many: the functions plan them with sequential scans and
-- hash or merge joins off, since a plan made while the edge table's
-- statistics are stale (a workflow just stored, not yet analyzed) read
-- the whole table per batch (seen: a seq scan of job_deps under every
-- settle of a 10,000-member fan-in, 10 ms each).
--
-- The children they cancel or revive are counted in job_counts on shard 16,
-- which no statement picks (they pick 0 to 15): PostgreSQL refuses an
-- ON CONFLICT update of a row that a later command of the same statement
-- (these functions' INSERTs) changed, so they must never share a row with
-- their caller's own count. Only a queue's sum over shards means anything.
DROP TRIGGER jq_flow ON {schema}.jobs;
DROP FUNCTION {schema}.jq_flow();

-- The foreign keys of job_nodes and job_results on jobs go too: each put
-- internal row triggers on `jobs` (an UPDATE trigger that re-reads every
-- updated row's old version, a DELETE trigger that probes both tables per
-- purged job), checked every stored step with a row lock on its job (a
-- 10,000-step workflow took 10,000 locks), and every stored result. A
-- node and its job are stored by one statement (the workflow's), a result
-- by its job's ack, and the purge statement deletes both with their job.
ALTER TABLE {schema}.job_nodes DROP CONSTRAINT job_nodes_id_fkey;
ALTER TABLE {schema}.job_results DROP CONSTRAINT job_results_id_fkey;

-- Parents `ids` (distinct) have just become `states` (Completed, Dead or
-- Cancelled) at `at`. Each open edge of theirs is released (parent
-- Completed, or failed under run_anyway): a child whose last edge this
-- releases becomes Pending (Scheduled when its run_at is later), and one
-- NOTIFY on `channel` wakes idle workers. Under cancel, a failed parent's
-- Waiting children become Cancelled naming it (counted in job_counts), and
-- theirs follow by recursion. Returns how many children became Pending.
--
-- Concurrent batches releasing the same child both decrement its node row:
-- the rows are locked in id order first (so two batches cannot deadlock),
-- and exactly one sees zero.
CREATE FUNCTION {schema}.jq_flow_finished(ids uuid[], states text[], at timestamptz, channel text)
RETURNS integer LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $flow$
DECLARE
    children uuid[];
    failed boolean;
    woken integer := 0;
    e record;
    child_flow smallint;
    cancelled uuid[] := '{}';
BEGIN
    -- Only a failed parent's releases are written (run_anyway): a Completed
    -- parent never finishes again, so its state says its edges are done
    -- with, and a fan-in's acks write nothing on their edges. An edge a
    -- parent released while Dead, before an operator's retry, stays
    -- released: the retried parent's completion does not count twice.
    SELECT array_agg(d.child ORDER BY d.child) INTO children
    FROM unnest(ids, states) AS p(id, state)
    JOIN {schema}.job_deps AS d ON d.parent = p.id
    WHERE NOT d.released AND (p.state = 'completed' OR d.on_failure = 'run_anyway');
    failed := array_position(states, 'dead') IS NOT NULL OR array_position(states, 'cancelled') IS NOT NULL;
    IF failed THEN
        UPDATE {schema}.job_deps AS d SET released = true
        FROM unnest(ids, states) AS p(id, state)
        WHERE d.parent = p.id AND p.state <> 'completed' AND NOT d.released AND d.on_failure = 'run_anyway';
    END IF;
    IF children IS NOT NULL THEN
        PERFORM 1 FROM {schema}.job_nodes WHERE id = ANY(children) ORDER BY id FOR UPDATE;
        WITH counted AS (
            SELECT child, count(*)::integer AS k FROM unnest(children) AS child GROUP BY child
        ),
        left_over AS (
            UPDATE {schema}.job_nodes AS n SET unfinished = n.unfinished - c.k
            FROM counted AS c
            WHERE n.id = c.child
            RETURNING n.id, n.unfinished
        ),
        woke AS (
            UPDATE {schema}.jobs AS j
            SET state = CASE WHEN j.run_at <= at THEN 'pending' ELSE 'scheduled' END,
                run_at = greatest(j.run_at, at)
            FROM left_over AS l
            WHERE j.id = l.id AND l.unfinished = 0 AND j.state = 'waiting'
            RETURNING j.state
        )
        SELECT count(*) INTO woken FROM woke WHERE woke.state = 'pending';
        IF woken > 0 THEN
            PERFORM pg_notify(channel, '');
        END IF;
    END IF;

    IF NOT failed THEN
        RETURN woken;
    END IF;
    FOR e IN
        SELECT d.child, p.id AS parent, j.queue
        FROM unnest(ids, states) AS p(id, state)
        JOIN {schema}.job_deps AS d ON d.parent = p.id
        JOIN {schema}.jobs AS j ON j.id = d.child
        WHERE p.state IN ('dead', 'cancelled') AND NOT d.released AND d.on_failure = 'cancel'
          AND j.state = 'waiting'
        ORDER BY d.child, d.position
    LOOP
        UPDATE {schema}.jobs SET state = 'cancelled', finished_at = at
        WHERE id = e.child AND state = 'waiting'
        RETURNING jobs.flow INTO child_flow;
        IF FOUND THEN
            UPDATE {schema}.job_nodes SET cancelled_by = e.parent WHERE id = e.child;
            INSERT INTO {schema}.job_counts AS c (queue, state, shard, n)
            VALUES (e.queue, 'cancelled', 16, 1)
            ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
            IF child_flow & 1 <> 0 THEN
                cancelled := cancelled || e.child;
            END IF;
        END IF;
    END LOOP;
    IF cardinality(cancelled) > 0 THEN
        woken := woken + {schema}.jq_flow_finished(
            cancelled, array_fill('cancelled'::text, ARRAY[cardinality(cancelled)]), at, channel);
    END IF;
    RETURN woken;
END
$flow$;

-- Jobs `ids` have just left Dead or Cancelled (an operator's retry, or this
-- function's own revival): each child a failure cancelled
-- (job_nodes.cancelled_by set) comes back to Waiting once no parent of its
-- is failed under cancel any more, leaves the Cancelled count, and its own
-- cancelled children follow by recursion. Returns how many came back.
CREATE FUNCTION {schema}.jq_flow_revived(ids uuid[]) RETURNS integer LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $flow$
DECLARE
    e record;
    revived uuid[] := '{}';
    total integer := 0;
BEGIN
    FOR e IN
        SELECT DISTINCT d.child, j.queue, j.flow
        FROM {schema}.job_deps AS d
        JOIN {schema}.job_nodes AS n ON n.id = d.child
        JOIN {schema}.jobs AS j ON j.id = d.child
        WHERE d.parent = ANY(ids) AND j.state = 'cancelled' AND n.cancelled_by IS NOT NULL
        ORDER BY d.child
    LOOP
        CONTINUE WHEN EXISTS (
            SELECT 1
            FROM {schema}.job_deps AS d JOIN {schema}.jobs AS p ON p.id = d.parent
            WHERE d.child = e.child AND NOT d.released AND d.on_failure = 'cancel'
              AND p.state IN ('dead', 'cancelled') AND NOT (d.parent = ANY(ids)));
        UPDATE {schema}.jobs SET state = 'waiting', finished_at = NULL
        WHERE id = e.child AND state = 'cancelled';
        IF FOUND THEN
            UPDATE {schema}.job_nodes SET cancelled_by = NULL WHERE id = e.child;
            INSERT INTO {schema}.job_counts AS c (queue, state, shard, n)
            VALUES (e.queue, 'cancelled', 16, -1)
            ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
            total := total + 1;
            IF e.flow & 1 <> 0 THEN
                revived := revived || e.child;
            END IF;
        END IF;
    END LOOP;
    IF cardinality(revived) > 0 THEN
        total := total + {schema}.jq_flow_revived(revived);
    END IF;
    RETURN total;
END
$flow$;
