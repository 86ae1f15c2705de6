//! Runnable examples and the benchmark of jq; see `examples/`:
//!
//! - `cargo run -p examples --example quickstart`: typed jobs on SQLite, a
//!   worker pool, and what became of each job.
//! - `cargo run --release -p examples --example bench -- sqlite [--runs N]`:
//!   enqueue throughput, drain throughput and wake-up latency of a backend
//!   at jq's default settings.
