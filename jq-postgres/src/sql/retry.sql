-- Operator retry: Dead -> Pending with one more attempt, errors kept.
-- $1 id uuid, $2 now timestamptz. No row returned: unknown id or not Dead
-- (the caller looks the job up to say which). $3 wake-up channel text.
WITH upd AS (
UPDATE {schema}.jobs AS j
SET state = 'pending',
    run_at = $2,
    finished_at = NULL,
    lease_token = NULL,
    lease_worker = NULL,
    lease_expires_at = NULL,
    max_attempts = greatest(j.max_attempts, j.attempts + 1)
WHERE j.id = $1 AND j.state = 'dead'
RETURNING j.id
)
SELECT upd.id, (SELECT count(*) FROM (SELECT pg_notify($3, '')) AS n) AS notified FROM upd
