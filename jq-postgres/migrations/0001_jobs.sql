-- Migration 1: the jobs table and its indexes.
--
-- `{schema}` is replaced by the configured (quoted) schema name before this
-- runs, so two applications can keep separate queues in one database.
--
-- Index design: every index that the hot paths use is partial on the states
-- that path looks at, so finished jobs (which can number millions) never sit
-- in the claim, promote or recover indexes.

CREATE TABLE {schema}.jobs (
    id               uuid        PRIMARY KEY,
    queue            text        NOT NULL,
    kind             text        NOT NULL,
    -- JSON text exactly as enqueued (jsonb would reformat it); cast to jsonb to query it.
    payload          text        NOT NULL,
    priority         smallint    NOT NULL,
    state            text        NOT NULL,
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL,
    run_at           timestamptz NOT NULL,
    created_at       timestamptz NOT NULL,
    finished_at      timestamptz,
    lease_token      uuid,
    lease_worker     text,
    lease_expires_at timestamptz,
    -- [{"attempt": n, "at": "<rfc3339>", "message": "..."}], oldest first.
    errors           jsonb       NOT NULL DEFAULT '[]',
    unique_key       text
);

-- Claim walks this per asked queue in claim order and stops at the limit.
CREATE INDEX jobs_claim ON {schema}.jobs (queue, priority DESC, run_at, id)
    WHERE state IN ('pending', 'scheduled');

-- Promote: due Scheduled jobs.
CREATE INDEX jobs_scheduled ON {schema}.jobs (run_at) WHERE state = 'scheduled';

-- Recover: expired leases.
CREATE INDEX jobs_running ON {schema}.jobs (lease_expires_at) WHERE state = 'running';

-- Uniqueness among live jobs of a queue; enqueue's ON CONFLICT names it, so
-- concurrent enqueuers of one key serialise on this index and never both insert.
CREATE UNIQUE INDEX jobs_unique ON {schema}.jobs (queue, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('scheduled', 'pending', 'running');

-- Purge / retention: finished jobs by state and age.
CREATE INDEX jobs_finished ON {schema}.jobs (state, finished_at)
    WHERE state IN ('completed', 'dead', 'cancelled');
