//! The kernel's monotonic clock, for timestamps only: log lines, wakes and observations
//! carry CLOCK_MONOTONIC nanoseconds so they line up with eBPF records
//! (`bpf_ktime_get_ns`) and with the test hogs' own stamps. Decisions never read it: the
//! synchronize loop's time is `tokio::time::Instant`, which tests can pause and advance.

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(ts) => {
            u64::try_from(ts.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(ts.tv_nsec()).unwrap_or(0)
        }
        // CLOCK_MONOTONIC exists on every Linux; 0 would only blur a log line.
        Err(_) => 0,
    }
}
