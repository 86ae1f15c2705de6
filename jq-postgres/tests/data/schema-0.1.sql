-- object: COMMENT FUNCTION enqueue(kind text, payload json, queue text, priority text, run_at timestamp with time zone, max_attempts integer, unique_key text, id uuid, key text)
COMMENT ON FUNCTION {schema}.enqueue(kind text, payload json, queue text, priority text, run_at timestamp with time zone, max_attempts integer, unique_key text, id uuid, key text) IS 'Stores one jq job as the Rust enqueue does, in the caller''s transaction; returns its id (see jq-postgres migrations 10 and 15).';

-- object: CONSTRAINT job_counts job_counts_pkey
ALTER TABLE ONLY {schema}.job_counts
    ADD CONSTRAINT job_counts_pkey PRIMARY KEY (queue, state, shard);

-- object: CONSTRAINT job_deps job_deps_pkey
ALTER TABLE ONLY {schema}.job_deps
    ADD CONSTRAINT job_deps_pkey PRIMARY KEY (parent, child);

-- object: CONSTRAINT job_nodes job_nodes_pkey
ALTER TABLE ONLY {schema}.job_nodes
    ADD CONSTRAINT job_nodes_pkey PRIMARY KEY (id);

-- object: CONSTRAINT job_results job_results_pkey
ALTER TABLE ONLY {schema}.job_results
    ADD CONSTRAINT job_results_pkey PRIMARY KEY (id);

-- object: CONSTRAINT jobs jobs_pkey
ALTER TABLE ONLY {schema}.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);

-- object: CONSTRAINT jq_migrations jq_migrations_pkey
ALTER TABLE ONLY {schema}.jq_migrations
    ADD CONSTRAINT jq_migrations_pkey PRIMARY KEY (version);

-- object: CONSTRAINT key_cursors key_cursors_pkey
ALTER TABLE ONLY {schema}.key_cursors
    ADD CONSTRAINT key_cursors_pkey PRIMARY KEY (queue, priority);

-- object: CONSTRAINT key_limits key_limits_pkey
ALTER TABLE ONLY {schema}.key_limits
    ADD CONSTRAINT key_limits_pkey PRIMARY KEY (queue, key);

-- object: CONSTRAINT leaders leaders_pkey
ALTER TABLE ONLY {schema}.leaders
    ADD CONSTRAINT leaders_pkey PRIMARY KEY (role);

-- object: CONSTRAINT queue_controls queue_controls_pkey
ALTER TABLE ONLY {schema}.queue_controls
    ADD CONSTRAINT queue_controls_pkey PRIMARY KEY (queue);

-- object: CONSTRAINT queue_seen queue_seen_pkey
ALTER TABLE ONLY {schema}.queue_seen
    ADD CONSTRAINT queue_seen_pkey PRIMARY KEY (queue, worker);

-- object: CONSTRAINT schedules schedules_pkey
ALTER TABLE ONLY {schema}.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (name);

-- object: CONSTRAINT workflow_counts workflow_counts_pkey
ALTER TABLE ONLY {schema}.workflow_counts
    ADD CONSTRAINT workflow_counts_pkey PRIMARY KEY (workflow, state, shard);

-- object: CONSTRAINT workflows workflows_pkey
ALTER TABLE ONLY {schema}.workflows
    ADD CONSTRAINT workflows_pkey PRIMARY KEY (id);

-- object: FUNCTION enqueue(text, json, text, text, timestamp with time zone, integer, text, uuid, text)
CREATE FUNCTION {schema}.enqueue(kind text, payload json, queue text DEFAULT 'default'::text, priority text DEFAULT 'normal'::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT 25, unique_key text DEFAULT NULL::text, id uuid DEFAULT NULL::uuid, key text DEFAULT NULL::text) RETURNS uuid
    LANGUAGE plpgsql
    AS $_$
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
    IF id IS NOT NULL AND EXISTS (SELECT 1 FROM "{schema}".jobs AS j WHERE j.id = enqueue.id) THEN
        RETURN id;
    END IF;
    -- The live job holding the key, whichever slot an operator's retry gave it.
    IF unique_key IS NOT NULL THEN
        SELECT j.id INTO found_id
        FROM "{schema}".jobs AS j
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
    INSERT INTO "{schema}".jobs AS j
        (id, queue, kind, payload, priority, state, max_attempts, run_at, created_at, unique_key, key)
    VALUES (enqueue.id, enqueue.queue, enqueue.kind, enqueue.payload::text, prio, st, enqueue.max_attempts, due, now_ts,
            enqueue.unique_key, enqueue.key)
    ON CONFLICT (queue, unique_key, key_slot)
        WHERE unique_key IS NOT NULL AND state IN ('scheduled', 'pending', 'running')
    DO UPDATE SET unique_key = EXCLUDED.unique_key
    RETURNING j.id INTO found_id;

    IF found_id = enqueue.id AND st = 'pending' THEN
        PERFORM pg_notify('jq_wake_' || btrim('"{schema}"', '"'), '');
    END IF;
    RETURN found_id;
END
$_$;

-- object: FUNCTION jq_claim_keyed(text[], integer[], integer, timestamp with time zone, text[])
CREATE FUNCTION {schema}.jq_claim_keyed(queues text[], allow integer[], lim integer, now timestamp with time zone, keyed text[]) RETURNS TABLE(id uuid, state text, flow smallint)
    LANGUAGE plpgsql ROWS 10
    SET plan_cache_mode TO 'auto'
    AS $$
#variable_conflict use_variable
DECLARE
    nq constant integer := coalesce(cardinality(queues), 0);
    left_ integer[] := allow;
    -- The plain candidates, in claim order.
    p_id uuid[]; p_state text[]; p_flow smallint[]; p_prio smallint[]; p_run timestamptz[]; p_qi integer[];
    pn integer; pi integer := 1;
    -- Every keyed queue's picks, in its rotation's order, one after the
    -- other: queue qi's are s_from[qi] .. s_to[qi]. s_eff: the effective
    -- run_at (the running maximum of run_ats at that priority).
    s_id uuid[] := '{}'; s_state text[] := '{}'; s_flow smallint[] := '{}'; s_prio smallint[] := '{}';
    s_eff timestamptz[] := '{}'; s_key text[] := '{}'; s_period bigint[] := '{}';
    s_from integer[]; s_to integer[];
    -- What the claim takes.
    pk_id uuid[] := '{}'; pk_state text[] := '{}'; pk_flow smallint[] := '{}';
    -- The cursors to write (last key taken per queue and priority), and
    -- the starts to log (one per keyed job taken whose key has a rate).
    c_q text[] := '{}'; c_p smallint[] := '{}'; c_k text[] := '{}';
    st_q text[] := '{}'; st_k text[] := '{}'; st_per bigint[] := '{}';
    taken integer := 0;
    qi integer; i integer; need integer; got integer;
    prior text[];
    b_is_plain boolean; b_qi_ integer; b_prio smallint; b_run timestamptz; b_queue text;
    q text; prio smallint; eff timestamptz; found_ boolean;
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
        SELECT jc.id, jc.state, jc.flow, jc.priority, jc.run_at, u.n::integer AS n FROM "{schema}".jobs AS jc
        WHERE jc.queue = u.name AND jc.key IS NULL
          AND jc.state IN ('pending', 'scheduled') AND (jc.state = 'pending' OR jc.run_at <= now)
        ORDER BY jc.priority DESC, jc.run_at, jc.id
        LIMIT greatest(0, least(u.allow, lim))
        FOR UPDATE SKIP LOCKED
    ) AS b;
    pn := coalesce(cardinality(p_id), 0);

    -- Each keyed queue's picks, up to what it may take.
    s_from := array_fill(1, ARRAY[nq]);
    s_to := array_fill(0, ARRAY[nq]);
    FOR qi IN 1 .. nq LOOP
        q := queues[qi];
        s_from[qi] := cardinality(s_id) + 1;
        s_to[qi] := cardinality(s_id);
        CONTINUE WHEN NOT (q = ANY (keyed));
        need := least(allow[qi], lim);
        prio := NULL;
        prior := '{}';
        WHILE need > 0 LOOP
            -- The next priority down with keyed waiting jobs (two
            -- statements, not `prio IS NULL OR ...`: each must seek jobs_keyed).
            IF prio IS NULL THEN
                SELECT jk.priority INTO prio FROM "{schema}".jobs AS jk
                WHERE jk.queue = q AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
                ORDER BY jk.priority DESC LIMIT 1;
            ELSE
                SELECT jk.priority INTO prio FROM "{schema}".jobs AS jk
                WHERE jk.queue = q AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
                  AND jk.priority < prio
                ORDER BY jk.priority DESC LIMIT 1;
            END IF;
            EXIT WHEN prio IS NULL;
            -- The priority's picks appended in one statement, not row by
            -- row. eff: the running maximum of their run_ats. The
            -- aggregates read x in the window's order, the picks' (n).
            SELECT s_id || coalesce(array_agg(x.o_id), '{}'),
                   s_state || coalesce(array_agg(x.o_state), '{}'),
                   s_flow || coalesce(array_agg(x.o_flow), '{}'),
                   s_prio || coalesce(array_agg(prio), '{}'),
                   s_eff || coalesce(array_agg(x.eff), '{}'),
                   s_key || coalesce(array_agg(x.o_key), '{}'),
                   s_period || coalesce(array_agg(x.o_period), '{}'),
                   prior || coalesce(array_agg(x.o_key), '{}'),
                   count(*)::integer
            INTO s_id, s_state, s_flow, s_prio, s_eff, s_key, s_period, prior, got
            FROM (SELECT kt.*, max(kt.o_run_at) OVER (ORDER BY kt.n) AS eff
                  FROM "{schema}".jq_key_turns(q, prio, need, now, prior) WITH ORDINALITY
                      AS kt(o_key, o_id, o_run_at, o_state, o_flow, o_period, n)) AS x;
            need := need - got;
        END LOOP;
        s_to[qi] := cardinality(s_id);
    END LOOP;

    IF nq = 1 AND pn = 0 THEN
        -- One queue, no plain job: the merge would take every pick in
        -- order (there are at most least(allowance, limit)). The cursor of
        -- each priority is its last pick's key; a start is logged per pick
        -- whose key has a rate.
        pk_id := s_id; pk_state := s_state; pk_flow := s_flow;
        SELECT coalesce(array_agg(queues[1] ORDER BY x.p), '{}'), coalesce(array_agg(x.p ORDER BY x.p), '{}'),
               coalesce(array_agg(x.k ORDER BY x.p), '{}')
        INTO c_q, c_p, c_k
        FROM (SELECT DISTINCT ON (u.p) u.p, u.k FROM unnest(s_prio, s_key) WITH ORDINALITY AS u(p, k, n)
              ORDER BY u.p, u.n DESC) AS x;
        SELECT coalesce(array_agg(queues[1]), '{}'), coalesce(array_agg(u.k), '{}'), coalesce(array_agg(u.per), '{}')
        INTO st_q, st_k, st_per
        FROM unnest(s_key, s_period) AS u(k, per)
        WHERE u.per IS NOT NULL;
        taken := lim;
    END IF;

    -- The merge: (priority desc, effective run_at, plain before keyed, queue name).
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
            CONTINUE WHEN s_from[qi] > s_to[qi] OR left_[qi] <= 0;
            i := s_from[qi];
            IF b_is_plain IS NULL
               OR s_prio[i] > b_prio
               OR (s_prio[i] = b_prio AND (s_eff[i] < b_run
                   OR (s_eff[i] = b_run AND NOT b_is_plain AND queues[qi] < b_queue))) THEN
                b_is_plain := false; b_qi_ := qi; b_prio := s_prio[i]; b_run := s_eff[i]; b_queue := queues[qi];
            END IF;
        END LOOP;
        EXIT WHEN b_is_plain IS NULL;
        IF b_is_plain THEN
            pk_id := pk_id || p_id[pi]; pk_state := pk_state || p_state[pi]; pk_flow := pk_flow || p_flow[pi];
            pi := pi + 1;
        ELSE
            i := s_from[b_qi_];
            s_from[b_qi_] := i + 1;
            pk_id := pk_id || s_id[i]; pk_state := pk_state || s_state[i]; pk_flow := pk_flow || s_flow[i];
            found_ := false;
            FOR j IN 1 .. cardinality(c_q) LOOP
                IF c_q[j] = b_queue AND c_p[j] = s_prio[i] THEN
                    c_k[j] := s_key[i]; found_ := true;
                END IF;
            END LOOP;
            IF NOT found_ THEN
                c_q := c_q || b_queue; c_p := c_p || s_prio[i]; c_k := c_k || s_key[i];
            END IF;
            IF s_period[i] IS NOT NULL THEN
                st_q := st_q || b_queue; st_k := st_k || s_key[i]; st_per := st_per || s_period[i];
            END IF;
        END IF;
        left_[b_qi_] := left_[b_qi_] - 1;
        taken := taken + 1;
    END LOOP;

    IF cardinality(c_q) > 0 THEN
        INSERT INTO "{schema}".key_cursors AS c (queue, priority, key)
        SELECT x.q, x.p, x.k FROM unnest(c_q, c_p, c_k) AS x(q, p, k)
        ON CONFLICT (queue, priority) DO UPDATE SET key = excluded.key;
    END IF;
    IF cardinality(st_q) > 0 THEN
        -- The log keeps only the window: older starts go as new ones come.
        DELETE FROM "{schema}".key_starts AS s
        USING (SELECT DISTINCT x.q, x.k, x.per FROM unnest(st_q, st_k, st_per) AS x(q, k, per)) AS x
        WHERE s.queue = x.q AND s.key = x.k AND s.at <= now - x.per * interval '1 microsecond';
        INSERT INTO "{schema}".key_starts (queue, key, at, n)
        SELECT x.q, x.k, now, count(*) FROM unnest(st_q, st_k) AS x(q, k) GROUP BY x.q, x.k;
    END IF;

    RETURN QUERY SELECT x.id, x.state, x.flow FROM unnest(pk_id, pk_state, pk_flow) AS x(id, state, flow);
END
$$;

-- object: FUNCTION jq_claim_keyed_take(text[], integer, timestamp with time zone, text, timestamp with time zone, uuid)
CREATE FUNCTION {schema}.jq_claim_keyed_take(queues text[], lim integer, now timestamp with time zone, worker text, expires timestamp with time zone, token uuid) RETURNS SETOF {schema}.jobs
    LANGUAGE plpgsql ROWS 10
    SET enable_seqscan TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
#variable_conflict use_variable
DECLARE
    keyed text[];
    k text;
    ids uuid[]; states text[]; flows smallint[];
    -- The one statement's queue and priority, and the rows it took.
    q text; prio smallint; got bigint;
BEGIN
    IF cardinality(queues) = 1 THEN
        -- One queue (the caller found it keyed) is locked unprobed: the
        -- priority's probe below, or jq_claim_keyed's, finds its keyed
        -- jobs, and the lock costs nothing if it has none left.
        keyed := queues;
    ELSE
        -- In control_lock.sql's order (two claims never deadlock).
        SELECT coalesce(array_agg(q.name ORDER BY q.name), '{}') INTO keyed
        FROM (SELECT DISTINCT u.name FROM unnest(queues) AS u(name)) AS q
        -- LIMIT 1 in a LATERAL keeps it one probe of jobs_keyed per queue.
        CROSS JOIN LATERAL (
            SELECT 1 FROM "{schema}".jobs AS jk
            WHERE jk.queue = q.name AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
            LIMIT 1
        ) AS probe;
    END IF;
    FOREACH k IN ARRAY keyed LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended('jq-keys:"{schema}":' || k, 0));
    END LOOP;

    IF cardinality(queues) = 1 AND lim > 0 THEN
        q := keyed[1];
        -- The queue's highest keyed priority (jq_claim_keyed's first), when
        -- the one statement can claim it: no override, no rate in the
        -- default limits, no due plain job to merge. First the highest
        -- priority with a cursor, if no keyed job waits above it and one
        -- waits there after its cursor's key; else the first entry of
        -- jobs_keyed. *That entry lies past the entries of every job a
        -- drain took, until vacuum removes them (about 20 us per thousand
        -- in the bench's keyed drain, 170 us a claim), where the rows
        -- after the cursor are the waiting ones.* COALESCE runs its
        -- second subquery only when the first finds nothing.
        SELECT coalesce(
                   (SELECT c.priority
                    FROM (SELECT kc.priority, kc.key FROM "{schema}".key_cursors AS kc
                          WHERE kc.queue = q ORDER BY kc.priority DESC LIMIT 1) AS c
                    WHERE (SELECT 1 FROM "{schema}".jobs AS jk
                           WHERE jk.queue = q AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
                             AND jk.priority > c.priority
                           LIMIT 1) IS NULL
                      AND (SELECT 1 FROM "{schema}".jobs AS jk
                           WHERE jk.queue = q AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
                             AND jk.priority = c.priority AND jk.key > c.key
                           LIMIT 1) IS NOT NULL),
                   (SELECT jk.priority FROM "{schema}".jobs AS jk
                    WHERE jk.queue = q AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
                    ORDER BY jk.priority DESC LIMIT 1))
        INTO prio
        WHERE NOT EXISTS (SELECT 1 FROM "{schema}".key_limits AS l
                          WHERE l.queue = q AND (l.key > '' OR l.rate_limit IS NOT NULL))
          AND NOT EXISTS (SELECT 1 FROM "{schema}".jobs AS jc
                          WHERE jc.queue = q AND jc.key IS NULL AND jc.state IN ('pending', 'scheduled')
                            AND (jc.state = 'pending' OR jc.run_at <= now));
        IF prio IS NOT NULL THEN
            RETURN QUERY
            WITH lims AS (
                -- The default concurrency; NULL: unlimited.
                SELECT (SELECT l.concurrency FROM "{schema}".key_limits AS l WHERE l.queue = q AND l.key = '') AS c
            ),
            cur AS (
                SELECT (SELECT kc.key FROM "{schema}".key_cursors AS kc
                        WHERE kc.queue = q AND kc.priority = prio) AS key
            ),
            -- The rows of jobs_keyed from the cursor's key on, then
            -- (wrapped) from the smallest up to it, each range at most a
            -- few rows per head wanted: read as far as the heads below
            -- are locked (neither is materialized; the second is read
            -- only when the first ends short of `lim` heads, and only if
            -- the first reached its end, not its limit).
            range1 AS NOT MATERIALIZED (
                SELECT jk.key, jk.run_at, jk.id, jk.ctid FROM "{schema}".jobs AS jk
                WHERE jk.queue = q AND jk.priority = prio AND jk.key IS NOT NULL
                  AND jk.state IN ('pending', 'scheduled') AND (jk.state = 'pending' OR jk.run_at <= now)
                  AND jk.key > coalesce((SELECT cur.key FROM cur), '')
                ORDER BY jk.priority DESC, jk.key, jk.run_at, jk.id
                LIMIT 4 * lim
            ),
            range2 AS NOT MATERIALIZED (
                SELECT jk.key, jk.run_at, jk.id, jk.ctid FROM "{schema}".jobs AS jk
                WHERE jk.queue = q AND jk.priority = prio AND jk.key IS NOT NULL
                  AND jk.state IN ('pending', 'scheduled') AND (jk.state = 'pending' OR jk.run_at <= now)
                  AND jk.key <= (SELECT cur.key FROM cur)
                  -- Only past the end of the first: keys the first range
                  -- did not reach come before these.
                  AND (SELECT count(*) FROM range1) < 4 * lim
                ORDER BY jk.priority DESC, jk.key, jk.run_at, jk.id
                LIMIT 4 * lim
            ),
            -- Each key's first row is its head (rows go by key, then
            -- run_at and id: the index's order, so no sort).
            heads AS NOT MATERIALIZED (
                (SELECT DISTINCT ON (r.key) 1 AS part, r.key, r.ctid FROM range1 AS r ORDER BY r.key, r.run_at, r.id)
                UNION ALL
                (SELECT DISTINCT ON (r.key) 2 AS part, r.key, r.ctid FROM range2 AS r ORDER BY r.key, r.run_at, r.id)
            ),
            -- The keys whose Running jobs fill the default concurrency:
            -- one aggregate in key order (jobs_key_running), hashed once
            -- by the NOT IN below and probed per head.
            full_keys AS (
                SELECT rr.key FROM "{schema}".jobs AS rr
                WHERE rr.queue = q AND rr.key IS NOT NULL AND rr.state = 'running'
                GROUP BY rr.key
                HAVING count(*) >= (SELECT lims.c FROM lims)
            ),
            -- The heads in rotation order, those the concurrency allows,
            -- each locked by its ctid (a TID scan, in the outer order), up
            -- to `lim`: the LIMIT stops the locking there.
            taken AS MATERIALIZED (
                SELECT h.part, h.key, h.ctid, t.state, t.flow
                FROM heads AS h
                CROSS JOIN LATERAL (
                    SELECT jk.state, jk.flow FROM "{schema}".jobs AS jk
                    WHERE jk.ctid = h.ctid AND jk.queue = q AND jk.priority = prio AND jk.key = h.key
                      AND jk.state IN ('pending', 'scheduled') AND (jk.state = 'pending' OR jk.run_at <= now)
                    FOR UPDATE SKIP LOCKED
                ) AS t
                WHERE h.key NOT IN (SELECT f.key FROM full_keys AS f)
                LIMIT lim
            ),
            -- Whether the statement is the whole claim. A workflow step
            -- taken from Scheduled is left to the other way, which tells
            -- jq_flow_moved.
            verdict AS (
                SELECT ((SELECT count(*) FROM taken) = lim
                        OR ((SELECT count(*) FROM range1) < 4 * lim
                            AND (SELECT count(*) FROM range2) < 4 * lim
                            AND (SELECT lims.c FROM lims) = 1
                            AND NOT EXISTS (SELECT 1 FROM "{schema}".jobs AS jk
                                            WHERE jk.queue = q AND jk.key IS NOT NULL
                                              AND jk.state IN ('pending', 'scheduled') AND jk.priority < prio)))
                       AND NOT EXISTS (SELECT 1 FROM taken AS t WHERE t.flow & 2 <> 0 AND t.state <> 'pending')
                       AS alone
            ),
            moved AS (
                INSERT INTO "{schema}".key_cursors AS c (queue, priority, key)
                SELECT q, prio, t.key FROM taken AS t
                WHERE (SELECT v.alone FROM verdict AS v)
                ORDER BY t.part DESC, t.key DESC
                LIMIT 1
                ON CONFLICT (queue, priority) DO UPDATE SET key = excluded.key
            ),
            -- claim.sql's update, of the rows locked above: their ctids
            -- are those the page read (the lock skipped any row changed
            -- since), so the update finds them without the primary key.
            claimed AS (
                UPDATE "{schema}".jobs AS j
                SET state = 'running',
                    attempts = j.attempts + 1,
                    lease_token = token,
                    lease_worker = worker,
                    lease_expires_at = expires
                FROM taken AS t
                WHERE j.ctid = t.ctid AND (SELECT v.alone FROM verdict AS v)
                RETURNING j.*
            )
            SELECT * FROM claimed;
            -- Nothing taken: this statement was not the whole claim, or
            -- there was nothing to take (the other way finds nothing
            -- either, at the cost of its statements).
            GET DIAGNOSTICS got = ROW_COUNT;
            IF got > 0 THEN
                RETURN;
            END IF;
        END IF;
    END IF;

    SELECT array_agg(p.id), array_agg(p.state), array_agg(p.flow)
    INTO ids, states, flows
    FROM "{schema}".jq_claim_keyed(queues, array_fill(lim, ARRAY[cardinality(queues)]), lim, now, keyed) AS p;
    IF ids IS NULL THEN
        RETURN;
    END IF;

    RETURN QUERY
    WITH claimed AS (
        UPDATE "{schema}".jobs AS j
        SET state = 'running',
            attempts = j.attempts + 1,
            lease_token = token,
            lease_worker = worker,
            lease_expires_at = expires
        WHERE j.id = ANY (ids)
        RETURNING j.*
    )
    SELECT * FROM claimed;

    -- The steps taken from Scheduled, as claim.sql counts them.
    PERFORM "{schema}".jq_flow_moved(array_agg(s.id ORDER BY s.id), array_agg(s.state ORDER BY s.id),
                                   array_agg('running'::text), array_agg(s.flow ORDER BY s.id), now, NULL)
    FROM unnest(ids, states, flows) AS s(id, state, flow)
    WHERE s.flow & 2 <> 0 AND s.state <> 'pending'
    HAVING count(*) > 0;
END
$$;

-- object: FUNCTION jq_flow_finished(uuid[], text[], timestamp with time zone, text)
CREATE FUNCTION {schema}.jq_flow_finished(ids uuid[], states text[], at timestamp with time zone, channel text) RETURNS TABLE(moved_workflow uuid, moved_from text, moved_to text)
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    AS $$
DECLARE
    children uuid[];
    failed boolean;
    woke_workflows uuid[];
    woke_states text[];
    e record;
    child_flow smallint;
    cancelled uuid[] := '{}';
BEGIN
    -- Only a failed parent's releases are written (run_anyway): a Completed
    -- parent never finishes again, so its state says its edges are done
    -- with, and a fan-in's acks write nothing on their edges. An edge a
    -- parent released while Dead, before an operator's retry, stays
    -- released: the retried parent's completion does not count twice.
    SELECT array_agg(d.child ORDER BY d.child) INTO children
    FROM unnest(ids, states) AS p(id, state)
    JOIN "{schema}".job_deps AS d ON d.parent = p.id
    WHERE NOT d.released AND (p.state = 'completed' OR d.on_failure = 'run_anyway');
    failed := array_position(states, 'dead') IS NOT NULL OR array_position(states, 'cancelled') IS NOT NULL;
    IF failed THEN
        UPDATE "{schema}".job_deps AS d SET released = true
        FROM unnest(ids, states) AS p(id, state)
        WHERE d.parent = p.id AND p.state <> 'completed' AND NOT d.released AND d.on_failure = 'run_anyway';
    END IF;
    IF children IS NOT NULL THEN
        PERFORM 1 FROM "{schema}".job_nodes WHERE id = ANY(children) ORDER BY id FOR UPDATE;
        WITH counted AS (
            SELECT child, count(*)::integer AS k FROM unnest(children) AS child GROUP BY child
        ),
        left_over AS (
            UPDATE "{schema}".job_nodes AS n SET unfinished = n.unfinished - c.k
            FROM counted AS c
            WHERE n.id = c.child
            RETURNING n.id, n.unfinished, n.workflow
        ),
        woke AS (
            UPDATE "{schema}".jobs AS j
            SET state = CASE WHEN j.run_at <= at THEN 'pending' ELSE 'scheduled' END,
                run_at = greatest(j.run_at, at)
            FROM left_over AS l
            WHERE j.id = l.id AND l.unfinished = 0 AND j.state = 'waiting'
            RETURNING l.workflow, j.state
        )
        SELECT array_agg(woke.workflow), array_agg(woke.state) INTO woke_workflows, woke_states FROM woke;
        IF array_position(woke_states, 'pending') IS NOT NULL THEN
            PERFORM pg_notify(channel, '');
        END IF;
        RETURN QUERY SELECT w.workflow, 'waiting'::text, w.state FROM unnest(woke_workflows, woke_states) AS w(workflow, state);
    END IF;

    IF NOT failed THEN
        RETURN;
    END IF;
    FOR e IN
        SELECT d.child, p.id AS parent, j.queue, n.workflow
        FROM unnest(ids, states) AS p(id, state)
        JOIN "{schema}".job_deps AS d ON d.parent = p.id
        JOIN "{schema}".jobs AS j ON j.id = d.child
        JOIN "{schema}".job_nodes AS n ON n.id = d.child
        WHERE p.state IN ('dead', 'cancelled') AND NOT d.released AND d.on_failure = 'cancel'
          AND j.state = 'waiting'
        ORDER BY d.child, d.position
    LOOP
        UPDATE "{schema}".jobs SET state = 'cancelled', finished_at = at
        WHERE id = e.child AND state = 'waiting'
        RETURNING jobs.flow INTO child_flow;
        IF FOUND THEN
            UPDATE "{schema}".job_nodes SET cancelled_by = e.parent WHERE id = e.child;
            INSERT INTO "{schema}".job_counts AS c (queue, state, shard, n)
            VALUES (e.queue, 'cancelled', 16, 1)
            ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
            moved_workflow := e.workflow;
            moved_from := 'waiting';
            moved_to := 'cancelled';
            RETURN NEXT;
            IF child_flow & 1 <> 0 THEN
                cancelled := cancelled || e.child;
            END IF;
        END IF;
    END LOOP;
    IF cardinality(cancelled) > 0 THEN
        RETURN QUERY SELECT * FROM "{schema}".jq_flow_finished(
            cancelled, array_fill('cancelled'::text, ARRAY[cardinality(cancelled)]), at, channel);
    END IF;
END
$$;

-- object: FUNCTION jq_flow_moved(uuid[], text[], text[], smallint[], timestamp with time zone, text)
CREATE FUNCTION {schema}.jq_flow_moved(ids uuid[], froms text[], tos text[], flows smallint[], at timestamp with time zone, channel text) RETURNS integer
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    AS $$
DECLARE
    finished uuid[];
    finished_states text[];
    revived uuid[];
    failing uuid[];
    workflows uuid[];
    was text[];
    became text[];
BEGIN
    -- A move that neither ends nor revives a step (a claim, a promotion, a
    -- retry or release back to Pending or Scheduled) runs no rule: its
    -- steps are looked up and counted by one statement, the same write as
    -- jq_workflow_count's. Through the general path below (the rules'
    -- classification, a lookup, then the count) a claim's call cost three
    -- statements, and took the 10,000-into-1 fan-in from 92% to 64% of the
    -- plain drain (BENCHMARKS.md, session 22).
    IF NOT (tos && ARRAY['completed', 'dead', 'cancelled'] OR froms && ARRAY['dead', 'cancelled']) THEN
        INSERT INTO "{schema}".workflow_counts AS c (workflow, state, shard, n)
        SELECT n.workflow, d.state, (pg_backend_pid() % 16)::int2, sum(d.n)
        FROM unnest(ids, froms, tos) AS s(id, was, became)
        JOIN "{schema}".job_nodes AS n ON n.id = s.id
        CROSS JOIN LATERAL (VALUES (s.was, -1), (s.became, 1)) AS d(state, n)
        WHERE s.was IS DISTINCT FROM s.became AND d.state IS NOT NULL
        GROUP BY n.workflow, d.state
        HAVING sum(d.n) <> 0
        ORDER BY n.workflow, d.state
        ON CONFLICT (workflow, state, shard) DO UPDATE SET n = c.n + excluded.n;
        RETURN cardinality(ids);
    END IF;

    -- The rules' classification, and the caller's steps with their
    -- workflows (looked up by key), in one read.
    SELECT array_agg(m.id ORDER BY m.id) FILTER (WHERE m.finishing),
           array_agg(m.became ORDER BY m.id) FILTER (WHERE m.finishing),
           array_agg(m.id ORDER BY m.id) FILTER (WHERE m.reviving),
           array_agg(m.id) FILTER (WHERE (m.finishing AND m.became <> 'completed') OR m.reviving),
           array_agg(m.workflow) FILTER (WHERE m.counted),
           array_agg(m.was) FILTER (WHERE m.counted),
           array_agg(m.became) FILTER (WHERE m.counted)
    INTO finished, finished_states, revived, failing, workflows, was, became
    FROM (
        SELECT s.id, s.was, s.became, n.workflow,
               s.flow & 1 <> 0 AND s.became IN ('completed', 'dead', 'cancelled')
                   AND s.was NOT IN ('completed', 'dead', 'cancelled') AS finishing,
               s.flow & 1 <> 0 AND s.was IN ('dead', 'cancelled')
                   AND s.became NOT IN ('completed', 'dead', 'cancelled') AS reviving,
               n.workflow IS NOT NULL AND s.was IS DISTINCT FROM s.became AS counted
        FROM unnest(ids, froms, tos, flows) AS s(id, was, became, flow)
        LEFT JOIN "{schema}".job_nodes AS n ON n.id = s.id
    ) AS m;

    -- A failure (or a revival) cascades: its function locks a child's node
    -- after changing the child's job, then goes down level by level, while
    -- a concurrent statement's release holds the nodes of its own children
    -- (sorted) and may need one of these; taken in two orders, such locks
    -- deadlocked (seen: two settle batches, each acking a parent of the
    -- child the other's failure cancels). So every node the cascade may
    -- touch, all the descendants of the failed or revived steps, and the
    -- children of the others, is locked here first, in one pass in id order,
    -- before any job row: the functions below then wait on no node, and the
    -- statements' lock orders agree. Edges never change, so the set read
    -- is the set the cascade walks. A batch of completions alone (the
    -- common case) skips this: jq_flow_finished locks their children, sorted.
    IF failing IS NOT NULL THEN
        PERFORM 1 FROM "{schema}".job_nodes
        WHERE id IN (
            WITH RECURSIVE below (id) AS (
                SELECT d.child FROM "{schema}".job_deps AS d WHERE d.parent = ANY(failing)
                UNION
                SELECT d.child FROM below AS b JOIN "{schema}".job_deps AS d ON d.parent = b.id
            )
            SELECT below.id FROM below
            UNION ALL
            SELECT d.child FROM "{schema}".job_deps AS d WHERE d.parent = ANY(finished)
        )
        ORDER BY id
        FOR UPDATE;
    END IF;

    IF finished IS NOT NULL THEN
        SELECT workflows || array_agg(f.moved_workflow), was || array_agg(f.moved_from),
               became || array_agg(f.moved_to)
        INTO workflows, was, became
        FROM "{schema}".jq_flow_finished(finished, finished_states, at, channel) AS f;
    END IF;
    IF revived IS NOT NULL THEN
        SELECT workflows || array_agg(f.moved_workflow), was || array_agg(f.moved_from),
               became || array_agg(f.moved_to)
        INTO workflows, was, became
        FROM "{schema}".jq_flow_revived(revived) AS f;
    END IF;

    IF workflows IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM "{schema}".jq_workflow_count(workflows, was, became);
    RETURN cardinality(workflows);
END
$$;

-- object: FUNCTION jq_flow_revived(uuid[])
CREATE FUNCTION {schema}.jq_flow_revived(ids uuid[]) RETURNS TABLE(moved_workflow uuid, moved_from text, moved_to text)
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    AS $$
DECLARE
    e record;
    revived uuid[] := '{}';
BEGIN
    FOR e IN
        SELECT DISTINCT d.child, j.queue, j.flow, n.workflow
        FROM "{schema}".job_deps AS d
        JOIN "{schema}".job_nodes AS n ON n.id = d.child
        JOIN "{schema}".jobs AS j ON j.id = d.child
        WHERE d.parent = ANY(ids) AND j.state = 'cancelled' AND n.cancelled_by IS NOT NULL
        ORDER BY d.child
    LOOP
        CONTINUE WHEN EXISTS (
            SELECT 1
            FROM "{schema}".job_deps AS d JOIN "{schema}".jobs AS p ON p.id = d.parent
            WHERE d.child = e.child AND NOT d.released AND d.on_failure = 'cancel'
              AND p.state IN ('dead', 'cancelled') AND NOT (d.parent = ANY(ids)));
        UPDATE "{schema}".jobs SET state = 'waiting', finished_at = NULL
        WHERE id = e.child AND state = 'cancelled';
        IF FOUND THEN
            UPDATE "{schema}".job_nodes SET cancelled_by = NULL WHERE id = e.child;
            INSERT INTO "{schema}".job_counts AS c (queue, state, shard, n)
            VALUES (e.queue, 'cancelled', 16, -1)
            ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
            moved_workflow := e.workflow;
            moved_from := 'cancelled';
            moved_to := 'waiting';
            RETURN NEXT;
            IF e.flow & 1 <> 0 THEN
                revived := revived || e.child;
            END IF;
        END IF;
    END LOOP;
    IF cardinality(revived) > 0 THEN
        RETURN QUERY SELECT * FROM "{schema}".jq_flow_revived(revived);
    END IF;
END
$$;

-- object: FUNCTION jq_key_turns(text, smallint, integer, timestamp with time zone, text[])
CREATE FUNCTION {schema}.jq_key_turns(q text, prio smallint, n integer, now timestamp with time zone, prior text[]) RETURNS TABLE(o_key text, o_id uuid, o_run_at timestamp with time zone, o_state text, o_flow smallint, o_period bigint)
    LANGUAGE plpgsql ROWS 10
    AS $$
#variable_conflict use_variable
DECLARE
    -- Round one: per key found, in rotation order.
    k_key text[]; k_cap integer[]; k_period bigint[];
    k_id uuid[]; k_run timestamptz[]; k_state text[]; k_flow smallint[];
    m integer;
    -- The queue's default limits (key ''), read once, for the keys
    -- without an override.
    d_found boolean;
    d_concurrency integer; d_rate_limit integer; d_rate_period bigint;
    -- Whether the queue has a key's own limits (an override): without
    -- one, no key's limits are probed.
    overrides boolean;
    -- The queue's keys with Running jobs, to their count: one read of
    -- jobs_key_running per call, looked up per key in the walk (a count
    -- per key cost an index descent each).
    running jsonb := '{}';
    -- The pages: the cursor's key (NULL: none), the last key read, whether
    -- the walk has wrapped (past the last key, from the smallest again, up
    -- to cur).
    cur text; after text; wrapped boolean;
    want integer; page_rows integer; rows_read integer; keys_seen integer; last_key text;
    -- A page's heads that their keys' limits allow, in key order.
    e_key text[]; e_cap integer[]; e_period bigint[]; e_ctid tid[];
    deep boolean := false;
BEGIN
    IF n <= 0 THEN
        RETURN;
    END IF;
    SELECT true, l.concurrency, l.rate_limit, least(l.rate_period, 3155760000000000)
    INTO d_found, d_concurrency, d_rate_limit, d_rate_period
    FROM "{schema}".key_limits AS l
    WHERE l.queue = q AND l.key = '';
    d_found := coalesce(d_found, false);
    overrides := EXISTS (SELECT 1 FROM "{schema}".key_limits AS l WHERE l.queue = q AND l.key > '');
    IF overrides OR d_concurrency IS NOT NULL THEN
        SELECT coalesce(jsonb_object_agg(r.key, r.n), '{}') INTO running
        FROM (SELECT rr.key, count(*) AS n FROM "{schema}".jobs AS rr
              WHERE rr.queue = q AND rr.key IS NOT NULL AND rr.state = 'running'
              GROUP BY rr.key) AS r;
    END IF;
    -- Round one, a page at a time: the rows of jobs_keyed after `after`
    -- at (q, prio), due ones only, in index order, a few per head wanted
    -- (page_rows); each key's first row there is its head (rows go by
    -- key, then run_at and id). Each head's limits (its override, else the
    -- default, else none) and what they still allow (cap, NULL when
    -- unlimited) counting this claim's earlier picks; the heads they allow,
    -- up to `want`, are locked (SKIP LOCKED) in key order by their ctid,
    -- then the next page reads on after the last key seen. One range scan
    -- per page, where a walk seeking each key's successor cost a descent
    -- per key. Past the last key the walk wraps to the smallest, and stops
    -- at the cursor's own key. A page whose keys have more than four rows
    -- each on average (a few deep keys) hands the rest of round one to the
    -- seek-per-key walk below, from where the pages stopped.
    SELECT kc.key INTO cur FROM "{schema}".key_cursors AS kc WHERE kc.queue = q AND kc.priority = prio;
    after := coalesce(cur, '');
    wrapped := cur IS NULL;
    k_key := '{}'; k_cap := '{}'; k_period := '{}'; k_id := '{}'; k_run := '{}'; k_state := '{}'; k_flow := '{}';
    LOOP
        want := n - cardinality(k_key);
        page_rows := 4 * want;
        WITH page AS MATERIALIZED (
            SELECT jk.key, jk.run_at, jk.id, jk.ctid FROM "{schema}".jobs AS jk
            WHERE jk.queue = q AND jk.priority = prio AND jk.key IS NOT NULL
              AND jk.state IN ('pending', 'scheduled') AND (jk.state = 'pending' OR jk.run_at <= now)
              AND jk.key > after AND (NOT wrapped OR cur IS NULL OR jk.key <= cur)
            ORDER BY jk.priority DESC, jk.key, jk.run_at, jk.id
            LIMIT page_rows
        ),
        -- Not materialized, so that `allowed` reads the heads in key order
        -- as DISTINCT ON yields them and stops at `want`: the limits of
        -- the page's other heads are not computed.
        heads AS NOT MATERIALIZED (
            SELECT DISTINCT ON (p.key) p.key, p.ctid FROM page AS p ORDER BY p.key, p.run_at, p.id
        ),
        allowed AS (
            SELECT h.key, h.ctid, c.cap, c.period
            FROM heads AS h
            LEFT JOIN LATERAL (
                SELECT o.concurrency, o.rate_limit, least(o.rate_period, 3155760000000000) AS rate_period
                FROM "{schema}".key_limits AS o
                WHERE overrides AND o.queue = q AND o.key = h.key
                UNION ALL
                SELECT d_concurrency, d_rate_limit, d_rate_period WHERE d_found
                LIMIT 1
            ) AS l ON true
            CROSS JOIN LATERAL (
                SELECT least(
                           CASE WHEN l.concurrency IS NOT NULL THEN
                               l.concurrency
                               - coalesce((running ->> h.key)::integer, 0)
                               - CASE WHEN cardinality(prior) > 0 THEN
                                     (SELECT count(*) FROM unnest(prior) AS x(k) WHERE x.k = h.key)::integer
                                 ELSE 0 END
                           END,
                           CASE WHEN l.rate_limit IS NOT NULL AND l.rate_period IS NOT NULL THEN
                               l.rate_limit
                               - (SELECT coalesce(sum(s.n), 0) FROM "{schema}".key_starts AS s
                                  WHERE s.queue = q AND s.key = h.key
                                    AND s.at > now - l.rate_period * interval '1 microsecond')
                               - CASE WHEN cardinality(prior) > 0 THEN
                                     (SELECT count(*) FROM unnest(prior) AS x(k) WHERE x.k = h.key)::integer
                                 ELSE 0 END
                           END)::integer AS cap,
                       CASE WHEN l.rate_limit IS NOT NULL THEN l.rate_period END AS period
                OFFSET 0
            ) AS c
            WHERE c.cap IS NULL OR c.cap > 0
            ORDER BY h.key
            LIMIT want
        )
        SELECT (SELECT count(*) FROM page)::integer, (SELECT count(DISTINCT p.key) FROM page AS p)::integer,
               (SELECT max(p.key) FROM page AS p),
               array_agg(a.key), array_agg(a.cap),
               array_agg(a.period), array_agg(a.ctid)
        INTO rows_read, keys_seen, last_key, e_key, e_cap, e_period, e_ctid
        FROM allowed AS a;

        IF e_key IS NOT NULL THEN
            -- The allowed heads, locked in key order up to `want`: a row
            -- another transaction holds is skipped, one it changed since
            -- the page read it no longer has that ctid (or fails the
            -- recheck) and is skipped too.
            SELECT k_key || coalesce(array_agg(t.key), '{}'),
                   k_cap || coalesce(array_agg(t.cap), '{}'),
                   k_period || coalesce(array_agg(t.period), '{}'),
                   k_id || coalesce(array_agg(t.id), '{}'),
                   k_run || coalesce(array_agg(t.run_at), '{}'),
                   k_state || coalesce(array_agg(t.state), '{}'),
                   k_flow || coalesce(array_agg(t.flow), '{}')
            INTO k_key, k_cap, k_period, k_id, k_run, k_state, k_flow
            FROM (
                -- A LATERAL runs once per row of its outer side, in that
                -- side's order (the array's), each a TID scan: the LIMIT
                -- stops the locking at `want` rows, with no ORDER BY.
                SELECT u.pos, u.key, u.cap, u.period, h.id, h.run_at, h.state, h.flow
                FROM unnest(e_key, e_cap, e_period, e_ctid) WITH ORDINALITY AS u(key, cap, period, c, pos)
                CROSS JOIN LATERAL (
                    SELECT jk.id, jk.run_at, jk.state, jk.flow FROM "{schema}".jobs AS jk
                    WHERE jk.ctid = u.c AND jk.queue = q AND jk.priority = prio AND jk.key = u.key
                      AND jk.state IN ('pending', 'scheduled') AND (jk.state = 'pending' OR jk.run_at <= now)
                    FOR UPDATE SKIP LOCKED
                ) AS h
                LIMIT want
            ) AS t;
        END IF;

        EXIT WHEN cardinality(k_key) >= n;
        IF coalesce(cardinality(e_key), 0) = want THEN
            -- Stopped at `want` allowed heads, some skipped at the lock:
            -- on after the last head tried.
            after := e_key[want];
        ELSIF rows_read < page_rows THEN
            -- The end of the range: wrap once, to the cursor's key.
            EXIT WHEN wrapped;
            wrapped := true;
            after := '';
        ELSE
            after := last_key;
            CONTINUE WHEN keys_seen * 4 >= rows_read;
            -- Deep keys: the rest of round one by the walk, from here.
            deep := true;
            EXIT;
        END IF;
    END LOOP;

    IF deep THEN
        -- The walk, after pages that found deep keys: from where they
        -- stopped, the next key of jobs_keyed at (q, prio), one seek per
        -- step; past the last, the smallest once (wrapped); after wrapping,
        -- up to the cursor's own key. OFFSET 0 keeps each step's seek one subquery run
        -- (pulled up, its expression would run once per use).
        -- Each key's limits (its override, else the default, else none: the
        -- UNION ALL's branches run in order, the LIMIT stops at the first row),
        -- and what they still allow (cap, NULL when unlimited) counting this
        -- claim's earlier picks; then its head, locked, only when cap allows
        -- one (the head refers to cap, so it is joined after it). The LIMIT
        -- stops the walk at n keys found: a recursive CTE runs as far as it is
        -- read.
        WITH RECURSIVE walk (key, wrapped, cur, d) AS (
            SELECT after COLLATE "C", wrapped, cur COLLATE "C", 0
            UNION ALL
            SELECT nx.key COLLATE "C", nx.wrapped, w.cur, w.d + 1
            FROM walk AS w
            CROSS JOIN LATERAL (
                SELECT (SELECT jk.key FROM "{schema}".jobs AS jk
                        WHERE jk.queue = q AND jk.priority = prio AND jk.key IS NOT NULL
                          AND jk.state IN ('pending', 'scheduled') AND jk.key > w.key
                        ORDER BY jk.priority DESC, jk.key LIMIT 1) AS after
                OFFSET 0
            ) AS a
            CROSS JOIN LATERAL (
                SELECT CASE
                           WHEN a.after IS NOT NULL THEN a.after
                           WHEN NOT w.wrapped THEN
                               (SELECT jk.key FROM "{schema}".jobs AS jk
                                WHERE jk.queue = q AND jk.priority = prio AND jk.key IS NOT NULL
                                  AND jk.state IN ('pending', 'scheduled')
                                ORDER BY jk.priority DESC, jk.key LIMIT 1)
                       END AS key,
                       w.wrapped OR a.after IS NULL AS wrapped
                OFFSET 0
            ) AS nx
            WHERE nx.key IS NOT NULL AND NOT (nx.wrapped AND w.cur IS NOT NULL AND nx.key > w.cur)
        ),
        picks AS (
            SELECT w.key, w.d, c.cap, c.period, h.id, h.run_at, h.state, h.flow
            FROM walk AS w
            LEFT JOIN LATERAL (
                SELECT o.concurrency, o.rate_limit, least(o.rate_period, 3155760000000000) AS rate_period
                FROM "{schema}".key_limits AS o
                WHERE overrides AND o.queue = q AND o.key = w.key
                UNION ALL
                SELECT d_concurrency, d_rate_limit, d_rate_period WHERE d_found
                LIMIT 1
            ) AS l ON true
            CROSS JOIN LATERAL (
                SELECT least(
                           CASE WHEN l.concurrency IS NOT NULL THEN
                               l.concurrency
                               - coalesce((running ->> w.key)::integer, 0)
                               - CASE WHEN cardinality(prior) > 0 THEN
                                     (SELECT count(*) FROM unnest(prior) AS x(k) WHERE x.k = w.key)::integer
                                 ELSE 0 END
                           END,
                           CASE WHEN l.rate_limit IS NOT NULL AND l.rate_period IS NOT NULL THEN
                               l.rate_limit
                               - (SELECT coalesce(sum(s.n), 0) FROM "{schema}".key_starts AS s
                                  WHERE s.queue = q AND s.key = w.key
                                    AND s.at > now - l.rate_period * interval '1 microsecond')
                               - CASE WHEN cardinality(prior) > 0 THEN
                                     (SELECT count(*) FROM unnest(prior) AS x(k) WHERE x.k = w.key)::integer
                                 ELSE 0 END
                           END)::integer AS cap,
                       CASE WHEN l.rate_limit IS NOT NULL THEN l.rate_period END AS period
                OFFSET 0
            ) AS c
            CROSS JOIN LATERAL (
                SELECT jk.id, jk.run_at, jk.state, jk.flow FROM "{schema}".jobs AS jk
                WHERE jk.queue = q AND jk.priority = prio AND jk.key = w.key AND jk.key IS NOT NULL
                  AND jk.state IN ('pending', 'scheduled') AND (jk.state = 'pending' OR jk.run_at <= now)
                  AND (c.cap IS NULL OR c.cap > 0)
                ORDER BY jk.run_at, jk.id
                LIMIT 1
                FOR UPDATE SKIP LOCKED
            ) AS h
            WHERE w.d > 0
            LIMIT n - cardinality(k_key)
        )
        SELECT k_key || coalesce(array_agg(f.key ORDER BY f.d), '{}'), k_cap || coalesce(array_agg(f.cap ORDER BY f.d), '{}'),
               k_period || coalesce(array_agg(f.period ORDER BY f.d), '{}'), k_id || coalesce(array_agg(f.id ORDER BY f.d), '{}'),
               k_run || coalesce(array_agg(f.run_at ORDER BY f.d), '{}'), k_state || coalesce(array_agg(f.state ORDER BY f.d), '{}'),
               k_flow || coalesce(array_agg(f.flow ORDER BY f.d), '{}')
        INTO k_key, k_cap, k_period, k_id, k_run, k_state, k_flow
        FROM picks AS f;
    END IF;
    m := coalesce(cardinality(k_key), 0);

    IF m = n OR m = 0 OR NOT EXISTS (SELECT 1 FROM unnest(k_cap) AS x(cap) WHERE x.cap IS NULL OR x.cap > 1) THEN
        RETURN QUERY SELECT u.key, u.id, u.run_at, u.state, u.flow, u.period
                     FROM unnest(k_key, k_id, k_run, k_state, k_flow, k_period) WITH ORDINALITY
                         AS u(key, id, run_at, state, flow, period, pos)
                     ORDER BY u.pos;
        RETURN;
    END IF;

    -- The walk saw every key: later rounds over the keys found, each key's
    -- next heads up to what its cap and the picks still wanted allow, in
    -- (round, rotation order).
    RETURN QUERY
    SELECT t.key, t.id, t.run_at, t.state, t.flow, t.period
    FROM (
        SELECT 1::bigint AS r, u.pos, u.key, u.id, u.run_at, u.state, u.flow, u.period
        FROM unnest(k_key, k_id, k_run, k_state, k_flow, k_period) WITH ORDINALITY
            AS u(key, id, run_at, state, flow, period, pos)
        UNION ALL
        SELECT b.r, u.pos, u.key, b.id, b.run_at, b.state, b.flow, u.period
        FROM unnest(k_key, k_cap, k_period) WITH ORDINALITY AS u(key, cap, period, pos)
        CROSS JOIN LATERAL (
            SELECT h.id, h.run_at, h.state, h.flow, 1 + row_number() OVER (ORDER BY h.run_at, h.id) AS r
            FROM (
                SELECT jk.id, jk.run_at, jk.state, jk.flow FROM "{schema}".jobs AS jk
                WHERE jk.queue = q AND jk.priority = prio AND jk.key = u.key AND jk.key IS NOT NULL
                  AND jk.state IN ('pending', 'scheduled') AND (jk.state = 'pending' OR jk.run_at <= now)
                  AND jk.id <> ALL (k_id)
                ORDER BY jk.run_at, jk.id
                LIMIT least(u.cap - 1, n - m)
                FOR UPDATE SKIP LOCKED
            ) AS h
        ) AS b
        WHERE u.cap IS NULL OR u.cap > 1
    ) AS t
    ORDER BY t.r, t.pos
    LIMIT n;
END
$$;

-- object: FUNCTION jq_workflow_count(uuid[], text[], text[])
CREATE FUNCTION {schema}.jq_workflow_count(workflows uuid[], froms text[], tos text[]) RETURNS void
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    AS $$
BEGIN
    INSERT INTO "{schema}".workflow_counts AS c (workflow, state, shard, n)
    SELECT d.workflow, d.state, (pg_backend_pid() % 16)::int2, sum(d.n)
    FROM (
        SELECT m.workflow, m.was AS state, -1 AS n
        FROM unnest(workflows, froms) AS m(workflow, was) WHERE m.was IS NOT NULL
        UNION ALL
        SELECT m.workflow, m.became, 1
        FROM unnest(workflows, tos) AS m(workflow, became) WHERE m.became IS NOT NULL
    ) AS d
    GROUP BY d.workflow, d.state
    HAVING sum(d.n) <> 0
    ORDER BY d.workflow, d.state
    ON CONFLICT (workflow, state, shard) DO UPDATE SET n = c.n + excluded.n;
END
$$;

-- object: INDEX job_deps_child
CREATE INDEX job_deps_child ON {schema}.job_deps USING btree (child, "position");

-- object: INDEX job_nodes_workflow
CREATE UNIQUE INDEX job_nodes_workflow ON {schema}.job_nodes USING btree (workflow, "position");

-- object: INDEX jobs_claim
CREATE INDEX jobs_claim ON {schema}.jobs USING btree (queue, priority DESC, run_at, id) INCLUDE (state) WHERE ((state = ANY (ARRAY['pending'::text, 'scheduled'::text])) AND (key IS NULL));

-- object: INDEX jobs_finished
CREATE INDEX jobs_finished ON {schema}.jobs USING btree (state, finished_at) WHERE (finished_at IS NOT NULL);

-- object: INDEX jobs_key_running
CREATE INDEX jobs_key_running ON {schema}.jobs USING btree (queue, key) WHERE ((key IS NOT NULL) AND (state = 'running'::text));

-- object: INDEX jobs_keyed
CREATE INDEX jobs_keyed ON {schema}.jobs USING btree (queue, priority DESC, key, run_at, id) INCLUDE (state) WHERE ((key IS NOT NULL) AND (state = ANY (ARRAY['pending'::text, 'scheduled'::text])));

-- object: INDEX jobs_lease_expiry
CREATE INDEX jobs_lease_expiry ON {schema}.jobs USING btree (lease_expires_at) WHERE (lease_expires_at IS NOT NULL);

-- object: INDEX jobs_scheduled
CREATE INDEX jobs_scheduled ON {schema}.jobs USING btree (run_at) WHERE (state = 'scheduled'::text);

-- object: INDEX jobs_unique
CREATE UNIQUE INDEX jobs_unique ON {schema}.jobs USING btree (queue, unique_key, key_slot) WHERE ((unique_key IS NOT NULL) AND (state = ANY (ARRAY['scheduled'::text, 'pending'::text, 'running'::text])));

-- object: INDEX jobs_waiting_on_parents
CREATE INDEX jobs_waiting_on_parents ON {schema}.jobs USING btree (queue) WHERE (state = 'waiting'::text);

-- object: INDEX key_starts_window
CREATE INDEX key_starts_window ON {schema}.key_starts USING btree (queue, key, at);

-- object: INDEX queue_starts_window
CREATE INDEX queue_starts_window ON {schema}.queue_starts USING btree (queue, at);

-- object: SCHEMA {schema}
CREATE SCHEMA {schema};

-- object: TABLE job_counts
CREATE TABLE {schema}.job_counts (
    queue text NOT NULL,
    state text NOT NULL,
    shard smallint NOT NULL,
    n bigint NOT NULL
);

-- object: TABLE job_deps
CREATE TABLE {schema}.job_deps (
    parent uuid NOT NULL,
    child uuid NOT NULL,
    "position" integer NOT NULL,
    on_failure text NOT NULL,
    released boolean DEFAULT false NOT NULL
);

-- object: TABLE job_nodes
CREATE TABLE {schema}.job_nodes (
    id uuid NOT NULL,
    workflow uuid NOT NULL,
    "position" integer NOT NULL,
    step text NOT NULL,
    unfinished integer NOT NULL,
    cancelled_by uuid
);

-- object: TABLE job_results
CREATE TABLE {schema}.job_results (
    id uuid NOT NULL,
    result text NOT NULL
);

-- object: TABLE jobs
CREATE TABLE {schema}.jobs (
    id uuid NOT NULL,
    queue text NOT NULL,
    kind text NOT NULL,
    payload text NOT NULL,
    priority smallint NOT NULL,
    state text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer NOT NULL,
    run_at timestamp with time zone NOT NULL,
    created_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    lease_token uuid,
    lease_worker text,
    lease_expires_at timestamp with time zone,
    errors jsonb DEFAULT '[]'::jsonb NOT NULL,
    unique_key text,
    key_slot uuid DEFAULT '00000000-0000-0000-0000-000000000000'::uuid NOT NULL,
    trace text,
    timeout_ms bigint,
    cancel_requested_at timestamp with time zone,
    cancel_reason text,
    progress text,
    flow smallint DEFAULT 0 NOT NULL,
    key text COLLATE pg_catalog."C"
);

-- object: TABLE jq_migrations
CREATE TABLE {schema}.jq_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

-- object: TABLE key_cursors
CREATE TABLE {schema}.key_cursors (
    queue text NOT NULL,
    priority smallint NOT NULL,
    key text NOT NULL COLLATE pg_catalog."C"
);

-- object: TABLE key_limits
CREATE TABLE {schema}.key_limits (
    queue text NOT NULL,
    key text NOT NULL COLLATE pg_catalog."C",
    concurrency integer,
    rate_limit integer,
    rate_period bigint
);

-- object: TABLE key_starts
CREATE TABLE {schema}.key_starts (
    queue text NOT NULL,
    key text NOT NULL COLLATE pg_catalog."C",
    at timestamp with time zone NOT NULL,
    n integer NOT NULL
);

-- object: TABLE leaders
CREATE TABLE {schema}.leaders (
    role text NOT NULL,
    token uuid NOT NULL,
    holder text NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

-- object: TABLE queue_controls
CREATE TABLE {schema}.queue_controls (
    queue text NOT NULL,
    paused_at timestamp with time zone,
    concurrency integer,
    rate_limit integer,
    rate_period bigint
);

-- object: TABLE queue_seen
CREATE TABLE {schema}.queue_seen (
    queue text NOT NULL,
    worker text NOT NULL,
    seen_at timestamp with time zone NOT NULL,
    paused boolean NOT NULL
);

-- object: TABLE queue_starts
CREATE TABLE {schema}.queue_starts (
    queue text NOT NULL,
    at timestamp with time zone NOT NULL,
    n integer NOT NULL
);

-- object: TABLE schedules
CREATE TABLE {schema}.schedules (
    name text NOT NULL,
    queue text NOT NULL,
    spec text NOT NULL,
    zone text NOT NULL,
    cursor timestamp with time zone NOT NULL,
    last_job uuid,
    missed bigint DEFAULT 0 NOT NULL,
    last_missed timestamp with time zone,
    declared_at timestamp with time zone NOT NULL,
    run_requested timestamp with time zone
);

-- object: TABLE workflow_counts
CREATE TABLE {schema}.workflow_counts (
    workflow uuid NOT NULL,
    state text NOT NULL,
    shard smallint NOT NULL,
    n bigint NOT NULL
);

-- object: TABLE workflows
CREATE TABLE {schema}.workflows (
    id uuid NOT NULL,
    created_at timestamp with time zone NOT NULL
);
