//! How a dashboard is served: read-only or not, and the token it asks for.

use std::fmt;
use std::time::Duration;

/// The dashboard's settings. `Options::new()` is read-write, without a
/// token, refreshing every 5 s: right for 127.0.0.1 or behind your app's
/// own auth.
#[derive(Clone)]
pub struct Options {
    pub(crate) read_only: bool,
    pub(crate) token: Option<String>,
    pub(crate) refresh: Duration,
}

impl Options {
    /// Read-write, no token, auto-refresh every 5 s.
    pub fn new() -> Self {
        Options { read_only: false, token: None, refresh: Duration::from_secs(5) }
    }

    /// Hides every action and refuses their POSTs with 403.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Requires `token` on every request: as the password of HTTP basic
    /// auth (any user name; what a browser prompts for) or as
    /// `Authorization: Bearer TOKEN`.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// How often the overview reloads its figures (the page has a pause).
    pub fn refresh_every(mut self, every: Duration) -> Self {
        self.refresh = every.max(Duration::from_secs(1));
        self
    }

    /// True when actions are off.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// True when requests need a token.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options::new()
    }
}

// Hand-written so that the token never reaches a log.
impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("read_only", &self.read_only)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("refresh", &self.refresh)
            .finish()
    }
}
