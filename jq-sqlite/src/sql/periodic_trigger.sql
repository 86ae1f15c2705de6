-- An operator's trigger for periodic job ?1 at ?2 (now); a pending request
-- is kept (requests coalesce). changes() is 0 for an unknown periodic job.
UPDATE periodic_jobs SET triggered_at = COALESCE(triggered_at, ?2) WHERE name = ?1
