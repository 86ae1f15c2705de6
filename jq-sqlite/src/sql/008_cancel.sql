-- Schema version 8: stopping running jobs (docs/CONTRACT.md, "Cancelling
-- a running job"). A cancel request is stored on the job
-- (cancel_requested_at, cancel_reason) and reported by every heartbeat of
-- its lease; progress holds the JSON its handler last reported; timeout_ms
-- the job's own limit per attempt. All NULL for jobs stored before this
-- version: no request, no progress, the kind's or the pool's limit.
ALTER TABLE jobs ADD COLUMN timeout_ms INTEGER;
ALTER TABLE jobs ADD COLUMN cancel_requested_at INTEGER;
ALTER TABLE jobs ADD COLUMN cancel_reason TEXT;
ALTER TABLE jobs ADD COLUMN progress TEXT;
