-- Stores the wait of job ?1 (index ?2, signal ?3, timeout ?4), replacing one.
INSERT OR REPLACE INTO waits (job_id, idx, name, until) VALUES (?1, ?2, ?3, ?4)
