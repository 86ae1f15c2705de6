//! The pages: the overview, the job list, one job.

pub(crate) mod job;
pub(crate) mod jobs;
pub(crate) mod overview;

use jq::{Rate, State};
use maud::{Markup, html};

/// A job state as a coloured label.
pub(crate) fn state_badge(state: State) -> Markup {
    html! { span class=(format!("state state-{state}")) { (state) } }
}

/// `100 / 1s`.
pub(crate) fn rate(rate: &Rate) -> String {
    format!("{} / {}", rate.limit, humantime::format_duration(rate.period))
}

/// Reads an optional form or query field: absent and empty are both none.
pub(crate) fn field(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}
