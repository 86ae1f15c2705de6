-- Worker ?2 claimed from controlled queue ?1 at ?3, paused then or not (?4).
INSERT INTO queue_seen (queue, worker, seen_at, paused) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (queue, worker) DO UPDATE SET seen_at = excluded.seen_at, paused = excluded.paused
