//! jq-core reads bottom-up: no module imports one that imports it back,
//! and each module imports only its own layer or lower ones. The graph is
//! read from the source files (`use` declarations and the `crate::` paths
//! of the code; see `jq_testkit::imports`).

use std::path::Path;

use jq_testkit::imports::Graph;

/// The layers, bottom first. A new file goes in one (a directory entry
/// takes every file under it not named on its own); the facades
/// (`lib.rs`, and the `mod.rs` files that only declare and re-export
/// modules) need none.
const LAYERS: &[(&str, &[&str])] = &[
    // What everything names: the ids, the states, the capabilities' names,
    // time, and the error over them (with the text forms that fail with it).
    ("ground", &["id.rs", "state.rs", "capability.rs", "clock.rs", "error.rs", "parse.rs"]),
    // Values and their rules: jobs, queue controls, keys, workflow plans,
    // periodic jobs, the read types, the trace context, text checks.
    (
        "model",
        &[
            "job/",
            "job.rs",
            "control.rs",
            "keys.rs",
            "workflow.rs",
            "durable.rs",
            "periodic/",
            "read.rs",
            "text.rs",
            "trace.rs",
            "redact.rs",
            "backoff.rs",
        ],
    ),
    // What a backend implements and the wrappers around it.
    ("traits", &["storage/"]),
    // The worker pool (the periodic jobs' rounds with it) and the metrics
    // read over a storage.
    ("pool", &["worker/", "observe.rs"]),
];

fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    Graph::of_crate(&src).unwrap_or_else(|e| panic!("the import graph of jq-core cannot be read:\n{e}"))
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let cycles: Vec<String> = graph().cycles().iter().map(|c| c.join(" -> ")).collect();
    assert!(cycles.is_empty(), "jq-core's modules import each other in a circle:\n{}", cycles.join("\n"));
}

#[test]
fn each_module_imports_only_its_layer_and_lower() {
    let problems = graph().layer_violations(LAYERS);
    assert!(problems.is_empty(), "jq-core's layers are broken:\n{}", problems.join("\n"));
}

#[test]
fn the_error_names_only_the_ground() {
    let graph = graph();
    let ground = LAYERS[0].1;
    let imports = graph.imports("error.rs");
    assert!(!imports.is_empty(), "error.rs names the ids, the states and the capabilities");
    let above: Vec<&str> = imports.iter().copied().filter(|f| !ground.contains(f)).collect();
    assert!(above.is_empty(), "error.rs imports from above the ground: {above:?}");
}

#[test]
fn every_file_is_read() {
    // The graph covers the crate: a file the reader skipped would hide its
    // imports from the checks above.
    fn count(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .expect("src is readable")
            .map(|e| e.expect("an entry").path())
            .map(|p| if p.is_dir() { count(&p) } else { usize::from(p.extension().is_some_and(|e| e == "rs")) })
            .sum()
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph();
    assert_eq!(graph.files().count(), count(&src));
    assert!(graph.is_facade("lib.rs") && graph.is_facade("storage/mod.rs"), "the facades are told apart");
}
