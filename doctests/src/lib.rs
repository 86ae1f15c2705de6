//! The Rust snippets of the repository's README.md, the facade's crates.io
//! README (jq/README.md) and the guides in docs/, compiled and run as
//! doctests: `cargo test -p doctests`. A guide whose code no longer builds
//! fails the tests. They live here, not in the published `jq-queue`, because
//! a crate must not read files outside itself when built from its package;
//! and the snippets see only this crate's dev-dependencies, which are what
//! a user adds (`tests/snippets.rs` checks the guides say so).

/// One item per file, each documented by the whole file.
#[cfg(doctest)]
mod guides {
    #[doc = include_str!("../../README.md")]
    struct Readme;
    #[doc = include_str!("../../jq/README.md")]
    struct FacadeReadme;
    #[doc = include_str!("../../docs/backends.md")]
    struct Backends;
    #[doc = include_str!("../../docs/periodic.md")]
    struct Periodic;
    #[doc = include_str!("../../docs/queue-controls.md")]
    struct QueueControls;
    #[doc = include_str!("../../docs/keyed-jobs.md")]
    struct KeyedJobs;
    #[doc = include_str!("../../docs/observability.md")]
    struct Observability;
    #[doc = include_str!("../../docs/dashboard.md")]
    struct Dashboard;
    #[doc = include_str!("../../docs/operations.md")]
    struct Operations;
    #[doc = include_str!("../../docs/cancellation.md")]
    struct Cancellation;
    #[doc = include_str!("../../docs/workflows.md")]
    struct Workflows;
    #[doc = include_str!("../../docs/http-api.md")]
    struct HttpApi;
    #[doc = include_str!("../../docs/durable.md")]
    struct Durable;
}
