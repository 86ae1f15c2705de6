-- Whether queue ?1 holds a job claimable at ?2: a plain Pending one, a
-- plain due Scheduled one, or a keyed one waiting to run and due. Read only
-- after a short claim, for a controlled queue whose own limits are full
-- (claim.rs): such a claim was held back, not drained.
SELECT EXISTS (SELECT 1 FROM jobs INDEXED BY jobs_plain_pending
               WHERE queue = ?1 AND state = 'pending' AND key IS NULL)
    OR EXISTS (SELECT 1 FROM jobs INDEXED BY jobs_plain_scheduled
               WHERE queue = ?1 AND state = 'scheduled' AND key IS NULL AND run_at <= ?2)
    OR EXISTS (SELECT 1 FROM jobs INDEXED BY jobs_keyed_waiting
               WHERE keyed_wait IS NOT NULL AND queue = ?1
                 AND (state = 'pending' OR (state = 'scheduled' AND run_at <= ?2)))
