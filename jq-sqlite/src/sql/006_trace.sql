-- Schema version 6: the W3C trace context of the span that enqueued a job
-- (`traceparent`, then a space and `tracestate` when there is one), so the
-- span of each run links to it. NULL for jobs enqueued outside a trace and
-- for every job stored before this version.
ALTER TABLE jobs ADD COLUMN trace TEXT;
