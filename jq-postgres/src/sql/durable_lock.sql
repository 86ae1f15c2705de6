-- The state of job $1, locked for the rest of the signal's transaction.
SELECT state FROM {schema}.jobs WHERE id = $1 FOR UPDATE
