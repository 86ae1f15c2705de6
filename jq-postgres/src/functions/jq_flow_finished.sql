-- {schema}.jq_flow_finished(ids, states, at, channel): the rules of the
-- contract's "Workflows" for parents `ids` (distinct) that have just become
-- `states` (Completed, Dead or Cancelled) at `at`. Called by jq_flow_moved
-- (and by itself, down a cascade); jq_flow_moved's callers are the
-- statements that finish a job (sql/settle.sql, settle_results.sql,
-- bury.sql, cancel.sql, cancel_request.sql, recover.sql), so the rules run
-- in the transaction of the parent's change: no poller, no window.
--
-- Each open edge of theirs is released (parent Completed, or failed under
-- run_anyway): a child whose last edge this releases becomes Pending
-- (Scheduled when its run_at is later), and one NOTIFY on `channel` wakes
-- idle workers. Under cancel, a failed parent's Waiting children become
-- Cancelled naming it (counted in job_counts), and theirs follow by
-- recursion. Returns every child it moved (its workflow, from, to): the
-- caller counts them with its own rows in one write.
--
-- Concurrent batches releasing the same child both decrement its node row:
-- the rows are locked in id order first (so two batches cannot deadlock),
-- and exactly one sees zero. Its queries run after the calling statement's
-- own changes and see them (a VOLATILE function takes a fresh snapshot per
-- query).
--
-- The children it cancels are counted in job_counts on shard 16, which no
-- statement picks (they pick 0 to 15): PostgreSQL refuses an ON CONFLICT
-- update of a row that a later command of the same statement (this
-- function's INSERTs) changed, so they must never share a row with their
-- caller's own count. Only a queue's sum over shards means anything.
-- Sequential scans and hash and merge joins are off (jq_workflow_count.sql
-- says why).
CREATE OR REPLACE FUNCTION {schema}.jq_flow_finished(ids uuid[], states text[], at timestamptz, channel text)
RETURNS TABLE (moved_workflow uuid, moved_from text, moved_to text) LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $flow$
DECLARE
    children uuid[];
    failed boolean;
    woke_workflows uuid[];
    woke_states text[];
    e record;
    child_flow smallint;
    cancelled uuid[] := '{}';
BEGIN
    -- Only a failed parent's releases are written (run_anyway): a Completed
    -- parent never finishes again, so its state says its edges are done
    -- with, and a fan-in's acks write nothing on their edges. An edge a
    -- parent released while Dead, before an operator's retry, stays
    -- released: the retried parent's ack does not count twice.
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
            RETURNING n.id, n.unfinished, n.workflow
        ),
        woke AS (
            UPDATE {schema}.jobs AS j
            SET state = CASE WHEN j.run_at <= at THEN 'pending' ELSE 'scheduled' END,
                run_at = greatest(j.run_at, at)
            FROM left_over AS l
            WHERE j.id = l.id AND l.unfinished = 0 AND j.state = 'waiting'
            RETURNING l.workflow, j.state
        )
        SELECT array_agg(woke.workflow), array_agg(woke.state) INTO woke_workflows, woke_states FROM woke;
        IF array_position(woke_states, 'pending') IS NOT NULL THEN
            PERFORM pg_notify(channel, '');
        END IF;
        RETURN QUERY SELECT w.workflow, 'waiting'::text, w.state FROM unnest(woke_workflows, woke_states) AS w(workflow, state);
    END IF;

    IF NOT failed THEN
        RETURN;
    END IF;
    FOR e IN
        SELECT d.child, p.id AS parent, j.queue, n.workflow
        FROM unnest(ids, states) AS p(id, state)
        JOIN {schema}.job_deps AS d ON d.parent = p.id
        JOIN {schema}.jobs AS j ON j.id = d.child
        JOIN {schema}.job_nodes AS n ON n.id = d.child
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
            moved_workflow := e.workflow;
            moved_from := 'waiting';
            moved_to := 'cancelled';
            RETURN NEXT;
            IF child_flow & 1 <> 0 THEN
                cancelled := cancelled || e.child;
            END IF;
        END IF;
    END LOOP;
    IF cardinality(cancelled) > 0 THEN
        RETURN QUERY SELECT * FROM {schema}.jq_flow_finished(
            cancelled, array_fill('cancelled'::text, ARRAY[cardinality(cancelled)]), at, channel);
    END IF;
END
$flow$;
