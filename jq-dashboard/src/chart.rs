//! The throughput chart: completed and failed jobs per minute over the last
//! hour, drawn as inline SVG on the server (no script, no chart library).

use chrono::{DurationRound, TimeDelta};
use jq::Timestamp;
use maud::{Markup, html};

/// Minutes on the chart.
pub(crate) const MINUTES: usize = 60;

/// One minute's finished jobs, over every queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Minute {
    pub completed: u64,
    pub dead: u64,
}

/// The first minute the chart shows when drawn at `now`: the current,
/// still running minute is the last bar.
pub(crate) fn since(now: Timestamp) -> Timestamp {
    let current = now.duration_trunc(TimeDelta::minutes(1)).unwrap_or(now);
    current - TimeDelta::minutes(MINUTES as i64 - 1)
}

/// Puts `(minute start, completed, dead)` rows into the chart's 60 slots;
/// rows outside the hour are left out.
pub(crate) fn slots(now: Timestamp, rows: impl IntoIterator<Item = (Timestamp, u64, u64)>) -> [Minute; MINUTES] {
    let first = since(now);
    let mut slots = [Minute::default(); MINUTES];
    for (minute, completed, dead) in rows {
        let Ok(index) = usize::try_from(minute.signed_duration_since(first).num_minutes()) else { continue };
        if let Some(slot) = slots.get_mut(index) {
            slot.completed += completed;
            slot.dead += dead;
        }
    }
    slots
}

const WIDTH: u64 = 1200;
const HEIGHT: u64 = 150;
const BAR: u64 = WIDTH / MINUTES as u64;

/// The chart, with a text summary for screen readers and tests.
pub(crate) fn render(now: Timestamp, slots: &[Minute; MINUTES]) -> Markup {
    let first = since(now);
    let peak = slots.iter().map(|m| m.completed + m.dead).max().unwrap_or(0).max(1);
    let (completed, dead): (u64, u64) = slots.iter().fold((0, 0), |(c, d), m| (c + m.completed, d + m.dead));
    let height = |n: u64| n * HEIGHT / peak;
    html! {
        figure.chart {
            svg viewBox=(format!("0 0 {WIDTH} {}", HEIGHT + 20)) role="img"
                aria-label=(format!("Jobs finished per minute over the last hour: {completed} completed, {dead} failed")) {
                line.axis x1="0" y1=(HEIGHT) x2=(WIDTH) y2=(HEIGHT) {}
                @for (i, minute) in slots.iter().enumerate() {
                    @let x = i as u64 * BAR;
                    @let ok = height(minute.completed);
                    @let bad = height(minute.dead);
                    @let at = first + TimeDelta::minutes(i as i64);
                    g {
                        title { (at.format("%H:%M UTC")) ": " (minute.completed) " completed, " (minute.dead) " failed" }
                        rect.hit x=(x) y="0" width=(BAR) height=(HEIGHT) {}
                        @if ok > 0 { rect.ok x=(x + 1) y=(HEIGHT - ok) width=(BAR - 2) height=(ok) {} }
                        @if bad > 0 { rect.bad x=(x + 1) y=(HEIGHT - ok - bad) width=(BAR - 2) height=(bad) {} }
                    }
                    @if i % 15 == 0 {
                        text.tick x=(x) y=(HEIGHT + 15) { (at.format("%H:%M")) }
                    }
                }
                text.tick x=(WIDTH - 4) y="12" text-anchor="end" { "peak " (peak) "/min" }
            }
            figcaption {
                span.key.ok { "completed" } " " strong #completed-hour { (completed) }
                " · "
                span.key.bad { "failed" } " " strong #failed-hour { (dead) }
                " in the last hour (by finish time; purged jobs no longer count)"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn rows_land_in_their_minute_and_old_ones_are_left_out() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 11, 23, 12, 30, 40).unwrap();
        let current = chrono::Utc.with_ymd_and_hms(2026, 11, 23, 12, 30, 0).unwrap();
        let rows =
            [(current, 5, 1), (current - TimeDelta::minutes(59), 2, 0), (current - TimeDelta::minutes(60), 100, 100)];
        let slots = slots(now, rows);
        assert_eq!(slots[MINUTES - 1], Minute { completed: 5, dead: 1 });
        assert_eq!(slots[0], Minute { completed: 2, dead: 0 });
        assert_eq!(slots.iter().map(|m| m.completed).sum::<u64>(), 7);
    }
}
