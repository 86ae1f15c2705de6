//! The schema the migrator leaves: a fresh schema, migrated, dumped with
//! `pg_dump --schema-only` and normalised, is compared catalog object by
//! catalog object (tables, columns, types, defaults, constraints, indexes
//! with their predicates and included columns, functions with their
//! bodies and settings, triggers, sequences, comments) with
//! `tests/data/schema-0.1.sql`, the normalised dump of what migrations 1
//! to 19 made before 0.1 replaced them.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use common::Fixture;

/// The committed dump: the schema migrations 1 to 19 made (c685e7e),
/// normalised by [`normalise`].
const DUMP_0_1: &str = include_str!("data/schema-0.1.sql");

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

/// A schema migrated from nothing by this build is, object by object, the
/// committed dump.
#[tokio::test]
async fn a_fresh_schema_is_the_schema_of_the_committed_dump() {
    jq_testkit::needs!(postgres);
    let f = Fixture::new().await;
    let s = f.connect(jq_core::Clock::system()).await;
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
    let expected = parse(DUMP_0_1);
    let wrong = differences(&expected, &found);
    if !wrong.is_empty() {
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("schema-fresh.sql");
        std::fs::write(&path, render(&found)).unwrap();
        panic!(
            "the migrated schema differs from tests/data/schema-0.1.sql in {} object(s) (this build's, normalised, \
             is in {}):\n\n{}",
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
