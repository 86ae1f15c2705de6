-- The Running jobs a claim with token $1 took: the earlier attempt of a
-- resent claim whose answer was lost. Only held leases are in
-- jobs_lease_expiry, so this walks the jobs running right
-- now, never the finished ones; it runs for resends only.
--
-- $1 token uuid.
SELECT {columns}
FROM {schema}.jobs AS j
WHERE j.lease_expires_at IS NOT NULL AND j.lease_token = $1 AND j.state = 'running'
