//! The `jq` crate reads bottom-up too: no module imports one that imports
//! it back (the import graph read from the source files; see
//! `jq_testkit::imports`).

use std::path::Path;

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = jq_testkit::imports::Graph::of_crate(&src)
        .unwrap_or_else(|e| panic!("the import graph of jq cannot be read:\n{e}"));
    assert!(graph.imports("flows.rs").contains("tx.rs"), "the workflow calls take a transaction");
    let cycles: Vec<String> = graph.cycles().iter().map(|c| c.join(" -> ")).collect();
    assert!(cycles.is_empty(), "jq's modules import each other in a circle:\n{}", cycles.join("\n"));
}
