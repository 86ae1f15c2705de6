-- Scheduled or Pending -> Cancelled. $1 id uuid, $2 now timestamptz.
-- No row returned: unknown id or another state (the caller looks it up).
UPDATE {schema}.jobs AS j
SET state = 'cancelled', finished_at = $2
WHERE j.id = $1 AND j.state IN ('scheduled', 'pending')
RETURNING j.id
