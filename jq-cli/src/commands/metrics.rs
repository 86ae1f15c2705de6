//! `jqctl metrics`, and the exporter `jqctl worker --metrics-listen` shares:
//! a Prometheus `/metrics` endpoint fed by jq's metrics (see the repository's
//! docs/observability.md for the metrics table).

use std::net::SocketAddr;
use std::time::Duration;

use jq::storage::Storage;
use metrics_exporter_prometheus::PrometheusBuilder;

use super::worker::shutdown_signal;
use crate::error::{CliError, CliResult};

/// Installs the Prometheus recorder as this process's metrics recorder and
/// serves `/metrics` on `listen` from the current runtime. Call it before
/// the pool starts: handles registered earlier stay no-ops.
pub fn serve(listen: SocketAddr) -> CliResult {
    PrometheusBuilder::new().with_http_listener(listen).install().map_err(|e| match e {
        metrics_exporter_prometheus::BuildError::FailedToCreateHTTPListener(reason) => {
            CliError::bad_input(format!("cannot serve /metrics on {listen}: {reason}"))
        }
        other => CliError::Other(format!("cannot install the Prometheus exporter: {other}")),
    })
}

/// Serves the store's gauges (jobs per queue and state, age of the oldest
/// pending job), sampled every `every`, until Ctrl-C or SIGTERM. The
/// counters and histograms come from the worker pools' own endpoints
/// (`jqctl worker --metrics-listen`, or the recorder in your program).
pub async fn run<S: Storage>(storage: &S, listen: SocketAddr, every: Duration) -> CliResult {
    serve(listen)?;
    eprintln!("jqctl metrics: serving http://{listen}/metrics, sampling the store every {every:?}; Ctrl-C to stop");
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        // A failed sample keeps the last values and is tried again: an
        // exporter that exits on a database blip loses its scrape target.
        if let Err(error) = jq::observe::sample_store(storage).await {
            if error.is_fatal() {
                return Err(error.into());
            }
            tracing::warn!(%error, "sampling the store failed; keeping the last values");
        }
        tokio::select! {
            signal = &mut stop => return signal,
            _ = tokio::time::sleep(every) => {}
        }
    }
}
