-- Delete up to $3 jobs in terminal state $1 that finished before $2.
-- Called in a loop; each statement is bounded so it never holds many locks
-- or builds one huge transaction.
DELETE FROM {schema}.jobs
WHERE id IN (
    SELECT id FROM {schema}.jobs
    WHERE state = $1 AND finished_at < $2
    LIMIT $3
)
