-- Takes or renews role ?1 for token ?2 (holder name ?3) until ?5, when it
-- is free, held with ?2 already, or expired at ?4 (now). One statement, so
-- of concurrent contenders exactly one inserts or updates; changes() is 1
-- when the role is now ?2's, 0 when another token holds it.
INSERT INTO leaders (role, token, holder, expires_at) VALUES (?1, ?2, ?3, ?5)
ON CONFLICT (role) DO UPDATE SET token = excluded.token, holder = excluded.holder, expires_at = excluded.expires_at
WHERE leaders.token = excluded.token OR leaders.expires_at <= ?4
