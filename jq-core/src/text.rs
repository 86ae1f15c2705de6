//! Text that comes from outside, made storable on every backend.
//!
//! PostgreSQL's `text` and `jsonb` cannot hold a NUL character (U+0000),
//! and Redis keeps some fields NUL-separated; SQLite and memory take
//! anything. So that the same text is stored, or refused, on every backend:
//!
//! - An error message (a handler's nack or bury, a command's stderr) is
//!   ours to record, so it is made storable: [`storable_message`] replaces
//!   each NUL with U+FFFD (the Unicode replacement character) and leaves
//!   everything else as it is. *Refusing it would lose the outcome; the
//!   replacement shows where the NUL was.*
//! - A name (kind, unique key, worker or role holder name, trace context)
//!   identifies something, so a NUL in it is refused at the API boundary
//!   with [`crate::Error::InvalidInput`] ([`check_no_nul`]): a changed
//!   name would not dedupe or match any more.
//! - A payload is JSON: the escape `\u0000` in it is refused with
//!   [`crate::Error::InvalidPayload`] ([`json_has_nul_escape`]): PostgreSQL's
//!   `jsonb` refuses it, and the value must read back equal everywhere.

use std::borrow::Cow;

use crate::error::{Error, Result};

/// What a NUL in a recorded error message becomes: U+FFFD.
pub const NUL_REPLACEMENT: char = '\u{FFFD}';

/// The error message as every backend records it: `message` with each NUL
/// replaced by [`NUL_REPLACEMENT`]; borrowed when there is none.
pub fn storable_message(message: &str) -> Cow<'_, str> {
    if message.contains('\0') { Cow::Owned(message.replace('\0', "\u{FFFD}")) } else { Cow::Borrowed(message) }
}

/// [`Error::InvalidInput`] naming `what` when `value` has a NUL character,
/// which PostgreSQL cannot store.
pub fn check_no_nul(what: &'static str, value: &str) -> Result<()> {
    if value.contains('\0') {
        return Err(Error::invalid(what, format!("{value:?} has a NUL character, which PostgreSQL cannot store")));
    }
    Ok(())
}

/// True when the JSON text `json` holds the escape `\u0000` (a NUL inside
/// a string), which PostgreSQL's `jsonb` refuses. A `\\u0000` (an escaped
/// backslash, then the letters) is not one.
pub fn json_has_nul_escape(json: &str) -> bool {
    let bytes = json.as_bytes();
    let mut i = 0;
    while let Some(at) = bytes[i..].iter().position(|&b| b == b'\\') {
        let start = i + at;
        if bytes.get(start + 1) == Some(&b'u') && bytes.get(start + 2..start + 6) == Some(b"0000") {
            return true;
        }
        // Skip the escaped character, a backslash included.
        i = start + 2;
        if i >= bytes.len() {
            return false;
        }
    }
    false
}

/// [`Error::InvalidPayload`] when `json` holds the escape `\u0000`.
pub fn check_payload_text(json: &str) -> Result<()> {
    if json_has_nul_escape(json) {
        return Err(Error::InvalidPayload(
            "the JSON holds \\u0000 (a NUL character in a string), which PostgreSQL's jsonb cannot store: \
             remove it or encode the bytes (e.g. base64)"
                .to_owned(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_lose_only_their_nuls() {
        assert!(matches!(storable_message("plain"), Cow::Borrowed("plain")));
        assert_eq!(storable_message("a\0b\0"), "a\u{FFFD}b\u{FFFD}");
        assert_eq!(storable_message("é\0"), "é\u{FFFD}");
    }

    #[test]
    fn nul_escapes_are_found_and_escaped_backslashes_are_not() {
        assert!(json_has_nul_escape(r#"{"a":"x\u0000y"}"#));
        assert!(json_has_nul_escape(r#"["\u0000"]"#));
        assert!(json_has_nul_escape(r#"["\\\u0000"]"#));
        assert!(!json_has_nul_escape(r#"["\\u0000"]"#));
        assert!(!json_has_nul_escape(r#"["\u0001"]"#));
        assert!(!json_has_nul_escape(r#"{"a":"\n\"\\"}"#));
        assert!(!json_has_nul_escape("\\"));
        assert!(!json_has_nul_escape(""));
        let of_nul = serde_json::to_string(&"a\0b").unwrap_or_default();
        assert!(json_has_nul_escape(&of_nul), "{of_nul}");
    }

    #[test]
    fn names_with_a_nul_are_refused() {
        assert!(check_no_nul("worker", "w-1").is_ok());
        assert!(matches!(check_no_nul("worker", "w\0"), Err(Error::InvalidInput { what: "worker", .. })));
        assert!(matches!(check_payload_text(r#""\u0000""#), Err(Error::InvalidPayload(_))));
    }
}
