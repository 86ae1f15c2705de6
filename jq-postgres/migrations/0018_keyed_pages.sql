-- Migration 18: the keyed claim's rotation read a page of keys at a time,
-- and the claim's statements made cheaper to run (issue 32). The picks,
-- their order and the cursors are migration 16's (the contract's "Keyed
-- jobs", jq-testkit's memory/keys.rs); the three functions keep their
-- signatures and return types and are replaced in place.
--
-- - jq_key_turns' round one sought each key's successor in jobs_keyed, one
--   index descent per key, then each head, one more. It now reads
--   jobs_keyed from the cursor as a range, a few rows per head wanted (as
--   SQLite's rotation does, jq-sqlite/src/rotation.rs), computes the
--   limits of the heads in key order up to the number wanted, and locks
--   those they allow by ctid. A page of deep keys (over four rows per key
--   on average) hands the rest of round one to migration 16's walk, which
--   seeks past each key's rows.
-- - The arrays are aggregated without ORDER BY where their input is already
--   in order (a subquery's ORDER BY, a window's order, a LATERAL's outer
--   order, with no join above it, so the aggregate reads the rows in that
--   order): an ordered aggregate sorts its input once per aggregate, and
--   the claim had sixteen of them per call over the same rows.
-- - Not done: generic plans for the take (plan_cache_mode =
--   force_generic_plan) cut the replay below by 4% more, but slowed the
--   suite's fairness and concurrent-claimers tests (claims of 10, a deep
--   key) by a third.
--
-- Replay of the bench's keyed drain (`JQ_REPLAY_KEYED=1 bash
-- scripts/pg-instructions.sh`): 8,787M instructions with migration 16,
-- 8,479M with 17, about 7.4G with this one.

-- jq_key_turns: the next `n` picks of queue `q`'s rotation at priority
-- `prio`, in the order the rotation takes them, locked (FOR UPDATE SKIP
-- LOCKED). `prior`: the keys this claim picked at higher priorities of
-- `q`, once per pick (they count in a key's Running jobs and, when its
-- limits have a rate, its starts). Returns each pick's key, row, and the
-- key's rate period (µs) when its limits have a rate (a start to log),
-- else NULL.
CREATE OR REPLACE FUNCTION {schema}.jq_key_turns(
    q text, prio smallint, n integer, now timestamptz, prior text[]
) RETURNS TABLE (o_key text, o_id uuid, o_run_at timestamptz, o_state text, o_flow smallint, o_period bigint)
LANGUAGE plpgsql
VOLATILE
ROWS 10
AS $fn$
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
    FROM {schema}.key_limits AS l
    WHERE l.queue = q AND l.key = '';
    d_found := coalesce(d_found, false);
    overrides := EXISTS (SELECT 1 FROM {schema}.key_limits AS l WHERE l.queue = q AND l.key > '');
    IF overrides OR d_concurrency IS NOT NULL THEN
        SELECT coalesce(jsonb_object_agg(r.key, r.n), '{}') INTO running
        FROM (SELECT rr.key, count(*) AS n FROM {schema}.jobs AS rr
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
    SELECT kc.key INTO cur FROM {schema}.key_cursors AS kc WHERE kc.queue = q AND kc.priority = prio;
    after := coalesce(cur, '');
    wrapped := cur IS NULL;
    k_key := '{}'; k_cap := '{}'; k_period := '{}'; k_id := '{}'; k_run := '{}'; k_state := '{}'; k_flow := '{}';
    LOOP
        want := n - cardinality(k_key);
        page_rows := 4 * want;
        WITH page AS MATERIALIZED (
            SELECT jk.key, jk.run_at, jk.id, jk.ctid FROM {schema}.jobs AS jk
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
                FROM {schema}.key_limits AS o
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
                               - (SELECT coalesce(sum(s.n), 0) FROM {schema}.key_starts AS s
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
                    SELECT jk.id, jk.run_at, jk.state, jk.flow FROM {schema}.jobs AS jk
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
                SELECT (SELECT jk.key FROM {schema}.jobs AS jk
                        WHERE jk.queue = q AND jk.priority = prio AND jk.key IS NOT NULL
                          AND jk.state IN ('pending', 'scheduled') AND jk.key > w.key
                        ORDER BY jk.priority DESC, jk.key LIMIT 1) AS after
                OFFSET 0
            ) AS a
            CROSS JOIN LATERAL (
                SELECT CASE
                           WHEN a.after IS NOT NULL THEN a.after
                           WHEN NOT w.wrapped THEN
                               (SELECT jk.key FROM {schema}.jobs AS jk
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
                FROM {schema}.key_limits AS o
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
                               - (SELECT coalesce(sum(s.n), 0) FROM {schema}.key_starts AS s
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
                SELECT jk.id, jk.run_at, jk.state, jk.flow FROM {schema}.jobs AS jk
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
                SELECT jk.id, jk.run_at, jk.state, jk.flow FROM {schema}.jobs AS jk
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
$fn$;

-- jq_claim_keyed: migration 17's, its picks aggregated without ORDER BY.
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
        SELECT jc.id, jc.state, jc.flow, jc.priority, jc.run_at, u.n::integer AS n FROM {schema}.jobs AS jc
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
                  FROM {schema}.jq_key_turns(q, prio, need, now, prior) WITH ORDINALITY
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
        INSERT INTO {schema}.key_cursors AS c (queue, priority, key)
        SELECT x.q, x.p, x.k FROM unnest(c_q, c_p, c_k) AS x(q, p, k)
        ON CONFLICT (queue, priority) DO UPDATE SET key = excluded.key;
    END IF;
    IF cardinality(st_q) > 0 THEN
        -- The log keeps only the window: older starts go as new ones come.
        DELETE FROM {schema}.key_starts AS s
        USING (SELECT DISTINCT x.q, x.k, x.per FROM unnest(st_q, st_k, st_per) AS x(q, k, per)) AS x
        WHERE s.queue = x.q AND s.key = x.k AND s.at <= now - x.per * interval '1 microsecond';
        INSERT INTO {schema}.key_starts (queue, key, at, n)
        SELECT x.q, x.k, now, count(*) FROM unnest(st_q, st_k) AS x(q, k) GROUP BY x.q, x.k;
    END IF;

    RETURN QUERY SELECT x.id, x.state, x.flow FROM unnest(pk_id, pk_state, pk_flow) AS x(id, state, flow);
END
$fn$;

-- jq_claim_keyed_take: migration 17's (its comment follows), its picks'
-- arrays unordered (the update does not depend on their order; the rows
-- are locked already).
--
-- jq_claim_keyed_take: a whole claim over queues none of which has a
-- control, some with keyed jobs, in one call (sql/claim_keyed.sql runs it
-- as one autocommit statement, as the plain claim runs claim.sql): the
-- same picks as claim_controlled.sql's over those queues (every allowance
-- `lim`), moved to Running as it moves them, returned as jobs rows.
-- *The transaction of claim_controlled.sql took four exchanges (BEGIN,
-- control_lock.sql, the claim, COMMIT), with the key lock held across the
-- last three; here the lock is held for the call and its commit only.*
--
-- Each statement here reads its own snapshot (READ COMMITTED, VOLATILE):
-- the queues with keyed waiting jobs are found (one probe of jobs_keyed
-- each), their key locks taken in name order (the same locks as
-- control_lock.sql's, so this and a controlled claim of one queue run one
-- at a time), then jq_claim_keyed picks and locks, reading what every
-- earlier claim of these queues committed, and only then are the picks
-- updated, by a later statement whose snapshot sees every row picked (the
-- snapshot of the statement calling this function is older than the rows
-- enqueued while it waited for the locks: it must not do the update).
-- The update is claim.sql's (lease, attempts), and the workflow steps
-- taken from Scheduled go to jq_flow_moved as there.
CREATE OR REPLACE FUNCTION {schema}.jq_claim_keyed_take(
    queues text[], lim integer, now timestamptz, worker text, expires timestamptz, token uuid
) RETURNS SETOF {schema}.jobs
LANGUAGE plpgsql
VOLATILE
ROWS 10
-- The update's `id = ANY (ids)` must probe the primary key: with a small
-- queue's statistics the planner chose a scan of the whole table.
SET enable_seqscan = off
AS $fn$
#variable_conflict use_variable
DECLARE
    keyed text[];
    k text;
    ids uuid[]; states text[]; flows smallint[];
BEGIN
    -- In control_lock.sql's order (two claims never deadlock).
    SELECT coalesce(array_agg(q.name ORDER BY q.name), '{}') INTO keyed
    FROM (SELECT DISTINCT u.name FROM unnest(queues) AS u(name)) AS q
    -- LIMIT 1 in a LATERAL keeps it one probe of jobs_keyed per queue.
    CROSS JOIN LATERAL (
        SELECT 1 FROM {schema}.jobs AS jk
        WHERE jk.queue = q.name AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
        LIMIT 1
    ) AS probe;
    FOREACH k IN ARRAY keyed LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended('jq-keys:{schema}:' || k, 0));
    END LOOP;

    SELECT array_agg(p.id), array_agg(p.state), array_agg(p.flow)
    INTO ids, states, flows
    FROM {schema}.jq_claim_keyed(queues, array_fill(lim, ARRAY[cardinality(queues)]), lim, now, keyed) AS p;
    IF ids IS NULL THEN
        RETURN;
    END IF;

    RETURN QUERY
    WITH claimed AS (
        UPDATE {schema}.jobs AS j
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
    PERFORM {schema}.jq_flow_moved(array_agg(s.id ORDER BY s.id), array_agg(s.state ORDER BY s.id),
                                   array_agg('running'::text), array_agg(s.flow ORDER BY s.id), now, NULL)
    FROM unnest(ids, states, flows) AS s(id, state, flow)
    WHERE s.flow & 2 <> 0 AND s.state <> 'pending'
    HAVING count(*) > 0;
END
$fn$;
