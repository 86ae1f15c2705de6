-- Every claimer that met a control, by queue and worker, whose latest
-- claim was after ?1 (a day ago, jq_core::control::SEEN_TTL).
SELECT queue, worker, seen_at, paused FROM queue_seen WHERE seen_at > ?1 ORDER BY queue, worker
