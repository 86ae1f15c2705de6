//! The schema a new file gets, compared fact by fact from SQLite's catalog
//! with the record in `tests/data/schema-0.1.txt`: what the development
//! chain of schema versions (001 to 012) built, dumped before the chain was
//! replaced by one baseline.
//!
//! The facts are those of the pragmas, not the `CREATE` text of
//! `sqlite_master`: a column added by `ALTER TABLE ADD COLUMN` leaves a
//! table's text unlike a clean `CREATE TABLE` of the same table.
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::fmt::Write as _;

use jq_sqlite::rusqlite::Connection;
use jq_sqlite::schema;

/// The record of the development chain's catalog.
const RECORD: &str = include_str!("data/schema-0.1.txt");

/// A new in-memory database, migrated as `SqliteStorage::open` migrates.
fn migrated() -> Connection {
    let mut conn = Connection::open_in_memory().unwrap();
    schema::migrate(&mut conn, std::path::Path::new(":memory:")).unwrap();
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

/// The record without its comment lines.
fn record() -> String {
    RECORD.lines().filter(|l| !l.starts_with('#')).map(|l| format!("{l}\n")).collect()
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
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            changed.push(('+', b[j], section));
            j += 1;
        } else {
            changed.push(('-', a[i], section));
            i += 1;
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

/// What `migrate` builds in a new file is the recorded catalog, fact by
/// fact. `JQ_WRITE_SCHEMA_RECORD=1` writes the record from the chain
/// instead (done once, before the chain goes).
#[test]
fn the_development_chain_builds_the_recorded_catalog() {
    let actual = catalog(&migrated());
    if std::env::var_os("JQ_WRITE_SCHEMA_RECORD").is_some() {
        let header = "# The catalog of a new SQLite database after jq-sqlite's development chain of\n\
                      # schema versions (src/sql/001_jobs.sql .. 012_keyed_wait.sql, at commit\n\
                      # c685e7e), as tests/schema.rs dumps it. A record: never regenerated.\n";
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/schema-0.1.txt");
        std::fs::write(path, format!("{header}{actual}")).unwrap();
        return;
    }
    let expected = record();
    assert!(expected == actual, "the catalog differs from tests/data/schema-0.1.txt:\n{}", diff(&expected, &actual));
}
