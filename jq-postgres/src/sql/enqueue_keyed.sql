-- Enqueue a batch in which some jobs have a unique key, in ONE statement.
--
-- $1 ids uuid[], $2 queues text[], $3 kinds text[], $4 payloads text[],
-- $5 priorities int2[], $6 states text[], $7 max_attempts int4[],
-- $8 run_ats timestamptz[], $9 traces text[], $10 unique_keys text[] (NULL
-- elements allowed in both), $11 now timestamptz, $12 wake-up channel text,
-- $13 timeouts in ms int8[] (NULL elements allowed), $14 keys text[] (the
-- jobs' keys, not unique keys; NULL elements allowed).
--
-- Each job resolves, in this order, to:
-- 1. its own id when that id is already stored (`known`: a client resending
--    after a lost answer); nothing is stored;
-- 2. the live job (Scheduled, Pending, Running) of its queue with its key,
--    the smallest id when an operator's retry left several (`live`);
-- 3. the row the INSERT wrote, or, when a concurrent enqueuer inserted the
--    key after this statement's snapshot, that row: the unique index
--    jobs_unique is the arbiter, and its no-op DO UPDATE branch locks the
--    existing row and RETURNs it (DO UPDATE cannot touch a row twice, so the
--    client sends each (queue, key) once per batch).
-- A concurrent insert of the same id is not arbitrated here (ON CONFLICT
-- names one index): it fails with a unique violation on jobs_pkey, and the
-- caller re-runs the statement when it can.
--
-- Returns (source, id, queue, unique_key) rows: source 0 known, 1 live,
-- 2 inserted or conflicting, 3 the NOTIFY (ignored). The NOTIFY is sent once,
-- only when a Pending job was really inserted.
WITH input AS (
    SELECT *
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::int2[], $6::text[], $7::int4[],
                $8::timestamptz[], $9::text[], $10::text[], $13::int8[], $14::text[])
        AS t(id, queue, kind, payload, priority, state, max_attempts, run_at, trace, unique_key, timeout_ms,
             key)
),
known AS (
    SELECT j.id FROM {schema}.jobs AS j WHERE j.id = ANY($1::uuid[])
),
live AS (
    SELECT DISTINCT ON (j.queue, j.unique_key) j.id, j.queue, j.unique_key
    FROM input AS t
    JOIN {schema}.jobs AS j ON j.queue = t.queue AND j.unique_key = t.unique_key
    WHERE t.unique_key IS NOT NULL
      AND j.unique_key IS NOT NULL AND j.state IN ('scheduled', 'pending', 'running')
      AND NOT EXISTS (SELECT 1 FROM known AS k WHERE k.id = t.id)
    ORDER BY j.queue, j.unique_key, j.id
),
ins AS (
    INSERT INTO {schema}.jobs AS j
        (id, queue, kind, payload, priority, state, max_attempts, run_at, trace, created_at, unique_key, timeout_ms,
         key)
    SELECT t.id, t.queue, t.kind, t.payload, t.priority, t.state, t.max_attempts, t.run_at, t.trace, $11,
           t.unique_key, t.timeout_ms, t.key
    FROM input AS t
    WHERE NOT EXISTS (SELECT 1 FROM known AS k WHERE k.id = t.id)
      AND NOT EXISTS (SELECT 1 FROM live AS l WHERE l.queue = t.queue AND l.unique_key = t.unique_key)
    ON CONFLICT (queue, unique_key, key_slot)
        WHERE unique_key IS NOT NULL AND state IN ('scheduled', 'pending', 'running')
    DO UPDATE SET unique_key = EXCLUDED.unique_key
    RETURNING j.id, j.queue, j.unique_key, j.state
),
notify AS (
    SELECT pg_notify($12, '') FROM ins AS fresh
    WHERE fresh.state = 'pending' AND fresh.id = ANY($1::uuid[])
    LIMIT 1
)
SELECT 0::int2 AS source, k.id, NULL::text AS queue, NULL::text AS unique_key FROM known AS k
UNION ALL
SELECT 1::int2, l.id, l.queue, l.unique_key FROM live AS l
UNION ALL
SELECT 2::int2, i.id, i.queue, i.unique_key FROM ins AS i
UNION ALL
SELECT 3::int2, NULL::uuid, NULL::text, NULL::text FROM notify
