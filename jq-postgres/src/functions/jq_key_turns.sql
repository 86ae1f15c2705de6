-- {schema}.jq_key_turns(q, prio, n, now, prior): the next `n` picks of
-- queue `q`'s rotation at priority `prio`, in the order the rotation takes
-- them (the contract's "Keyed jobs", exactly as jq-testkit's
-- memory/keys.rs picks them), locked (FOR UPDATE SKIP LOCKED). Called by
-- jq_claim_keyed, once per keyed queue and priority it takes from.
-- `prior`: the keys this claim picked at higher priorities of `q`, once per
-- pick (they count in a key's Running jobs and, when its limits have a
-- rate, its starts). Returns each pick's key, row, and the key's rate
-- period (µs) when its limits have a rate (a start to log), else NULL.
--
-- A rotation's sequence depends only on its own picks: a key's load and a
-- priority's members change only when the rotation takes a job, and both
-- only shrink what is eligible. So a queue's picks are computed ahead, here,
-- and jq_claim_keyed merges them with the plain jobs and the other queues'.
-- At one priority the rotation goes in rounds: each eligible key after the
-- cursor (wrapping, the cursor's own key last) gets one job, then those
-- still eligible a second, in the same order, and so on (after a round the
-- cursor is on the round's last key, and every key after it was found
-- ineligible, and stays so).
--
-- Round one reads jobs_keyed from the cursor as a range, a few rows per
-- head wanted (as SQLite's rotation does, jq-sqlite/src/rotation.rs),
-- computes the limits of the heads in key order up to the number wanted,
-- and locks those they allow by ctid. A page of deep keys (over four rows
-- per key on average) hands the rest of round one to a walk that seeks
-- past each key's rows, one index descent per key. Later rounds, only when
-- round one found fewer keys than wanted, are one more statement. A key's
-- Running count comes from one aggregate of the queue's Running keyed jobs
-- per call, and a key's own limits are probed only when the queue has an
-- override. The arrays are aggregated without ORDER BY where their input is
-- already in order (a subquery's ORDER BY, a window's order, a LATERAL's
-- outer order, with no join above it): an ordered aggregate sorts its input
-- once per aggregate.
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
