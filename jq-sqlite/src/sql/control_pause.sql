-- Pauses queue ?1 at ?2 (keeping an earlier pause's instant) or, with ?2
-- NULL, resumes it.
INSERT INTO queue_controls (queue, paused_at) VALUES (?1, ?2)
ON CONFLICT (queue) DO UPDATE SET paused_at = CASE WHEN ?2 IS NULL THEN NULL ELSE coalesce(paused_at, ?2) END
