-- Serialises the unique-rule enqueues of one key ($1 queue, $2 unique key)
-- until the transaction ends, so each decides on what the one before it
-- committed (the contract's "Unique rules": races). Plain enqueues of the
-- key do not take it: they insert only with no live holder, and
-- jobs_unique arbitrates them against a rule's insert.
SELECT pg_advisory_xact_lock(hashtextextended('jq_unique:{schema}:' || $1 || ':' || $2, 0))
