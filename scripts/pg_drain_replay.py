#!/usr/bin/env python3
"""Writes the SQL that replays PostgreSQL's plain drain as one git revision
of jq runs it (scripts/pg-instructions.sh runs it under callgrind).

    python3 scripts/pg_drain_replay.py REV TAG [BATCH] > setup.sql

The SQL creates schema `s_<TAG>` as the revision's `migrate` makes it: its
migrations (its schema.rs lists them, its migrations/ holds them: the chain
of 19 before 0.1, the baseline since), then its functions where they are
files of their own (src/functions/, since 0.1; before, the migrations
created them), in the order schema.rs lists them. Then a table `template` with
20,000 pending plain jobs (fixed ids and times, so every replay walks the
same rows in the same order), and two procedures:

- `reset()`: the jobs table back to the template's 20,000 pending jobs;
- `drain()`: the revision's own claim.sql and settle.sql (with `keyed`,
  claim_keyed.sql, and each claim's settle after the next claim, so that
  a claim meets the previous one's jobs Running, as the bench's pool
  does; and, in a revision that has it, claim_held.sql after each short
  keyed claim, as its storage ran it) (its COLUMNS and
  schema substituted, `$n` bound to plpgsql variables, which plan and cache
  as the storage's prepared statements do), claims of BATCH (default 120,
  what the bench's drain claims per statement on a quiet machine: its
  pg_stat_statements calls) and one settle of each claim's jobs as acks,
  committing after each statement, the claim positions carried forward as
  hints.rs does, until a claim takes nothing.

What it leaves out: the client, the network, concurrency between claims
and settles, the heartbeat and the enqueue. What it keeps: every row write
and index entry of the drain, and each statement's planning and executor
setup, which is where a schema or statement change shows.
"""
import os
import re
import subprocess
import sys


def show(rev: str, path: str) -> str:
    if rev == "WORKTREE":
        with open(path, encoding="utf-8") as f:
            return f.read()
    return subprocess.run(["git", "show", f"{rev}:{path}"], check=True, capture_output=True, text=True).stdout


def exists(rev: str, path: str) -> bool:
    if rev == "WORKTREE":
        return os.path.exists(path)
    return subprocess.run(["git", "cat-file", "-e", f"{rev}:{path}"], capture_output=True).returncode == 0


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rev, tag = sys.argv[1], sys.argv[2]
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 120
    keyed = len(sys.argv) > 4 and sys.argv[4] == "keyed"
    schema_rs = show(rev, "jq-postgres/src/schema.rs")
    columns = re.search(r'const COLUMNS: &str = "(.*?)";', schema_rs, re.S)
    if columns is None:
        sys.exit(f"pg_drain_replay: no COLUMNS in {rev}'s jq-postgres/src/schema.rs")
    columns = re.sub(r"\\\n\s*", "", columns.group(1))
    migrations = re.findall(r'include_str!\("\.\./migrations/([^"]+)"\)', schema_rs)
    functions = re.findall(r'include_str!\("functions/([^"]+)"\)', schema_rs)
    if not migrations:
        sys.exit(f"pg_drain_replay: no migrations in {rev}'s jq-postgres/src/schema.rs")
    schema = f'"s_{tag}"'

    def fill(text: str) -> str:
        return text.replace("{schema}", schema).replace("{columns}", columns)

    def bound(path: str) -> str:
        # Comments out (a `$n` in one would do no harm, but the text is
        # shorter to read back), `$n` to the plpgsql variable `pn`.
        text = "\n".join(line for line in fill(show(rev, path)).splitlines() if not line.lstrip().startswith("--"))
        return re.sub(r"\$(\d+)", r"p\1", text).rstrip().rstrip(";")

    out = [f"DROP SCHEMA IF EXISTS {schema} CASCADE;", f"CREATE SCHEMA {schema};"]
    # Each migration in its own transaction, as schema.rs applies them.
    for name in migrations:
        out.append("BEGIN;\n" + fill(show(rev, f"jq-postgres/migrations/{name}")) + "\n;COMMIT;")
    # The functions after the migrations, in one transaction, as migrate
    # installs them.
    if functions:
        out.append("BEGIN;\n" + "\n".join(fill(show(rev, f"jq-postgres/src/functions/{name}")) for name in functions)
                   + "\n;COMMIT;")
    claim = bound("jq-postgres/src/sql/claim_keyed.sql" if keyed else "jq-postgres/src/sql/claim.sql")
    # The keyed drain: job i's key is k(i mod 10,000), two jobs per key,
    # every key limited to one Running job (the bench's keyed scenario).
    key = "'k' || (i % 10000)" if keyed else "NULL"
    limits = (f"INSERT INTO {schema}.key_limits (queue, key, concurrency) VALUES ('default', '', 1);"
              if keyed else "")
    # Before the glossary's vocabulary (b51e322), the settle was complete.sql.
    settle_sql = "jq-postgres/src/sql/settle.sql"
    if not exists(rev, settle_sql):
        settle_sql = "jq-postgres/src/sql/complete.sql"
    settle = bound(settle_sql)
    # Until the keyed claim said itself what held a short claim back, the
    # storage read it after every short claim with claim_held.sql: the
    # replay of such a revision reads it too, or it would leave out work
    # that later revisions do in the claim.
    held_sql = "jq-postgres/src/sql/claim_held.sql"
    after_short = ""
    if keyed and exists(rev, held_sql):
        after_short = f"""IF cardinality(ids) < p2 THEN
            DECLARE
                queues constant text[] := p1; at constant timestamptz := p3;
            BEGIN
                DECLARE p1 text[] := queues; p2 timestamptz := at; reason record;
                BEGIN
                    FOR reason IN {bound(held_sql)} LOOP NULL; END LOOP;
                END;
            END;
        END IF;"""
    out.append(f"""
CREATE TABLE {schema}.template (LIKE {schema}.jobs INCLUDING DEFAULTS);
INSERT INTO {schema}.template (id, queue, kind, payload, priority, state, attempts, max_attempts, run_at, created_at{", key" if keyed else ""})
SELECT md5('job' || i)::uuid, 'default', 'noop', '{{}}', 0, 'pending', 0, 3,
       timestamptz '2026-01-01' + i * interval '1 microsecond', timestamptz '2026-01-01' + i * interval '1 microsecond'{(", " + key) if keyed else ""}
FROM generate_series(1, 20000) AS i;
{limits}

CREATE PROCEDURE {schema}.reset() LANGUAGE plpgsql AS $reset$
BEGIN
    TRUNCATE {schema}.jobs;
    -- Finished jobs' counts (since the chain's migration 8).
    IF to_regclass('{schema}.job_counts') IS NOT NULL THEN
        EXECUTE 'TRUNCATE {schema}.job_counts';
    END IF;
    INSERT INTO {schema}.jobs SELECT * FROM {schema}.template;
    {"TRUNCATE " + schema + ".key_cursors;" if keyed else ""}
END $reset$;

CREATE PROCEDURE {schema}.drain() LANGUAGE plpgsql AS $drain$
DECLARE
    p1 text[] := '{{default}}'; p2 int4 := {batch}; p3 timestamptz := timestamptz '2026-06-01';
    p4 text := 'replay'; p5 timestamptz := timestamptz '2026-06-01 00:05'; p6 uuid := md5('token')::uuid;
    p7 timestamptz[] := '{{NULL,NULL,NULL,NULL}}'; p8 uuid[] := '{{NULL,NULL,NULL,NULL}}';
    ids uuid[]; held uuid[] := '{{}}'; r record; settled record; n integer := 0;
BEGIN
    LOOP
        ids := '{{}}';
        FOR r IN {claim} LOOP
            CONTINUE WHEN r.id IS NULL;
            ids := ids || r.id;
            -- Priority 0's band goes on after the last job taken (hints.rs).
            IF p7[4] IS NULL OR (r.run_at, r.id) > (p7[4], p8[4]) THEN
                p7[4] := r.run_at; p8[4] := r.id;
            END IF;
        END LOOP;
        COMMIT;
        {after_short}
        EXIT WHEN cardinality(ids) = 0 AND cardinality(held) = 0;
        n := n + cardinality(ids);
        {"-- The settle lags one claim: its jobs are Running during the next." if keyed else ""}
        {"held := held || ids; ids := held[1:cardinality(held) - cardinality(ids)]; held := held[cardinality(ids) + 1:];" if keyed else ""}
        CONTINUE WHEN cardinality(ids) = 0;
        DECLARE
            k constant integer := cardinality(ids);
            p1 uuid[] := ids; p2 uuid[] := array_fill(md5('token')::uuid, ARRAY[k]);
            p3 int2[] := array_fill(0::int2, ARRAY[k]); p4 text[] := array_fill(NULL::text, ARRAY[k]);
            p5 timestamptz[] := array_fill(NULL::timestamptz, ARRAY[k]); p6 text[] := array_fill(NULL::text, ARRAY[k]);
            p7 timestamptz := timestamptz '2026-06-01 00:00:01'; p8 text := '2026-06-01T00:00:01Z';
            p9 text := 'jq_replay';
        BEGIN
            FOR settled IN {settle} LOOP NULL; END LOOP;
        END;
        COMMIT;
    END LOOP;
    IF n <> 20000 THEN
        RAISE EXCEPTION 'the replay drained % jobs, not 20000', n;
    END IF;
END $drain$;
""")
    print("\n".join(out))


if __name__ == "__main__":
    main()
