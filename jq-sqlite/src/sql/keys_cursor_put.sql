-- Moves the rotation's cursor of queue ?1 at priority ?2 to key ?3.
INSERT INTO key_cursors (queue, priority, key) VALUES (?1, ?2, ?3)
ON CONFLICT (queue, priority) DO UPDATE SET key = excluded.key
