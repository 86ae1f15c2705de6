-- Every held role, by name.
SELECT role, holder, expires_at FROM {schema}.leaders ORDER BY role
