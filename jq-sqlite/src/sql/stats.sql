-- Job counts by queue and state, whatever the number of finished jobs:
-- finished states from job_counts, live ones from the
-- partial indexes that hold only them (jobs_plain_pending and
-- jobs_plain_scheduled for plain jobs, jobs_keyed_waiting for keyed
-- ones), each term repeating its index's WHERE; all begin with the
-- queue: a walk of the indexes alone, but for the keyed jobs' state, read
-- from their rows).
SELECT queue, state, n FROM job_counts WHERE n <> 0
UNION ALL
SELECT queue, 'pending', count(*) FROM jobs WHERE state = 'pending' AND key IS NULL GROUP BY queue
UNION ALL
SELECT queue, 'scheduled', count(*) FROM jobs WHERE state = 'scheduled' AND key IS NULL GROUP BY queue
UNION ALL
SELECT queue, state, count(*) FROM jobs
WHERE keyed_wait IS NOT NULL AND (state = 'pending' OR state = 'scheduled') GROUP BY queue, state
UNION ALL
SELECT queue, 'running', count(*) FROM jobs WHERE state = 'running' GROUP BY queue
