-- Creates periodic job $1's row unless it exists; a row comes back iff this
-- call created it (of concurrent creators one does, the others wait on its
-- key and find it).
--
-- $1 name, $2 queue, $3 spec, $4 zone text, $5 cursor, $6 declared_at
-- timestamptz, $7 missed bigint, $8 last_missed timestamptz.
INSERT INTO {schema}.periodic_jobs (name, queue, spec, zone, cursor, missed, last_missed, declared_at)
VALUES ($1, $2, $3, $4, $5, $7, $8, $6)
ON CONFLICT (name) DO NOTHING
RETURNING name
