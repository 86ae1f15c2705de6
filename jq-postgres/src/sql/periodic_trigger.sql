-- An operator's trigger for periodic job $1 at $2 (now); a pending one is
-- kept (requests coalesce). No row comes back for an unknown periodic job.
UPDATE {schema}.periodic_jobs SET triggered_at = COALESCE(triggered_at, $2) WHERE name = $1 RETURNING name
