-- Migration 14: each workflow's steps counted per state in a summary
-- table, moved by the statements that change a step's state, so that
-- `workflow(id)` reads a few rows instead of every step (issue 30: "status
-- without scans").
--
-- `flow` bit 2 marks a workflow step (bit 1 still means "has children";
-- every job with children is a step). The statements that change states
-- collect their rows with that bit, and only those, in a CTE that calls
-- `jq_flow_moved` once with HAVING count(*) > 0: a batch of plain jobs
-- calls nothing, as with migration 13's `flowed`. Still no trigger on
-- `jobs` (migration 13 says why).
--
-- A workflow's count of a state is the sum of its rows over shards, as in
-- job_counts (migration 8): each session writes on shard
-- pg_backend_pid() % 16, so concurrent claimers and settlers of one
-- workflow's steps seldom wait on the same row. Shards may go negative (a
-- step claimed on one shard, settled on another); only sums mean anything.
-- A row is kept when its sum comes back to zero: at most seven states
-- times sixteen shards per workflow, and a purged workflow stays known
-- (its `workflows` row) with no step counted.
--
-- All writes to it go through `jq_workflow_count` or the fast path of
-- `jq_flow_moved` (the same INSERT, for moves that run no rule), once per
-- statement: PostgreSQL refuses an ON CONFLICT update of a row that an
-- earlier command of the same statement changed in a way it cannot see
-- (a second call from the same statement would be such a command), and a
-- single INSERT must not name a row twice, so its deltas are summed per
-- (workflow, state) first. They are written in (workflow, state) order,
-- the last locks the statement takes: two statements meeting on the same
-- shard lock the rows they share in the same order, and cannot deadlock
-- on them.
--
-- jq_flow_moved also locks, before a failure or a revival cascades, every
-- node the cascade may reach, in one pass in id order: migration 13's
-- functions locked a cancelled child's node after its job, level by level,
-- and two settle batches each acking a parent of the child the other's
-- failure cancelled deadlocked (seen under six concurrent workers; the
-- storage test concurrent_claims_and_settles_of_one_workflow_keep_its_counts).
CREATE TABLE {schema}.workflow_counts (
    workflow uuid     NOT NULL,
    state    text     NOT NULL,
    shard    smallint NOT NULL,
    n        bigint   NOT NULL,
    PRIMARY KEY (workflow, state, shard)
);

-- Writers of an older build neither mark steps nor count them: while the
-- steps are marked and counted no job may change (SHARE lets reads
-- through, waits for writers in flight, and holds new ones until this
-- migration commits).
LOCK TABLE {schema}.jobs IN SHARE MODE;

UPDATE {schema}.jobs SET flow = flow | 2 WHERE id IN (SELECT id FROM {schema}.job_nodes);

INSERT INTO {schema}.workflow_counts (workflow, state, shard, n)
SELECT n.workflow, j.state, 0, count(*)
FROM {schema}.job_nodes AS n JOIN {schema}.jobs AS j ON j.id = n.id
GROUP BY n.workflow, j.state;

-- Steps of workflows `workflows` moved from `froms` to `tos` (element by
-- element; a NULL from: just stored, a NULL to: purged). Adds the moves to
-- workflow_counts, summed per (workflow, state), in that order, on this
-- session's shard. The one writer of the table: once per statement.
CREATE FUNCTION {schema}.jq_workflow_count(workflows uuid[], froms text[], tos text[])
RETURNS void LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $count$
BEGIN
    INSERT INTO {schema}.workflow_counts AS c (workflow, state, shard, n)
    SELECT d.workflow, d.state, (pg_backend_pid() % 16)::int2, sum(d.n)
    FROM (
        SELECT m.workflow, m.was AS state, -1 AS n
        FROM unnest(workflows, froms) AS m(workflow, was) WHERE m.was IS NOT NULL
        UNION ALL
        SELECT m.workflow, m.became, 1
        FROM unnest(workflows, tos) AS m(workflow, became) WHERE m.became IS NOT NULL
    ) AS d
    GROUP BY d.workflow, d.state
    HAVING sum(d.n) <> 0
    ORDER BY d.workflow, d.state
    ON CONFLICT (workflow, state, shard) DO UPDATE SET n = c.n + excluded.n;
END
$count$;

-- Migration 13's functions, the same rules, now also returning the steps
-- they moved (their workflow, from, to) instead of a count: the caller
-- (jq_flow_moved) counts them with its own rows in one write. Their
-- job_counts rows stay on shard 16 (migration 13 says why).
DROP FUNCTION {schema}.jq_flow_finished(uuid[], text[], timestamptz, text);
DROP FUNCTION {schema}.jq_flow_revived(uuid[]);

-- Parents `ids` (distinct) have just become `states` (Completed, Dead or
-- Cancelled) at `at`. Each open edge of theirs is released (parent
-- Completed, or failed under run_anyway): a child whose last edge this
-- releases becomes Pending (Scheduled when its run_at is later), and one
-- NOTIFY on `channel` wakes idle workers. Under cancel, a failed parent's
-- Waiting children become Cancelled naming it (counted in job_counts), and
-- theirs follow by recursion. Returns every child it moved.
--
-- Concurrent batches releasing the same child both decrement its node row:
-- the rows are locked in id order first (so two batches cannot deadlock),
-- and exactly one sees zero.
CREATE FUNCTION {schema}.jq_flow_finished(ids uuid[], states text[], at timestamptz, channel text)
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

-- Jobs `ids` have just left Dead or Cancelled (an operator's retry, or this
-- function's own revival): each child a failure cancelled
-- (job_nodes.cancelled_by set) comes back to Waiting once no parent of its
-- is failed under cancel any more, leaves the Cancelled count, and its own
-- cancelled children follow by recursion. Returns every child it moved.
CREATE FUNCTION {schema}.jq_flow_revived(ids uuid[])
RETURNS TABLE (moved_workflow uuid, moved_from text, moved_to text) LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $flow$
DECLARE
    e record;
    revived uuid[] := '{}';
BEGIN
    FOR e IN
        SELECT DISTINCT d.child, j.queue, j.flow, n.workflow
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
            moved_workflow := e.workflow;
            moved_from := 'cancelled';
            moved_to := 'waiting';
            RETURN NEXT;
            IF e.flow & 1 <> 0 THEN
                revived := revived || e.child;
            END IF;
        END IF;
    END LOOP;
    IF cardinality(revived) > 0 THEN
        RETURN QUERY SELECT * FROM {schema}.jq_flow_revived(revived);
    END IF;
END
$flow$;

-- Steps `ids` (distinct, with `flow` bit 2) have just moved from `froms`
-- to `tos` by the calling statement, which calls this once, after its own
-- changes, with all its steps: their parents' rules run (jq_flow_finished
-- for those with children that finished, jq_flow_revived for those with
-- children that left Dead or Cancelled for a live state), and every
-- step moved, the caller's and the children these moved, is counted in
-- workflow_counts by one jq_workflow_count. `at` and `channel` are those
-- of jq_flow_finished (`channel` may be NULL when no step finishes: a
-- claim, a promotion). Returns how many steps it counted.
CREATE FUNCTION {schema}.jq_flow_moved(
    ids uuid[], froms text[], tos text[], flows smallint[], at timestamptz, channel text)
RETURNS integer LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $flow$
DECLARE
    finished uuid[];
    finished_states text[];
    revived uuid[];
    failing uuid[];
    workflows uuid[];
    was text[];
    became text[];
BEGIN
    -- A move that neither ends nor revives a step (a claim, a promotion, a
    -- retry or release back to Pending or Scheduled) runs no rule: its
    -- steps are looked up and counted by one statement, the same write as
    -- jq_workflow_count's. Through the general path below (the rules'
    -- classification, a lookup, then the count) a claim's call cost three
    -- statements, and took the 10,000-into-1 fan-in from 92% to 64% of the
    -- plain drain (BENCHMARKS.md, session 22).
    IF NOT (tos && ARRAY['completed', 'dead', 'cancelled'] OR froms && ARRAY['dead', 'cancelled']) THEN
        INSERT INTO {schema}.workflow_counts AS c (workflow, state, shard, n)
        SELECT n.workflow, d.state, (pg_backend_pid() % 16)::int2, sum(d.n)
        FROM unnest(ids, froms, tos) AS s(id, was, became)
        JOIN {schema}.job_nodes AS n ON n.id = s.id
        CROSS JOIN LATERAL (VALUES (s.was, -1), (s.became, 1)) AS d(state, n)
        WHERE s.was IS DISTINCT FROM s.became AND d.state IS NOT NULL
        GROUP BY n.workflow, d.state
        HAVING sum(d.n) <> 0
        ORDER BY n.workflow, d.state
        ON CONFLICT (workflow, state, shard) DO UPDATE SET n = c.n + excluded.n;
        RETURN cardinality(ids);
    END IF;

    -- The rules' classification, and the caller's steps with their
    -- workflows (looked up by key), in one read.
    SELECT array_agg(m.id ORDER BY m.id) FILTER (WHERE m.finishing),
           array_agg(m.became ORDER BY m.id) FILTER (WHERE m.finishing),
           array_agg(m.id ORDER BY m.id) FILTER (WHERE m.reviving),
           array_agg(m.id) FILTER (WHERE (m.finishing AND m.became <> 'completed') OR m.reviving),
           array_agg(m.workflow) FILTER (WHERE m.counted),
           array_agg(m.was) FILTER (WHERE m.counted),
           array_agg(m.became) FILTER (WHERE m.counted)
    INTO finished, finished_states, revived, failing, workflows, was, became
    FROM (
        SELECT s.id, s.was, s.became, n.workflow,
               s.flow & 1 <> 0 AND s.became IN ('completed', 'dead', 'cancelled')
                   AND s.was NOT IN ('completed', 'dead', 'cancelled') AS finishing,
               s.flow & 1 <> 0 AND s.was IN ('dead', 'cancelled')
                   AND s.became NOT IN ('completed', 'dead', 'cancelled') AS reviving,
               n.workflow IS NOT NULL AND s.was IS DISTINCT FROM s.became AS counted
        FROM unnest(ids, froms, tos, flows) AS s(id, was, became, flow)
        LEFT JOIN {schema}.job_nodes AS n ON n.id = s.id
    ) AS m;

    -- A failure (or a revival) cascades: its function locks a child's node
    -- after changing the child's job, then goes down level by level, while
    -- a concurrent statement's release holds the nodes of its own children
    -- (sorted) and may need one of these; taken in two orders, such locks
    -- deadlocked (seen: two settle batches, each acking a parent of the
    -- child the other's failure cancels). So every node the cascade may
    -- touch, all the descendants of the failed or revived steps, and the
    -- children of the others, is locked here first, in one pass in id order,
    -- before any job row: the functions below then wait on no node, and the
    -- statements' lock orders agree. Edges never change, so the set read
    -- is the set the cascade walks. A batch of completions alone (the
    -- common case) skips this: jq_flow_finished locks their children, sorted.
    IF failing IS NOT NULL THEN
        PERFORM 1 FROM {schema}.job_nodes
        WHERE id IN (
            WITH RECURSIVE below (id) AS (
                SELECT d.child FROM {schema}.job_deps AS d WHERE d.parent = ANY(failing)
                UNION
                SELECT d.child FROM below AS b JOIN {schema}.job_deps AS d ON d.parent = b.id
            )
            SELECT below.id FROM below
            UNION ALL
            SELECT d.child FROM {schema}.job_deps AS d WHERE d.parent = ANY(finished)
        )
        ORDER BY id
        FOR UPDATE;
    END IF;

    IF finished IS NOT NULL THEN
        SELECT workflows || array_agg(f.moved_workflow), was || array_agg(f.moved_from),
               became || array_agg(f.moved_to)
        INTO workflows, was, became
        FROM {schema}.jq_flow_finished(finished, finished_states, at, channel) AS f;
    END IF;
    IF revived IS NOT NULL THEN
        SELECT workflows || array_agg(f.moved_workflow), was || array_agg(f.moved_from),
               became || array_agg(f.moved_to)
        INTO workflows, was, became
        FROM {schema}.jq_flow_revived(revived) AS f;
    END IF;

    IF workflows IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM {schema}.jq_workflow_count(workflows, was, became);
    RETURN cardinality(workflows);
END
$flow$;
