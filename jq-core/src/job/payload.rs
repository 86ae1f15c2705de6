//! [`Payload`]: a job's arguments, JSON text.

use serde::{Serialize, de::DeserializeOwned};

use crate::error::{Error, Result};

/// Default payload size limit of a backend, in bytes of serialized JSON.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

/// A job's payload: JSON text.
///
/// Payloads made by jq are checked to be JSON; payloads read back from
/// storage are not re-parsed (the handler parses them once), so a payload
/// corrupted in storage surfaces as a deserialization failure of the
/// handler, which sends the job to Dead with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payload(String);

impl Payload {
    /// Serializes `value` to JSON.
    /// [`Error::InvalidPayload`] when serde fails, or when a string holds
    /// a NUL character, which PostgreSQL's `jsonb` cannot store (see
    /// "Text from outside" in the repository's `docs/CONTRACT.md`).
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Result<Self> {
        let text = serde_json::to_string(value).map_err(|e| Error::InvalidPayload(e.to_string()))?;
        crate::text::check_payload_text(&text)?;
        Ok(Payload(text))
    }

    /// Checks that `text` is JSON without the escape `\u0000` (see "Text
    /// from outside" in the repository's `docs/CONTRACT.md`) and wraps it.
    pub fn from_json(text: impl Into<String>) -> Result<Self> {
        let text = text.into();
        serde_json::from_str::<serde::de::IgnoredAny>(&text).map_err(|e| Error::InvalidPayload(e.to_string()))?;
        crate::text::check_payload_text(&text)?;
        Ok(Payload(text))
    }

    /// Wraps text read back from storage without checking it.
    pub fn from_stored(text: String) -> Self {
        Payload(text)
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Size of the JSON text in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True for an empty text (never the case for a payload made by jq).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Deserializes the payload into `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> std::result::Result<T, serde_json::Error> {
        serde_json::from_str(&self.0)
    }
}
