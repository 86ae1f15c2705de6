//! What one round does for one periodic job: pure code from the stored row,
//! the periodic job and the pool's clock, unit-tested here.

use super::declared::{DECLARE_REFRESH, MAX_TICKS_PER_ROUND, MissedPolicy, Periodic};
use super::stored::PeriodicInfo;
use super::ticks::ticks_between;
use crate::clock::{Timestamp, add};

/// One step of a periodic job, before its jobs are built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The cursor read (`None`: create the row).
    pub expected: Option<Timestamp>,
    /// The trigger read.
    pub expected_trigger: Option<Timestamp>,
    /// The new cursor: the last due tick, or the one read.
    pub cursor: Timestamp,
    /// The ticks that get a job, ascending.
    pub ticks: Vec<Timestamp>,
    /// An operator's trigger to serve, with its instant as the tick.
    pub trigger: Option<Timestamp>,
    /// Due ticks that get no job.
    pub missed: u64,
    /// The most recent of them.
    pub last_missed: Option<Timestamp>,
}

/// The step for `periodic` at `now`, given its stored row, or `None` when
/// there is nothing to do (no tick due, no run asked for, the row's
/// declaration fresh and unchanged).
///
/// - No row yet: create it with the cursor at `now` (the first tick is the
///   first one after the periodic job was first stored).
/// - The due ticks are those in `(cursor, now]`. Those at least the
///   periodic job's grace old are *missed* and follow its [`MissedPolicy`];
///   the others run. The cursor moves to the last due tick either way.
/// - Over [`MAX_TICKS_PER_ROUND`] due ticks: the first that many are
///   counted as missed and the rest wait for the next round.
pub fn plan(periodic: &Periodic, stored: Option<&PeriodicInfo>, now: Timestamp) -> Option<Plan> {
    let Some(row) = stored else {
        return Some(Plan {
            expected: None,
            expected_trigger: None,
            cursor: now,
            ticks: Vec::new(),
            trigger: None,
            missed: 0,
            last_missed: None,
        });
    };
    let (due, more) = ticks_between(periodic.spec(), periodic.zone(), row.cursor, now, MAX_TICKS_PER_ROUND);
    let cursor = due.last().copied().unwrap_or(row.cursor);
    let (ticks, skipped) = if more {
        (Vec::new(), due.as_slice())
    } else {
        let on_time = chrono::Duration::from_std(periodic.grace())
            .ok()
            .and_then(|g| now.checked_sub_signed(g))
            .unwrap_or(Timestamp::MIN_UTC);
        let late = due.partition_point(|t| *t <= on_time);
        let (missed, fresh) = due.split_at(late);
        let keep = match periodic.missed() {
            MissedPolicy::Skip => 0,
            MissedPolicy::Latest => missed.len().min(1),
            MissedPolicy::All { cap } => missed.len().min(cap),
        };
        let (skipped, run) = missed.split_at(missed.len() - keep);
        let mut ticks = run.to_vec();
        ticks.extend_from_slice(fresh);
        (ticks, skipped)
    };
    let declared = add(row.declared_at, DECLARE_REFRESH) > now
        && row.spec == periodic.spec().text()
        && row.zone == periodic.zone().name()
        && row.queue == periodic.queue().as_str();
    if due.is_empty() && row.triggered_at.is_none() && declared {
        return None;
    }
    Some(Plan {
        expected: Some(row.cursor),
        expected_trigger: row.triggered_at,
        cursor,
        ticks,
        trigger: row.triggered_at,
        missed: skipped.len() as u64,
        last_missed: skipped.last().copied(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use chrono::{DateTime, Utc};

    use super::*;
    use crate::job::{NewJob, Payload};

    fn utc(s: &str) -> Timestamp {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn hourly(policy: MissedPolicy) -> Periodic {
        Periodic::cron("hourly", "0 * * * *")
            .unwrap()
            .missed(policy)
            .job_with("q", |_| NewJob::builder("k", Payload::from_json("{}").unwrap()))
            .unwrap()
    }

    fn row(s: &Periodic, cursor: &str) -> PeriodicInfo {
        PeriodicInfo {
            name: s.name().into(),
            queue: "q".into(),
            spec: s.spec().text(),
            zone: "UTC".into(),
            cursor: utc(cursor),
            last_job: None,
            missed: 0,
            last_missed: None,
            declared_at: utc(cursor),
            triggered_at: None,
        }
    }

    #[test]
    fn a_new_periodic_job_starts_now() {
        let s = hourly(MissedPolicy::Latest);
        let p = plan(&s, None, utc("2026-01-01T10:20:00Z")).unwrap();
        assert_eq!((p.expected, p.cursor, p.ticks.len()), (None, utc("2026-01-01T10:20:00Z"), 0));
    }

    #[test]
    fn an_on_time_tick_runs_and_nothing_else_happens_between_ticks() {
        let s = hourly(MissedPolicy::Skip);
        let mut r = row(&s, "2026-01-01T10:00:00Z");
        r.declared_at = utc("2026-01-01T10:59:00Z");
        assert_eq!(plan(&s, Some(&r), utc("2026-01-01T10:59:59Z")), None);
        let p = plan(&s, Some(&r), utc("2026-01-01T11:00:30Z")).unwrap();
        assert_eq!(p.ticks, [utc("2026-01-01T11:00:00Z")]);
        assert_eq!((p.missed, p.cursor), (0, utc("2026-01-01T11:00:00Z")));
    }

    #[test]
    fn missed_policies() {
        // Down from 10:00 to 13:20: 11:00, 12:00 and 13:00 were missed.
        let now = utc("2026-01-01T13:20:00Z");
        let cases = [
            (MissedPolicy::Skip, vec![], 3, Some("2026-01-01T13:00:00Z")),
            (MissedPolicy::Latest, vec!["2026-01-01T13:00:00Z"], 2, Some("2026-01-01T12:00:00Z")),
            (
                MissedPolicy::All { cap: 2 },
                vec!["2026-01-01T12:00:00Z", "2026-01-01T13:00:00Z"],
                1,
                Some("2026-01-01T11:00:00Z"),
            ),
            (
                MissedPolicy::All { cap: 10 },
                vec!["2026-01-01T11:00:00Z", "2026-01-01T12:00:00Z", "2026-01-01T13:00:00Z"],
                0,
                None,
            ),
        ];
        for (policy, ticks, missed, last) in cases {
            let s = hourly(policy);
            let p = plan(&s, Some(&row(&s, "2026-01-01T10:00:00Z")), now).unwrap();
            assert_eq!(p.ticks, ticks.iter().map(|t| utc(t)).collect::<Vec<_>>(), "{policy}");
            assert_eq!((p.missed, p.last_missed), (missed, last.map(utc)), "{policy}");
            assert_eq!(p.cursor, utc("2026-01-01T13:00:00Z"));
        }
    }

    #[test]
    fn a_tick_within_grace_runs_under_skip() {
        let s = hourly(MissedPolicy::Skip);
        let p = plan(&s, Some(&row(&s, "2026-01-01T10:00:00Z")), utc("2026-01-01T11:00:59Z")).unwrap();
        assert_eq!(p.ticks, [utc("2026-01-01T11:00:00Z")]);
        let p = plan(&s, Some(&row(&s, "2026-01-01T10:00:00Z")), utc("2026-01-01T11:01:00Z")).unwrap();
        assert!(p.ticks.is_empty(), "a tick a whole grace old is missed");
        assert_eq!(p.missed, 1);
    }

    #[test]
    fn a_run_request_and_a_stale_declaration_make_a_step() {
        let s = hourly(MissedPolicy::Latest);
        let mut r = row(&s, "2026-01-01T10:00:00Z");
        r.triggered_at = Some(utc("2026-01-01T10:05:00Z"));
        let p = plan(&s, Some(&r), utc("2026-01-01T10:06:00Z")).unwrap();
        assert_eq!((p.trigger, p.expected_trigger, p.ticks.len()), (r.triggered_at, r.triggered_at, 0));
        r.triggered_at = None;
        let p = plan(&s, Some(&r), add(utc("2026-01-01T10:00:00Z"), DECLARE_REFRESH)).unwrap();
        assert_eq!((p.cursor, p.ticks.len()), (r.cursor, 0));
        r.spec = "0 3 * * *".into();
        assert!(plan(&s, Some(&r), utc("2026-01-01T10:00:01Z")).is_some(), "a changed expression is written");
    }

    #[test]
    fn a_huge_backlog_is_counted_over_rounds() {
        let s = Periodic::every("secondly", Duration::from_secs(1))
            .unwrap()
            .job_with("q", |_| NewJob::builder("k", Payload::from_json("{}").unwrap()))
            .unwrap();
        let r = row(&s, "2026-01-01T00:00:00Z");
        let p = plan(&s, Some(&r), utc("2026-01-03T00:00:00Z")).unwrap();
        assert_eq!(p.missed, MAX_TICKS_PER_ROUND as u64);
        assert!(p.ticks.is_empty());
        assert_eq!(p.cursor, add(r.cursor, Duration::from_secs(MAX_TICKS_PER_ROUND as u64)));
    }
}
