-- Starts of queue ?1 after instant ?2 (the rate window), once the rows
-- before the window are deleted (control_forget.sql).
SELECT coalesce(sum(n), 0) FROM queue_starts WHERE queue = ?1 AND at > ?2
