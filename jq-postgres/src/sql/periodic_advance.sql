-- Moves periodic job $1's cursor from $9 to $5 when the trigger is $10
-- too (IS NOT DISTINCT FROM: both may be NULL); a row comes back iff it
-- moved. Under READ COMMITTED a concurrent step waits on the row and then
-- checks the WHERE against the committed row: the loser moves nothing.
--
-- $1 name, $2 queue, $3 spec, $4 zone text, $5 new cursor, $6 declared_at
-- (now) timestamptz, $7 missed to add bigint, $8 last missed, $9 expected
-- cursor, $10 expected trigger timestamptz.
UPDATE {schema}.periodic_jobs
SET queue = $2, spec = $3, zone = $4, cursor = $5, declared_at = $6, missed = missed + $7,
    last_missed = COALESCE($8, last_missed), triggered_at = NULL
WHERE name = $1 AND cursor = $9 AND triggered_at IS NOT DISTINCT FROM $10
RETURNING name
