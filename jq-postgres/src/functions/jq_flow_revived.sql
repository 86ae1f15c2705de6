-- {schema}.jq_flow_revived(ids): jobs `ids` have just left Dead or
-- Cancelled (an operator's retry, or this function's own revival): each
-- child a failure cancelled (job_nodes.cancelled_by set) comes back to
-- Waiting once no parent of its is failed under cancel any more, leaves the
-- Cancelled count (shard 16, as jq_flow_finished.sql says), and its own
-- cancelled children follow by recursion. Returns every child it moved
-- (its workflow, from, to). Called by jq_flow_moved (sql/retry.sql's
-- call) and by itself, down a cascade. Sequential scans and hash and merge
-- joins are off (jq_workflow_count.sql says why).
CREATE OR REPLACE FUNCTION {schema}.jq_flow_revived(ids uuid[])
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
