//! Tracing and metrics, wired the way an application would: a
//! `tracing-opentelemetry` layer over an OpenTelemetry tracer, and the
//! Prometheus recorder of the `metrics` facade.
//!
//! ```text
//! cargo run -p examples --example otel
//! ```
//!
//! A "request" span enqueues two jobs; a worker pool runs them. Each run's
//! `jq.job` span is a trace of its own that links to the request's trace,
//! and the handler's own span nests inside it. The spans go to the SDK's
//! in-memory exporter (swap in `opentelemetry-otlp` for a collector) and are
//! printed, then the Prometheus text of jq's counters.

use std::time::Duration;

use jq::{HandlerResult, JobContext, JobType};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The job the request enqueues.
#[derive(Serialize, Deserialize)]
pub struct SendReceipt {
    /// Which order.
    pub order: u64,
}

impl JobType for SendReceipt {
    const KIND: &'static str = "send_receipt";
    const QUEUE: &'static str = "receipts";
}

/// What the application installs once at start-up.
pub struct Telemetry {
    /// Flushes and owns the tracer.
    pub provider: SdkTracerProvider,
    /// Where finished spans land (an OTLP exporter in production).
    pub spans: InMemorySpanExporter,
    /// Renders the Prometheus text (or serve it: `with_http_listener`).
    pub metrics: PrometheusHandle,
}

/// Installs the global tracing subscriber (fmt for logs, OpenTelemetry for
/// spans) and the global metrics recorder. Once per process.
pub fn install() -> Result<Telemetry, BoxError> {
    let spans = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(spans.clone()).build();
    tracing_subscriber::registry()
        .with(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("otel-example")))
        .try_init()?;
    // Before any pool starts: metric handles made earlier stay no-ops.
    let metrics = PrometheusBuilder::new().install_recorder()?;
    Ok(Telemetry { provider, spans, metrics })
}

/// Enqueues two receipts inside a request span, runs them, and returns
/// every finished span.
pub async fn run(client: &jq::Client, telemetry: &Telemetry) -> Result<Vec<SpanData>, BoxError> {
    let request = tracing::info_span!("POST /orders", order = 41);
    async {
        tracing::info!("order stored; enqueueing its receipts");
        client.enqueue(SendReceipt { order: 41 }).await?;
        client.enqueue(SendReceipt { order: 42 }).await?;
        Ok::<_, jq::Error>(())
    }
    .instrument(request)
    .await?;

    let (sent, mut receipts) = mpsc::unbounded_channel();
    let pool = client
        .worker_pool()
        .register::<SendReceipt, _, _>(move |job: SendReceipt, _ctx: JobContext| {
            let sent = sent.clone();
            async move {
                // Nests in the job's span: its trace is the run's.
                let span = tracing::info_span!("smtp.send", order = job.order);
                async { tokio::time::sleep(Duration::from_millis(5)).await }.instrument(span).await;
                tracing::info!(order = job.order, "receipt sent");
                let _ = sent.send(job.order);
                HandlerResult::Ok(())
            }
        })
        .start()?;
    for _ in 0..2 {
        receipts.recv().await.ok_or("the pool stopped")?;
    }
    pool.shutdown().await?;
    telemetry.provider.force_flush()?;
    Ok(telemetry.spans.get_finished_spans()?)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let telemetry = install()?;
    let dir = tempfile::tempdir()?;
    let client = jq::connect(&format!("sqlite://{}", dir.path().join("otel.db").display())).await?;
    let spans = run(&client, &telemetry).await?;
    println!("spans (name, trace, links to):");
    for span in &spans {
        let links: Vec<String> = span.links.iter().map(|l| l.span_context.trace_id().to_string()).collect();
        println!("  {:<14} trace {}  links {links:?}", span.name, span.span_context.trace_id());
    }
    println!("metrics:");
    for line in telemetry.metrics.render().lines().filter(|l| l.starts_with("jq_jobs_")) {
        println!("  {line}");
    }
    Ok(())
}
