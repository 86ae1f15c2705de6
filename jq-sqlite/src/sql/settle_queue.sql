-- The queue of job ?1 (just acked), for the counts of finished jobs
-- (counts.rs): one probe of the id index, on pages the ack just touched.
-- `flow` says whether the job has children to release.
SELECT queue, flow FROM jobs WHERE id = ?1
