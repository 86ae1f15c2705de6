-- Migration 15: keyed jobs (capability keys; docs/CONTRACT.md "Keyed jobs").
--
-- `{schema}` is replaced by the configured (quoted) schema name.
--
-- Every statement here can run again over its own result (the migration
-- tests roll later versions back by deleting their rows of jq_migrations and
-- migrate again), so each creates IF NOT EXISTS or replaces.
--
-- - jobs.key: the job's key, NULL for a plain job. COLLATE "C": the
--   rotation walks keys in byte order, whatever the database's collation.
-- - jobs_claim gets `AND key IS NULL`: the plain claim walk never meets a
--   keyed job (the index predicate, not a row filter). It is built beside
--   the old one and takes its name, as in migration 9, so claims find
--   jobs_claim at every moment of the migration's transaction.
-- - jobs_keyed: the keyed waiting jobs by (queue, priority, key, run_at,
--   id): the rotation's skip scan (the next key after a cursor is one seek,
--   that key's head another) and the plain claim's existence probe. Plain
--   jobs are never in it.
-- - jobs_key_running: a key's Running jobs (its concurrency), bounded by
--   the key's slots.
-- - key_limits: per queue, the default every key follows (key '', which
--   no job key can be: keys are 1 to 255 bytes) and the overrides.
-- - key_cursors: per (queue, priority) the key the rotation served last.
-- - key_starts: the per-(queue, key) log of starts for rate limits.
ALTER TABLE {schema}.jobs ADD COLUMN IF NOT EXISTS key text COLLATE "C";

DROP INDEX IF EXISTS {schema}.jobs_claim_15;

CREATE INDEX jobs_claim_15 ON {schema}.jobs (queue, priority DESC, run_at, id) INCLUDE (state)
    WHERE state IN ('pending', 'scheduled') AND key IS NULL;

DROP INDEX {schema}.jobs_claim;

ALTER INDEX {schema}.jobs_claim_15 RENAME TO jobs_claim;

CREATE INDEX IF NOT EXISTS jobs_keyed ON {schema}.jobs (queue, priority DESC, key, run_at, id) INCLUDE (state)
    WHERE key IS NOT NULL AND state IN ('pending', 'scheduled');

CREATE INDEX IF NOT EXISTS jobs_key_running ON {schema}.jobs (queue, key)
    WHERE key IS NOT NULL AND state = 'running';

CREATE TABLE IF NOT EXISTS {schema}.key_limits (
    queue       text    NOT NULL,
    key         text    COLLATE "C" NOT NULL,
    concurrency integer,
    rate_limit  integer,
    rate_period bigint,
    PRIMARY KEY (queue, key)
);

CREATE TABLE IF NOT EXISTS {schema}.key_cursors (
    queue    text     NOT NULL,
    priority smallint NOT NULL,
    key      text     COLLATE "C" NOT NULL,
    PRIMARY KEY (queue, priority)
);

CREATE TABLE IF NOT EXISTS {schema}.key_starts (
    queue text        NOT NULL,
    key   text        COLLATE "C" NOT NULL,
    at    timestamptz NOT NULL,
    n     integer     NOT NULL
);

CREATE INDEX IF NOT EXISTS key_starts_window ON {schema}.key_starts (queue, key, at);

-- {schema}.enqueue gains a trailing `key` argument (DEFAULT NULL): the
-- job's key (1 to 255 bytes). Callers of migration 10's signature, by
-- position or by name, call this one unchanged. The old signature is
-- dropped rather than overloaded: with every argument after payload
-- defaulted, two signatures would make `enqueue(kind, payload)` ambiguous.
DROP FUNCTION IF EXISTS {schema}.enqueue(text, json, text, text, timestamptz, integer, text, uuid);

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
    'Stores one jq job as the Rust enqueue does, in the caller''s transaction; returns its id (see jq-postgres migrations 10 and 15).';

-- jq_claim_keyed: the jobs a claim over queues with keyed jobs takes, in
-- the order it takes them (the contract's "Keyed jobs", exactly as
-- jq-testkit's memory/keys.rs picks them). Called by claim_controlled.sql,
-- in the transaction that locked the asked queues' controls and, for each
-- queue of `keyed`, a transaction-level advisory lock on the (schema,
-- queue) pair (sql/control_lock.sql): keyed claims of one queue run one at a
-- time, so the Running and start counts read here (each statement a new
-- snapshot, taken after the locks) include every earlier claim, and no
-- key's limits can be exceeded by concurrent claimers.
--
-- queues: the asked queues; allow: each one's allowance (claim_controlled's
-- ctl.allow, in queues' order); lim: the claim's limit; now: the claim's
-- instant; keyed: the queues whose keyed jobs this claim may take (locked).
--
-- Plain jobs: each queue's best, up to its allowance, locked SKIP LOCKED,
-- in claim order (jobs_claim). Each keyed queue's rotation: from the
-- highest priority with an eligible key, the first eligible key after that
-- priority's cursor in byte order, wrapping around (a seek of jobs_keyed
-- per key), and that key's head (run_at, id), locked SKIP LOCKED. A key is
-- eligible when its limits (override, else the queue's default, else none)
-- allow one more counting this claim: Running jobs of (queue, key) from
-- jobs_key_running, starts in (now - period, now] from key_starts. The
-- streams are merged by (priority desc, effective run_at, plain before
-- keyed, queue name), a rotation's effective run_at being the running
-- maximum of what it yielded at that priority in this claim. Taking a keyed
-- job moves the cursor and, when the key's limits have a rate, logs a
-- start. Rows returned are locked; the caller's statement takes them.
CREATE OR REPLACE FUNCTION {schema}.jq_claim_keyed(
    queues text[], allow integer[], lim integer, now timestamptz, keyed text[]
) RETURNS TABLE (id uuid, state text, flow smallint)
LANGUAGE plpgsql
VOLATILE
-- What a claim takes, about: the default estimate (1000 rows) would make
-- claim_controlled.sql's UPDATE join every claimed row by a scan of jobs.
ROWS 10
AS $fn$
#variable_conflict use_variable
DECLARE
    nq constant integer := coalesce(cardinality(queues), 0);
    left_ integer[] := allow;
    -- The plain candidates, in claim order.
    p_id uuid[]; p_state text[]; p_flow smallint[]; p_prio smallint[]; p_run timestamptz[]; p_qi integer[];
    pn integer; pi integer := 1;
    -- What this claim picked (keyed ones with their queue index and key).
    pk_id uuid[] := '{}'; pk_state text[] := '{}'; pk_flow smallint[] := '{}';
    pk_qi integer[] := '{}'; pk_key text[] := '{}';
    -- Per asked queue: is its rotation in play, its cached next job.
    in_play boolean[];
    nx_ok boolean[]; nx_prio smallint[]; nx_key text[]; nx_id uuid[]; nx_run timestamptz[];
    nx_state text[]; nx_flow smallint[];
    -- Per (queue index, priority): the running maximum of yielded run_ats.
    y_qi integer[] := '{}'; y_prio smallint[] := '{}'; y_run timestamptz[] := '{}';
    -- Keys found ineligible in this claim (limits only tighten as it
    -- takes more), per queue index; and (queue, priority, key) found with
    -- no claimable head.
    b_qi integer[] := '{}'; b_key text[] := '{}';
    h_qi integer[] := '{}'; h_prio smallint[] := '{}'; h_key text[] := '{}';
    taken integer := 0;
    qi integer; i integer;
    b_is_plain boolean; b_qi_ integer; b_prio smallint; b_run timestamptz; b_queue text;
    eff timestamptz;
    q text; prio smallint; cur text; k text; wrapped boolean; found_ boolean;
    conc integer; rlim integer; rper bigint; running_ bigint; started bigint;
    h_id uuid; h_run timestamptz; h_state text; h_flow smallint;
BEGIN
    SELECT array_agg(b.id ORDER BY b.priority DESC, b.run_at, b.id),
           array_agg(b.state ORDER BY b.priority DESC, b.run_at, b.id),
           array_agg(b.flow ORDER BY b.priority DESC, b.run_at, b.id),
           array_agg(b.priority ORDER BY b.priority DESC, b.run_at, b.id),
           array_agg(b.run_at ORDER BY b.priority DESC, b.run_at, b.id),
           array_agg(b.n ORDER BY b.priority DESC, b.run_at, b.id)
    INTO p_id, p_state, p_flow, p_prio, p_run, p_qi
    FROM unnest(queues, allow) WITH ORDINALITY AS u(name, allow, n)
    CROSS JOIN LATERAL (
        SELECT jc.id, jc.state, jc.flow, jc.priority, jc.run_at, u.n::integer AS n FROM {schema}.jobs AS jc
        WHERE jc.queue = u.name AND jc.key IS NULL
          AND jc.state IN ('pending', 'scheduled') AND (jc.state = 'pending' OR jc.run_at <= now)
        ORDER BY jc.priority DESC, jc.run_at, jc.id
        LIMIT greatest(0, least(u.allow, lim))
        FOR UPDATE SKIP LOCKED
    ) AS b;
    pn := coalesce(cardinality(p_id), 0);

    in_play := array_fill(false, ARRAY[nq]);
    nx_ok := array_fill(false, ARRAY[nq]);
    nx_prio := array_fill(NULL::smallint, ARRAY[nq]); nx_key := array_fill(NULL::text, ARRAY[nq]);
    nx_id := array_fill(NULL::uuid, ARRAY[nq]); nx_run := array_fill(NULL::timestamptz, ARRAY[nq]);
    nx_state := array_fill(NULL::text, ARRAY[nq]); nx_flow := array_fill(NULL::smallint, ARRAY[nq]);
    FOR qi IN 1 .. nq LOOP
        in_play[qi] := queues[qi] = ANY (keyed);
    END LOOP;

    WHILE taken < lim LOOP
        WHILE pi <= pn AND left_[p_qi[pi]] <= 0 LOOP
            pi := pi + 1;
        END LOOP;
        b_is_plain := NULL;
        IF pi <= pn THEN
            b_is_plain := true; b_qi_ := p_qi[pi]; b_prio := p_prio[pi]; b_run := p_run[pi];
            b_queue := queues[p_qi[pi]];
        END IF;

        FOR qi IN 1 .. nq LOOP
            CONTINUE WHEN NOT in_play[qi] OR left_[qi] <= 0;
            IF NOT nx_ok[qi] THEN
                -- The rotation's next job, from the highest priority down.
                q := queues[qi];
                found_ := false;
                prio := NULL;
                LOOP
                    -- Two statements, not `prio IS NULL OR ...`: each must seek jobs_keyed.
                    IF prio IS NULL THEN
                        SELECT jk.priority INTO prio FROM {schema}.jobs AS jk
                        WHERE jk.queue = q AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
                        ORDER BY jk.priority DESC LIMIT 1;
                    ELSE
                        SELECT jk.priority INTO prio FROM {schema}.jobs AS jk
                        WHERE jk.queue = q AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
                          AND jk.priority < prio
                        ORDER BY jk.priority DESC LIMIT 1;
                    END IF;
                    EXIT WHEN prio IS NULL;
                    SELECT c.key INTO cur FROM {schema}.key_cursors AS c WHERE c.queue = q AND c.priority = prio;
                    k := cur;
                    wrapped := cur IS NULL;
                    LOOP
                        -- The next key after k (one seek), wrapping to the smallest once.
                        IF k IS NULL THEN
                            SELECT jk.key INTO k FROM {schema}.jobs AS jk
                            WHERE jk.queue = q AND jk.priority = prio AND jk.key IS NOT NULL
                              AND jk.state IN ('pending', 'scheduled')
                            ORDER BY jk.priority DESC, jk.key LIMIT 1;
                        ELSE
                            SELECT jk.key INTO k FROM {schema}.jobs AS jk
                            WHERE jk.queue = q AND jk.priority = prio AND jk.key IS NOT NULL
                              AND jk.state IN ('pending', 'scheduled') AND jk.key > k
                            ORDER BY jk.priority DESC, jk.key LIMIT 1;
                        END IF;
                        IF k IS NULL THEN
                            EXIT WHEN wrapped;
                            wrapped := true;
                            CONTINUE;
                        END IF;
                        -- Past the cursor again after wrapping: every key was seen.
                        EXIT WHEN wrapped AND cur IS NOT NULL AND k > cur;
                        CONTINUE WHEN EXISTS (SELECT 1 FROM unnest(b_qi, b_key) AS x(i, kk) WHERE x.i = qi AND x.kk = k)
                            OR EXISTS (SELECT 1 FROM unnest(h_qi, h_prio, h_key) AS x(i, p, kk)
                                       WHERE x.i = qi AND x.p = prio AND x.kk = k);
                        -- The key's limits, and its load counting this claim.
                        conc := NULL; rlim := NULL; rper := NULL;
                        SELECT l.concurrency, l.rate_limit, least(l.rate_period, 3155760000000000)
                        INTO conc, rlim, rper
                        FROM {schema}.key_limits AS l
                        WHERE l.queue = q AND l.key IN (k, '')
                        ORDER BY l.key DESC
                        LIMIT 1;
                        IF conc IS NOT NULL THEN
                            SELECT count(*) INTO running_ FROM {schema}.jobs AS r
                            WHERE r.queue = q AND r.key = k AND r.key IS NOT NULL AND r.state = 'running';
                            running_ := running_ + (SELECT count(*) FROM unnest(pk_qi, pk_key) AS x(i, kk)
                                                    WHERE x.i = qi AND x.kk = k);
                            IF running_ >= conc THEN
                                b_qi := b_qi || qi; b_key := b_key || k;
                                CONTINUE;
                            END IF;
                        END IF;
                        IF rlim IS NOT NULL AND rper IS NOT NULL THEN
                            SELECT coalesce(sum(s.n), 0) INTO started FROM {schema}.key_starts AS s
                            WHERE s.queue = q AND s.key = k AND s.at > now - rper * interval '1 microsecond';
                            IF started >= rlim THEN
                                b_qi := b_qi || qi; b_key := b_key || k;
                                CONTINUE;
                            END IF;
                        END IF;
                        -- Its head at this priority: claimable, not taken yet, not held elsewhere.
                        h_id := NULL;
                        SELECT jk.id, jk.run_at, jk.state, jk.flow INTO h_id, h_run, h_state, h_flow
                        FROM {schema}.jobs AS jk
                        WHERE jk.queue = q AND jk.priority = prio AND jk.key = k AND jk.key IS NOT NULL
                          AND jk.state IN ('pending', 'scheduled') AND (jk.state = 'pending' OR jk.run_at <= now)
                          AND jk.id <> ALL (pk_id)
                        ORDER BY jk.run_at, jk.id
                        LIMIT 1
                        FOR UPDATE SKIP LOCKED;
                        IF h_id IS NULL THEN
                            h_qi := h_qi || qi; h_prio := h_prio || prio; h_key := h_key || k;
                            CONTINUE;
                        END IF;
                        found_ := true;
                        EXIT;
                    END LOOP;
                    EXIT WHEN found_;
                END LOOP;
                IF NOT found_ THEN
                    -- Nothing eligible now; nothing this claim does can change that.
                    in_play[qi] := false;
                    CONTINUE;
                END IF;
                nx_ok[qi] := true; nx_prio[qi] := prio; nx_key[qi] := k; nx_id[qi] := h_id;
                nx_run[qi] := h_run; nx_state[qi] := h_state; nx_flow[qi] := h_flow;
            END IF;
            eff := nx_run[qi];
            SELECT greatest(eff, max(x.r)) INTO eff FROM unnest(y_qi, y_prio, y_run) AS x(i, p, r)
            WHERE x.i = qi AND x.p = nx_prio[qi];
            -- (priority desc, effective run_at, plain before keyed, queue name)
            IF b_is_plain IS NULL
               OR nx_prio[qi] > b_prio
               OR (nx_prio[qi] = b_prio AND (eff < b_run
                   OR (eff = b_run AND NOT b_is_plain AND queues[qi] < b_queue))) THEN
                b_is_plain := false; b_qi_ := qi; b_prio := nx_prio[qi]; b_run := eff; b_queue := queues[qi];
            END IF;
        END LOOP;

        EXIT WHEN b_is_plain IS NULL;
        IF b_is_plain THEN
            pk_id := pk_id || p_id[pi]; pk_state := pk_state || p_state[pi]; pk_flow := pk_flow || p_flow[pi];
            pk_qi := pk_qi || 0; pk_key := pk_key || NULL::text;
            pi := pi + 1;
        ELSE
            qi := b_qi_;
            q := queues[qi];
            k := nx_key[qi];
            pk_id := pk_id || nx_id[qi]; pk_state := pk_state || nx_state[qi]; pk_flow := pk_flow || nx_flow[qi];
            pk_qi := pk_qi || qi; pk_key := pk_key || k;
            INSERT INTO {schema}.key_cursors AS c (queue, priority, key) VALUES (q, nx_prio[qi], k)
            ON CONFLICT (queue, priority) DO UPDATE SET key = excluded.key;
            rlim := NULL; rper := NULL;
            SELECT l.rate_limit, least(l.rate_period, 3155760000000000) INTO rlim, rper
            FROM {schema}.key_limits AS l WHERE l.queue = q AND l.key IN (k, '') ORDER BY l.key DESC LIMIT 1;
            IF rlim IS NOT NULL AND rper IS NOT NULL THEN
                -- The log keeps only the window: older starts go as new ones come.
                DELETE FROM {schema}.key_starts AS s
                WHERE s.queue = q AND s.key = k AND s.at <= now - rper * interval '1 microsecond';
                INSERT INTO {schema}.key_starts (queue, key, at, n) VALUES (q, k, now, 1);
            END IF;
            -- Update the running maximum of (qi, priority).
            found_ := false;
            FOR i IN 1 .. coalesce(cardinality(y_qi), 0) LOOP
                IF y_qi[i] = qi AND y_prio[i] = nx_prio[qi] THEN
                    y_run[i] := b_run; found_ := true;
                END IF;
            END LOOP;
            IF NOT found_ THEN
                y_qi := y_qi || qi; y_prio := y_prio || nx_prio[qi]; y_run := y_run || b_run;
            END IF;
            nx_ok[qi] := false;
        END IF;
        left_[b_qi_] := left_[b_qi_] - 1;
        taken := taken + 1;
    END LOOP;

    RETURN QUERY SELECT x.id, x.state, x.flow FROM unnest(pk_id, pk_state, pk_flow) AS x(id, state, flow);
END
$fn$;
