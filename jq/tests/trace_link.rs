//! Trace context propagation: a job enqueued inside a request's span runs
//! in a `jq.job` span that links to that request's trace, carries the job's
//! fields, and is the parent of what the handler logs.

#![cfg(feature = "opentelemetry")]
#![allow(clippy::unwrap_used)] // tests may unwrap

use jq::{Client, HandlerResult, JobContext, JobType};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

#[derive(Serialize, Deserialize)]
struct Receipt {
    order: u64,
}

impl JobType for Receipt {
    const KIND: &'static str = "receipt";
    const QUEUE: &'static str = "traced";
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.to_string())
}

#[tokio::test]
async fn a_jobs_run_span_links_to_the_span_that_enqueued_it() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("jq-test")));
    // This test binary's only subscriber: the pool's tasks run on other
    // threads of the runtime.
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let client = Client::new(jq_testkit::MemoryStorage::default());
    let request = tracing::info_span!("http.request", route = "/orders");
    let request_trace = request.context().span().span_context().trace_id();
    let id = client.enqueue(Receipt { order: 7 }).instrument(request.clone()).await.unwrap();
    let untraced = client.enqueue(Receipt { order: 8 }).await.unwrap();
    drop(request);
    let stored = client.get(id).await.unwrap().trace.unwrap();
    assert_eq!(stored.trace_id(), Some(request_trace.to_string().as_str()));
    assert_eq!(client.get(untraced).await.unwrap().trace, None, "no span, no context");

    let (ran, mut done) = mpsc::unbounded_channel();
    let pool = client
        .worker_pool()
        .register::<Receipt, _, _>(move |job: Receipt, _ctx: JobContext| {
            let ran = ran.clone();
            async move {
                tracing::info_span!("handler.work", order = job.order).in_scope(|| tracing::info!("sending receipt"));
                ran.send(job.order).unwrap();
                HandlerResult::Ok(())
            }
        })
        .start()
        .unwrap();
    let mut orders = vec![done.recv().await.unwrap(), done.recv().await.unwrap()];
    orders.sort_unstable();
    assert_eq!(orders, [7, 8]);
    pool.shutdown().await.unwrap();
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let runs: Vec<&SpanData> = spans.iter().filter(|s| s.name == "jq.job").collect();
    assert_eq!(runs.len(), 2, "{:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    let run = runs.iter().find(|s| attribute(s, "job.id").as_deref() == Some(id.to_string().as_str())).unwrap();
    let links: Vec<_> = run.links.links.iter().map(|l| l.span_context.trace_id()).collect();
    assert_eq!(links, [request_trace], "the run links to the enqueuing trace");
    assert_ne!(run.span_context.trace_id(), request_trace, "a run is its own trace, linked, not a child");
    assert_eq!(attribute(run, "job.kind").as_deref(), Some("receipt"));
    assert_eq!(attribute(run, "job.queue").as_deref(), Some("traced"));
    assert_eq!(attribute(run, "job.attempt").as_deref(), Some("1"));
    assert_eq!(attribute(run, "outcome").as_deref(), Some("ack"));
    assert!(attribute(run, "duration_us").is_some());
    assert!(attribute(run, "worker").is_some());
    let other = runs.iter().find(|s| s.span_context.span_id() != run.span_context.span_id()).unwrap();
    assert!(other.links.links.is_empty(), "a job enqueued outside a trace has no link");

    let work =
        spans.iter().find(|s| s.name == "handler.work" && attribute(s, "order").as_deref() == Some("7")).unwrap();
    assert_eq!(work.parent_span_id, run.span_context.span_id(), "handler spans nest in the run span");
    assert_eq!(work.span_context.trace_id(), run.span_context.trace_id());
}
