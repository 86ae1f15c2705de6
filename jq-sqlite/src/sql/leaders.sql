-- Every held role, by name.
SELECT role, holder, expires_at FROM leaders ORDER BY role
