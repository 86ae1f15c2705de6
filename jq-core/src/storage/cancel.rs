//! The cancellation capability ([`Capability::Cancellation`](crate::storage::Capability::Cancellation)):
//! stopping a job that is already running, from any process, and the
//! progress its handler reports.
//!
//! A cancel request is stored on the job; the pool running it learns of it
//! from its next heartbeat ([`Beat::cancel`](super::Beat::cancel)), stops
//! the handler and settles the job with [`Outcome::Cancel`](super::Outcome::Cancel).
//! The whole contract, races included, is in `docs/CONTRACT.md`
//! ("Cancelling a running job").

use crate::error::{Error, Result};
use crate::job::LeaseRef;
use crate::state::State;

/// Longest progress value a handler may report, in bytes of JSON text.
pub const MAX_PROGRESS_BYTES: usize = 4096;
/// Longest cancel reason, in bytes; a longer one is cut at a character
/// boundary.
pub const MAX_CANCEL_REASON_BYTES: usize = 512;

/// What [`CancelStorage::request_cancel`](super::CancelStorage::request_cancel) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelAnswer {
    /// The job had not started: it is Cancelled now.
    Cancelled,
    /// The job is running: the request is stored and the pool running it
    /// stops it; it ends Cancelled (or Completed, when its handler
    /// succeeded first).
    Requested,
    /// The job had already finished, in this state: nothing changed.
    Finished(State),
}

/// A handler's progress, sent by the pool's heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgressReport {
    /// The job and the token of the claim that runs it.
    pub lease: LeaseRef,
    /// JSON text, checked by [`check_progress`].
    pub value: String,
}

/// Checks a progress value: JSON text of at most [`MAX_PROGRESS_BYTES`]
/// that every backend can store (no `\u0000`); [`Error::InvalidInput`]
/// otherwise.
pub fn check_progress(value: &str) -> Result<()> {
    if value.len() > MAX_PROGRESS_BYTES {
        return Err(Error::invalid(
            "progress",
            format!("{} bytes, over the limit of {MAX_PROGRESS_BYTES}", value.len()),
        ));
    }
    serde_json::from_str::<serde::de::IgnoredAny>(value).map_err(|e| Error::invalid("progress", e.to_string()))?;
    crate::text::check_payload_text(value).map_err(|e| Error::invalid("progress", e.to_string()))
}

/// A cancel reason as every backend stores it: NUL characters replaced
/// ([`storable_message`](crate::text::storable_message)) and cut to
/// [`MAX_CANCEL_REASON_BYTES`] at a character boundary.
pub fn cancel_reason(reason: &str) -> String {
    let mut text = crate::text::storable_message(reason).into_owned();
    if text.len() > MAX_CANCEL_REASON_BYTES {
        let mut end = MAX_CANCEL_REASON_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_must_be_small_storable_json() {
        assert!(check_progress(r#"{"percent":40,"message":"step 2"}"#).is_ok());
        assert!(check_progress("not json").is_err());
        assert!(check_progress(r#""\u0000""#).is_err());
        assert!(check_progress(&format!("\"{}\"", "x".repeat(MAX_PROGRESS_BYTES))).is_err());
    }

    #[test]
    fn reasons_are_storable_and_bounded() {
        assert_eq!(cancel_reason("a\0b"), format!("a{}b", crate::text::NUL_REPLACEMENT));
        let long = "é".repeat(MAX_CANCEL_REASON_BYTES);
        let cut = cancel_reason(&long);
        assert!(cut.len() <= MAX_CANCEL_REASON_BYTES && cut.chars().all(|c| c == 'é'));
    }
}
