-- Stores signal ?2 with payload ?3 sent at ?4 to job ?1.
INSERT INTO signals (job_id, name, payload, sent_at) VALUES (?1, ?2, ?3, ?4)
