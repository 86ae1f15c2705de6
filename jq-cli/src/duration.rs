//! Durations on the command line: `500ms`, `30s`, `5m`, `2h`, `7d`.

use std::time::Duration;

/// Parses a duration such as `500ms`, `30s`, `5m`, `2h`, `7d` or `1h30m`.
/// Zero is accepted.
pub fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.starts_with('-') {
        return Err(format!("{s:?} is negative; give a duration such as 30s, 5m, 2h or 7d"));
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s:?} has no unit; write e.g. {s}s, {s}m or {s}d"));
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration ({e}); write e.g. 500ms, 30s, 5m, 2h or 7d"))
}

/// [`parse`], refusing zero.
pub fn parse_positive(s: &str) -> Result<Duration, String> {
    let d = parse(s)?;
    if d.is_zero() {
        return Err(format!("{s:?} is zero; give a positive duration such as 1s"));
    }
    Ok(d)
}

/// A duration for people: `1m 30s`, at second precision above a second.
pub fn human(d: Duration) -> String {
    let d = if d >= Duration::from_secs(1) { Duration::from_secs(d.as_secs()) } else { d };
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn bad_durations_say_what_to_write() {
        for bad in ["-5s", "", "abc", "5", "5 parsecs", "s"] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("30s") || e.contains("e.g."), "{bad:?}: {e}");
        }
        assert!(parse_positive("0s").is_err());
    }
}
