-- After a change of queue ?1's key limits: drops the start logs of its
-- keys whose limits (their override, else the default) have no rate any
-- more. A log is kept only while its key's limits have a rate.
DELETE FROM key_starts
WHERE queue = ?1
  AND coalesce(
        (SELECT l.rate_limit IS NOT NULL FROM key_limits AS l WHERE l.queue = key_starts.queue AND l.key = key_starts.key),
        (SELECT d.rate_limit IS NOT NULL FROM key_limits AS d WHERE d.queue = key_starts.queue AND d.key = ''),
        0) = 0
