-- Due Scheduled jobs (run_at <= ?1, now) become Pending (jobs_due index).
UPDATE jobs SET state = 'pending'
WHERE state = 'scheduled' AND run_at <= ?1
