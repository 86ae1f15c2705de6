-- An operator's run request for schedule ?1 at ?2 (now); a pending request
-- is kept (requests coalesce). changes() is 0 for an unknown schedule.
UPDATE schedules SET run_requested = COALESCE(run_requested, ?2) WHERE name = ?1
