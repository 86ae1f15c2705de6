//! `jqctl serve`: the dashboard (`jq-dashboard`) on its own address.

use std::net::SocketAddr;

use jq::storage::Storage;

use super::worker::shutdown_signal;
use crate::error::{CliError, CliResult};

/// Where and how to serve, checked before the store is opened.
#[derive(Debug)]
pub struct ServePlan {
    listen: SocketAddr,
    options: jq_dashboard::Options,
}

impl ServePlan {
    /// Refuses to serve a non-loopback address without a token: anyone who
    /// reaches it could retry, cancel and purge jobs.
    pub fn prepare(listen: SocketAddr, read_only: bool, token: Option<String>) -> CliResult<Self> {
        let token = token.filter(|t| !t.trim().is_empty());
        if !listen.ip().is_loopback() && token.is_none() {
            return Err(CliError::bad_input(format!(
                "serving on {listen} needs a token (--token or JQ_DASHBOARD_TOKEN): anyone who reaches \
                 that address could act on your jobs; or bind 127.0.0.1"
            )));
        }
        let mut options = jq_dashboard::Options::new().read_only(read_only);
        if let Some(token) = token {
            options = options.token(token);
        }
        Ok(ServePlan { listen, options })
    }
}

/// Serves until Ctrl-C or SIGTERM.
pub async fn run<S: Storage>(storage: S, plan: ServePlan) -> CliResult {
    let listener = tokio::net::TcpListener::bind(plan.listen)
        .await
        .map_err(|e| CliError::bad_input(format!("cannot listen on {}: {e}", plan.listen)))?;
    let address = listener.local_addr()?;
    let mode = if plan.options.is_read_only() { ", read-only" } else { "" };
    let auth = if plan.options.has_token() { ", token required" } else { "" };
    eprintln!("jqctl serve: dashboard on http://{address}/{mode}{auth}; Ctrl-C to stop");
    let app = jq_dashboard::router(jq::Client::new(storage), plan.options);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            if let Err(error) = shutdown_signal().await {
                tracing::warn!(%error, "cannot wait for a signal; stopping");
            }
        })
        .await?;
    eprintln!("jqctl serve: stopped");
    Ok(())
}
