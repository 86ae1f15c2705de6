-- Whether queue ?1 holds a keyed job waiting to run (Pending or
-- Scheduled): one probe of jobs_keyed per asked queue, the only thing a
-- claim over queues without keyed jobs does more than before keys.
SELECT 1 FROM jobs INDEXED BY jobs_keyed
WHERE key IS NOT NULL AND (state = 'pending' OR state = 'scheduled') AND queue = ?1
