-- An operator's trigger for periodic job ?1 at ?2 (now); a pending request
-- is kept (requests coalesce). changes() is 0 for an unknown periodic job.
UPDATE schedules SET run_requested = COALESCE(run_requested, ?2) WHERE name = ?1
