-- Marks job ?1 as having durable rows (flow bit 8), once.
UPDATE jobs SET flow = flow | 8 WHERE id = ?1 AND flow & 8 = 0
