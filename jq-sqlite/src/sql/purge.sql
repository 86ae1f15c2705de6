-- Deletes at most ?3 jobs in terminal state ?1 that finished before ?2
-- (jobs_finished index). Called repeatedly until it deletes fewer than ?3,
-- so no single transaction holds the writer or grows the WAL for long.
DELETE FROM jobs WHERE seq IN (
    SELECT seq FROM jobs
    WHERE (state = 'completed' OR state = 'dead' OR state = 'cancelled') AND state = ?1 AND finished_at < ?2
    LIMIT ?3
)
RETURNING queue, state, id, flow
