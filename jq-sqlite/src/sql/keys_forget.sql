-- Drops the starts of queue ?1 and key ?2 that left the rate window (at
-- or before ?3).
DELETE FROM key_starts WHERE queue = ?1 AND key = ?2 AND at <= ?3
