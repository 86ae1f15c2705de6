-- One job by id. $1 id uuid.
SELECT {columns} FROM {schema}.jobs AS j WHERE j.id = $1
