-- Job counts by queue and state.
SELECT queue, state, count(*) FROM jobs GROUP BY queue, state
