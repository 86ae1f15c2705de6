-- Job counts by queue and state, whatever the number of finished jobs:
-- finished states from job_counts (schema version 7), live ones from the
-- partial indexes that hold only them (jobs_pending and jobs_scheduled
-- begin with the queue: a walk of the index alone).
SELECT queue, state, n FROM job_counts WHERE n <> 0
UNION ALL
SELECT queue, 'pending', count(*) FROM jobs WHERE state = 'pending' GROUP BY queue
UNION ALL
SELECT queue, 'scheduled', count(*) FROM jobs WHERE state = 'scheduled' GROUP BY queue
UNION ALL
SELECT queue, 'running', count(*) FROM jobs WHERE state = 'running' GROUP BY queue
