-- Migration 4: named roles (RoleStorage::elect), e.g. "maintenance": the one
-- worker pool per schema that runs promote, recover and purge.
--
-- `{schema}` is replaced by the configured (quoted) schema name.
--
-- One row per held role: the holder's token (it renews with it), its name
-- for operators, and when the role is free unless renewed (the storage's
-- clock, like every instant jq writes). Resigning deletes the row. A
-- handful of rows, written a few times a minute: the primary key is all.
CREATE TABLE {schema}.leaders (
    role       text        PRIMARY KEY,
    token      uuid        NOT NULL,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL
);
