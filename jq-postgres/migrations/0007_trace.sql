-- Migration 7: the W3C trace context of the span that enqueued a job
-- (`traceparent`, then a space and `tracestate` when there is one), so the
-- span of each run links to it. NULL for jobs enqueued outside a trace and
-- for every job stored before this migration: adding a nullable column
-- without a default rewrites no row.
--
-- `{schema}` is replaced by the configured (quoted) schema name.
ALTER TABLE {schema}.jobs ADD COLUMN trace text;
