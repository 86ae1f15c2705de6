-- {schema}.jq_flow_moved(ids, froms, tos, flows, at, channel): workflow
-- steps `ids` (distinct, with `flow` bit 2) have just moved from `froms` to
-- `tos` by the calling statement. Called once per statement, after its own
-- changes, with all its steps, by every statement that changes a step's
-- state (sql/claim.sql, claim_controlled.sql, settle.sql,
-- settle_results.sql, bury.sql, cancel.sql, cancel_request.sql, retry.sql,
-- recover.sql, promote.sql; jq_claim_keyed_take): each collects its rows
-- with that bit, and only those, in a CTE that calls this with HAVING
-- count(*) > 0, so a batch of plain jobs calls nothing. There is no trigger
-- on `jobs`: having an AFTER UPDATE row trigger at all made PostgreSQL
-- keep the old tuple of every updated row for it, plain jobs' included.
--
-- The parents' rules run (jq_flow_finished for those with children that
-- finished, jq_flow_revived for those with children that left Dead or
-- Cancelled for a live state), and every step moved, the caller's and the
-- children these moved, is counted in workflow_counts by one
-- jq_workflow_count. `at` and `channel` are those of jq_flow_finished
-- (`channel` may be NULL when no step finishes: a claim, a promotion).
-- Returns how many steps it counted.
--
-- Before a failure or a revival cascades it locks every node the cascade
-- may reach, in one pass in id order: locking a cancelled child's node
-- after its job, level by level, let two settle batches each acking a
-- parent of the child the other's failure cancelled deadlock (the storage
-- test concurrent_claims_and_settles_of_one_workflow_keep_its_counts).
-- Sequential scans and hash and merge joins are off (jq_workflow_count.sql
-- says why).
CREATE OR REPLACE FUNCTION {schema}.jq_flow_moved(
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
    -- statements, and took a wide fan-in far below the plain drain's rate
    -- (BENCHMARKS.md's workflow scenarios).
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
    -- is the set the cascade walks. A batch of acks alone (the
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
