//! The shared jq-testkit suites, against a fresh schema per test.

mod common;

jq_testkit::conformance!(common::harness; roles, periodic, controls, throughput, cancellation, workflows, keys, durable);
jq_testkit::properties!(common::harness; periodic, workflows);
