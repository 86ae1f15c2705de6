//! The pages: the overview, the job list, one job.

pub(crate) mod job;
pub(crate) mod jobs;
pub(crate) mod overview;
pub(crate) mod workflow;

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

/// The first 8 characters of a job id, enough to tell jobs apart on a page.
pub(crate) fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// Percent-encodes a queue or periodic job name for a URL path or query.
pub(crate) fn urlencode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, URL_COMPONENT).to_string()
}

/// Everything but the unreserved characters of RFC 3986, which queue and
/// periodic job names mostly are made of.
const URL_COMPONENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
