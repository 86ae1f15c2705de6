-- A store that grew for a year, for the bench's `grown` scenario
-- (examples/examples/bench/grown.rs), which runs this once per chunk of
-- finished jobs; by hand, in a migrated jq schema:
--
--   sed -e 's/{schema}/"jq"/g' -e 's/{first}/1/g' -e 's/{last}/10000000/g' \
--       -e 's/{total}/10000000/g' scripts/bench/grow-postgres.sql | psql ...
--
-- then scripts/bench/grow-postgres-finish.sql the same way.
--
-- Jobs {first} to {last} of {total} finished jobs, spread evenly over the
-- past 365 days (the last one a minute ago) and over four queues: 98 in
-- 100 Completed, 1 Dead (with its error), 1 Cancelled. Ids are UUID v7 of
-- their creation instant, as jq's clients make them, so they are in time
-- order like a real store's. One statement: generate_series, no round trip
-- per row.
INSERT INTO {schema}.jobs (id, queue, kind, payload, priority, state, attempts, max_attempts, run_at, created_at,
                           finished_at, errors)
SELECT (lpad(to_hex((extract(epoch FROM t.at) * 1000)::int8), 12, '0') || '7' || substr(md5(n::text), 1, 3) || '8'
        || substr(md5(n::text), 4, 15))::uuid,
       (ARRAY['mail', 'reports', 'images', 'webhooks'])[1 + n % 4],
       'grown',
       '{"n":' || n || '}',
       1,
       CASE n % 100 WHEN 0 THEN 'dead' WHEN 1 THEN 'cancelled' ELSE 'completed' END,
       CASE n % 100 WHEN 1 THEN 0 ELSE 1 END,
       CASE n % 100 WHEN 0 THEN 1 ELSE 25 END,
       t.at,
       t.at,
       t.at + interval '20 ms',
       CASE n % 100
           WHEN 0 THEN jsonb_build_array(jsonb_build_object('attempt', 1, 'at', t.at::text, 'message', 'boom'))
           ELSE '[]'::jsonb
       END
FROM generate_series({first}::int8, {last}::int8) AS n,
     LATERAL (SELECT now() - interval '1 minute' - (({total} - n)::float8 / {total}) * interval '365 days') AS t(at);
