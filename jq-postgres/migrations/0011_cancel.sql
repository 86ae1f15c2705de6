-- Migration 11: stopping running jobs (docs/CONTRACT.md, "Cancelling a
-- running job"). A cancel request is stored on the job
-- (cancel_requested_at, cancel_reason) and reported by every heartbeat of
-- its lease; progress holds the JSON text its handler last reported;
-- timeout_ms the job's own limit per attempt. Nullable without defaults:
-- adding them rewrites no row, and jobs stored before have no request, no
-- progress, and the kind's or the pool's limit.
--
-- `{schema}` is replaced by the configured (quoted) schema name.
ALTER TABLE {schema}.jobs
    ADD COLUMN timeout_ms bigint,
    ADD COLUMN cancel_requested_at timestamptz,
    ADD COLUMN cancel_reason text,
    ADD COLUMN progress text;
