//! jqctl: the command line for people who operate jq queues.
//!
//! Every command is a generic function over `S: jq::storage::Storage` (`commands`),
//! run on the `jq::Backend` that `backend` opens from `--url`.
//! Exit codes: 0 success, 2 bad input (nothing stored), 1 anything else.

#[cfg(not(any(feature = "sqlite", feature = "postgres", feature = "redis")))]
compile_error!("jqctl needs at least one backend: enable the `sqlite`, `postgres` or `redis` feature");

mod backend;
mod cli;
mod commands;
mod duration;
mod error;
mod view;

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser as _;

use crate::cli::{Cli, Command};
use crate::commands::Action;
use crate::error::{CliError, CliResult};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(matches!(cli.command, Command::Worker(_)));
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return report(&CliError::Other(format!("cannot start the async runtime: {e}"))),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report(&e),
    }
}

fn report(e: &CliError) -> ExitCode {
    eprintln!("jqctl: error: {e}");
    if let Some(hint) = e.hint() {
        eprintln!("hint: {hint}");
    }
    e.exit_code()
}

/// Checks the input, then opens the backend, then runs the command: bad
/// input never touches (or creates) the store.
async fn run(cli: Cli) -> CliResult {
    let url = backend::parse(&cli.url)?;
    let action = Action::prepare(cli.command)?;
    let backend = backend::open(&url, cli.listen_url.as_deref()).await?;
    match action {
        None => {
            let message = backend::migrate(&backend).await?;
            view::emit(&format!("{message}\n"))
        }
        Some(action) => action.run(backend, cli.json).await,
    }
}

/// Logs go to stderr. `RUST_LOG` overrides the default: warnings, plus one
/// line per job for the worker.
fn init_logging(worker: bool) {
    let default = if worker { "warn,jq_cli=info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}
