-- True when job $1 is stored already (a resend): a unique rule's enqueue
-- answers its id and changes nothing, as every enqueue does.
SELECT EXISTS (SELECT 1 FROM {schema}.jobs WHERE id = $1) AS found
