-- Adds ?3 (negative: removes) to the count of finished jobs of queue ?1
-- in state ?2 (job_counts). One per queue and state per
-- writer call, in the call's transaction (counts.rs).
INSERT INTO job_counts (queue, state, n) VALUES (?1, ?2, ?3)
ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n
