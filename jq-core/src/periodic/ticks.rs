//! When a periodic job ticks: pure code, no I/O, unit-tested with the
//! daylight-saving cases.
//!
//! A cron expression is matched against the zone's wall clock (croner
//! searches the naive local calendar), and each local match is turned into
//! an instant by jq's own rules, so the behaviour at a transition does not
//! depend on the parser crate:
//!
//! - **Spring forward** (a local time that does not exist): the tick is the
//!   first instant after the gap (the transition itself). Several matches in
//!   one gap (`*/15` over a skipped hour) are one tick, and a match at the
//!   end of the gap (03:00 after a 02:00 to 03:00 gap) is that same tick.
//! - **Fall back** (a local time that occurs twice): the tick is the first
//!   occurrence only. The repeated wall-clock range does not tick again.
//!
//! Both follow from one rule: a local match maps to one instant, and a
//! periodic job's ticks are the *distinct* instants, strictly after the last one.
//!
//! A fixed interval ticks at whole multiples of the interval since the Unix
//! epoch (UTC): every pool computes the same instants, and zones do not
//! apply (an interval is absolute time).

use std::time::Duration;

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use crate::clock::{Timestamp, from_micros};
use crate::error::{Error, Result};

/// What makes a periodic job tick.
#[derive(Clone, Debug)]
pub enum Spec {
    /// A cron expression of 5 fields (minute hour day-of-month month
    /// day-of-week) or 6 (a leading seconds field), on the periodic job's zone.
    Cron {
        /// The parsed expression.
        cron: Box<Cron>,
        /// The expression as given (trimmed), shown to operators.
        text: String,
    },
    /// A fixed interval, at whole multiples of it since the Unix epoch.
    Every(Duration),
}

impl Spec {
    /// Parses a cron expression of 5 or 6 fields (seconds first); names of
    /// months and weekdays and `L`, `W`, `#` as croner takes them.
    pub fn cron(expression: &str) -> Result<Spec> {
        let text = expression.split_whitespace().collect::<Vec<_>>().join(" ");
        let fields = text.split(' ').filter(|f| !f.is_empty()).count();
        if !(5..=6).contains(&fields) {
            return Err(Error::invalid(
                "cron expression",
                format!(
                    "{expression:?} has {fields} fields: use 5 (min hour dom mon dow) or 6 (sec min hour dom mon dow)"
                ),
            ));
        }
        let parser = CronParser::builder().seconds(Seconds::Optional).year(Year::Disallowed).build();
        let cron =
            parser.parse(&text).map_err(|e| Error::invalid("cron expression", format!("{expression:?}: {e}")))?;
        Ok(Spec::Cron { cron: Box::new(cron), text })
    }

    /// A fixed interval; at least one second and a whole number of
    /// milliseconds.
    pub fn every(interval: Duration) -> Result<Spec> {
        if interval < Duration::from_secs(1) || !interval.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(Error::invalid("interval", format!("{interval:?}: use at least 1 s, in whole milliseconds")));
        }
        Ok(Spec::Every(interval))
    }

    /// Reads back what [`Spec::text`] wrote: `every 30s`, `every 1500ms`,
    /// or a cron expression (for tools that have the stored row only, such
    /// as `jqctl periodic list` computing the next tick).
    pub fn parse(text: &str) -> Result<Spec> {
        let Some(every) = text.strip_prefix("every ") else { return Spec::cron(text) };
        let bad = || Error::invalid("interval", format!("{text:?}: use every Ns or every Nms"));
        let interval = match every.strip_suffix("ms") {
            Some(ms) => Duration::from_millis(ms.parse().map_err(|_| bad())?),
            None => Duration::from_secs(every.strip_suffix('s').ok_or_else(bad)?.parse().map_err(|_| bad())?),
        };
        Spec::every(interval)
    }

    /// The text stored and shown to operators: the cron expression, or
    /// `every 30s` / `every 1500ms`.
    pub fn text(&self) -> String {
        match self {
            Spec::Cron { text, .. } => text.clone(),
            Spec::Every(d) if d.subsec_millis() == 0 => format!("every {}s", d.as_secs()),
            Spec::Every(d) => format!("every {}ms", d.as_millis()),
        }
    }

    /// The first tick strictly after `after`, or `None` when the expression
    /// never matches again (e.g. February 30th).
    pub fn next_after(&self, after: Timestamp, zone: Tz) -> Option<Timestamp> {
        match self {
            Spec::Every(d) => {
                let step = i64::try_from(d.as_micros()).ok()?;
                let t = after.timestamp_micros();
                let next = t.div_euclid(step).checked_add(1)?.checked_mul(step)?;
                Some(from_micros(next))
            }
            Spec::Cron { cron, .. } => next_cron(cron, after, zone),
        }
    }
}

/// The first distinct instant after `after` that a local match of `cron`
/// maps to.
fn next_cron(cron: &Cron, after: Timestamp, zone: Tz) -> Option<Timestamp> {
    let mut local = after.with_timezone(&zone).naive_local();
    // Each step moves to a later local match; matches that map to `after`
    // or earlier (the repeated half of a fall-back, the rest of a gap) are
    // passed over. A day's worth of seconds bounds the walk.
    for _ in 0..100_000 {
        local = cron.find_next_occurrence(&local, false).ok()?;
        let at = to_instant(local, zone)?;
        if at > after {
            return Some(at);
        }
    }
    None
}

/// The instant of wall-clock time `local` in `zone`: the first occurrence
/// when it is repeated, the first instant after the gap when it is skipped.
pub fn to_instant(local: NaiveDateTime, zone: Tz) -> Option<Timestamp> {
    match zone.from_local_datetime(&local) {
        LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
        LocalResult::Ambiguous(first, _) => Some(first.with_timezone(&Utc)),
        LocalResult::None => after_gap(local, zone),
    }
}

/// The first instant after the gap that `local` falls in: the first local
/// second that exists, found by whole minutes then by seconds.
fn after_gap(local: NaiveDateTime, zone: Tz) -> Option<Timestamp> {
    let exists = |t: NaiveDateTime| !matches!(zone.from_local_datetime(&t), LocalResult::None);
    let minute = chrono::Duration::minutes(1);
    let mut end = local.with_nanosecond(0)?.with_second(0)?;
    // Gaps last hours at most (a whole day in the rarest cases).
    for _ in 0..(3 * 24 * 60) {
        end = end.checked_add_signed(minute)?;
        if exists(end) {
            // The first existing second of the minute before `end`, if any.
            let first = (1..=60)
                .map(|s| end - chrono::Duration::seconds(60 - s))
                .find(|t| *t > local && exists(*t))
                .unwrap_or(end);
            return to_instant(first, zone);
        }
    }
    None
}

/// The ticks of `spec` in `(after, until]`, ascending, at most `limit` of
/// them: the bool is true when more ticks remain in that range.
pub fn ticks_between(
    spec: &Spec,
    zone: Tz,
    after: Timestamp,
    until: Timestamp,
    limit: usize,
) -> (Vec<Timestamp>, bool) {
    let mut ticks = Vec::new();
    let mut cursor = after;
    while let Some(next) = spec.next_after(cursor, zone) {
        if next > until {
            return (ticks, false);
        }
        if ticks.len() == limit {
            return (ticks, true);
        }
        ticks.push(next);
        cursor = next;
    }
    (ticks, false)
}

/// Parses an IANA zone name (`Europe/Berlin`, `UTC`).
pub fn zone(name: &str) -> Result<Tz> {
    name.parse::<Tz>()
        .map_err(|_| Error::invalid("time zone", format!("{name:?}: use an IANA name such as Europe/Berlin or UTC")))
}

/// An instant in `zone`, for messages and tests.
pub fn local(t: Timestamp, zone: Tz) -> DateTime<Tz> {
    t.with_timezone(&zone)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use chrono::NaiveDate;

    use super::*;

    fn utc(s: &str) -> Timestamp {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn ticks(expr: &str, zone: &str, from: &str, to: &str) -> Vec<String> {
        let spec = Spec::cron(expr).unwrap();
        let (ticks, more) = ticks_between(&spec, super::zone(zone).unwrap(), utc(from), utc(to), 10_000);
        assert!(!more);
        ticks.into_iter().map(|t| t.to_rfc3339()).collect()
    }

    #[test]
    fn five_and_six_fields_parse_and_others_do_not() {
        assert!(Spec::cron("*/5 * * * *").is_ok());
        assert!(Spec::cron("30 */5 * * * *").is_ok());
        for bad in ["* * * *", "0 0 0 * * * 2030", "", "61 * * * *", "nonsense"] {
            assert!(matches!(Spec::cron(bad), Err(Error::InvalidInput { .. })), "{bad:?}");
        }
        assert_eq!(Spec::cron("  0   3 * * *").unwrap().text(), "0 3 * * *");
    }

    #[test]
    fn parse_reads_back_text() {
        for text in ["every 30s", "every 1500ms", "*/5 * * * *", "0 30 2 * * *"] {
            assert_eq!(Spec::parse(text).unwrap().text(), text);
        }
        assert!(Spec::parse("every soon").is_err());
    }

    #[test]
    fn six_fields_tick_on_seconds() {
        let got = ticks("*/20 * * * * *", "UTC", "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z");
        assert_eq!(got, ["2026-01-01T00:00:20+00:00", "2026-01-01T00:00:40+00:00", "2026-01-01T00:01:00+00:00"]);
    }

    #[test]
    fn intervals_tick_at_multiples_since_the_epoch() {
        let spec = Spec::every(Duration::from_secs(90)).unwrap();
        let from = utc("2026-01-01T00:00:00Z");
        let (got, _) = ticks_between(&spec, Tz::UTC, from, utc("2026-01-01T00:05:00Z"), 100);
        assert!(got.iter().all(|t| t.timestamp() % 90 == 0));
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(spec.next_after(got[0], Tz::UTC), Some(got[1]));
        assert!(Spec::every(Duration::from_millis(500)).is_err());
        assert_eq!(Spec::every(Duration::from_millis(1500)).unwrap().text(), "every 1500ms");
    }

    #[test]
    fn berlin_spring_forward_runs_once_at_the_first_instant_after_the_gap() {
        // 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00 UTC).
        assert_eq!(
            ticks("30 2 * * *", "Europe/Berlin", "2026-03-28T00:00:00Z", "2026-03-30T23:00:00Z"),
            ["2026-03-28T01:30:00+00:00", "2026-03-29T01:00:00+00:00", "2026-03-30T00:30:00+00:00"]
        );
        // Every quarter hour over the gap: 02:00..02:45 and 03:00 are one tick.
        assert_eq!(
            ticks("*/15 * * * *", "Europe/Berlin", "2026-03-29T00:30:00Z", "2026-03-29T01:30:00Z"),
            [
                "2026-03-29T00:45:00+00:00",
                "2026-03-29T01:00:00+00:00",
                "2026-03-29T01:15:00+00:00",
                "2026-03-29T01:30:00+00:00"
            ]
        );
    }

    #[test]
    fn berlin_fall_back_runs_once() {
        // 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:00-02:59 happens twice
        // (00:00-00:59 UTC and 01:00-01:59 UTC).
        assert_eq!(
            ticks("30 2 * * *", "Europe/Berlin", "2026-10-24T00:00:00Z", "2026-10-26T12:00:00Z"),
            ["2026-10-24T00:30:00+00:00", "2026-10-25T00:30:00+00:00", "2026-10-26T01:30:00+00:00"]
        );
        // Hourly: the repeated 02:00 ticks once, at its first occurrence.
        assert_eq!(
            ticks("0 * * * *", "Europe/Berlin", "2026-10-24T23:30:00Z", "2026-10-25T02:30:00Z"),
            ["2026-10-25T00:00:00+00:00", "2026-10-25T02:00:00+00:00"]
        );
    }

    #[test]
    fn sydney_southern_transitions() {
        // 2026-10-04: 02:00 AEST becomes 03:00 AEDT (16:00 UTC on the 3rd).
        assert_eq!(
            ticks("30 2 * * *", "Australia/Sydney", "2026-10-02T12:00:00Z", "2026-10-04T18:00:00Z"),
            ["2026-10-02T16:30:00+00:00", "2026-10-03T16:00:00+00:00", "2026-10-04T15:30:00+00:00"]
        );
        // 2026-04-05: 03:00 AEDT becomes 02:00 AEST; 02:30 happens twice
        // (15:30 and 16:30 UTC on the 4th): once, the first.
        assert_eq!(
            ticks("30 2 * * *", "Australia/Sydney", "2026-04-03T12:00:00Z", "2026-04-05T18:00:00Z"),
            ["2026-04-03T15:30:00+00:00", "2026-04-04T15:30:00+00:00", "2026-04-05T16:30:00+00:00"]
        );
    }

    #[test]
    fn santiago_midnight_that_does_not_exist() {
        // 2026-09-06: 00:00 -04 becomes 01:00 -03 (04:00 UTC): a daily
        // midnight job runs at 01:00 local that day.
        assert_eq!(
            ticks("0 0 * * *", "America/Santiago", "2026-09-05T00:00:00Z", "2026-09-07T12:00:00Z"),
            ["2026-09-05T04:00:00+00:00", "2026-09-06T04:00:00+00:00", "2026-09-07T03:00:00+00:00"]
        );
    }

    #[test]
    fn gap_instant_is_the_transition() {
        let berlin = zone("Europe/Berlin").unwrap();
        let gap = NaiveDate::from_ymd_opt(2026, 3, 29).unwrap().and_hms_opt(2, 17, 41).unwrap();
        assert_eq!(to_instant(gap, berlin), Some(utc("2026-03-29T01:00:00Z")));
        assert!(zone("Mars/Olympus").is_err());
    }

    #[test]
    fn ticks_between_stops_at_the_limit() {
        let spec = Spec::every(Duration::from_secs(1)).unwrap();
        let from = utc("2026-01-01T00:00:00Z");
        let (got, more) = ticks_between(&spec, Tz::UTC, from, utc("2026-01-01T01:00:00Z"), 10);
        assert_eq!(got.len(), 10);
        assert!(more);
    }
}
