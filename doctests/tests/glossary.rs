//! The glossary holds in code: no name that docs/GLOSSARY.md retired
//! ("Retired names") appears in the sources of any crate (`src/` of every
//! workspace member: Rust, SQL and Lua, comments included), so a reader
//! never meets two names for one concept.
//!
//! Text is cut into words at every character that is not a letter or a
//! digit and at each lower-to-upper case change (`ScheduleInfo` is
//! `schedule info`, `run_schedule` is `run schedule`), then compared
//! without case. `scheduled` (the state Scheduled) and `complete`
//! (Completed) are current words and pass, and so does a line that says
//! the name it holds is retired (a test that the old flag is refused).

use std::path::{Path, PathBuf};

/// Retired names, each as the words it is cut into, with what replaced it.
const RETIRED: &[(&[&str], &str)] = &[
    (&["schedule"], "periodic job (`Periodic`), or tick"),
    (&["schedules"], "periodic jobs (`periodic_jobs`)"),
    (&["scheduler"], "the periodic runner, or promote"),
    (&["schedulers"], "the periodic runner, or promote"),
    (&["scheduling"], "periodic jobs, or a delay (`run_at`)"),
    (&["completion"], "settle, ack (`Settlement`, `Outcome::Ack`)"),
    (&["completions"], "settlements, acks"),
    (&["completer"], "settler"),
    (&["complete", "lua"], "settle.lua"),
    (&["snooze"], "release (`HandlerError::release`)"),
    (&["snoozed"], "released"),
    (&["discard"], "bury (`Outcome::Bury`)"),
    (&["discarded"], "buried"),
    (&["run", "schedule"], "trigger"),
    (&["request", "run"], "trigger"),
    (&["max", "retries"], "max attempts"),
    (&["retried", "total"], "`jq_jobs_nacked_total`"),
    (&["storage", "layer"], "`jq::storage::Wrapper`"),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs`, `.sql` and `.lua` file under a `src/` directory of the
/// repository (build output and version control left out).
fn sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, in_src: bool, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if path.is_dir() {
                if name == "target" || name.starts_with('.') || name == "node_modules" {
                    continue;
                }
                walk(&path, in_src || name == "src", out);
            } else if in_src && [".rs", ".sql", ".lua"].iter().any(|ext| name.ends_with(ext)) {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root(), false, &mut files);
    files.sort();
    files
}

/// The words of a line, lower case.
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in line.chars() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// `(retired words, replacement)` pairs found in `line`.
fn retired_in(line: &str) -> Vec<(String, &'static str)> {
    let words = words(line);
    if words.iter().any(|w| w == "retired") {
        return Vec::new();
    }
    RETIRED
        .iter()
        .filter(|(name, _)| words.windows(name.len()).any(|w| w.iter().zip(name.iter()).all(|(a, b)| a == b)))
        .map(|(name, instead)| (name.join(" "), *instead))
        .collect()
}

#[test]
fn no_retired_name_in_any_source() {
    let files = sources();
    assert!(files.len() > 100, "found only {} source files under {}", files.len(), root().display());
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for (n, line) in text.lines().enumerate() {
            for (name, instead) in retired_in(line) {
                let shown = file.strip_prefix(root()).unwrap_or(file).display().to_string();
                found.push(format!("{shown}:{}: `{name}` (retired; say {instead}): {}", n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "retired names (docs/GLOSSARY.md, \"Retired names\"):\n{}", found.join("\n"));
}

#[test]
fn the_check_finds_retired_names_and_passes_current_ones() {
    assert_eq!(retired_in("struct ScheduleInfo;").len(), 1);
    assert_eq!(retired_in("let run_schedule = 1;").len(), 2); // "run schedule" and "schedule"
    assert_eq!(retired_in("-- the schedules table").len(), 1);
    assert_eq!(retired_in("include_str!(\"lua/complete.lua\")").len(), 1);
    assert!(retired_in("State::Scheduled, a job scheduled for later; Completed").is_empty());
    assert!(retired_in("the run's completed; max_attempts; a tracing layer").is_empty());
    assert!(retired_in("assert!(refused(\"--max-retries\"), \"retired flag\")").is_empty());
}
