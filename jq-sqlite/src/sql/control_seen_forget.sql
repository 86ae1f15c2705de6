-- Forgets the claimers of queue ?1 whose latest claim was at or before ?2
-- (a day ago, jq_core::control::SEEN_TTL), but not ?3, the claimer just
-- recorded: pools long gone, one per worker name ever used, must not pile
-- up. Walks the queue's rows of the primary key.
DELETE FROM queue_seen WHERE queue = ?1 AND seen_at <= ?2 AND worker <> ?3
