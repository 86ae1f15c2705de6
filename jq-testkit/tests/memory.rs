//! The whole suite on the in-memory reference storage.

use jq_testkit::MemoryHarness;

async fn setup() -> MemoryHarness {
    MemoryHarness::new()
}

jq_testkit::conformance!(setup; roles, periodic, controls, throughput, cancellation, workflows, keys, durable);
jq_testkit::properties!(setup; periodic, workflows);
