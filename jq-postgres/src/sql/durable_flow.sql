-- Job $1's flow bits: bit 4 says it has durable rows (a journal entry, a
-- wait or a signal), so a journal read of a job without them is this one
-- statement.
SELECT flow FROM {schema}.jobs WHERE id = $1
