-- The state of job ?1 (explains why a guarded update changed nothing).
SELECT state FROM jobs WHERE id = ?1
