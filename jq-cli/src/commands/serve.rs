//! `jqctl serve`: the dashboard (`jq-dashboard`) and the HTTP API
//! (`jq_dashboard::api`, under `/api/v1/`) on their own address.

use std::net::SocketAddr;

use jq::storage::Storage;

use super::worker::shutdown_signal;
use crate::error::{CliError, CliResult};

/// Where and how to serve, checked before the store is opened.
#[derive(Debug)]
pub struct ServePlan {
    listen: SocketAddr,
    options: jq_dashboard::Options,
    /// `--allowed-host` values, checked; the bound port is known only
    /// once bound.
    allowed_hosts: Vec<String>,
    /// `--read-token`, checked.
    read_token: Option<String>,
}

impl ServePlan {
    /// Refuses to serve a non-loopback address without a token: anyone who
    /// reaches it could retry, cancel and purge jobs. Refuses an empty
    /// token, and allowed hosts that are not `name` or `name:port`.
    pub fn prepare(
        listen: SocketAddr,
        read_only: bool,
        token: Option<String>,
        allowed_hosts: Vec<String>,
    ) -> CliResult<Self> {
        if !listen.ip().is_loopback() && token.is_none() {
            return Err(CliError::bad_input(format!(
                "serving on {listen} needs a token (--token or JQ_DASHBOARD_TOKEN): anyone who reaches \
                 that address could act on your jobs; or bind 127.0.0.1"
            )));
        }
        let mut options = jq_dashboard::Options::new().read_only(read_only);
        if let Some(token) = token {
            options = options
                .token(token)
                .map_err(|e| CliError::bad_input(format!("{e} (--token or JQ_DASHBOARD_TOKEN)")))?;
        }
        // Checked now, so a typo fails before the store is opened.
        options = options
            .allowed_hosts(allowed_hosts.iter().map(String::as_str))
            .map_err(|e| CliError::bad_input(format!("{e} (--allowed-host)")))?;
        Ok(ServePlan { listen, options, allowed_hosts, read_token: None })
    }

    /// Adds the HTTP API's read-only token; an empty one is refused.
    pub fn read_token(mut self, token: Option<String>) -> CliResult<Self> {
        if let Some(token) = token {
            jq_dashboard::api::ApiOptions::default()
                .read_token(token.as_str())
                .map_err(|e| CliError::bad_input(format!("{e} (--read-token or JQ_API_READ_TOKEN)")))?;
            self.read_token = Some(token);
        }
        Ok(self)
    }
}

/// The hosts a dashboard bound to `address` answers: the loopback names
/// with its port, the bound address itself, and the `--allowed-host`
/// values. A wildcard address (`0.0.0.0`, `[::]`) is no name a request can
/// carry, so it is left out: name the server's with --allowed-host.
fn hosts(address: SocketAddr, allowed: &[String]) -> Vec<String> {
    let port = address.port();
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]"].iter().map(|n| format!("{n}:{port}")).collect();
    if !address.ip().is_unspecified() {
        hosts.push(address.to_string());
    }
    hosts.extend(allowed.iter().cloned());
    hosts
}

/// Serves until Ctrl-C or SIGTERM.
pub async fn run<S: Storage + Clone>(storage: S, plan: ServePlan) -> CliResult {
    let listener = tokio::net::TcpListener::bind(plan.listen)
        .await
        .map_err(|e| CliError::bad_input(format!("cannot listen on {}: {e}", plan.listen)))?;
    let address = listener.local_addr()?;
    let hosts = hosts(address, &plan.allowed_hosts);
    let options = plan
        .options
        .allowed_hosts(hosts.iter().map(String::as_str))
        .map_err(|e| CliError::bad_input(format!("{e} (--allowed-host)")))?;
    let mode = if options.is_read_only() { ", read-only" } else { "" };
    let auth = if options.has_token() { ", token required" } else { "" };
    eprintln!("jqctl serve: dashboard on http://{address}/{mode}{auth}; Ctrl-C to stop");
    eprintln!(
        "jqctl serve: answering requests for {} only (another name behind a proxy: --allowed-host NAME[:PORT])",
        hosts.join(", ")
    );
    let mut api_options = jq_dashboard::api::ApiOptions::new(options.clone());
    if let Some(token) = plan.read_token {
        api_options = api_options
            .read_token(token)
            .map_err(|e| CliError::bad_input(format!("{e} (--read-token or JQ_API_READ_TOKEN)")))?;
    }
    eprintln!("jqctl serve: HTTP API on http://{address}/api/v1/ (document: /api/v1/openapi.json)");
    let client = jq::Client::new(storage);
    let app = jq_dashboard::api::router(client.clone(), api_options).merge(jq_dashboard::router(client, options));
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_address_and_loopback_names_with_its_port() {
        let bound = hosts("127.0.0.1:8080".parse().unwrap(), &["jobs.example.com".to_owned()]);
        assert_eq!(bound, ["localhost:8080", "127.0.0.1:8080", "[::1]:8080", "127.0.0.1:8080", "jobs.example.com"]);
        let wildcard = hosts("0.0.0.0:9000".parse().unwrap(), &[]);
        assert_eq!(wildcard, ["localhost:9000", "127.0.0.1:9000", "[::1]:9000"]);
        assert_eq!(hosts("[::1]:7000".parse().unwrap(), &[]).last().map(String::as_str), Some("[::1]:7000"));
    }

    #[test]
    fn empty_tokens_and_urls_as_hosts_are_refused() {
        let listen: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let empty = ServePlan::prepare(listen, false, Some("  ".into()), vec![]).unwrap_err().to_string();
        assert!(empty.contains("empty"), "{empty}");
        let url = ServePlan::prepare(listen, false, None, vec!["https://jobs.example.com/".into()]);
        assert!(url.unwrap_err().to_string().contains("not a URL"));
    }
}
