-- Starts of queue ?1 after instant ?2 (the rate window), once the rows
-- before the window are deleted (control_forget.sql), and the oldest of
-- them: when a full window has room again.
SELECT coalesce(sum(n), 0), min(at) FROM queue_starts WHERE queue = ?1 AND at > ?2
