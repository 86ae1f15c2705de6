-- The state of one job, to explain why a guarded update matched nothing.
-- $1 id uuid.
SELECT state FROM {schema}.jobs WHERE id = $1
