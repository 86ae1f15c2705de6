//! Periodic jobs: periodic jobs declared in code, one job per (periodic job, tick)
//! enforced by the store.
//!
//! A [`Periodic`] names a cron expression ([`Spec::cron`], 5 or 6 fields)
//! or a fixed interval ([`Spec::every`]), an IANA time zone, a
//! [`MissedPolicy`], and the job to enqueue for each tick, built from the
//! tick's instant. Give periodic jobs to the pool
//! ([`WorkerPool::periodic`](crate::WorkerPool::periodic)); every pool that
//! declares a periodic job takes part, and no pool is special:
//!
//! - The store keeps one row (a hash on Redis) per periodic job with its
//!   *cursor*: the last tick handled. A pool reads the rows
//!   ([`PeriodicStorage::periodic`](crate::storage::PeriodicStorage::periodic)), works out the due
//!   ticks from the cursor and its clock ([`plan()`]), builds their jobs, and
//!   calls [`PeriodicStorage::fire`](crate::storage::PeriodicStorage::fire): one atomic step that
//!   moves the cursor from the value read to the new tick *and* stores the
//!   jobs, or does nothing when the cursor is no longer the value read
//!   (another pool fired first). So any number of pools, started and
//!   stopped at any time, store each tick's job once.
//! - The cursor is a tick instant, never a wall-clock reading: pools whose
//!   clocks differ by seconds compute the same ticks, and the one with the
//!   clock ahead merely fires a tick a little earlier.
//! - Daylight-saving time: a cron expression is read on its zone's wall
//!   clock; a local time that does not exist runs once, at the first
//!   instant after the gap, and one that occurs twice runs once, at its
//!   first occurrence (the repository's `docs/periodic.md` has examples).
//!
//! [`PeriodicRunner`] is the step the pool runs every second;
//! tests call [`PeriodicRunner::run_once`] under a [`ManualClock`](crate::ManualClock).

mod declared;
mod plan;
mod stored;
mod ticks;

/// The round a pool repeats lives with the pool (it calls the storage);
/// its path stays here, beside what it runs.
pub use crate::worker::{PeriodicRunner, Round};
pub use declared::{
    DECLARE_REFRESH, DEFAULT_GRACE, MAX_TICKS_PER_ROUND, MissedPolicy, ORPHAN_AFTER, Periodic, PeriodicBuilder,
    check_name,
};
pub use plan::{Plan, plan};
pub use stored::{Fire, FireOutcome, PeriodicInfo};
pub use ticks::{Spec, local, ticks_between, to_instant, zone};
