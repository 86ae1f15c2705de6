-- Stores a workflow in ONE statement (so it is atomic on any executor, the
-- caller's transaction included).
--
-- $1 workflow id, $2 now; the jobs: $3 ids uuid[], $4 queues text[],
-- $5 kinds text[], $6 payloads text[], $7 priorities int2[], $8 states
-- text[] ('waiting' for a step with parents), $9 max_attempts int4[],
-- $10 run_ats timestamptz[], $11 traces text[], $12 flows int2[]; the
-- nodes: $13 steps text[], $14 unfinished int4[] (positions are the array
-- order); the edges: $15 parents uuid[], $16 children uuid[], $17 the
-- parents' positions int4[], $18 policies text[]; $19 wake-up channel;
-- $20 the jobs' timeouts in ms int8[] (NULL elements: none); $21 the jobs'
-- keys text[] (NULL elements: none).
--
-- Every job stored gets `flow` bit 2 (a step), and the
-- steps' initial states are counted in workflow_counts by one
-- jq_workflow_count call.
--
-- A workflow already stored (a resend) stores nothing: `created` is 0 and
-- the caller reads the stored ids. A job id stored outside it fails the
-- statement with a unique violation, and nothing is stored.
WITH wf AS (
    INSERT INTO {schema}.workflows (id, created_at) VALUES ($1, $2)
    ON CONFLICT (id) DO NOTHING
    RETURNING id
),
ins AS (
    INSERT INTO {schema}.jobs AS j
        (id, queue, kind, payload, priority, state, max_attempts, run_at, trace, created_at, flow, timeout_ms, key)
    SELECT t.id, t.queue, t.kind, t.payload, t.priority, t.state, t.max_attempts, t.run_at, t.trace, $2, t.flow | 2,
           t.timeout_ms, t.key
    FROM unnest($3::uuid[], $4::text[], $5::text[], $6::text[], $7::int2[], $8::text[], $9::int4[],
                $10::timestamptz[], $11::text[], $12::int2[], $20::int8[], $21::text[])
        AS t(id, queue, kind, payload, priority, state, max_attempts, run_at, trace, flow, timeout_ms, key)
    WHERE EXISTS (SELECT 1 FROM wf)
    RETURNING j.id, j.state
),
nodes AS (
    INSERT INTO {schema}.job_nodes (id, workflow, position, step, unfinished)
    SELECT ins.id, $1, t.position - 1, t.step, t.unfinished
    FROM unnest($3::uuid[], $13::text[], $14::int4[]) WITH ORDINALITY AS t(id, step, unfinished, position)
    JOIN ins ON ins.id = t.id
),
deps AS (
    INSERT INTO {schema}.job_deps (parent, child, position, on_failure)
    SELECT t.parent, t.child, t.position, t.policy
    FROM unnest($15::uuid[], $16::uuid[], $17::int4[], $18::text[]) AS t(parent, child, position, policy)
    WHERE EXISTS (SELECT 1 FROM wf)
),
counted AS (
    SELECT {schema}.jq_workflow_count(array_agg($1::uuid), array_agg(NULL::text), array_agg(ins.state)) AS counted
    FROM ins
    HAVING count(*) > 0
)
SELECT (SELECT count(*) FROM wf) AS created,
       (SELECT count(*) FROM (
            SELECT pg_notify($19, '') FROM ins AS fresh WHERE fresh.state = 'pending' LIMIT 1) AS n) AS notified,
       (SELECT count(*) FROM counted) AS counted
