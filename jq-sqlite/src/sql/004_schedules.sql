-- Schema version 4: recurring periodic jobs (Storage::fire). One row per
-- periodic job: its cursor (the last tick handled) and what operators read.
-- Instants in microseconds (the storage's clock); last_job a 16-byte UUID
-- BLOB. A handful of rows: no index besides the key. Existing jobs are
-- untouched.
CREATE TABLE schedules (
    name          TEXT    PRIMARY KEY,
    queue         TEXT    NOT NULL,
    spec          TEXT    NOT NULL,
    zone          TEXT    NOT NULL,
    cursor        INTEGER NOT NULL,
    last_job      BLOB,
    missed        INTEGER NOT NULL DEFAULT 0,
    last_missed   INTEGER,
    declared_at   INTEGER NOT NULL,
    run_requested INTEGER
);
