-- Takes or renews role $1 for token $2 (holder name $3) until $5, when the
-- role is free, held with $2 already, or expired at $4 (now).
--
-- $1 role text, $2 token uuid, $3 holder text, $4 now timestamptz,
-- $5 expires_at timestamptz.
--
-- One statement: of concurrent contenders for a free role one inserts, the
-- others wait on its row and then find it held (the WHERE is checked on
-- the row as committed). A row comes back iff the role is now $2's.
INSERT INTO {schema}.leaders AS l (role, token, holder, expires_at)
VALUES ($1, $2, $3, $5)
ON CONFLICT (role) DO UPDATE SET token = EXCLUDED.token, holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE l.token = EXCLUDED.token OR l.expires_at <= $4
RETURNING l.role
