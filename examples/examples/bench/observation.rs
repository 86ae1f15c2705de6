//! `--observe on|off`: the bench's A/B of what spans and metrics cost.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::BoxError;

/// The pools' `observe` setting; unset: the pool's default.
static POOL_OBSERVE: OnceLock<bool> = OnceLock::new();

/// `WorkerPool::observe` for every pool the scenarios start.
pub fn pool_observe() -> Option<bool> {
    POOL_OBSERVE.get().copied()
}

/// Installs logging and, for `Some(true)`, the recorder and the
/// OpenTelemetry layer; returns what must live as long as the bench.
pub fn install(observe: Option<bool>) -> Result<Option<SdkTracerProvider>, BoxError> {
    // sqlx warns of every statement over 1 s; the loaded drain's 1M-row load is one.
    let default = if observe == Some(true) { "warn,sqlx::query=error,jq_core=info" } else { "warn,sqlx::query=error" };
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    if let Some(on) = observe {
        let _ = POOL_OBSERVE.set(on);
    }
    if observe != Some(true) {
        tracing_subscriber::registry().with(filter).with(fmt).try_init()?;
        return Ok(None);
    }
    // No exporter: spans are built, sampled and dropped, which is the cost
    // jq adds; shipping them is the exporter's cost, not jq's.
    let provider = SdkTracerProvider::builder().build();
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("bench")))
        .try_init()?;
    let handle = PrometheusBuilder::new().install_recorder()?;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            handle.run_upkeep();
        }
    });
    Ok(Some(provider))
}
