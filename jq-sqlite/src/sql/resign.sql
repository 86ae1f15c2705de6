-- Frees role ?1 when token ?2 holds it; nothing otherwise.
DELETE FROM leaders WHERE role = ?1 AND token = ?2
