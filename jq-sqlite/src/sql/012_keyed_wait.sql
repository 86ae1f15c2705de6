-- Schema version 12: keyed waiting jobs indexed by a marker that only
-- keyed statements write (issue 32; BENCHMARKS.md, "Keyed jobs on SQLite").
--
-- `keyed_wait` is the job's key while a keyed job waits to run (Pending
-- or Scheduled), NULL otherwise and always NULL for a plain job: the key
-- itself, so that a statement sets it to `key` (NULL for a plain job)
-- with no CASE, and the enqueue binds the key once more. Every
-- statement that moves a keyed job into Pending or Scheduled sets it
-- (enqueue, a workflow step's insert and wake, nack, release, recover, an
-- operator's retry); the keyed claim's take and an operator's cancel clear
-- it; promote (Scheduled to Pending) keeps it. Every reader repeats its
-- state terms, so a marker left on a job in another state is passed over,
-- never taken.
--
-- Why not `state` in the index's WHERE, as schema 11's jobs_keyed had it:
-- SQLite opens a write cursor on every index whose columns or WHERE name
-- a column an UPDATE sets, and the claim's and the ack's UPDATEs set
-- `state`, so jobs_keyed cost every plain job's claim and ack a cursor
-- opened and closed though no plain job is ever in it. No plain statement
-- of the hot paths sets `keyed_wait` nor a column of this index.
ALTER TABLE jobs ADD COLUMN keyed_wait TEXT;
-- Keyed jobs in flight keep waiting: jobs_keyed finds them.
UPDATE jobs SET keyed_wait = key WHERE key IS NOT NULL AND (state = 'pending' OR state = 'scheduled');
-- The keyed jobs waiting to run, by queue, priority and key, each key's
-- in claim order: the rotation is a skip scan of it (the next key after
-- the cursor is one seek, and its head is the first row found), and a
-- claim tells whether a queue has any keyed job at all with one probe.
CREATE INDEX jobs_keyed_waiting ON jobs (queue, priority DESC, key, run_at, id) WHERE keyed_wait IS NOT NULL;
DROP INDEX jobs_keyed;
