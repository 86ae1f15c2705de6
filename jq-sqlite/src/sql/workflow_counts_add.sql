-- Adds ?3 (negative: removes) to the count of workflow ?1's steps in state
-- ?2 (workflow_counts). One per workflow and state per
-- writer call, in the call's transaction (counts.rs).
INSERT INTO workflow_counts (workflow, state, n) VALUES (?1, ?2, ?3)
ON CONFLICT (workflow, state) DO UPDATE SET n = n + excluded.n
