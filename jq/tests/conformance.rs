//! The shared conformance and property suites, run on every compiled-in
//! backend through `jq::connect`: the facade (URL parsing, options, the
//! `Backend` enum's dispatch) must add nothing wrong. PostgreSQL and Redis
//! use the real servers (`JQ_POSTGRES_URL`, `JQ_REDIS_URL`); when one is not
//! running its suites are skipped, saying so once, or fail under
//! `JQ_REQUIRE_SERVICES=1` (`jq_testkit::services`).

mod common;

#[cfg(feature = "sqlite")]
mod sqlite {
    jq_testkit::conformance!(super::common::sqlite; roles, periodic, controls, throughput, cancellation, workflows, keys, durable);
    jq_testkit::properties!(super::common::sqlite; periodic, workflows);
}

#[cfg(feature = "postgres")]
mod postgres {
    jq_testkit::conformance!(super::common::postgres; roles, periodic, controls, throughput, cancellation, workflows, keys, durable);
    jq_testkit::properties!(super::common::postgres; periodic, workflows);
}

#[cfg(feature = "redis")]
mod redis {
    jq_testkit::conformance!(super::common::redis; roles, periodic, controls, throughput, cancellation, workflows, keys, durable);
    jq_testkit::properties!(super::common::redis; periodic, workflows);
}
