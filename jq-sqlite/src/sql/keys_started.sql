-- Starts of queue ?1 and key ?2 after instant ?3 (the rate window), once
-- the rows before the window are deleted (keys_forget.sql), and the oldest
-- of them: when a full window has room again.
SELECT coalesce(sum(n), 0), min(at) FROM key_starts WHERE queue = ?1 AND key = ?2 AND at > ?3
