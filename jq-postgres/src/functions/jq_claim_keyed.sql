-- {schema}.jq_claim_keyed(queues, allow, lim, now, keyed): the jobs a
-- claim over queues with keyed jobs takes, in the order it takes them (the
-- contract's "Keyed jobs", exactly as jq-testkit's memory/keys.rs picks
-- them). Called by sql/claim_controlled.sql, in the transaction that locked
-- the asked queues' controls and, for each queue of `keyed`, a
-- transaction-level advisory lock on the (schema, queue) pair
-- (sql/control_lock.sql), and by jq_claim_keyed_take under the same locks:
-- keyed claims of one queue run one at a time, so the Running and start
-- counts read here (each statement a new snapshot, taken after the locks)
-- include every earlier claim, and no key's limits can be exceeded by
-- concurrent claimers.
--
-- queues: the asked queues; allow: each one's allowance (claim_controlled's
-- ctl.allow, in queues' order); lim: the claim's limit; now: the claim's
-- instant; keyed: the queues whose keyed jobs this claim may take (locked).
--
-- Plain jobs: each queue's best, up to its allowance, locked SKIP LOCKED,
-- in claim order (jobs_claim). Each keyed queue's picks, up to what it may
-- take, from jq_key_turns, a priority at a time, highest first (a key's
-- picks at a higher priority count against its limits at a lower one).
-- The streams are merged by (priority desc, effective run_at, plain before
-- keyed, queue name), a rotation's effective run_at being the running
-- maximum of what it yielded at that priority in this claim; with one queue
-- and no plain job the picks are taken as they are, with no merge loop.
-- Only what the merge takes moves a cursor (the last key taken per queue
-- and priority) or logs a start (one per keyed job taken whose key has a
-- rate); picked rows the merge does not take stay locked until the claim's
-- transaction commits, untouched. Rows returned are locked; the caller's
-- statement takes them.
CREATE OR REPLACE FUNCTION {schema}.jq_claim_keyed(
    queues text[], allow integer[], lim integer, now timestamptz, keyed text[]
) RETURNS TABLE (id uuid, state text, flow smallint)
LANGUAGE plpgsql
VOLATILE
-- What a claim takes, about: the default estimate (1000 rows) would make
-- claim_controlled.sql's UPDATE join every claimed row by a scan of jobs.
ROWS 10
-- Its caller jq_claim_keyed_take plans with generic plans, and a function's
-- SET holds for the functions it calls: generic plans slowed this one's
-- deep-key walk (BENCHMARKS.md), so it keeps the default.
SET plan_cache_mode = auto
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
