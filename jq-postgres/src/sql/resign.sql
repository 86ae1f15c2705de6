-- Frees role $1 when token $2 holds it; nothing otherwise.
-- $1 role text, $2 token uuid.
DELETE FROM {schema}.leaders WHERE role = $1 AND token = $2
