//! The read commands: `list`, `dead list`, `stats`, `leaders`.

use std::io::IsTerminal as _;
use std::time::Duration;

use jq::storage::{Storage, StorageExt};
use jq::{JobFilter, State};

use crate::cli::PageArgs;
use crate::duration;
use crate::error::CliResult;
use crate::view::{self, JobView, LeaderView, StatsView};

/// `jqctl list` and `jqctl dead list`.
pub async fn list<S: Storage>(
    storage: &S,
    state: Option<State>,
    page: &PageArgs,
    json: bool,
    with_last_error: bool,
) -> CliResult {
    let filter = JobFilter {
        queue: page.queue.clone(),
        state,
        kind: page.kind.clone(),
        after: page.after,
        limit: usize::try_from(page.limit).unwrap_or(usize::MAX),
    };
    let jobs = storage.list(&filter).await?;
    if json {
        let views: Vec<JobView> = jobs.iter().map(JobView::from).collect();
        return view::emit_json(&views);
    }
    if jobs.is_empty() {
        eprintln!("no jobs match");
        return Ok(());
    }
    view::emit(&view::jobs_table(&jobs, with_last_error))?;
    if jobs.len() == filter.page_size()
        && let Some(last) = jobs.last()
    {
        eprintln!("(more may follow: add --after {})", last.id);
    }
    Ok(())
}

/// `jqctl stats`.
pub async fn stats<S: Storage>(storage: &S, json: bool) -> CliResult {
    let stats = storage.stats().await?;
    if json { view::emit_json(&StatsView::from(&stats)) } else { view::emit(&view::stats_table(&stats)) }
}

/// `jqctl stats --watch`: redraws in place on a terminal (one JSON document
/// per line with `--json`) until Ctrl-C.
pub async fn watch_stats<S: Storage>(storage: &S, every: Duration, json: bool) -> CliResult {
    let in_place = !json && std::io::stdout().is_terminal();
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = ticker.tick() => {}
        }
        let stats = storage.stats().await?;
        if json {
            view::emit(&format!("{}\n", serde_json::to_string(&StatsView::from(&stats))?))?;
            continue;
        }
        let now = view::instant(jq::Clock::system().now());
        let header = format!("{now}  every {}; Ctrl-C to stop\n\n", duration::human(every));
        // Clear the screen and home the cursor, then draw: one write, so the
        // table never flickers half-drawn.
        let clear = if in_place { "\x1b[2J\x1b[H" } else { "" };
        view::emit(&format!("{clear}{header}{}{}", view::stats_table(&stats), if in_place { "" } else { "\n" }))?;
    }
}

/// `jqctl leaders`: who holds each role, by the system clock.
pub async fn leaders<S: Storage>(storage: &S, json: bool) -> CliResult {
    let leaders = storage.require_roles()?.leaders().await?;
    let now = jq::Clock::system().now();
    if json {
        let views: Vec<LeaderView> = leaders.iter().map(|l| LeaderView::of(l, now)).collect();
        return view::emit_json(&views);
    }
    if leaders.is_empty() {
        eprintln!("no role is held (no worker pool with maintenance on is running)");
        return Ok(());
    }
    view::emit(&view::leaders_table(&leaders, now))
}
