-- Migration 17: the keyed claim's per-job work cut (issue 32: the keyed
-- drain ran at about half the plain one on PostgreSQL). The semantics are
-- migrations 15's and 16's, unchanged (the contract's "Keyed jobs",
-- jq-testkit's memory/keys.rs); what changed is how much each pick costs:
--
-- - jq_key_turns reads a key's Running count from one aggregate of the
--   queue's Running keyed jobs per call (a jsonb object, looked up by
--   key), not one count of jobs_key_running per key; and skips the probe
--   of a key's own limits when the queue has no override (one EXISTS per
--   call). The count is read by a statement before the walk's: it can
--   only be higher than the walk's own (every claim of a keyed queue holds
--   its key lock, as this one does), so no limit is exceeded.
-- - jq_claim_keyed appends a priority's picks in one statement, not row by
--   row, and with one queue and no plain job takes them as they are, with
--   no merge loop.
-- - jq_claim_keyed_take runs with enable_seqscan off: with the statistics
--   of a table of a few thousand jobs, the planner updated the picks by a
--   sequential scan of jobs (`id = ANY (ids)`), every claim.
--
-- Every function keeps its signature and return type, so each is replaced
-- in place, and migrations 15 and 16 still run over this one's result
-- (the migration tests run them again).

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
BEGIN
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
    -- The walk: from the cursor (or before the smallest key, '', when
    -- none), the next key of jobs_keyed at (q, prio), one seek per step;
    -- past the last, the smallest once (wrapped); after wrapping, up to the
    -- cursor's own key. OFFSET 0 keeps each step's seek one subquery run
    -- (pulled up, its expression would run once per use).
    -- Each key's limits (its override, else the default, else none: the
    -- UNION ALL's branches run in order, the LIMIT stops at the first row),
    -- and what they still allow (cap, NULL when unlimited) counting this
    -- claim's earlier picks; then its head, locked, only when cap allows
    -- one (the head refers to cap, so it is joined after it). The LIMIT
    -- stops the walk at n keys found: a recursive CTE runs as far as it is
    -- read.
    WITH RECURSIVE walk (key, wrapped, cur, d) AS (
        SELECT coalesce(c.key, ''::text) COLLATE "C", c.key IS NULL, c.key COLLATE "C", 0
        FROM (SELECT (SELECT kc.key FROM {schema}.key_cursors AS kc
                      WHERE kc.queue = q AND kc.priority = prio) AS key OFFSET 0) AS c
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
        LIMIT n
    )
    SELECT array_agg(f.key ORDER BY f.d), array_agg(f.cap ORDER BY f.d), array_agg(f.period ORDER BY f.d),
           array_agg(f.id ORDER BY f.d), array_agg(f.run_at ORDER BY f.d), array_agg(f.state ORDER BY f.d),
           array_agg(f.flow ORDER BY f.d)
    INTO k_key, k_cap, k_period, k_id, k_run, k_state, k_flow
    FROM picks AS f;
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

-- jq_claim_keyed: as in migration 15 (its comment there holds: what it
-- returns, the locks it runs under, the merge), with each keyed queue's
-- picks computed ahead by jq_key_turns, priority by priority, and the
-- cursors and starts written once per claim for what the merge took.
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
            -- row. eff: the running maximum of their run_ats.
            SELECT s_id || coalesce(array_agg(x.o_id ORDER BY x.n), '{}'),
                   s_state || coalesce(array_agg(x.o_state ORDER BY x.n), '{}'),
                   s_flow || coalesce(array_agg(x.o_flow ORDER BY x.n), '{}'),
                   s_prio || coalesce(array_agg(prio ORDER BY x.n), '{}'),
                   s_eff || coalesce(array_agg(x.eff ORDER BY x.n), '{}'),
                   s_key || coalesce(array_agg(x.o_key ORDER BY x.n), '{}'),
                   s_period || coalesce(array_agg(x.o_period ORDER BY x.n), '{}'),
                   prior || coalesce(array_agg(x.o_key ORDER BY x.n), '{}'),
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

    SELECT array_agg(p.id ORDER BY p.id), array_agg(p.state ORDER BY p.id), array_agg(p.flow ORDER BY p.id)
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
