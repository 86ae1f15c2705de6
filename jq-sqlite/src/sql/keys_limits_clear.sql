-- Removes key ?2's override in queue ?1 (never the default, key '').
DELETE FROM key_limits WHERE queue = ?1 AND key = ?2 AND key <> ''
