//! How instants and durations read on the pages.

use std::time::Duration;

use jq::Timestamp;

/// `2026-11-23 21:04:05 UTC`.
pub(crate) fn instant(t: Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// `3m 12s` style, seconds at most: what an operator reads at a glance.
pub(crate) fn age(d: Duration) -> String {
    let secs = d.as_secs();
    let (days, hours, minutes, seconds) = (secs / 86_400, secs / 3_600 % 24, secs / 60 % 60, secs % 60);
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{seconds}s"),
        (0, 0, _) => format!("{minutes}m {seconds}s"),
        (0, _, _) => format!("{hours}h {minutes}m"),
        _ => format!("{days}d {hours}h"),
    }
}

/// `in 4m 3s` or `5s ago`, relative to `now`.
pub(crate) fn relative(t: Timestamp, now: Timestamp) -> String {
    match t.signed_duration_since(now).to_std() {
        Ok(ahead) if ahead >= Duration::from_secs(1) => format!("in {}", age(ahead)),
        Ok(_) => "now".to_owned(),
        Err(_) => format!("{} ago", age(now.signed_duration_since(t).to_std().unwrap_or_default())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_at_a_glance() {
        assert_eq!(age(Duration::from_secs(7)), "7s");
        assert_eq!(age(Duration::from_secs(192)), "3m 12s");
        assert_eq!(age(Duration::from_secs(7_380)), "2h 3m");
        assert_eq!(age(Duration::from_secs(90_000)), "1d 1h");
    }
}
