-- The rotation's cursor of queue ?1 at priority ?2: the key it served
-- last (no row: before every key).
SELECT key FROM key_cursors WHERE queue = ?1 AND priority = ?2
