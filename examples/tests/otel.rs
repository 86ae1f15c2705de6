//! Runs the otel example's own code: the run spans link to the request's
//! trace, the handler's span nests in its run, and the Prometheus text
//! counts both jobs.

#![allow(clippy::unwrap_used)] // tests may unwrap

#[path = "../examples/otel.rs"]
#[allow(dead_code)] // its `main` is the example's, not the test's
mod otel;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_example_links_runs_to_the_request() {
    let telemetry = otel::install().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let client = jq::connect(&format!("sqlite://{}", dir.path().join("otel.db").display())).await.unwrap();
    let spans = otel::run(&client, &telemetry).await.unwrap();

    let request = spans.iter().find(|s| s.name == "POST /orders").unwrap();
    let runs: Vec<_> = spans.iter().filter(|s| s.name == "jq.job").collect();
    assert_eq!(runs.len(), 2);
    for run in &runs {
        let linked: Vec<_> = run.links.iter().map(|l| l.span_context.trace_id()).collect();
        assert_eq!(linked, [request.span_context.trace_id()]);
        let nested =
            spans.iter().filter(|s| s.name == "smtp.send" && s.parent_span_id == run.span_context.span_id()).count();
        assert_eq!(nested, 1, "one smtp.send inside each run");
    }
    let text = telemetry.metrics.render();
    let completed = text
        .lines()
        .find(|l| l.starts_with("jq_jobs_completed_total{") && l.contains("queue=\"receipts\""))
        .unwrap_or_else(|| panic!("no completed counter in:\n{text}"));
    assert!(completed.ends_with(" 2"), "{completed}");
}
