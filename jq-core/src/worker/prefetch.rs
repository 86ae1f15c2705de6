//! Prefetch: how many claimed jobs may wait for a free executor.
//!
//! Every claim costs a storage round trip (a commit on the SQL backends)
//! whose fixed part is paid once per batch, so short jobs run fastest when
//! claims are big; but a waiting job is leased to this worker, so a big
//! buffer of slow jobs splits a shared queue unevenly between workers. The
//! default therefore sizes the buffer by time, not by count: it holds about
//! [`PREFETCH_HORIZON`] of work at the rate the executors have been taking
//! jobs, never fewer than the concurrency and never more than
//! [`MAX_PREFETCH`]. Slow jobs keep the old default (as many as the
//! concurrency); a backlog of short jobs grows the batches until the fixed
//! cost of a claim no longer matters: a no-op drain on PostgreSQL runs more
//! than twice as fast with 240 waiting as with 16 (BENCHMARKS.md).
//!
//! The horizon is never shorter than [`LATENCY_FACTOR`] claim round trips.
//! The claims are serial, so when short jobs run out during a claim the
//! rate observed is the batch over the round trip; a buffer of a fixed
//! 10 ms of that rate then shrinks the next batch whenever a claim takes
//! longer than 10 ms (a commit waiting on a slow disk, a keyed claim's
//! extra work), which lowers the rate again, down to the floor. Sized to
//! cover the round trip, the buffer keeps the executors fed while the next
//! claim is out, like a window sized to bandwidth times delay.

use std::time::{Duration, Instant};

/// The most claimed jobs the default lets wait beyond the running ones.
pub const MAX_PREFETCH: usize = 256;

/// How much work, at the observed rate, the default lets wait.
pub const PREFETCH_HORIZON: Duration = Duration::from_millis(10);

/// The horizon covers at least this many claim round trips (smoothed).
pub const LATENCY_FACTOR: f64 = 2.0;

/// A claim round trip counted at most this long: a stalled claim must not
/// make one slow store's buffer huge (the cap bounds it anyway).
const MAX_LATENCY: Duration = Duration::from_secs(1);

/// How quickly the observed rate follows a change: a sample spanning this
/// long replaces about two thirds of the old estimate.
const RATE_TIME_CONSTANT: Duration = Duration::from_millis(50);

/// The pool's prefetch policy and the rate it has observed.
#[derive(Debug)]
pub(crate) struct Prefetch {
    /// Fewest jobs allowed to wait.
    floor: usize,
    /// Most jobs allowed to wait: the slots beyond the concurrency.
    cap: usize,
    /// Jobs per second the executors took, smoothed.
    rate: f64,
    /// When `taken` was last observed, and its value then.
    last: Option<(Instant, u64)>,
    /// A claim's round trip in seconds, smoothed (0 before the first).
    latency: f64,
}

impl Prefetch {
    /// Exactly `n` jobs may wait (the user's [`prefetch`](super::WorkerPool::prefetch)).
    pub(crate) fn fixed(n: usize) -> Self {
        Prefetch { floor: n, cap: n, rate: 0.0, last: None, latency: 0.0 }
    }

    /// The default for a pool of `concurrency` executors: about
    /// [`PREFETCH_HORIZON`] of work, between `concurrency` and
    /// [`MAX_PREFETCH`].
    pub(crate) fn adaptive(concurrency: usize) -> Self {
        Prefetch { floor: concurrency, cap: MAX_PREFETCH.max(concurrency), rate: 0.0, last: None, latency: 0.0 }
    }

    /// The most jobs that may ever wait: the pool's slots are the
    /// concurrency plus this.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// Records how long a claim took to answer (resends after an error not
    /// counted): the horizon covers [`LATENCY_FACTOR`] of these.
    pub(crate) fn claimed_in(&mut self, took: Duration) {
        let took = took.min(MAX_LATENCY).as_secs_f64();
        // The first sets it; then each moves it a quarter of the way.
        self.latency = if self.latency == 0.0 { took } else { self.latency + 0.25 * (took - self.latency) };
    }

    /// Records that the executors have taken `taken` jobs in all by `now`
    /// and returns how many may wait from now on.
    pub(crate) fn observe(&mut self, now: Instant, taken: u64) -> usize {
        if self.floor == self.cap {
            return self.cap;
        }
        if let Some((then, before)) = self.last {
            let span = now.saturating_duration_since(then);
            if !span.is_zero() {
                let sample = taken.saturating_sub(before) as f64 / span.as_secs_f64();
                // An exponential average weighted by the span the sample
                // covers, so many short samples count as much as one long one.
                let weight = 1.0 - (-span.as_secs_f64() / RATE_TIME_CONSTANT.as_secs_f64()).exp();
                self.rate += weight * (sample - self.rate);
            }
        }
        self.last = Some((now, taken));
        let horizon = PREFETCH_HORIZON.as_secs_f64().max(LATENCY_FACTOR * self.latency);
        let wanted = (self.rate * horizon).round();
        // `as` saturates: a huge or non-finite rate gives the cap.
        (wanted as usize).clamp(self.floor, self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Feeds `rate` jobs/s for `span`, observing every millisecond.
    fn run_at(p: &mut Prefetch, start: Instant, taken: &mut u64, rate: u64, span: Duration) -> (Instant, usize) {
        let mut now = start;
        let mut last = p.observe(now, *taken);
        for _ in 0..span.as_millis() {
            now += MS;
            *taken += rate / 1000;
            last = p.observe(now, *taken);
        }
        (now, last)
    }

    #[test]
    fn fixed_never_moves() {
        let mut p = Prefetch::fixed(3);
        let start = Instant::now();
        assert_eq!(p.observe(start, 0), 3);
        assert_eq!(p.observe(start + MS, 1_000_000), 3);
        assert_eq!(p.cap(), 3);
    }

    #[test]
    fn starts_at_the_concurrency() {
        let mut p = Prefetch::adaptive(16);
        assert_eq!(p.observe(Instant::now(), 0), 16);
        assert_eq!(p.cap(), MAX_PREFETCH);
    }

    #[test]
    fn short_jobs_grow_it_to_the_cap_and_idleness_shrinks_it_back() {
        let mut p = Prefetch::adaptive(16);
        let mut taken = 0;
        // 30,000 jobs/s for half a second: 10 ms of that is 300 jobs, over the cap.
        let (now, waiting) = run_at(&mut p, Instant::now(), &mut taken, 30_000, 500 * MS);
        assert_eq!(waiting, MAX_PREFETCH);
        // Then nothing for half a second: back to the floor.
        let (_, waiting) = run_at(&mut p, now, &mut taken, 0, 500 * MS);
        assert_eq!(waiting, 16);
    }

    #[test]
    fn holds_about_the_horizon_of_work() {
        let mut p = Prefetch::adaptive(4);
        let mut taken = 0;
        // 8,000 jobs/s: 10 ms of work is 80 jobs.
        let (_, waiting) = run_at(&mut p, Instant::now(), &mut taken, 8_000, 1_000 * MS);
        assert!((78..=82).contains(&waiting), "{waiting}");
    }

    #[test]
    fn slow_jobs_keep_the_floor() {
        let mut p = Prefetch::adaptive(16);
        let start = Instant::now();
        p.observe(start, 0);
        // 16 executors, 100 ms jobs: 160 jobs/s, 1.6 jobs per 10 ms.
        let mut waiting = 0;
        for i in 1..=50u64 {
            waiting = p.observe(start + 100 * MS * i as u32, 16 * i);
        }
        assert_eq!(waiting, 16);
    }

    #[test]
    fn a_slow_claim_lengthens_the_horizon() {
        let mut p = Prefetch::adaptive(4);
        // Claims answering in 20 ms: the horizon is 40 ms.
        for _ in 0..20 {
            p.claimed_in(20 * MS);
        }
        let mut taken = 0;
        // 4,000 jobs/s: 40 ms of work is 160 jobs (10 ms would be 40).
        let (_, waiting) = run_at(&mut p, Instant::now(), &mut taken, 4_000, 1_000 * MS);
        assert!((155..=165).contains(&waiting), "{waiting}");
    }

    #[test]
    fn a_fast_claim_keeps_the_horizon() {
        let mut p = Prefetch::adaptive(4);
        p.claimed_in(MS);
        let mut taken = 0;
        let (_, waiting) = run_at(&mut p, Instant::now(), &mut taken, 8_000, 1_000 * MS);
        assert!((78..=82).contains(&waiting), "{waiting}");
    }

    #[test]
    fn a_stalled_claim_counts_as_a_second_at_most() {
        let mut p = Prefetch::adaptive(4);
        p.claimed_in(Duration::from_secs(60));
        let start = Instant::now();
        p.observe(start, 0);
        // 100 jobs/s for 3 s over a 2 s horizon: 200, not 6,000 (nor the cap).
        let mut waiting = 0;
        for i in 1..=300u32 {
            waiting = p.observe(start + 10 * MS * i, u64::from(i));
        }
        assert!((195..=205).contains(&waiting), "{waiting}");
    }

    #[test]
    fn a_burst_in_no_time_is_not_a_rate() {
        let mut p = Prefetch::adaptive(16);
        let now = Instant::now();
        p.observe(now, 0);
        assert_eq!(p.observe(now, 1_000), 16);
    }
}
