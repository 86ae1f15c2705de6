//! The shared jq-testkit suites, against a fresh schema per test.

mod common;

jq_testkit::conformance!(common::harness);
jq_testkit::properties!(common::harness);
