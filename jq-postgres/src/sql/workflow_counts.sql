-- Workflow $1's counts per state: the sums over its shards of
-- workflow_counts (migration 13), kept by the statements that change its
-- jobs; never a read of the jobs. `shards` is 0 for an unknown workflow
-- (every stored one has a row from its enqueue on).
SELECT count(*) AS shards,
       coalesce(sum(scheduled), 0)::int8,
       coalesce(sum(pending), 0)::int8,
       coalesce(sum(running), 0)::int8,
       coalesce(sum(completed), 0)::int8,
       coalesce(sum(dead), 0)::int8,
       coalesce(sum(cancelled), 0)::int8,
       coalesce(sum(waiting), 0)::int8
FROM {schema}.workflow_counts
WHERE workflow = $1
