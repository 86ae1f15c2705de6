-- Delete up to $3 jobs in terminal state $1 that finished before $2, the
-- oldest first. Called in a loop; each statement is bounded so it never
-- holds many locks or builds one huge transaction.
--
-- The ORDER BY walks jobs_finished (state, finished_at) and stops at the
-- limit; without it the planner may scan the heap from its start, which
-- earlier batches emptied, so each batch would read further. The picked rows
-- are locked (rows a retry holds are left for the next batch) and deleted
-- by ctid: `id IN (subquery)` made the planner hash-join the whole table.
DELETE FROM {schema}.jobs
WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM {schema}.jobs
    WHERE state = $1 AND finished_at < $2
    ORDER BY finished_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
))
