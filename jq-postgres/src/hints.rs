//! Where each claim starts its walk of a (queue, priority) band of the claim
//! index.
//!
//! A claim walks `jobs_claim` in claim order and stops at its limit. Every job
//! it takes leaves behind the index entry of the row version it replaced, and
//! while any snapshot older than that claim is open (a long report query, a
//! session idle in a transaction, a lagging replication slot) neither vacuum
//! nor the index scan itself may drop that entry: each is walked, and its heap
//! row visited, by every later claim that starts before it. Claims take from
//! the front of the order, so these entries pile up exactly where a claim
//! from the start of a band begins, and the claim's work grows with every job
//! claimed since the oldest open snapshot: the drain collapses. Each storage
//! therefore remembers, per band, the last job its claims took, and the next
//! claim starts after it: its walk is the jobs it takes plus those that other
//! claimers took since, however many dead entries lie behind.
//!
//! A job can become claimable behind that position: its `run_at` is in the
//! past, its insert committed after a later job had already been claimed (a
//! concurrent producer, a caller's transaction), another claimer locked it
//! and then let it go, a clock elsewhere is behind. So a claim never starts
//! later than [`RECENT`] before now (which covers concurrent producers and
//! small clock differences), this storage's own writes move a band's start
//! back before what they made claimable ([`Hints::arrived`]: enqueues,
//! promotions and recoveries, releases and zero-delay retries, which may
//! hand a job back in the instant it was claimed, at the very key a claim
//! just passed, and an operator's retry), each once its own transaction
//! has committed (a claim before the commit cannot see the job, and would
//! move the position past it again); a caller's transaction (`enqueue_tx`)
//! commits when the caller says, so its jobs also *pin* their band
//! ([`Hints::pin`]): for [`UNCOMMITTED_PIN`] no claim moves the band's
//! position past them. And at least
//! every [`REWALK_MIN`], or every [`REWALK_RATIO`] times what the last whole
//! walk cost, a claim walks every band from its start. What one process makes
//! claimable behind another process's position therefore waits at most until
//! that process's next whole walk; nothing waits forever, and order is exact
//! within one process.
//!
//! Recover walks the lease index the same way, from where its last pass
//! ended ([`RecoverStart`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use jq_core::storage::add;
use jq_core::{Priority, Timestamp};
use uuid::Uuid;

/// How far behind now a claim always looks, whatever its bands' positions.
pub(crate) const RECENT: Duration = Duration::from_millis(100);

/// The shortest time between two claims that walk every band whole.
pub(crate) const REWALK_MIN: Duration = Duration::from_millis(50);

/// A whole walk is repeated after this many times its own duration, so whole
/// walks take at most about 1/RATIO of the claiming time however long they get.
pub(crate) const REWALK_RATIO: u32 = 20;

/// How long a job stored in a caller's transaction keeps claims of its
/// band from moving past it ([`Hints::pin`]): a transaction that commits
/// within this time has its jobs claimed in order; a later one, at the
/// next whole walk.
pub(crate) const UNCOMMITTED_PIN: Duration = Duration::from_secs(2);

/// The priorities with a start position, in the order `sql/claim.sql` lists
/// them for each queue: highest first.
pub(crate) const BANDS: [Priority; 4] = [Priority::Critical, Priority::High, Priority::Normal, Priority::Low];

/// A position in a band's claim order (run_at, then id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key {
    pub run_at: Timestamp,
    pub id: Uuid,
}

impl Key {
    /// A position just before every job at `run_at` or later, for a `run_at`
    /// sent from the client: the server keeps microseconds, so the stored
    /// value may differ from the sent one by less than one.
    fn before(run_at: Timestamp) -> Key {
        Key { run_at: add_signed(run_at, -2), id: Uuid::max() }
    }
}

fn add_signed(t: Timestamp, micros: i64) -> Timestamp {
    t.checked_add_signed(chrono::Duration::microseconds(micros)).unwrap_or(t)
}

/// The start positions of one claim, one per band of each asked queue, in
/// the order of [`BANDS`]; `None` walks the band from its start.
#[derive(Debug, Default)]
pub(crate) struct Starts {
    pub run_ats: Vec<Option<Timestamp>>,
    pub ids: Vec<Option<Uuid>>,
}

/// One claim in flight, from [`Hints::begin`] to [`Hints::finish`] or
/// [`Hints::abort`]. Dropped without either (the claim's future dropped
/// mid-way: a response timeout, a caller giving up), it aborts, or every
/// later claim would count it as overlapping and move no position again.
#[derive(Debug)]
pub(crate) struct Ticket<'a> {
    hints: &'a Hints,
    /// Finished or aborted: nothing left for the drop to do.
    settled: bool,
    generation: u64,
    /// Another claim of this storage was in flight when this one began: it
    /// may skip rows that one locked and then lets go, so it moves no position.
    overlapped: bool,
    whole: bool,
    now: Timestamp,
    started: Instant,
}

/// The start positions of one storage (shared by its clones).
#[derive(Debug, Default)]
pub(crate) struct Hints {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Per queue, per band of [`BANDS`]: the last job a claim took.
    after: HashMap<String, [Option<Key>; 4]>,
    /// Bumped by every claim that begins and every position moved back: a
    /// claim that sees it changed since it began moves no position.
    generation: u64,
    in_flight: usize,
    /// When the next claim walks every band whole; `None`: the next one does.
    next_whole: Option<Timestamp>,
    /// When the last whole walk began (a clock set back walks again).
    last_whole: Option<Timestamp>,
    /// Jobs of transactions that may not have committed yet, per queue and
    /// band: no position moves past them until the instant given.
    pins: Vec<Pin>,
}

/// See [`Hints::pin`].
#[derive(Debug)]
struct Pin {
    queue: String,
    band: usize,
    key: Key,
    until: Instant,
}

impl Hints {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a claim of `queues` at `now` and returns where each band's
    /// walk starts.
    pub(crate) fn begin(&self, queues: &[&str], now: Timestamp) -> (Ticket<'_>, Starts) {
        let mut s = self.lock();
        let whole = match (s.next_whole, s.last_whole) {
            (Some(next), Some(last)) => now >= next || now < last,
            _ => true,
        };
        let overlapped = s.in_flight > 0;
        s.in_flight += 1;
        s.generation += 1;
        let ticket = Ticket {
            hints: self,
            settled: false,
            generation: s.generation,
            overlapped,
            whole,
            now,
            started: Instant::now(),
        };
        let recent = Key::before(add_signed(now, -(RECENT.as_micros() as i64)));
        let mut starts = Starts::default();
        for queue in queues {
            let after = if whole { None } else { s.after.get(*queue) };
            for band in 0..BANDS.len() {
                let start = after.and_then(|a| a[band]).map(|a| a.min(recent));
                starts.run_ats.push(start.map(|k| k.run_at));
                starts.ids.push(start.map(|k| k.id));
            }
        }
        (ticket, starts)
    }

    /// Ends a claim that took `claimed` (queue, priority, run_at, id), in
    /// any order.
    pub(crate) fn finish<'a>(
        &self,
        mut ticket: Ticket<'_>,
        claimed: impl IntoIterator<Item = (&'a str, Priority, Key)>,
    ) {
        ticket.settled = true;
        let mut s = self.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
        if ticket.whole {
            let took = ticket.started.elapsed().saturating_mul(REWALK_RATIO).max(REWALK_MIN);
            s.last_whole = Some(ticket.now);
            s.next_whole = Some(add(ticket.now, took));
        }
        if ticket.overlapped || s.generation != ticket.generation {
            return;
        }
        for (queue, priority, key) in claimed {
            let Some(band) = band_of(priority) else { continue };
            let after = match s.after.get_mut(queue) {
                Some(after) => after,
                None => s.after.entry(queue.to_owned()).or_default(),
            };
            if after[band].is_none_or(|a| a < key) {
                after[band] = Some(key);
            }
        }
        if !s.pins.is_empty() {
            let now = Instant::now();
            let State { pins, after, .. } = &mut *s;
            pins.retain(|p| p.until > now);
            for pin in pins.iter() {
                if let Some(at) = after.get_mut(&pin.queue).and_then(|a| a[pin.band].as_mut())
                    && pin.key < *at
                {
                    *at = pin.key;
                }
            }
        }
    }

    /// Ends a claim that failed: it took nothing, and its locks are gone.
    pub(crate) fn abort(&self, ticket: Ticket<'_>) {
        drop(ticket);
    }

    /// Jobs stored in a transaction that commits later, out of this
    /// storage's sight (a caller's `enqueue_tx`): moves their bands back
    /// like [`Hints::arrived`], and until `until` no claim that ends moves
    /// a band's position past them. *A claim between the insert and the
    /// commit cannot see them and would pass them.*
    pub(crate) fn pin<'a>(&self, jobs: impl IntoIterator<Item = (&'a str, i16, Timestamp)> + Clone, until: Instant) {
        self.arrived(jobs.clone());
        let mut s = self.lock();
        for (queue, priority, run_at) in jobs {
            let Some(band) = Priority::from_i16(priority).and_then(band_of) else { continue };
            let key = Key::before(run_at);
            match s.pins.iter_mut().find(|p| p.queue == queue && p.band == band) {
                Some(pin) => {
                    pin.key = pin.key.min(key);
                    pin.until = pin.until.max(until);
                }
                None => s.pins.push(Pin { queue: queue.to_owned(), band, key, until }),
            }
        }
    }

    /// This storage made jobs claimable at these (queue, priority, run_at as
    /// sent or stored), in a transaction that has committed: a band whose
    /// start is at or past one moves back before it.
    pub(crate) fn arrived<'a>(&self, jobs: impl IntoIterator<Item = (&'a str, i16, Timestamp)>) {
        let mut s = self.lock();
        if s.after.is_empty() {
            return;
        }
        let mut moved = false;
        for (queue, priority, run_at) in jobs {
            let Some(band) = Priority::from_i16(priority).and_then(band_of) else { continue };
            let Some(after) = s.after.get_mut(queue) else { continue };
            let before = Key::before(run_at);
            if after[band].is_some_and(|a| before < a) {
                after[band] = Some(before);
                moved = true;
            }
        }
        if moved {
            s.generation += 1;
        }
    }
}

/// Every this many passes, recover walks the lease index whole.
pub(crate) const RECOVER_WHOLE_EVERY: u32 = 6;

/// Where recover starts its walk of the lease index (`jobs_lease_expiry`).
///
/// Every claim and heartbeat leaves an entry there, and while an old
/// snapshot is open the entries of jobs completed since cannot go: a
/// recover that walks every expiry up to now walks all of them, every pass.
/// A pass that got to the end recovered every lease that expired by its
/// `now`; a lease taken or extended later expires after that (now plus a
/// positive lease, unless clocks differ by more than a lease), so the next
/// pass starts there. A row the pass skipped because another statement held
/// it (an ack, a heartbeat) normally leaves Running or gets a later expiry
/// meanwhile; one whose holder rolled back waits for the next whole walk:
/// every [`RECOVER_WHOLE_EVERY`] passes, and whenever the clock went back.
#[derive(Debug, Default)]
pub(crate) struct RecoverStart {
    /// The end of the last pass that got to the end, and passes since the
    /// last whole walk.
    state: Mutex<(Option<Timestamp>, u32)>,
}

impl RecoverStart {
    /// Where a pass at `now` starts (exclusive); `None`: from the start.
    pub(crate) fn begin(&self, now: Timestamp) -> Option<Timestamp> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match s.0 {
            Some(after) if after <= now && !s.1.is_multiple_of(RECOVER_WHOLE_EVERY) => Some(after),
            _ => None,
        }
    }

    /// A pass at `now` got to the end.
    pub(crate) fn finish(&self, now: Timestamp) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        *s = (Some(now), s.1.wrapping_add(1));
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if !self.settled {
            let mut s = self.hints.lock();
            s.in_flight = s.in_flight.saturating_sub(1);
        }
    }
}

fn band_of(priority: Priority) -> Option<usize> {
    BANDS.iter().position(|b| *b == priority)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        chrono::DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap_or_default()
    }

    fn key(secs: i64, id: u128) -> Key {
        Key { run_at: t(secs), id: Uuid::from_u128(id) }
    }

    #[test]
    fn first_claim_walks_whole_then_starts_after_what_it_took() {
        let h = Hints::default();
        let (ticket, starts) = h.begin(&["q"], t(100));
        assert!(ticket.whole);
        assert_eq!(starts.run_ats, vec![None; 4]);
        h.finish(ticket, [("q", Priority::Normal, key(10, 5)), ("q", Priority::Normal, key(10, 7))]);
        let (ticket, starts) = h.begin(&["q", "other"], t(100));
        assert!(!ticket.whole, "the next whole walk is REWALK_MIN later");
        assert_eq!(starts.run_ats, vec![None, None, Some(t(10)), None, None, None, None, None]);
        assert_eq!(starts.ids[2], Some(Uuid::from_u128(7)));
        h.abort(ticket);
        let (ticket, starts) = h.begin(&["q"], t(101));
        assert!(ticket.whole, "a second after the first whole walk");
        assert_eq!(starts.run_ats, vec![None; 4]);
        h.abort(ticket);
    }

    #[test]
    fn a_start_is_never_later_than_recent_before_now() {
        let h = Hints::default();
        let (ticket, _) = h.begin(&["q"], t(0));
        h.finish(ticket, [("q", Priority::Low, key(50, 1))]);
        let (ticket, starts) = h.begin(&["q"], t(0));
        let start = starts.run_ats[3].unwrap_or_default();
        assert!(start < t(0) && start > t(-1), "{start}");
        h.abort(ticket);
    }

    #[test]
    fn recover_starts_where_the_last_pass_ended_and_walks_whole_now_and_then() {
        let r = RecoverStart::default();
        assert_eq!(r.begin(t(0)), None, "the first pass walks whole");
        r.finish(t(0));
        for pass in 1..RECOVER_WHOLE_EVERY {
            assert_eq!(r.begin(t(pass as i64)), Some(t(pass as i64 - 1)));
            r.finish(t(pass as i64));
        }
        assert_eq!(r.begin(t(100)), None, "every RECOVER_WHOLE_EVERY passes");
        r.finish(t(100));
        assert_eq!(r.begin(t(50)), None, "the clock went back");
    }

    #[test]
    fn a_claim_dropped_mid_way_does_not_overlap_the_next_ones() {
        let h = Hints::default();
        let (first, _) = h.begin(&["q"], t(100));
        h.finish(first, [("q", Priority::Normal, key(10, 1))]);
        let (cut_short, _) = h.begin(&["q"], t(100));
        drop(cut_short); // its future dropped by a response timeout
        let (next, _) = h.begin(&["q"], t(100));
        assert!(!next.overlapped, "a dropped claim is no longer in flight");
        h.finish(next, [("q", Priority::Normal, key(20, 1))]);
        let (after, starts) = h.begin(&["q"], t(100));
        assert_eq!(starts.run_ats[2], Some(t(20)), "the claim after it moved the position");
        h.abort(after);
    }

    #[test]
    fn a_pin_keeps_positions_before_uncommitted_jobs_until_it_ends() {
        let h = Hints::default();
        let (first, _) = h.begin(&["q"], t(100));
        h.finish(first, [("q", Priority::Normal, key(10, 1))]);
        // A caller's transaction stores a job at 20 and has not committed:
        // a claim meanwhile takes one at 30 without seeing it.
        h.pin([("q", 1, t(20))], Instant::now() + Duration::from_secs(3600));
        let (claim, _) = h.begin(&["q"], t(100));
        h.finish(claim, [("q", Priority::Normal, key(30, 1))]);
        let (next, starts) = h.begin(&["q"], t(100));
        let start = starts.run_ats[2].unwrap_or_default();
        assert!(start < t(20) && start > t(19), "still before the pinned job: {start}");
        h.finish(next, [("q", Priority::Normal, key(40, 1))]);
        // Another band, another queue: not pinned.
        let (other, _) = h.begin(&["r"], t(100));
        h.finish(other, [("r", Priority::Normal, key(40, 1))]);
        let (r, starts) = h.begin(&["r"], t(100));
        assert_eq!(starts.run_ats[2], Some(t(40)));
        h.abort(r);

        let expired = Hints::default();
        let (first, _) = expired.begin(&["q"], t(100));
        expired.finish(first, [("q", Priority::Normal, key(10, 1))]);
        expired.pin([("q", 1, t(20))], Instant::now());
        let (claim, _) = expired.begin(&["q"], t(100));
        expired.finish(claim, [("q", Priority::Normal, key(30, 1))]);
        let (next, starts) = expired.begin(&["q"], t(100));
        assert_eq!(starts.run_ats[2], Some(t(30)), "an ended pin holds nothing back");
        expired.abort(next);
    }

    #[test]
    fn overlapping_claims_and_arrivals_move_no_position_forward() {
        let h = Hints::default();
        let (first, _) = h.begin(&["q"], t(100));
        h.finish(first, [("q", Priority::Normal, key(10, 1))]);
        let (a, _) = h.begin(&["q"], t(100));
        let (b, _) = h.begin(&["q"], t(100));
        h.finish(b, [("q", Priority::Normal, key(20, 1))]);
        h.finish(a, [("q", Priority::Normal, key(30, 1))]);
        let (c, starts) = h.begin(&["q"], t(100));
        assert_eq!(starts.run_ats[2], Some(t(10)), "neither overlapping claim moved it");
        h.arrived([("q", 1, t(5))]);
        h.finish(c, [("q", Priority::Normal, key(40, 1))]);
        let (d, starts) = h.begin(&["q"], t(100));
        let start = starts.run_ats[2].unwrap_or_default();
        assert!(start < t(5) && start > t(4), "moved back before the arrival: {start}");
        h.arrived([("q", 1, t(50)), ("q", 9, t(0)), ("other", 1, t(0))]);
        h.finish(d, []);
        let (e, starts) = h.begin(&["q"], t(100));
        assert_eq!(starts.run_ats[2].map(|s| s < t(5)), Some(true), "a later arrival moves nothing");
        h.abort(e);
    }
}
