//! Schema version 1 (`src/sql/001_schema.sql`), the one 0.1 released:
//!
//! - it builds what the development chain of twelve versions built
//!   (`tests/data/schema-0.1.txt`, that chain's catalog dumped before it
//!   was replaced), fact by fact, with only the renames of [`RENAMES`];
//! - it is never edited again: [`CHECKSUMS`] holds each released
//!   version's SHA-256.
//!
//! The facts are those of the pragmas, not the `CREATE` text of
//! `sqlite_master`: a column added by `ALTER TABLE ADD COLUMN` leaves a
//! table's text unlike a clean `CREATE TABLE` of the same table.
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::fmt::Write as _;

use jq_sqlite::rusqlite::Connection;
use jq_sqlite::schema;
use sha2::{Digest, Sha256};

/// The record of the development chain's catalog (at c685e7e, before the
/// chain was replaced by version 1). Never regenerated.
const RECORD: &str = include_str!("data/schema-0.1.txt");

/// A renamed catalog object: the development chain's name, then 0.1's.
enum Rename {
    /// A table (its automatic indexes follow it).
    Table(&'static str, &'static str),
    /// A column of a table (named as 0.1 names it).
    Column(&'static str, &'static str, &'static str),
}

/// Every difference between the chain's catalog and version 1's: the
/// retired names of docs/GLOSSARY.md ("Retired names": `schedules`, "run
/// now"), and nothing else.
const RENAMES: &[Rename] =
    &[Rename::Table("schedules", "periodic_jobs"), Rename::Column("periodic_jobs", "run_requested", "triggered_at")];

/// The SHA-256 of each released schema version's file (its text with LF
/// line ends), in version order.
const CHECKSUMS: &[(&str, &str)] = &[
    ("001_schema", "39626a0f81fb6942428d5069b75ac6fcddb3cb896f6b46d8ae3ab82d6cab2f37"),
    ("002_durable", "bcae8b8a595b5ace74a4ca4f054fc6f1b739ff0bf25797b01cd6823b00941c77"),
    ("003_unique_created", "56b0fd0527e54f9be63c5d852c33132b80262c99ea6e9ff1524c2e5c597ad0d1"),
];

/// A new in-memory database with schema version 1 alone (what 0.1's
/// `SqliteStorage::open` built; later versions add to it).
fn version_1() -> Connection {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(schema::MIGRATIONS[0].1).unwrap();
    conn
}

/// Every catalog fact of `conn`'s main schema, one per line: each table
/// (by name) with its columns (`table_xinfo`, by position: code that reads
/// by position depends on it), its indexes (`index_list` and `index_xinfo`,
/// by name, a partial index with its `WHERE`), its foreign keys; then the
/// triggers and views.
fn catalog(conn: &Connection) -> String {
    let mut out = String::new();
    let strings = |sql: &str, arg: &str| -> Vec<Vec<String>> {
        let mut stmt = conn.prepare(sql).unwrap();
        let n = stmt.column_count();
        stmt.query_map([arg], |row| {
            (0..n)
                .map(|i| {
                    Ok(match row.get_ref(i)? {
                        jq_sqlite::rusqlite::types::ValueRef::Null => "NULL".to_owned(),
                        jq_sqlite::rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                        jq_sqlite::rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                        other => format!("{other:?}"),
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    };
    let tables = strings(
        "SELECT name, wr, strict FROM pragma_table_list WHERE schema = 'main' AND type = 'table' \
         AND name NOT LIKE 'sqlite_%' AND name <> ?1 ORDER BY name",
        "",
    );
    for t in &tables {
        let name = &t[0];
        writeln!(out, "table {name} without_rowid={} strict={}", t[1], t[2]).unwrap();
        for c in strings(
            "SELECT cid, name, type, \"notnull\", dflt_value, pk, hidden FROM pragma_table_xinfo(?1) ORDER BY cid",
            name,
        ) {
            writeln!(
                out,
                "  column {} {} type={} notnull={} default={} pk={} hidden={}",
                c[0], c[1], c[2], c[3], c[4], c[5], c[6]
            )
            .unwrap();
        }
        for i in strings("SELECT name, seq, \"unique\", origin, partial FROM pragma_index_list(?1) ORDER BY name", name)
        {
            let sql = strings(
                "SELECT coalesce((SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?1), '')",
                &i[0],
            );
            let filter = partial_where(&sql[0][0]).map(|w| format!(" where={w}")).unwrap_or_default();
            writeln!(out, "  index {} seq={} unique={} origin={} partial={}{filter}", i[0], i[1], i[2], i[3], i[4])
                .unwrap();
            for k in strings(
                "SELECT seqno, coalesce(name, '<rowid>'), cid, \"desc\", coll, \"key\" FROM pragma_index_xinfo(?1) \
                 ORDER BY seqno",
                &i[0],
            ) {
                writeln!(out, "    {} {} cid={} desc={} coll={} key={}", k[0], k[1], k[2], k[3], k[4], k[5]).unwrap();
            }
        }
        for f in strings(
            "SELECT id, seq, \"table\", \"from\", \"to\", on_update, on_delete, \"match\" \
             FROM pragma_foreign_key_list(?1) ORDER BY id, seq",
            name,
        ) {
            writeln!(
                out,
                "  foreign_key {} {} {} -> {}.{} on_update={} on_delete={} match={}",
                f[0], f[1], f[3], f[2], f[4], f[5], f[6], f[7]
            )
            .unwrap();
        }
    }
    for kind in ["trigger", "view"] {
        let rows =
            strings("SELECT name, tbl_name, coalesce(sql, '') FROM sqlite_master WHERE type = ?1 ORDER BY name", kind);
        writeln!(out, "{kind}s {}", rows.len()).unwrap();
        for r in rows {
            writeln!(out, "  {kind} {} on={} sql={}", r[0], r[1], squeeze(&r[2])).unwrap();
        }
    }
    out
}

/// A partial index's condition, from its `CREATE INDEX` text, with its
/// white space squeezed; `None` for an index without one.
fn partial_where(sql: &str) -> Option<String> {
    let upper = sql.to_ascii_uppercase();
    let at = upper
        .match_indices("WHERE")
        .map(|(i, _)| i)
        .find(|&i| i > 0 && upper.as_bytes()[i - 1].is_ascii_whitespace())?;
    Some(squeeze(&sql[at + "WHERE".len()..]))
}

/// `text` with every run of white space made one space, and trimmed.
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The record without its comment lines, with [`RENAMES`] applied, its
/// tables in name order again.
fn renamed_record() -> String {
    // one block per table (or section): its unindented line, then the rest
    let mut blocks: Vec<Vec<String>> = Vec::new();
    for line in RECORD.lines().filter(|l| !l.starts_with('#')) {
        match blocks.last_mut() {
            Some(block) if line.starts_with(' ') => block.push(line.to_owned()),
            _ => blocks.push(vec![line.to_owned()]),
        }
    }
    for rename in RENAMES {
        match *rename {
            Rename::Table(old, new) => {
                let header = format!("table {old} ");
                let block = blocks.iter_mut().find(|b| b[0].starts_with(&header)).expect("a renamed table is recorded");
                block[0] = block[0].replacen(&header, &format!("table {new} "), 1);
                let (old_auto, new_auto) = (format!("sqlite_autoindex_{old}_"), format!("sqlite_autoindex_{new}_"));
                for line in block.iter_mut() {
                    *line = line.replace(&old_auto, &new_auto);
                }
            }
            Rename::Column(table, old, new) => {
                let header = format!("table {table} ");
                let block = blocks.iter_mut().find(|b| b[0].starts_with(&header)).expect("its table is recorded");
                let mut found = false;
                for line in block.iter_mut() {
                    let fields: Vec<&str> = line.split(' ').collect();
                    // `  column <cid> <name> ...` and an index's `    <seqno> <name> ...`
                    let at = if line.starts_with("  column ") {
                        4
                    } else if line.starts_with("    ") {
                        5
                    } else {
                        continue;
                    };
                    if fields.get(at) == Some(&old) {
                        let mut fields = fields;
                        fields[at] = new;
                        *line = fields.join(" ");
                        found = true;
                    }
                }
                assert!(found, "the renamed column {table}.{old} is recorded");
            }
        }
    }
    // the sections (triggers, views) stay last, after the tables
    blocks.sort_by_key(|b| (!b[0].starts_with("table "), b[0].starts_with("table ").then(|| b[0].clone())));
    blocks.iter().flatten().map(|l| format!("{l}\n")).collect()
}

/// A line diff of `expected` and `actual` (longest common subsequence):
/// `-` lines only the first has, `+` lines only the second has, each
/// under the table (or section) it belongs to.
fn diff(expected: &str, actual: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    // (mark, line, the section it is in)
    let mut changed: Vec<(char, &str, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    let mut section = "";
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            if !a[i].starts_with(' ') {
                section = a[i];
            }
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            changed.push(('-', a[i], section));
            i += 1;
        } else {
            changed.push(('+', b[j], section));
            j += 1;
        }
    }
    let mut out = String::new();
    let mut shown = None;
    for (mark, line, section) in changed {
        if line.starts_with(' ') && shown != Some(section) {
            writeln!(out, "@ {section}").unwrap();
            shown = Some(section);
        }
        writeln!(out, "{mark} {line}").unwrap();
    }
    out
}

/// What version 1 builds in a new file is the recorded catalog of the
/// development chain, fact by fact, but for [`RENAMES`].
#[test]
fn schema_version_1_builds_what_the_development_chain_built() {
    let actual = catalog(&version_1());
    let expected = renamed_record();
    assert!(
        expected == actual,
        "schema version 1 does not build the catalog of tests/data/schema-0.1.txt (with RENAMES applied); \
         - recorded, + built:\n{}",
        diff(&expected, &actual)
    );
}

/// A released schema version is never edited: a file that opened at
/// version 1 is never migrated again, so an edit would reach new files
/// only, and the stores of one release would differ.
#[test]
fn released_schema_versions_are_never_edited() {
    assert_eq!(
        schema::MIGRATIONS.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        CHECKSUMS.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        "every schema version needs its checksum here, and a released one is never removed"
    );
    for ((name, sql), (_, expected)) in schema::MIGRATIONS.iter().zip(CHECKSUMS) {
        let digest = Sha256::digest(sql.replace("\r\n", "\n").as_bytes());
        let actual: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert!(
            actual == *expected,
            "src/sql/{name}.sql changed (SHA-256 {actual}, released as {expected}): a released schema version is \
             never edited, since the files it migrated are never migrated again; undo the change and add the next \
             version instead (src/sql/NNN_name.sql in schema::MIGRATIONS, its checksum in CHECKSUMS here)"
        );
    }
}

/// A file a development build left (a schema version, no application id)
/// is refused by `open` with the typed error that says so, and left as it
/// was: no version is applied over it.
#[test]
fn a_file_of_a_development_build_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE jobs (seq INTEGER PRIMARY KEY); PRAGMA user_version = 12;").unwrap();
    }
    let err = jq_sqlite::SqliteStorage::open(jq_sqlite::SqliteConfig::new(&path)).unwrap_err();
    assert!(matches!(err, jq_sqlite::SqliteError::DevelopmentSchema { found: 12, .. }), "{err:?}");
    assert!(err.to_string().contains("unreleased development build"), "{err}");
    let conn = Connection::open(&path).unwrap();
    let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0)).unwrap();
    assert_eq!((schema::version(&conn).unwrap(), tables), (12, 1));
}

/// Version 3 adds the index of a unique key's jobs by creation (the unique
/// period's) and nothing else.
#[test]
fn schema_version_3_adds_the_unique_period_index() {
    let one = Connection::open_in_memory().unwrap();
    one.execute_batch(schema::MIGRATIONS[0].1).unwrap();
    one.execute_batch(schema::MIGRATIONS[1].1).unwrap();
    // An index's seq is its place in the table's list, which a new one shifts.
    let unseq = |text: String| -> String {
        text.lines()
            .map(|l| match l.find(" seq=") {
                Some(at) => {
                    let rest = &l[at + 5..];
                    format!("{}{}", &l[..at], &rest[rest.find(' ').unwrap_or(rest.len())..])
                }
                None => l.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let before = unseq(catalog(&one));
    let mut all = Connection::open_in_memory().unwrap();
    schema::migrate(&mut all, std::path::Path::new(":memory:")).unwrap();
    let after = unseq(catalog(&all));
    let added: Vec<&str> = after.lines().filter(|l| !before.lines().any(|b| b == *l)).collect();
    // The index's line, then its columns' lines that no other index has.
    assert!(added.first().is_some_and(|l| l.contains("index jobs_unique_created")), "{added:#?}");
    assert!(added[1..].iter().all(|l| l.starts_with("    ")), "{added:#?}");
    assert!(before.lines().all(|b| after.lines().any(|l| l == b)), "version 3 only adds");
}
