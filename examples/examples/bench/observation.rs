//! `--observe on|off|otel`: the bench's A/B of what spans and metrics cost.

use std::io::IsTerminal;
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

/// What `--observe` asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observe {
    /// No recorder, logs at warn, pools with `observe(false)`.
    Off,
    /// The Prometheus recorder, jq's spans enabled (`jq_core=info`) in the
    /// fmt subscriber, pools observing: what jq itself adds.
    On,
    /// `On` plus a `tracing-opentelemetry` layer over an always-sampling
    /// SDK tracer (no exporter): adds what the OpenTelemetry SDK costs.
    Otel,
}

impl Observe {
    /// `on`, `off` or `otel`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "off" => Observe::Off,
            "on" => Observe::On,
            "otel" => Observe::Otel,
            _ => return None,
        })
    }
}

/// Installs logging and, unless `Off`, the recorder (and for `Otel` the
/// OpenTelemetry layer); returns what must live as long as the bench.
pub fn install(observe: Option<Observe>) -> Result<Option<SdkTracerProvider>, BoxError> {
    let observing = matches!(observe, Some(Observe::On | Observe::Otel));
    // sqlx warns of every statement over 1 s; the loaded drain's 1M-row load is one.
    let default = if observing { "warn,sqlx::query=error,jq_core=info" } else { "warn,sqlx::query=error" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colour codes only for a person watching: a deployment's log
    // collector gets plain lines, and colouring every field costs.
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(std::io::stderr().is_terminal());
    if let Some(mode) = observe {
        let _ = POOL_OBSERVE.set(mode != Observe::Off);
    }
    let provider = if observe == Some(Observe::Otel) {
        // No exporter: spans are built, sampled and dropped; shipping them
        // is the exporter's cost.
        let provider = SdkTracerProvider::builder().build();
        tracing_subscriber::registry()
            .with(filter)
            .with(fmt)
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("bench")))
            .try_init()?;
        Some(provider)
    } else {
        tracing_subscriber::registry().with(filter).with(fmt).try_init()?;
        None
    };
    if !observing {
        return Ok(provider);
    }
    let handle = PrometheusBuilder::new().install_recorder()?;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            handle.run_upkeep();
        }
    });
    Ok(provider)
}
