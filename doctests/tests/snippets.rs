//! What the guides' Rust snippets may name. A user who pastes one has the
//! facade (`jq-queue`, whose library is `jq`), serde and tokio; any other
//! crate the visible code of a snippet names must appear in a toml block of
//! the same file, so the reader knows to add it. And every file with a Rust
//! snippet is one this crate compiles (src/lib.rs), so none goes untested.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Names a snippet may use as a path's first segment without a toml block.
const GIVEN: &[&str] = &["std", "core", "alloc", "jq", "serde", "tokio", "crate", "self", "super"];

/// The info-string words rustdoc reads as a Rust block's attributes.
const RUST_WORDS: &[&str] = &[
    "rust",
    "no_run",
    "ignore",
    "should_panic",
    "compile_fail",
    "test_harness",
    "standalone_crate",
    "edition2015",
    "edition2018",
    "edition2021",
    "edition2024",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// README.md, jq/README.md and docs/*.md, as paths relative to the root.
fn guides() -> Vec<String> {
    let mut files = vec!["README.md".to_owned(), "jq/README.md".to_owned()];
    let docs = std::fs::read_dir(root().join("docs")).expect("docs/ is readable");
    let mut names: Vec<String> = docs
        .map(|entry| entry.expect("docs/ lists").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    names.sort();
    files.extend(names);
    files
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Whether src/lib.rs compiles `relative`'s snippets as doctests.
fn compiled(lib: &str, relative: &str) -> bool {
    lib.contains(&format!("include_str!(\"../../{relative}\")"))
}

/// A fenced code block: its info string and its lines.
struct Block {
    info: String,
    lines: Vec<String>,
}

impl Block {
    /// rustdoc compiles a block whose info words are all its own (none: Rust).
    fn is_rust(&self) -> bool {
        self.info.split(',').map(str::trim).filter(|w| !w.is_empty()).all(|w| RUST_WORDS.contains(&w))
    }

    /// A block its author marked as Rust (```rust...), not a bare fence: a
    /// file rustdoc does not read may use bare fences for diagrams.
    fn is_marked_rust(&self) -> bool {
        !self.info.is_empty() && self.is_rust()
    }

    /// The lines a reader sees: rustdoc hides `# ` lines and a lone `#`.
    fn visible(&self) -> impl Iterator<Item = &str> {
        self.lines.iter().map(String::as_str).filter(|line| {
            let t = line.trim_start();
            !(t == "#" || t.starts_with("# "))
        })
    }
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for line in text.lines() {
        let t = line.trim_start();
        match open.take() {
            None if t.starts_with("```") => open = Some(Block { info: t[3..].trim().to_owned(), lines: Vec::new() }),
            None => {}
            Some(block) if t.starts_with("```") => out.push(block),
            Some(mut block) => {
                block.lines.push(line.to_owned());
                open = Some(block);
            }
        }
    }
    assert!(open.is_none(), "a code block is never closed");
    out
}

/// The first segments of the paths in `code` (`jq_dashboard` of
/// `jq_dashboard::router(..)`), outside strings and comments, that start
/// in lower case: crates or modules, not types.
fn path_roots(code: &str) -> BTreeSet<String> {
    let chars: Vec<char> = code.chars().collect();
    let mut roots = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == 'r' && chars.get(i + 1) == Some(&'#') && chars.get(i + 2) == Some(&'"') {
            i += 3;
            while i + 1 < chars.len() && !(chars[i] == '"' && chars[i + 1] == '#') {
                i += 1;
            }
            i += 2;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let before = if start == 0 { ' ' } else { chars[start - 1] };
            let after_path = chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':');
            let first_segment = before != '.' && before != ':';
            if after_path && first_segment && !c.is_ascii_uppercase() {
                roots.insert(chars[start..i].iter().collect());
            }
        } else {
            i += 1;
        }
    }
    roots
}

/// The modules a block declares itself (`mod my_backend { .. }`), hidden
/// lines included.
fn declared_modules(block: &Block) -> BTreeSet<String> {
    block
        .lines
        .iter()
        .flat_map(|line| {
            let words: Vec<&str> = line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).collect();
            words.windows(2).filter(|w| w[0] == "mod").map(|w| w[1].to_owned()).collect::<Vec<_>>()
        })
        .collect()
}

/// The packages a file's toml blocks name (`jq-dashboard = "0.1"`,
/// `[dependencies.axum]`; not in a comment), with `-` as `_` like a
/// crate's name in code.
fn packages_in_toml(blocks: &[Block]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for block in blocks.iter().filter(|b| b.info == "toml") {
        for line in block.lines.iter().map(|l| l.trim()).filter(|l| !l.starts_with('#')) {
            let key = match line.strip_prefix('[') {
                Some(table) => table.trim_end_matches(']').rsplit('.').next().unwrap_or_default(),
                None => line.split('=').next().unwrap_or_default(),
            };
            names.insert(key.trim().replace('-', "_"));
        }
    }
    names
}

#[test]
fn a_crate_a_snippet_names_is_one_its_guide_says_to_add() {
    let lib = read("doctests/src/lib.rs");
    let mut missing = Vec::new();
    let mut rust_blocks = 0;
    for file in guides() {
        let all = blocks(&read(&file));
        let listed = packages_in_toml(&all);
        let doctested = compiled(&lib, &file);
        for block in all.iter().filter(|b| if doctested { b.is_rust() } else { b.is_marked_rust() }) {
            rust_blocks += 1;
            let code: String = block.visible().flat_map(|l| [l, "\n"]).collect();
            let local = declared_modules(block);
            for root in path_roots(&code) {
                if !GIVEN.contains(&root.as_str()) && !local.contains(&root) && !listed.contains(&root) {
                    missing.push(format!("{file}: `{root}::` (no toml block names {})", root.replace('_', "-")));
                }
            }
        }
    }
    assert!(rust_blocks > 20, "found only {rust_blocks} Rust blocks: is the parser still reading the guides?");
    assert!(missing.is_empty(), "snippets name crates their guide does not say to add:\n{}", missing.join("\n"));
}

#[test]
fn every_guide_with_rust_snippets_is_compiled_here() {
    let lib = read("doctests/src/lib.rs");
    let untested: Vec<String> = guides()
        .into_iter()
        .filter(|file| blocks(&read(file)).iter().any(Block::is_marked_rust))
        .filter(|file| !compiled(&lib, file))
        .collect();
    assert!(untested.is_empty(), "guides with Rust snippets that src/lib.rs does not include: {untested:?}");
}

#[test]
fn the_checks_see_what_they_look_for() {
    let code = "let c = jq::connect(\"sqlite::memory:\").await?; // or other::url\n\
                let d = jq_dashboard::router(c, o); x.decode::<u32>(); Duration::from_secs(1);\n\
                let j = r#\"{\"a\": b::c}\"#; use tracing_subscriber::layer::SubscriberExt;";
    let roots: Vec<String> = path_roots(code).into_iter().collect();
    assert_eq!(roots, ["jq", "jq_dashboard", "tracing_subscriber"]);
    let text = "```toml\n[dependencies]\njq-dashboard = \"0.1\"\n# axum = \"0.8\"\n[dependencies.tracing]\n```\n\
                ```rust,no_run\n# mod helper { }\nlet x = 1;\n```\n```sh\ncargo run\n```\n";
    let all = blocks(text);
    assert_eq!(all.iter().filter(|b| b.is_rust()).count(), 1);
    assert!(blocks("```\n  a -> b\n```\n")[0].is_rust() && !blocks("```\n```\n")[0].is_marked_rust());
    let listed = packages_in_toml(&all);
    assert!(["jq_dashboard", "tracing"].iter().all(|name| listed.contains(*name)), "{listed:?}");
    assert!(!listed.contains("axum"), "a commented line adds nothing: {listed:?}");
    assert_eq!(declared_modules(&all[1]).into_iter().collect::<Vec<_>>(), ["helper"]);
    assert_eq!(all[1].visible().collect::<Vec<_>>(), ["let x = 1;"]);
}
