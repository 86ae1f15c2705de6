-- Marks job $1 as having durable rows (flow bit 4), once.
UPDATE {schema}.jobs SET flow = flow | 4 WHERE id = $1 AND flow & 4 = 0
