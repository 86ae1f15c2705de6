//! `jqctl periodic list` and `jqctl periodic trigger NAME`.

use jq::{JobId, PeriodicInfo, State, Storage, Timestamp};
use serde::Serialize;

use crate::error::CliResult;
use crate::view;

/// A periodic job as `periodic list --json` shows it.
#[derive(Debug, Serialize)]
pub struct PeriodicView {
    /// The name.
    pub name: String,
    /// The queue its jobs go to.
    pub queue: String,
    /// The cron expression or `every Ns`.
    pub expression: String,
    /// The IANA zone.
    pub zone: String,
    /// The next tick after the last one handled, by the stored expression
    /// (`null` when it never ticks again or cannot be read).
    pub next_tick: Option<Timestamp>,
    /// The last tick handled (run or skipped); for a periodic job that has not
    /// ticked yet, when it was first stored.
    pub last_tick: Timestamp,
    /// The job of the most recent run.
    pub last_job: Option<JobId>,
    /// Its state now (`null` when purged or never run).
    pub last_job_state: Option<State>,
    /// Ticks that passed without a job, in all.
    pub missed: u64,
    /// The most recent of them.
    pub last_missed: Option<Timestamp>,
    /// When a pool last declared it.
    pub declared_at: Timestamp,
    /// True when no pool has declared it for 5 minutes: nothing fires it.
    pub orphaned: bool,
    /// A `periodic trigger` not served yet.
    pub triggered_at: Option<Timestamp>,
}

/// `jqctl periodic list`.
pub async fn list<S: Storage>(storage: &S, json: bool) -> CliResult {
    let rows = storage.periodic().await?;
    let now = jq::Clock::system().now();
    let mut views = Vec::with_capacity(rows.len());
    for row in rows {
        let state = match row.last_job {
            Some(id) => storage.get(id).await.ok().map(|job| job.state),
            None => None,
        };
        views.push(PeriodicView::of(row, state, now));
    }
    if json {
        return view::emit_json(&views);
    }
    if views.is_empty() {
        eprintln!("no periodic job is stored (no worker pool has declared one on this store)");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = views.iter().map(PeriodicView::cells).collect();
    view::emit(&view::table(
        &["NAME", "EXPRESSION", "ZONE", "NEXT TICK", "LAST TICK", "LAST JOB", "MISSED", "STATUS"],
        &rows,
    ))
}

/// `jqctl periodic trigger NAME`.
pub async fn trigger<S: Storage>(storage: &S, name: &str, json: bool) -> CliResult {
    storage.trigger(name).await?;
    if json {
        return view::emit_json(&serde_json::json!({ "periodic": name, "triggered": true }));
    }
    view::emit(&format!("{name} triggered: a worker pool that declares it enqueues the job at its next round\n"))
}

impl PeriodicView {
    fn of(row: PeriodicInfo, last_job_state: Option<State>, now: Timestamp) -> Self {
        PeriodicView {
            next_tick: row.next_tick(),
            orphaned: row.is_orphaned(now),
            name: row.name,
            queue: row.queue,
            expression: row.spec,
            zone: row.zone,
            last_tick: row.cursor,
            last_job: row.last_job,
            last_job_state,
            missed: row.missed,
            last_missed: row.last_missed,
            declared_at: row.declared_at,
            triggered_at: row.triggered_at,
        }
    }

    fn cells(&self) -> Vec<String> {
        let last_job = match (self.last_job, self.last_job_state) {
            (Some(id), Some(state)) => format!("{id} {state}"),
            (Some(id), None) => format!("{id} (gone)"),
            (None, _) => "-".to_owned(),
        };
        let missed = match self.last_missed {
            Some(t) => format!("{} (last {})", self.missed, view::instant(t)),
            None => self.missed.to_string(),
        };
        let mut status = if self.orphaned { "orphaned".to_owned() } else { "declared".to_owned() };
        if self.triggered_at.is_some() {
            status.push_str(", triggered");
        }
        vec![
            self.name.clone(),
            self.expression.clone(),
            self.zone.clone(),
            self.next_tick.map_or_else(|| "-".to_owned(), view::instant),
            view::instant(self.last_tick),
            last_job,
            missed,
            status,
        ]
    }
}
