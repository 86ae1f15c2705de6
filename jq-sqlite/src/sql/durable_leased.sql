-- The `flow` of job ?1 while token ?2 holds its lease (no row: the lease
-- is lost): the fence of every durable write.
SELECT flow FROM jobs WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
