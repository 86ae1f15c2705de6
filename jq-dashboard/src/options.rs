//! How a dashboard is served: read-only or not, the token it asks for, and
//! the host names it answers to.

use std::fmt;
use std::time::Duration;

/// The dashboard's settings. `Options::new()` is read-write, without a
/// token, answering only requests addressed to a loopback name
/// (`localhost`, `127.0.0.1`, `[::1]`, any port), refreshing every 5 s:
/// right for 127.0.0.1. Nested in your app under another name, allow that
/// name ([`Options::allow_host`]).
///
/// *Why the host check:* a page from another site can point its own name
/// at 127.0.0.1 (DNS rebinding) and then read and post to a dashboard
/// there as if it were that site, CSRF token included; its requests still
/// name its own host, so answering only our own names stops it.
#[derive(Clone)]
pub struct Options {
    pub(crate) read_only: bool,
    pub(crate) token: Option<String>,
    pub(crate) refresh: Duration,
    pub(crate) hosts: Hosts,
}

/// Which `Host` headers a dashboard answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Hosts {
    /// Any (the embedding app or a proxy in front checks it).
    Any,
    /// Only these.
    Only(Vec<HostName>),
}

/// One accepted host: a name (lowercase; an IPv6 address in brackets) and,
/// when given, the one port it is accepted with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HostName {
    pub(crate) name: String,
    pub(crate) port: Option<u16>,
}

/// The loopback names every dashboard answers unless told otherwise.
pub(crate) const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// A setting [`Options`] refuses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum OptionsError {
    /// An empty token (or one of only whitespace) would be no protection:
    /// refused rather than accepting anything.
    #[error("the dashboard token is empty: give a non-empty one, or none to serve without a token")]
    EmptyToken,
    /// A host that is not `name` or `name:port`.
    #[error("allowed host {host:?} is invalid: {reason}")]
    InvalidHost {
        /// The host given.
        host: String,
        /// What is wrong, and what would be accepted.
        reason: &'static str,
    },
}

impl Options {
    /// Read-write, no token, loopback names only, auto-refresh every 5 s.
    pub fn new() -> Self {
        let loopback = LOOPBACK.iter().map(|name| HostName { name: (*name).to_owned(), port: None }).collect();
        Options { read_only: false, token: None, refresh: Duration::from_secs(5), hosts: Hosts::Only(loopback) }
    }

    /// Hides every action and refuses their POSTs with 403.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Requires `token` on every request: as the password of HTTP basic
    /// auth (any user name; what a browser prompts for) or as
    /// `Authorization: Bearer TOKEN`.
    ///
    /// Whitespace around the token is trimmed, here and in what a request
    /// sends, so a token read from a file or a secret with a trailing
    /// newline still matches what a person types. An empty token (after
    /// trimming) is refused: it would let anything in.
    pub fn token(mut self, token: impl Into<String>) -> Result<Self, OptionsError> {
        let token = token.into();
        let token = token.trim();
        if token.is_empty() {
            return Err(OptionsError::EmptyToken);
        }
        self.token = Some(token.to_owned());
        Ok(self)
    }

    /// Also answers requests addressed to `host`: a name or address
    /// (`jobs.example.com`, `10.0.0.5`, `[fd00::5]`), accepted on any port,
    /// or `name:port`, accepted on that port only. For a dashboard reached
    /// under another name than loopback, directly or through a reverse
    /// proxy that passes the `Host` header on.
    pub fn allow_host(mut self, host: &str) -> Result<Self, OptionsError> {
        let host = parse_host(host)?;
        match &mut self.hosts {
            Hosts::Any => {}
            Hosts::Only(hosts) => hosts.push(host),
        }
        Ok(self)
    }

    /// Answers exactly these hosts (each as in [`Options::allow_host`]),
    /// loopback names included only if listed: `jqctl serve` lists the
    /// loopback names with its port, the address it is bound to, and its
    /// `--allowed-host` values.
    pub fn allowed_hosts<'a>(mut self, hosts: impl IntoIterator<Item = &'a str>) -> Result<Self, OptionsError> {
        self.hosts = Hosts::Only(hosts.into_iter().map(parse_host).collect::<Result<_, _>>()?);
        Ok(self)
    }

    /// Answers whatever `Host` a request names: for an app or a proxy in
    /// front that checks it, or that requires its own authentication.
    pub fn allow_any_host(mut self) -> Self {
        self.hosts = Hosts::Any;
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

    /// The hosts answered, as `name` (any port) or `name:port`; `None`
    /// when any host is.
    pub fn hosts(&self) -> Option<Vec<String>> {
        match &self.hosts {
            Hosts::Any => None,
            Hosts::Only(hosts) => Some(
                hosts
                    .iter()
                    .map(|h| match h.port {
                        Some(port) => format!("{}:{port}", h.name),
                        None => h.name.clone(),
                    })
                    .collect(),
            ),
        }
    }
}

/// `name` or `name:port` (`[v6]` or `[v6]:port`), lowercased.
pub(crate) fn parse_host(host: &str) -> Result<HostName, OptionsError> {
    let invalid = |reason| OptionsError::InvalidHost { host: host.to_owned(), reason };
    if host.contains("://") || host.contains(['/', '?', '#', '@']) {
        return Err(invalid("give a host name and an optional port (jobs.example.com:443), not a URL"));
    }
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let Some((address, after)) = rest.split_once(']') else { return Err(invalid("an unclosed [")) };
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or_else(|| invalid("expected :port after ]"))?),
        };
        (format!("[{address}]"), port)
    } else {
        match host.rsplit_once(':') {
            Some((name, _)) if name.contains(':') => {
                return Err(invalid("put an IPv6 address in brackets: [fd00::5] or [fd00::5]:8080"));
            }
            Some((name, port)) => (name.to_owned(), Some(port)),
            None => (host.to_owned(), None),
        }
    };
    let port = match port {
        None => None,
        Some(port) => Some(port.parse::<u16>().map_err(|_| invalid("the port is not a number from 0 to 65535"))?),
    };
    if name.is_empty() || name == "[]" || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid("the name is empty or has whitespace"));
    }
    Ok(HostName { name: name.to_ascii_lowercase(), port })
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
            .field("hosts", &self.hosts)
            .finish()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn hosts_parse_with_and_without_ports() {
        assert_eq!(parse_host("Jobs.Example.com").unwrap(), HostName { name: "jobs.example.com".into(), port: None });
        assert_eq!(parse_host("10.0.0.5:8080").unwrap(), HostName { name: "10.0.0.5".into(), port: Some(8080) });
        assert_eq!(parse_host("[::1]:80").unwrap(), HostName { name: "[::1]".into(), port: Some(80) });
        assert_eq!(parse_host("[fd00::5]").unwrap(), HostName { name: "[fd00::5]".into(), port: None });
        for bad in ["", "http://x.example", "x.example/", "fd00::5", "x:port", "x:70000", "[::1", "[::1]8080", "a b"] {
            assert!(matches!(parse_host(bad), Err(OptionsError::InvalidHost { .. })), "{bad:?}");
        }
    }

    #[test]
    fn empty_tokens_are_refused_and_others_trimmed() {
        assert_eq!(Options::new().token("").err(), Some(OptionsError::EmptyToken));
        assert_eq!(Options::new().token(" \n\t").err(), Some(OptionsError::EmptyToken));
        assert_eq!(Options::new().token(" s3cret\n").unwrap().token.as_deref(), Some("s3cret"));
    }
}
