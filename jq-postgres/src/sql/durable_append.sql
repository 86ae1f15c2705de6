-- Appends an entry to job $1's journal at index $2.
INSERT INTO {schema}.journal (job_id, idx, name, kind, value, until, at, bytes)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
