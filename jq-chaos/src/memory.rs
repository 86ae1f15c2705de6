//! Resident memory of processes, read from `/proc/<pid>/status` (`VmRSS`).

use std::collections::BTreeMap;
use std::time::Instant;

/// The resident set size of `pid` in KiB, or `None` when it is gone (or
/// this is not Linux).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// One sample.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// When it was taken.
    pub at: Instant,
    /// Resident memory in KiB.
    pub kib: u64,
}

/// Samples of several processes over a run.
#[derive(Clone, Debug, Default)]
pub struct MemorySampler {
    /// Samples per process, oldest first.
    pub samples: BTreeMap<u32, Vec<Sample>>,
}

impl MemorySampler {
    /// Samples every process of `pids` that is still alive.
    pub fn sample(&mut self, pids: impl IntoIterator<Item = u32>) {
        let at = Instant::now();
        for pid in pids {
            if let Some(kib) = rss_kib(pid) {
                self.samples.entry(pid).or_default().push(Sample { at, kib });
            }
        }
    }

    /// The largest sample of any process, in KiB.
    pub fn peak_kib(&self) -> u64 {
        self.samples.values().flatten().map(|s| s.kib).max().unwrap_or(0)
    }

    /// First and last sample of `pid`, in KiB.
    pub fn first_last_kib(&self, pid: u32) -> Option<(u64, u64)> {
        let s = self.samples.get(&pid)?;
        Some((s.first()?.kib, s.last()?.kib))
    }
}

/// KiB as MiB with one decimal, for reports.
pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}
