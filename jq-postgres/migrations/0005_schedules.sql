-- Migration 5: recurring periodic jobs (Storage::fire). Existing jobs are
-- untouched.
--
-- `{schema}` is replaced by the configured (quoted) schema name.
--
-- One row per periodic job: its cursor (the last tick handled, run or
-- skipped), what operators read (`jqctl periodic list`), and a pending run
-- request. A step moves the cursor with a compare-and-set on it in the
-- same transaction that inserts the tick's jobs. A handful of rows, written
-- once per tick: the primary key is all.
CREATE TABLE {schema}.schedules (
    name          text        PRIMARY KEY,
    queue         text        NOT NULL,
    spec          text        NOT NULL,
    zone          text        NOT NULL,
    cursor        timestamptz NOT NULL,
    last_job      uuid,
    missed        bigint      NOT NULL DEFAULT 0,
    last_missed   timestamptz,
    declared_at   timestamptz NOT NULL,
    run_requested timestamptz
);
