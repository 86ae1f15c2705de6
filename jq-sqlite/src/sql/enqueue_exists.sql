-- 1 when job ?1 is already stored.
SELECT 1 FROM jobs WHERE id = ?1
