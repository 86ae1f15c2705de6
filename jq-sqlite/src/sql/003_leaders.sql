-- Schema version 3: named roles (RoleStorage::elect). One row per role held:
-- the holder's token (16-byte UUID BLOB), its name for operators, and when
-- the role is free unless renewed (microseconds, the storage's clock).
-- Resigning deletes the row. A handful of rows: no index besides the key.
CREATE TABLE leaders (
    role       TEXT    PRIMARY KEY,
    token      BLOB    NOT NULL,
    holder     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);
