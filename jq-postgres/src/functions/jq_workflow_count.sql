-- {schema}.jq_workflow_count(workflows, froms, tos): steps of workflows
-- `workflows` moved from `froms` to `tos` (element by element; a NULL from:
-- just stored, a NULL to: purged). Adds the moves to workflow_counts,
-- summed per (workflow, state), in that order, on this session's shard.
-- Called by jq_flow_moved, once per statement (after the rules ran), and
-- by sql/workflow_enqueue.sql and sql/purge.sql.
--
-- One write per statement: PostgreSQL refuses an ON CONFLICT update of a
-- row that an earlier command of the same statement changed in a way it
-- cannot see (a second call from the same statement would be such a
-- command), and a single INSERT must not name a row twice, so its deltas
-- are summed per (workflow, state) first. They are written in (workflow,
-- state) order, the last locks the statement takes: two statements meeting
-- on the same shard lock the rows they share in the same order, and cannot
-- deadlock on them.
--
-- Like the other workflow functions it plans with sequential scans and
-- hash and merge joins off: its lookups touch a handful of rows among
-- many, and a plan made while the tables' statistics are stale (a workflow
-- just stored, not yet analyzed) read a whole table per call.
CREATE OR REPLACE FUNCTION {schema}.jq_workflow_count(workflows uuid[], froms text[], tos text[])
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
