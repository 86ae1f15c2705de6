-- Stores signal $3 (id $2) with payload $4 sent at $5 to job $1.
INSERT INTO {schema}.signals (job_id, id, name, payload, sent_at) VALUES ($1, $2, $3, $4, $5)
