-- {schema}.enqueue(kind, payload, ...): enqueue from SQL. Called by
-- producers other than jq's Rust client: a trigger, a psql session, a
-- program in another language (examples/examples/sql_trigger.rs,
-- examples/python/producer.py; tests/sql_enqueue.rs checks it). No
-- statement of jq calls it.
--
-- It stores one job exactly as the Rust enqueue does (Storage::enqueue,
-- sql/enqueue_keyed.sql): the same checks, defaults, unique keys and
-- wake-up, in the caller's transaction, so the job is stored or not with
-- the rest of the caller's writes. It returns the job's id: the id it
-- stored; the id given, when a job with that id is already stored (a
-- producer resending after a lost answer); or, with a unique key, the live
-- job (Scheduled, Pending, Running) of the queue that holds that key.
--
--   SELECT jq.enqueue('send_email', '{"to": "a@example.com"}');
--   SELECT jq.enqueue('report', '{}', queue => 'reports', run_at => now() + interval '1 hour',
--                     unique_key => 'daily-report');
--   SELECT jq.enqueue('sync', '{}', queue => 'tenants', key => 'tenant-42');
--
-- Bad input raises invalid_parameter_value (22023) naming the argument, and
-- stores nothing. The id is a UUIDv7 from the server's clock, like the ids
-- the Rust client makes, so claim and list order agree. The job is
-- claimable when the caller's transaction commits: the wake-up (NOTIFY) is
-- delivered at the commit, and claimers that do not listen find it by their
-- next whole walk (hints.rs: at most REWALK_MIN later).
--
-- The signature is an API: callers pass the arguments by position or by
-- name, so a new one goes last with a default. An old signature is dropped
-- rather than overloaded (with every argument after payload defaulted, two
-- signatures would make `enqueue(kind, payload)` ambiguous): a new
-- signature in src/schema.rs's FUNCTIONS, and the installer drops the one
-- the schema's previous generation recorded.
CREATE OR REPLACE FUNCTION {schema}.enqueue(
    kind         text,
    payload      json,
    queue        text        DEFAULT 'default',
    priority     text        DEFAULT 'normal',
    run_at       timestamptz DEFAULT NULL,
    max_attempts integer     DEFAULT 25,
    unique_key   text        DEFAULT NULL,
    id           uuid        DEFAULT NULL,
    key          text        DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql
VOLATILE
AS $fn$
-- The arguments are named like the columns (for named notation); inside
-- statements a bare name is the column, `enqueue.name` the argument.
#variable_conflict use_column
DECLARE
    -- Limits of jq_core: MAX_NAME_BYTES and DEFAULT_MAX_PAYLOAD_BYTES.
    max_name constant integer := 128;
    max_payload constant integer := 1048576;
    -- jq_core's MAX_KEY_BYTES.
    max_key constant integer := 255;
    now_ts constant timestamptz := clock_timestamp();
    prio smallint;
    due timestamptz := coalesce(run_at, now_ts);
    st text;
    found_id uuid;
BEGIN
    IF kind IS NULL OR kind = '' OR octet_length(kind) > max_name OR kind ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'jq.enqueue: kind %: use 1 to 128 bytes with no control character', quote_nullable(kind)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF payload IS NULL THEN
        RAISE EXCEPTION 'jq.enqueue: payload is NULL: pass a JSON value (''null''::json for none)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF octet_length(payload::text) > max_payload THEN
        RAISE EXCEPTION 'jq.enqueue: payload of % bytes is over the limit of % bytes',
            octet_length(payload::text), max_payload
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    BEGIN
        -- jsonb refuses what workers could not read back as jsonb: \u0000.
        PERFORM payload::jsonb;
    EXCEPTION WHEN untranslatable_character OR invalid_text_representation THEN
        RAISE EXCEPTION 'jq.enqueue: payload holds \u0000 (a NUL character in a string), which jq cannot store: remove it or encode the bytes (e.g. base64)'
            USING ERRCODE = 'invalid_parameter_value';
    END;
    IF queue IS NULL OR queue !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN
        RAISE EXCEPTION 'jq.enqueue: queue %: use 1 to 128 bytes of A-Z a-z 0-9 _ - . :', quote_nullable(queue)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    prio := CASE lower(priority) WHEN 'low' THEN 0 WHEN 'normal' THEN 1 WHEN 'high' THEN 2 WHEN 'critical' THEN 3 END;
    IF prio IS NULL THEN
        RAISE EXCEPTION 'jq.enqueue: priority %: use low, normal, high or critical', quote_nullable(priority)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_attempts IS NULL OR max_attempts < 1 THEN
        RAISE EXCEPTION 'jq.enqueue: max_attempts %: a job needs at least 1 attempt', quote_nullable(max_attempts)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF unique_key IS NOT NULL
       AND (unique_key = '' OR octet_length(unique_key) > max_name OR unique_key ~ '[[:cntrl:]]') THEN
        RAISE EXCEPTION 'jq.enqueue: unique_key %: use 1 to 128 bytes with no control character',
            quote_nullable(unique_key)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    IF key IS NOT NULL AND (key = '' OR octet_length(key) > max_key) THEN
        RAISE EXCEPTION 'jq.enqueue: key %: use 1 to 255 bytes', quote_nullable(key)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- A stored id is a resend: nothing more is stored.
    IF id IS NOT NULL AND EXISTS (SELECT 1 FROM {schema}.jobs AS j WHERE j.id = enqueue.id) THEN
        RETURN id;
    END IF;
    -- The live job holding the key, whichever slot an operator's retry gave it.
    IF unique_key IS NOT NULL THEN
        SELECT j.id INTO found_id
        FROM {schema}.jobs AS j
        WHERE j.queue = enqueue.queue AND j.unique_key = enqueue.unique_key
          AND j.state IN ('scheduled', 'pending', 'running')
        ORDER BY j.id
        LIMIT 1;
        IF found_id IS NOT NULL THEN
            RETURN found_id;
        END IF;
    END IF;

    IF id IS NULL THEN
        -- UUIDv7: 48 bits of Unix milliseconds over a random v4, version 7.
        id := encode(
            set_bit(set_bit(
                overlay(uuid_send(gen_random_uuid())
                        PLACING substring(int8send(floor(extract(epoch FROM now_ts) * 1000)::bigint) FROM 3)
                        FROM 1 FOR 6),
                52, 1), 53, 1),
            'hex')::uuid;
    END IF;
    st := CASE WHEN due > now_ts THEN 'scheduled' ELSE 'pending' END;

    -- jobs_unique arbitrates a concurrent enqueuer of the same key, as in
    -- enqueue_keyed.sql: the no-op DO UPDATE locks and returns its row.
    INSERT INTO {schema}.jobs AS j
        (id, queue, kind, payload, priority, state, max_attempts, run_at, created_at, unique_key, key)
    VALUES (enqueue.id, enqueue.queue, enqueue.kind, enqueue.payload::text, prio, st, enqueue.max_attempts, due, now_ts,
            enqueue.unique_key, enqueue.key)
    ON CONFLICT (queue, unique_key, key_slot)
        WHERE unique_key IS NOT NULL AND state IN ('scheduled', 'pending', 'running')
    DO UPDATE SET unique_key = EXCLUDED.unique_key
    RETURNING j.id INTO found_id;

    IF found_id = enqueue.id AND st = 'pending' THEN
        PERFORM pg_notify('jq_wake_' || btrim('{schema}', '"'), '');
    END IF;
    RETURN found_id;
END
$fn$;

COMMENT ON FUNCTION {schema}.enqueue(text, json, text, text, timestamptz, integer, text, uuid, text) IS
    'Stores one jq job as the Rust enqueue does, in the caller''s transaction; returns its id (see jq-postgres/src/functions/enqueue.sql).';
