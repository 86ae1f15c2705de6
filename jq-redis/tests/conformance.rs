//! The shared jq-testkit suites against the real server
//! (`JQ_REDIS_URL`, default `redis://127.0.0.1:6379`), each test under its
//! own random key prefix, removed when the test passed.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use common::setup;

jq_testkit::conformance!(setup; roles, periodic, controls, throughput, cancellation, workflows, keys, durable);
jq_testkit::properties!(setup; periodic, workflows);
