//! The frame of every page: head, navigation, the notice an action left,
//! and the base path that makes links work wherever the router is nested.

use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::request::Parts;
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;

/// The path the dashboard is mounted at ("" at the root, "/admin/jobs"
/// when nested there); every link and form starts with it.
#[derive(Clone, Debug)]
pub(crate) struct Base(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Base {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        // A nested router sees its own part of the path; the original
        // minus that part is the mount point.
        let inner = parts.uri.path();
        let full = parts.extensions.get::<OriginalUri>().map_or(inner, |o| o.0.path());
        let base = match full.strip_suffix(inner) {
            Some(base) => base,
            None if inner == "/" => full,
            None => "",
        };
        Ok(Base(base.trim_end_matches('/').to_owned()))
    }
}

impl Base {
    /// The dashboard's own `path` (which starts with `/`).
    pub(crate) fn to(&self, path: &str) -> String {
        format!("{}{path}", self.0)
    }
}

/// What an action did, carried in the redirect's query (`?done=...&n=...`)
/// as a code: the message itself is ours, never a request's text.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Done {
    done: Option<String>,
    n: Option<u64>,
}

impl Done {
    /// The sentence for the notice banner, if an action just ran.
    pub(crate) fn message(&self) -> Option<String> {
        let n = self.n.unwrap_or(0);
        Some(match self.done.as_deref()? {
            "retried" => "Retried: the job is pending again, with one more attempt.".to_owned(),
            "cancelled" => "Cancelled: the job will not run.".to_owned(),
            "cancel_requested" => "Cancel requested: the worker running the job stops it within seconds; \
                                   it ends Cancelled (or Completed, if it finished first)."
                .to_owned(),
            "signalled" => "Signal sent: the job's wait for it takes it (each signal once, oldest first), \
                            and a job waiting for it runs again at once."
                .to_owned(),
            "cancel_too_late" => "Too late to cancel: the job had already finished.".to_owned(),
            "paused" => "Paused: no worker starts a job of this queue until it is resumed.".to_owned(),
            "resumed" => "Resumed: workers start this queue's jobs again.".to_owned(),
            "retried-dead" => format!("Retried {n} dead job(s): they are pending again."),
            "purged" => format!("Purged {n} finished job(s)."),
            "triggered" => {
                "Triggered: a worker pool that declares the periodic job enqueues its job at its next round.".to_owned()
            }
            _ => return None,
        })
    }
}

/// Which page the navigation marks as current.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Overview,
    Jobs,
}

/// A whole page.
pub(crate) fn page(
    base: &Base,
    title: &str,
    nav: Nav,
    read_only: bool,
    notice: Option<String>,
    body: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · jq" }
                link rel="stylesheet" href=(base.to("/assets/dashboard.css"));
                script src=(base.to("/assets/dashboard.js")) defer {}
            }
            body {
                header.top {
                    a.brand href=(base.to("/")) { "jq" }
                    nav {
                        a.current[nav == Nav::Overview] href=(base.to("/")) { "Overview" }
                        a.current[nav == Nav::Jobs] href=(base.to("/jobs")) { "Jobs" }
                    }
                    @if read_only { span.badge title="Actions are turned off" { "read-only" } }
                }
                main {
                    @if let Some(notice) = notice { p.notice role="status" { (notice) } }
                    (body)
                }
            }
        }
    }
}

/// A POST form of one button that asks before it acts (`data-confirm`,
/// see dashboard.js) and carries the CSRF token.
pub(crate) fn action(action: &str, csrf: &str, label: &str, confirm: &str, class: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) data-confirm=(confirm) {
            input type="hidden" name="csrf" value=(csrf);
            button type="submit" class=(class) { (label) }
        }
    }
}
