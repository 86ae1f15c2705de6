-- Drops the starts of queue ?1 that left the rate window (at or before ?2).
DELETE FROM queue_starts WHERE queue = ?1 AND at <= ?2
