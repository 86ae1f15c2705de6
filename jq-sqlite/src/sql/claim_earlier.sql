-- Rowids of the Running jobs a claim with token ?1 took: an earlier
-- attempt of a resent claim. Only Running jobs are in jobs_lease, so this
-- walks the jobs held right now, never the finished ones; run for resends
-- only.
SELECT seq FROM jobs INDEXED BY jobs_lease
WHERE state = 'running' AND lease_token = ?1
