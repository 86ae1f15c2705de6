-- Extend the leases still held by the given tokens.
--
-- $1 ids uuid[], $2 tokens uuid[], $3 new expiry timestamptz.
-- Returns the ids extended, and whether each holds a cancel request; the
-- caller reports the others as lost. An expired but not yet recovered
-- lease is still extended (recovery ends a lease).
UPDATE {schema}.jobs AS j
SET lease_expires_at = $3
FROM unnest($1::uuid[], $2::uuid[]) AS t(id, token)
WHERE j.id = t.id AND j.state = 'running' AND j.lease_token = t.token
RETURNING j.id, j.lease_token, j.cancel_requested_at IS NOT NULL
