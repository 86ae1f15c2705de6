-- A checkpoint's one-statement path: appends the entry ($3..$9) at index
-- $3 of job $1's journal while token $2 holds the job's lease, if $3 is
-- the journal's end and the journal stays within $10 entries and $11
-- bytes; marks the job (flow bit 4) in the same statement. One row, the
-- count appended: 0 leaves the lease, a resend, a mismatch and a limit to
-- the checked path in durable.rs, which names the reason. The job's row
-- lock serialises this with every other write to the job's journal.
WITH job AS (
    SELECT id, flow FROM {schema}.jobs WHERE id = $1 AND lease_token = $2 AND state = 'running' FOR UPDATE
), size AS (
    SELECT count(*) AS entries, coalesce(sum(bytes), 0) AS bytes FROM {schema}.journal WHERE job_id = $1
), appended AS (
    INSERT INTO {schema}.journal (job_id, idx, name, kind, value, until, at, bytes)
    SELECT $1, $3, $4, $5, $6, $7, $8, $9 FROM job, size
    WHERE size.entries = $3 AND size.entries + 1 <= $10 AND size.bytes + $9 <= $11
    ON CONFLICT DO NOTHING
    RETURNING job_id
), marked AS (
    UPDATE {schema}.jobs SET flow = flow | 4
    WHERE id IN (SELECT job_id FROM appended) AND flow & 4 = 0
)
SELECT count(*)::int4 FROM appended
