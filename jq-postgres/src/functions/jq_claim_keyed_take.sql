-- {schema}.jq_claim_keyed_take(queues, lim, now, worker, expires, token): a
-- whole claim over queues none of which has a control, some with keyed
-- jobs, in one call. Called by sql/claim_keyed.sql, which runs it as one
-- autocommit statement, as the plain claim runs claim.sql: the same picks
-- as claim_controlled.sql's over those queues (every allowance `lim`),
-- moved to Running as it moves them, returned as jobs rows. A controlled
-- claim's transaction takes four exchanges (BEGIN, control_lock.sql, the
-- claim, COMMIT), with the key lock held across the last three; here the
-- lock is held for the call and its commit only.
--
-- Each statement here reads its own snapshot (READ COMMITTED, VOLATILE):
-- the queues with keyed waiting jobs are found (one probe of jobs_keyed
-- each), their key locks taken in name order (the same locks as
-- control_lock.sql's, so this and a controlled claim of one queue run one
-- at a time), then the picks are found and locked, reading what every
-- earlier claim of these queues committed, and only then are they
-- updated, by a later statement whose snapshot sees every row picked (the
-- snapshot of the statement calling this function is older than the rows
-- enqueued while it waited for the locks: it must not do the update). The
-- update is claim.sql's (lease, attempts), and the workflow steps taken
-- from Scheduled go to jq_flow_moved as there.
--
-- The common claim is one statement: a claim of one queue whose waiting
-- jobs are all keyed, whose keys share the queue's default limits (no
-- override) and those have no rate. It runs after the key lock, so its
-- snapshot sees what every earlier claim of the queue committed, and is
-- round one of the rotation at the queue's highest keyed priority, as
-- jq_key_turns' pages read it: the rows of jobs_keyed from the cursor's key
-- on, then (wrapped) from the smallest key up to it, each key's first row
-- its head; the heads whose key has fewer Running jobs than the default
-- concurrency, locked by ctid in that order (SKIP LOCKED) up to `lim`, then
-- updated as claim.sql updates. The rows are read only as far as the
-- locking goes (at most four per head wanted in each range). The picks,
-- their order and the cursor are jq_claim_keyed's (tests/storage.rs claims
-- both ways side by side).
--
-- It is the whole claim when it took `lim` jobs, or when it read every due
-- row of that priority and nothing could follow in the same claim: a
-- concurrency of one (no later rounds) and no keyed job at a lower
-- priority. Then it updates the picks and writes the cursor (the last key
-- taken). Otherwise it changes nothing, and jq_claim_keyed claims as
-- before: the rows locked here are this transaction's, so it locks them
-- again. A workflow step taken from Scheduled also goes that way, which
-- tells jq_flow_moved. A claim that finds nothing goes that way too, and
-- finds nothing again.
--
-- A lone queue is locked without the probe of its keyed jobs (its caller
-- found it keyed), and the priority to claim is the highest cursor's when a
-- job waits after that cursor: the probes walked past the entries of every
-- job a drain took, until vacuum removed them.
--
-- The function's statements run with generic plans (planned once per
-- session): a custom plan per call of the one statement cost more than the
-- planning saved (BENCHMARKS.md). jq_claim_keyed sets the default back for
-- itself (a function's SET holds for the functions it calls).
CREATE OR REPLACE FUNCTION {schema}.jq_claim_keyed_take(
    queues text[], lim integer, now timestamptz, worker text, expires timestamptz, token uuid
) RETURNS SETOF {schema}.jobs
LANGUAGE plpgsql
VOLATILE
ROWS 10
-- The update's `id = ANY (ids)` must probe the primary key: with a small
-- queue's statistics the planner chose a scan of the whole table.
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $fn$
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
            SELECT 1 FROM {schema}.jobs AS jk
            WHERE jk.queue = q.name AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
            LIMIT 1
        ) AS probe;
    END IF;
    FOREACH k IN ARRAY keyed LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended('jq-keys:{schema}:' || k, 0));
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
                    FROM (SELECT kc.priority, kc.key FROM {schema}.key_cursors AS kc
                          WHERE kc.queue = q ORDER BY kc.priority DESC LIMIT 1) AS c
                    WHERE (SELECT 1 FROM {schema}.jobs AS jk
                           WHERE jk.queue = q AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
                             AND jk.priority > c.priority
                           LIMIT 1) IS NULL
                      AND (SELECT 1 FROM {schema}.jobs AS jk
                           WHERE jk.queue = q AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
                             AND jk.priority = c.priority AND jk.key > c.key
                           LIMIT 1) IS NOT NULL),
                   (SELECT jk.priority FROM {schema}.jobs AS jk
                    WHERE jk.queue = q AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
                    ORDER BY jk.priority DESC LIMIT 1))
        INTO prio
        WHERE NOT EXISTS (SELECT 1 FROM {schema}.key_limits AS l
                          WHERE l.queue = q AND (l.key > '' OR l.rate_limit IS NOT NULL))
          AND NOT EXISTS (SELECT 1 FROM {schema}.jobs AS jc
                          WHERE jc.queue = q AND jc.key IS NULL AND jc.state IN ('pending', 'scheduled')
                            AND (jc.state = 'pending' OR jc.run_at <= now));
        IF prio IS NOT NULL THEN
            RETURN QUERY
            WITH lims AS (
                -- The default concurrency; NULL: unlimited.
                SELECT (SELECT l.concurrency FROM {schema}.key_limits AS l WHERE l.queue = q AND l.key = '') AS c
            ),
            cur AS (
                SELECT (SELECT kc.key FROM {schema}.key_cursors AS kc
                        WHERE kc.queue = q AND kc.priority = prio) AS key
            ),
            -- The rows of jobs_keyed from the cursor's key on, then
            -- (wrapped) from the smallest up to it, each range at most a
            -- few rows per head wanted: read as far as the heads below
            -- are locked (neither is materialized; the second is read
            -- only when the first ends short of `lim` heads, and only if
            -- the first reached its end, not its limit).
            range1 AS NOT MATERIALIZED (
                SELECT jk.key, jk.run_at, jk.id, jk.ctid FROM {schema}.jobs AS jk
                WHERE jk.queue = q AND jk.priority = prio AND jk.key IS NOT NULL
                  AND jk.state IN ('pending', 'scheduled') AND (jk.state = 'pending' OR jk.run_at <= now)
                  AND jk.key > coalesce((SELECT cur.key FROM cur), '')
                ORDER BY jk.priority DESC, jk.key, jk.run_at, jk.id
                LIMIT 4 * lim
            ),
            range2 AS NOT MATERIALIZED (
                SELECT jk.key, jk.run_at, jk.id, jk.ctid FROM {schema}.jobs AS jk
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
                SELECT rr.key FROM {schema}.jobs AS rr
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
                    SELECT jk.state, jk.flow FROM {schema}.jobs AS jk
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
                            AND NOT EXISTS (SELECT 1 FROM {schema}.jobs AS jk
                                            WHERE jk.queue = q AND jk.key IS NOT NULL
                                              AND jk.state IN ('pending', 'scheduled') AND jk.priority < prio)))
                       AND NOT EXISTS (SELECT 1 FROM taken AS t WHERE t.flow & 2 <> 0 AND t.state <> 'pending')
                       AS alone
            ),
            moved AS (
                INSERT INTO {schema}.key_cursors AS c (queue, priority, key)
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
                UPDATE {schema}.jobs AS j
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
