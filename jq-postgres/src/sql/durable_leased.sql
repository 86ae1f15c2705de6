-- The `flow` of job $1 while token $2 holds its lease, locked for the rest
-- of the durable write's transaction (no row: the lease is lost).
SELECT flow FROM {schema}.jobs WHERE id = $1 AND lease_token = $2 AND state = 'running' FOR UPDATE
