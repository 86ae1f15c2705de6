//! The names of the model: a queue's ([`QueueName`], with its hash tag),
//! and the rules of kinds, unique keys, job keys, role and periodic job
//! names.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Longest accepted queue name, kind and unique key, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// Longest accepted job key ([`JobBuilder::key`](super::JobBuilder::key)), in bytes: keys are
/// often outside identifiers (a tenant, an account, a host name), so they
/// get more room than names.
pub const MAX_KEY_BYTES: usize = 255;

/// A validated queue name: 1 to 128 bytes of `A-Z a-z 0-9 _ - . :`,
/// optionally after a *hash tag* `{tag}` (the tag 1 or more of those
/// characters). Queues that share a hash tag share a Redis Cluster hash
/// slot, so a workflow may span them there (docs/CONTRACT.md, "Workflows");
/// elsewhere the tag is just part of the name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct QueueName(String);

/// A byte a queue name may hold outside its hash tag's braces.
fn plain_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':')
}

/// True for 1 to 128 bytes of `A-Z a-z 0-9 _ - . :` with no brace: the
/// rule of role and periodic job names (a queue name may add a hash tag).
pub(crate) fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_BYTES && name.bytes().all(plain_name_byte)
}

/// `name` without its leading hash tag's braces (`{tag}rest` -> `tagrest`),
/// or `name` itself; a tag that is empty or unclosed leaves a brace, which
/// the check refuses.
fn untagged(name: &str) -> Cow<'_, str> {
    match name.strip_prefix('{').and_then(|rest| rest.split_once('}')) {
        Some((tag, rest)) if !tag.is_empty() => Cow::Owned(format!("{tag}{rest}")),
        _ => Cow::Borrowed(name),
    }
}

impl QueueName {
    /// Checks `name` and wraps it.
    pub fn new(name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        let reason = if name.is_empty() {
            Some("it is empty")
        } else if name.len() > MAX_NAME_BYTES {
            Some("it is longer than 128 bytes")
        } else if !untagged(&name).bytes().all(plain_name_byte) {
            Some("it has a character outside A-Z a-z 0-9 _ - . : (or braces other than one leading {tag})")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(Error::InvalidQueue { name, reason }),
            None => Ok(QueueName(name)),
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for QueueName {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        QueueName::new(s)
    }
}

impl<'de> Deserialize<'de> for QueueName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        QueueName::new(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// Checks a job key ([`JobBuilder::key`](crate::JobBuilder::key)): [`Error::InvalidInput`] when it
/// is empty, longer than [`MAX_KEY_BYTES`], or holds a NUL (which
/// PostgreSQL cannot store). Any other text is a key: keys come from
/// outside (tenant ids, host names) and are compared byte for byte.
pub fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid("key", "it is empty"));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::invalid("key", format!("{} bytes, over the limit of {MAX_KEY_BYTES}", key.len())));
    }
    crate::text::check_no_nul("key", key)
}

/// Checks a kind or unique key: 1 to [`MAX_NAME_BYTES`] bytes without a
/// control character; [`Error::InvalidInput`] naming `what` otherwise.
pub(crate) fn check_name(what: &'static str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(what, "it is empty"));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(Error::invalid(what, format!("{} bytes, over the limit of {MAX_NAME_BYTES}", value.len())));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(what, format!("{value:?} has a control character")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_are_checked() {
        assert!(QueueName::new("mail:high-1.x_y").is_ok());
        for bad in ["", "a b", "é", "a/b", &"x".repeat(129)] {
            assert!(matches!(QueueName::new(bad), Err(Error::InvalidQueue { .. })), "{bad:?}");
        }
        assert!(QueueName::new("x".repeat(128)).is_ok());
        // a leading hash tag, and no other brace
        assert!(QueueName::new("{t}a").is_ok());
        assert!(QueueName::new("{flow:1}resize.x").is_ok());
        for bad in ["{}a", "{t", "a{t}b", "{t}{u}a", "{t}a}", "}a", "{t b}a"] {
            assert!(matches!(QueueName::new(bad), Err(Error::InvalidQueue { .. })), "{bad:?}");
        }
    }
}
