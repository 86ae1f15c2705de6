//! The schema the migrator leaves: a fresh schema, migrated, dumped with
//! `pg_dump --schema-only` and normalised, is compared catalog object by
//! catalog object (tables, columns, types, defaults, constraints, indexes
//! with their predicates and included columns, functions with their
//! bodies and settings, triggers, sequences, comments) with
//! `tests/data/schema-0.1.sql`, the normalised dump of what migrations 1
//! to 19 made before the 0.1 baseline and the function files replaced them
//! (taken at c685e7e, where this test passed on that chain), with the
//! renames of [`CHANGES`] applied. Then the migrator's refusals: an edited
//! migration, a schema made before the baseline, newer migrations or
//! functions, another text of the same functions' generation; and an
//! older generation replaced.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use common::Fixture;
use jq_core::Clock;
use jq_core::storage::Storage;
use jq_postgres::{FUNCTIONS_VERSION, PostgresError, PostgresStorage, SCHEMA_VERSION, SchemaPart};

/// The committed dump: the schema migrations 1 to 19 made (c685e7e),
/// normalised by [`normalise`].
const DUMP_0_1: &str = include_str!("data/schema-0.1.sql");

/// What 0.1 changed on purpose, as text replacements applied to the whole
/// committed dump (names and bodies) before comparing; nothing else may
/// differ.
const CHANGES: &[(&str, &str, &str)] = &[
    // docs/GLOSSARY.md retired `schedules`: the concept is the periodic job.
    ("schedules", "periodic_jobs", "the table of periodic jobs, and its primary key"),
    // One name per concept: jq-core's PeriodicInfo::triggered_at.
    ("run_requested", "triggered_at", "the pending trigger's column"),
    // Retired names in the workflow functions' comments (the word is ack).
    ("the retried parent's completion does not count", "the retried parent's ack does not count", "comment"),
    ("A batch of completions alone (the", "A batch of acks alone (the", "comment"),
    // The migrations the comment named are gone; the function has its file.
    ("(see jq-postgres migrations 10 and 15)", "(see jq-postgres/src/functions/enqueue.sql)", "enqueue's COMMENT"),
    // Benchmark figures and session numbers left the code's comments.
    (
        "took the 10,000-into-1 fan-in from 92% to 64% of the\n    -- plain drain (BENCHMARKS.md, session 22).",
        "took a wide fan-in far below the plain drain's rate\n    -- (BENCHMARKS.md's workflow scenarios).",
        "jq_flow_moved's comment",
    ),
    // jq_claim_keyed's setting came from an ALTER FUNCTION, now from its
    // CREATE: the same setting (pg_dump prints both alike), no change.
];

/// The migrator's own tables, which 0.1 changed (a checksum per migration;
/// the functions' generation, checksum and signatures): not the schema jq
/// runs on, so left out of both sides; the tests below check what the
/// migrator does with them.
const BOOKKEEPING: &[&str] = &["jq_migrations", "jq_functions"];

/// The tables later migrations added (2: durable jobs), with their
/// constraints: not 0.1's schema, so left out of this build's side of the
/// comparison with 0.1's dump.
const ADDED_SINCE_0_1: &[&str] = &["journal", "signals", "waits", "jobs_unique_created"];

/// The committed dump with [`CHANGES`] applied, without [`BOOKKEEPING`].
fn expected() -> BTreeMap<String, String> {
    let mut text = DUMP_0_1.to_owned();
    for (old, new, _) in CHANGES {
        assert!(text.contains(old), "the documented change {old:?} -> {new:?} matches nothing in the dump");
        text = text.replace(old, new);
    }
    without_bookkeeping(parse(&text))
}

/// `objects` without the migrator's tables and their constraints.
fn without_bookkeeping(objects: BTreeMap<String, String>) -> BTreeMap<String, String> {
    objects
        .into_iter()
        .filter(|(key, _)| {
            let name = key.split_whitespace().nth(1).unwrap_or_default();
            !BOOKKEEPING.contains(&name)
        })
        .collect()
}

/// The line that heads each object of a normalised dump: `-- object: KIND
/// NAME`, as pg_dump names it (`TABLE jobs`, `CONSTRAINT jobs jobs_pkey`,
/// `FUNCTION enqueue(text, json, ...)`). Function bodies hold comments
/// too, none of them starting so.
const HEAD: &str = "-- object: ";

/// `pg_dump` of the server's major version (an older or newer one prints
/// some objects differently): Debian's `/usr/lib/postgresql/<major>/bin`,
/// else `pg_dump` on `PATH` when `--version` says that major.
fn pg_dump_for(major: u32) -> Result<PathBuf, String> {
    let debian = PathBuf::from(format!("/usr/lib/postgresql/{major}/bin/pg_dump"));
    if debian.is_file() {
        return Ok(debian);
    }
    let on_path = Command::new("pg_dump").arg("--version").output();
    match on_path {
        Ok(out) if String::from_utf8_lossy(&out.stdout).contains(&format!(") {major}.")) => Ok("pg_dump".into()),
        Ok(out) => Err(format!(
            "no pg_dump of PostgreSQL {major} (the server's): not at {}, and the one on PATH is {}",
            debian.display(),
            String::from_utf8_lossy(&out.stdout).trim()
        )),
        Err(e) => Err(format!(
            "no pg_dump of PostgreSQL {major} (the server's): not at {}, none on PATH ({e})",
            debian.display()
        )),
    }
}

/// The server's major version.
async fn server_major(s: &jq_postgres::PostgresStorage) -> u32 {
    let num: String = sqlx::query_scalar("SHOW server_version_num").fetch_one(s.pool()).await.unwrap();
    num.parse::<u32>().unwrap() / 10_000
}

/// `pg_dump --schema-only` of `schema`, without owners and privileges.
fn dump(pg_dump: &PathBuf, schema: &str) -> String {
    let out = Command::new(pg_dump)
        .args(["--schema-only", "--no-owner", "--no-privileges", "--schema", schema, "--dbname", &common::url()])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", pg_dump.display()));
    assert!(out.status.success(), "{} failed: {}", pg_dump.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A dump's objects by (kind, name), each its SQL: pg_dump's comments
/// (the object heads, the banner), its `SET` lines and its blank lines
/// between objects left out, and the schema's name replaced by
/// `{schema}`. Sorted by the map, so the order pg_dump chose (by
/// dependencies and object ids, which differ between two ways of making
/// the same schema) does not count.
fn normalise(dump: &str, schema: &str) -> BTreeMap<String, String> {
    let dump = dump.replace(schema, "{schema}");
    let mut objects = BTreeMap::new();
    let mut current: Option<(String, Vec<&str>)> = None;
    let lines: Vec<&str> = dump.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line == "--" && lines.get(i + 1) == Some(&"-- PostgreSQL database dump complete") {
            break;
        }
        // An object's head: `--`, `-- Name: N; Type: T; Schema: S; Owner: O`, `--`.
        if line == "--"
            && let Some(head) = lines.get(i + 1).and_then(|l| l.strip_prefix("-- Name: "))
            && lines.get(i + 2) == Some(&"--")
        {
            if let Some((key, body)) = current.take() {
                objects.insert(key, tidy(&body));
            }
            let (name, rest) = head.split_once("; Type: ").unwrap();
            let kind = rest.split_once("; Schema: ").unwrap().0;
            current = Some((format!("{kind} {name}"), Vec::new()));
            i += 3;
            continue;
        }
        if let Some((_, body)) = current.as_mut() {
            body.push(line);
        }
        i += 1;
    }
    if let Some((key, body)) = current.take() {
        objects.insert(key, tidy(&body));
    }
    objects
}

/// An object's lines without the `SET` lines pg_dump writes between
/// objects (`SET default_tablespace = '';`) and the blank lines around.
fn tidy(body: &[&str]) -> String {
    let kept: Vec<&str> =
        body.iter().copied().filter(|l| !(l.starts_with("SET default_") && l.ends_with(';'))).collect();
    let text = kept.join("\n");
    text.trim_matches('\n').trim_end().to_owned()
}

/// A normalised dump as text: each object after its [`HEAD`] line, in
/// (kind, name) order.
fn render(objects: &BTreeMap<String, String>) -> String {
    objects.iter().map(|(key, sql)| format!("{HEAD}{key}\n{sql}\n")).collect::<Vec<_>>().join("\n")
}

/// The objects of a text [`render`] wrote.
fn parse(text: &str) -> BTreeMap<String, String> {
    let mut objects = BTreeMap::new();
    let mut current: Option<(String, Vec<&str>)> = None;
    for line in text.lines() {
        if let Some(key) = line.strip_prefix(HEAD) {
            if let Some((key, body)) = current.take() {
                objects.insert(key, body.join("\n").trim_end().to_owned());
            }
            current = Some((key.to_owned(), Vec::new()));
        } else if let Some((_, body)) = current.as_mut() {
            body.push(line);
        }
    }
    if let Some((key, body)) = current.take() {
        objects.insert(key, body.join("\n").trim_end().to_owned());
    }
    objects
}

/// The lines of `old` and `new` with `-` before those only in `old`, `+`
/// before those only in `new` (a longest common subsequence), and two
/// lines of context around each change.
fn line_diff(old: &str, new: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', a[i]));
            i += 1;
        } else {
            ops.push(('+', b[j]));
            j += 1;
        }
    }
    let near = |k: usize| ops[k.saturating_sub(2)..(k + 3).min(ops.len())].iter().any(|(op, _)| *op != ' ');
    let mut out = Vec::new();
    let mut skipped = false;
    for (k, (op, line)) in ops.iter().enumerate() {
        if near(k) {
            if skipped {
                out.push("  ...".to_owned());
                skipped = false;
            }
            out.push(format!("{op} {line}"));
        } else {
            skipped = true;
        }
    }
    out.join("\n")
}

/// What differs between the expected objects and those found, object by
/// object; empty when they agree.
fn differences(expected: &BTreeMap<String, String>, found: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (key, sql) in expected {
        match found.get(key) {
            None => out.push(format!("missing: {key}\n{sql}")),
            Some(got) if got != sql => out.push(format!("differs: {key}\n{}", line_diff(sql, got))),
            Some(_) => {}
        }
    }
    for (key, sql) in found {
        if !expected.contains_key(key) {
            out.push(format!("unexpected: {key}\n{sql}"));
        }
    }
    out
}

/// A schema migrated from nothing by this build (the baseline, then the
/// function files) is, object by object, the schema the 19 migrations
/// before 0.1 made, renamed as [`CHANGES`] says.
#[tokio::test]
async fn a_fresh_schema_is_the_old_chains_schema_renamed() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;
    let major = server_major(&s).await;
    let pg_dump = match pg_dump_for(major) {
        Ok(p) => p,
        Err(reason) if jq_testkit::services::required() => {
            panic!("the schema dump test must run ({} is set), but {reason}", jq_testkit::services::REQUIRE_VAR)
        }
        Err(reason) => {
            eprintln!("jq: skipping the schema dump test: {reason} (install postgresql-client-{major})");
            return;
        }
    };
    let found = normalise(&dump(&pg_dump, &f.schema), &f.schema);
    let since_0_1: BTreeMap<String, String> = without_bookkeeping(found.clone())
        .into_iter()
        .filter(|(key, _)| {
            let name = key.split_whitespace().nth(1).unwrap_or_default();
            !ADDED_SINCE_0_1.contains(&name)
        })
        .collect();
    let wrong = differences(&expected(), &since_0_1);
    if !wrong.is_empty() {
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("schema-fresh.sql");
        std::fs::write(&path, render(&found)).unwrap();
        panic!(
            "the migrated schema differs from tests/data/schema-0.1.sql (with CHANGES applied) in {} object(s) \
             (this build's, normalised, is in {}; `-` lines are the dump's, `+` this build's):\n\n{}",
            wrong.len(),
            path.display(),
            wrong.join("\n\n")
        );
    }
    s.close().await;
    f.cleanup().await;
}

/// The normaliser reads back what it writes, and the diff marks what
/// changed.
#[test]
fn a_normalised_dump_reads_back_and_diffs_by_line() {
    let dump = "--\n-- PostgreSQL database dump\n--\n\nSET statement_timeout = 0;\n\n--\n-- Name: t; Type: TABLE; \
                Schema: s_x; Owner: -\n--\n\nCREATE TABLE s_x.t (\n    a integer\n);\n\n\nSET default_tablespace \
                = '';\n\n--\n-- Name: f(); Type: FUNCTION; Schema: s_x; Owner: -\n--\n\nCREATE FUNCTION s_x.f() \
                RETURNS void\n    LANGUAGE plpgsql\n    AS $$\n-- a comment in the body\nBEGIN\nEND\n$$;\n\n\n--\n-- \
                PostgreSQL database dump complete\n--\n\n";
    let objects = normalise(dump, "s_x");
    assert_eq!(objects.keys().collect::<Vec<_>>(), ["FUNCTION f()", "TABLE t"]);
    assert_eq!(objects["TABLE t"], "CREATE TABLE {schema}.t (\n    a integer\n);");
    assert!(objects["FUNCTION f()"].ends_with("-- a comment in the body\nBEGIN\nEND\n$$;"), "{objects:?}");
    assert_eq!(parse(&render(&objects)), objects);
    assert_eq!(line_diff("a\nb\nc", "a\nx\nc"), "  a\n- b\n+ x\n  c");
}

/// The [`PostgresError`] a failed `migrate` carries.
async fn refusal(s: &PostgresStorage) -> PostgresError {
    match s.migrate().await {
        Ok(n) => panic!("migrate applied {n} migration(s) instead of refusing"),
        Err(jq_core::Error::Backend { source, .. }) => match source.downcast::<PostgresError>() {
            Ok(e) => *e,
            Err(other) => panic!("not a PostgresError: {other}"),
        },
        Err(e) => panic!("not a backend error: {e}"),
    }
}

/// Runs `sql` (several statements) on the schema's pool.
async fn run(s: &PostgresStorage, sql: &str) {
    let q = format!("\"{}\"", s.schema());
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.replace("{schema}", &q))).execute(s.pool()).await.unwrap();
}

/// The body (`prosrc`) of function `name` of the schema, if it has one.
async fn body(s: &PostgresStorage, name: &str) -> Option<String> {
    sqlx::query_scalar(
        "SELECT p.prosrc FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace \
         WHERE n.nspname = $1 AND p.proname = $2",
    )
    .bind(s.schema())
    .bind(name)
    .fetch_optional(s.pool())
    .await
    .unwrap()
}

/// The functions' record: (generation, checksum, signatures) per install,
/// oldest first.
async fn function_records(s: &PostgresStorage) -> Vec<(i32, Vec<u8>, Vec<String>)> {
    let sql =
        format!("SELECT generation, checksum, signatures FROM \"{}\".jq_functions ORDER BY generation", s.schema());
    sqlx::query_as(sqlx::AssertSqlSafe(sql)).fetch_all(s.pool()).await.unwrap()
}

/// A migration recorded with another checksum than this build's file (an
/// edited release) is refused, naming it, and the schema is left alone.
#[tokio::test]
async fn a_migration_applied_with_another_text_is_refused() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;
    run(&s, "UPDATE {schema}.jq_migrations SET checksum = '\\x0102' WHERE version = 1").await;
    match refusal(&s).await {
        PostgresError::MigrationChanged { version: 1, name, found: Some(found), known, .. } => {
            assert_eq!((name.as_str(), found.as_str()), ("baseline", "0102"));
            assert_eq!(known.len(), 96, "SHA-384, in hex: {known}");
        }
        e => panic!("not MigrationChanged: {e}"),
    }
    s.close().await;
    f.cleanup().await;
}

/// A schema a build before 0.1 made (its jq_migrations records 19
/// migrations and no checksum) is refused as such, and nothing is added
/// to it.
#[tokio::test]
async fn a_schema_made_before_the_baseline_is_refused() {
    jq_testkit::needs!(postgres);
    let schema = format!("jq_test_{}", uuid::Uuid::new_v4().simple());
    let s = common::connect(&schema, Clock::system()).await;
    run(
        &s,
        "CREATE SCHEMA {schema}; \
         CREATE TABLE {schema}.jq_migrations (version integer PRIMARY KEY, name text NOT NULL, \
                                              applied_at timestamptz NOT NULL DEFAULT now()); \
         INSERT INTO {schema}.jq_migrations (version, name) SELECT v, 'm' || v FROM generate_series(1, 19) AS v;",
    )
    .await;
    let e = refusal(&s).await;
    assert!(matches!(e, PostgresError::MigrationChanged { version: 1, found: None, .. }), "{e:?}");
    assert!(e.to_string().contains("before 0.1"), "{e}");
    let tables: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE schemaname = $1")
        .bind(&schema)
        .fetch_one(s.pool())
        .await
        .unwrap();
    assert_eq!(tables, 1, "only the old jq_migrations: the refusal rolled everything back");
    s.close().await;
    common::drop_schema(&schema).await;
}

/// A schema with a newer migration, or a newer generation of functions,
/// than this build knows is refused with `TooNew` (what an old worker
/// meets after an upgrade), and keeps what the newer build installed.
#[tokio::test]
async fn a_schema_newer_than_this_build_is_too_new_and_left_as_it_is() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;
    run(
        &s,
        &format!(
            "INSERT INTO {{schema}}.jq_migrations (version, name, checksum) VALUES ({}, 'later', '\\x00')",
            SCHEMA_VERSION + 1
        ),
    )
    .await;
    match refusal(&s).await {
        PostgresError::TooNew { part: SchemaPart::Migrations, found, known, .. } => {
            assert_eq!((found, known), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
        }
        e => panic!("not TooNew: {e}"),
    }
    run(&s, &format!("DELETE FROM {{schema}}.jq_migrations WHERE version > {SCHEMA_VERSION}")).await;

    // A newer generation's functions (one stands for them all): an older
    // build's migrate must not put its own back.
    run(
        &s,
        &format!(
            "INSERT INTO {{schema}}.jq_functions (generation, checksum, signatures) \
             SELECT {}, '\\x00', signatures FROM {{schema}}.jq_functions; \
             CREATE OR REPLACE FUNCTION {{schema}}.jq_workflow_count(workflows uuid[], froms text[], tos text[]) RETURNS void \
             LANGUAGE plpgsql AS $$ BEGIN /* a newer generation */ END $$;",
            FUNCTIONS_VERSION + 1
        ),
    )
    .await;
    let e = refusal(&s).await;
    match &e {
        PostgresError::TooNew { part: SchemaPart::Functions, found, known, .. } => {
            assert_eq!((*found, *known), (FUNCTIONS_VERSION + 1, FUNCTIONS_VERSION));
        }
        e => panic!("not TooNew: {e}"),
    }
    assert!(e.to_string().contains("functions generation"), "{e}");
    assert!(body(&s, "jq_workflow_count").await.unwrap().contains("a newer generation"));
    s.close().await;
    f.cleanup().await;
}

/// Functions recorded as this build's generation with another checksum
/// (a build that edited them without a new generation) are refused.
#[tokio::test]
async fn the_same_generation_with_other_texts_is_refused() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;
    run(&s, "UPDATE {schema}.jq_functions SET checksum = '\\x0a0b'").await;
    match refusal(&s).await {
        PostgresError::FunctionsChanged { generation, found, .. } => {
            assert_eq!((generation, found.as_str()), (FUNCTIONS_VERSION, "0a0b"));
        }
        e => panic!("not FunctionsChanged: {e}"),
    }
    s.close().await;
    f.cleanup().await;
}

/// An older generation's functions are replaced by this build's, in place
/// (a function of the schema's own, not recorded, stays); the function it
/// recorded and this build has not is dropped; the install is recorded,
/// and the next migrate has nothing to do.
#[tokio::test]
async fn an_older_generation_is_replaced_and_what_only_it_had_is_dropped() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(Clock::system()).await;
    let installed = function_records(&s).await;
    assert_eq!(installed.len(), 1, "{installed:?}");
    let (generation, checksum, signatures) = installed[0].clone();
    assert_eq!(generation, FUNCTIONS_VERSION);
    let fresh_body = body(&s, "jq_workflow_count").await.unwrap();
    run(
        &s,
        "DELETE FROM {schema}.jq_functions; \
         INSERT INTO {schema}.jq_functions (generation, checksum, signatures) \
         VALUES (0, '\\x00', ARRAY['jq_retired(integer)', 'jq_workflow_count(uuid[],text[],text[])']); \
         CREATE FUNCTION {schema}.jq_retired(integer) RETURNS integer LANGUAGE sql AS 'SELECT 1'; \
         CREATE FUNCTION {schema}.users_own(integer) RETURNS integer LANGUAGE sql AS 'SELECT 2'; \
         CREATE OR REPLACE FUNCTION {schema}.jq_workflow_count(workflows uuid[], froms text[], tos text[]) RETURNS void \
         LANGUAGE plpgsql AS $$ BEGIN /* generation 0 */ END $$;",
    )
    .await;

    assert_eq!(s.migrate().await.unwrap(), 0, "no migration: only the functions");
    assert_eq!(body(&s, "jq_workflow_count").await.as_deref(), Some(fresh_body.as_str()), "replaced");
    assert_eq!(body(&s, "jq_retired").await, None, "recorded by generation 0 only: dropped");
    assert_eq!(body(&s, "users_own").await.as_deref(), Some("SELECT 2"), "not jq's: kept");
    assert_eq!(
        function_records(&s).await,
        [
            (0, vec![0], vec!["jq_retired(integer)".to_owned(), "jq_workflow_count(uuid[],text[],text[])".to_owned()]),
            (generation, checksum.clone(), signatures.clone())
        ]
    );

    assert_eq!(s.migrate().await.unwrap(), 0);
    assert_eq!(function_records(&s).await.len(), 2, "up to date: nothing installed again");
    s.close().await;
    f.cleanup().await;
}
