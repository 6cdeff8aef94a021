//! The machine's own stalls, measured beside the races: how often a thread that only
//! reads the clock in user space is kept from running, and for how long.
//!
//! Such a thread can lose its CPU only to interrupts, to another task (counted apart, as
//! its involuntary switches) or, in a virtual machine, to the hypervisor. A gap in its
//! clock reads is time the races' kills could have lost the same way, whatever the agent
//! does; the report puts these figures beside the races' tails. On a VM whose host does
//! not report a stall as steal time, the kernel counts it as the thread's own CPU time,
//! which the rows show too.
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Gaps at least this long are counted.
const GAP_SHORT: Duration = Duration::from_micros(200);
const GAP_LONG: Duration = Duration::from_millis(1);

/// One measurement: `busy` CPUs each spinning for `seconds`, the others idle.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Row {
    pub(crate) busy: usize,
    pub(crate) cpus: usize,
    pub(crate) seconds: f64,
    /// Over all spinning threads.
    pub(crate) gaps_200us: u64,
    pub(crate) gaps_1ms: u64,
    pub(crate) longest_us: u64,
    /// Wall time of the gaps ≥ 200 µs, and how much of the threads' wall time the
    /// kernel did not count as their CPU time.
    pub(crate) gap_ms: f64,
    pub(crate) not_cpu_ms: f64,
    pub(crate) involuntary_switches: u64,
    /// The node's steal time over the measurement (/proc/stat, 10 ms resolution).
    pub(crate) steal_ms: f64,
}

/// What one spinning thread saw.
#[derive(Default)]
struct Spin {
    gaps_200us: u64,
    gaps_1ms: u64,
    longest: Duration,
    gaps: Duration,
    wall: Duration,
    cpu: Duration,
    involuntary: u64,
}

/// A row with one CPU busy (as in a race, where the allocating pod holds one) and one
/// with every CPU busy.
pub(crate) fn measure(seconds: u64) -> Vec<Row> {
    let cpus = usable_cpus();
    let mut busy = vec![1];
    if cpus.len() > 1 {
        busy.push(cpus.len());
    }
    busy.into_iter()
        .map(|n| row(&cpus[..n], cpus.len(), Duration::from_secs(seconds)))
        .collect()
}

fn row(spin_on: &[usize], cpus: usize, length: Duration) -> Row {
    let steal_before = steal();
    let spins: Vec<Spin> = std::thread::scope(|s| {
        let handles: Vec<_> = spin_on
            .iter()
            .map(|&cpu| s.spawn(move || spin(cpu, length)))
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let steal_ms = match (steal_before, steal()) {
        (Some(a), Some(b)) => b.saturating_sub(a).as_secs_f64() * 1000.0,
        _ => 0.0,
    };
    Row {
        busy: spin_on.len(),
        cpus,
        seconds: length.as_secs_f64(),
        gaps_200us: spins.iter().map(|s| s.gaps_200us).sum(),
        gaps_1ms: spins.iter().map(|s| s.gaps_1ms).sum(),
        longest_us: spins
            .iter()
            .map(|s| s.longest.as_micros() as u64)
            .max()
            .unwrap_or(0),
        gap_ms: spins.iter().map(|s| s.gaps.as_secs_f64() * 1000.0).sum(),
        not_cpu_ms: spins
            .iter()
            .map(|s| s.wall.saturating_sub(s.cpu).as_secs_f64() * 1000.0)
            .sum(),
        involuntary_switches: spins.iter().map(|s| s.involuntary).sum(),
        steal_ms,
    }
}

/// Spins on `cpu` for `length`, reading the clock.
fn spin(cpu: usize, length: Duration) -> Spin {
    pin_to(cpu);
    let cpu_start = thread_cpu();
    let switches_start = involuntary_switches();
    let start = Instant::now();
    let mut last = start;
    let mut seen = Spin::default();
    loop {
        let now = Instant::now();
        let gap = now - last;
        last = now;
        if gap >= GAP_SHORT {
            seen.gaps_200us += 1;
            seen.gaps += gap;
            if gap >= GAP_LONG {
                seen.gaps_1ms += 1;
            }
            seen.longest = seen.longest.max(gap);
        }
        if now - start >= length {
            break;
        }
    }
    seen.wall = last - start;
    seen.cpu = thread_cpu().saturating_sub(cpu_start);
    seen.involuntary = involuntary_switches().saturating_sub(switches_start);
    seen
}

/// The CPUs this process may run on.
fn usable_cpus() -> Vec<usize> {
    use nix::sched::{CpuSet, sched_getaffinity};
    use nix::unistd::Pid;
    match sched_getaffinity(Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count())
            .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
            .collect(),
        Err(_) => vec![0],
    }
}

fn pin_to(cpu: usize) {
    use nix::sched::{CpuSet, sched_setaffinity};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    if set.set(cpu).is_ok() {
        // Unpinned, the thread still spins and counts its gaps.
        let _ = sched_setaffinity(Pid::from_raw(0), &set);
    }
}

fn thread_cpu() -> Duration {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

fn involuntary_switches() -> u64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_THREAD)
        .map(|u| u.involuntary_context_switches() as u64)
        .unwrap_or(0)
}

/// The node's steal time so far (the `cpu` line of /proc/stat).
fn steal() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: u64 = stat
        .lines()
        .find(|l| l.starts_with("cpu "))?
        .split_whitespace()
        .nth(8)?
        .parse()
        .ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map_or(100, |hz| hz.max(1) as u64);
    Some(Duration::from_millis(ticks * 1000 / hz))
}

/// The report's lines.
pub(crate) fn lines(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .map(|r| {
            let cpu_seconds = r.seconds * r.busy as f64;
            let per = |n: u64| n as f64 / cpu_seconds.max(f64::EPSILON);
            format!(
                "- {busy} of {cpus} CPUs busy, {secs:.0} s: {g200:.2} gaps ≥ 200 µs and {g1:.2} ≥ 1 ms per CPU-second, longest {longest:.2} ms; {gap_ms:.1} ms in gaps, of which the kernel did not count {lost:.1} ms as the threads' CPU time; {inv} involuntary switches; steal {steal:.0} ms",
                busy = r.busy,
                cpus = r.cpus,
                secs = r.seconds,
                g200 = per(r.gaps_200us),
                g1 = per(r.gaps_1ms),
                longest = r.longest_us as f64 / 1000.0,
                gap_ms = r.gap_ms,
                lost = r.not_cpu_ms,
                inv = r.involuntary_switches,
                steal = r.steal_ms,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_measurement_counts_its_own_time() {
        let rows = measure(1);
        assert!(!rows.is_empty());
        let one = &rows[0];
        assert_eq!(one.busy, 1);
        assert!(one.cpus >= 1);
        // Gaps are parts of the wall time the threads spun.
        assert!(one.gap_ms <= one.seconds * 1000.0 * one.busy as f64 + 1.0);
        assert!(one.gaps_1ms <= one.gaps_200us);
        assert!(one.longest_us == 0 || one.gaps_200us > 0);
        let text = lines(&rows).join("\n");
        assert!(text.contains("1 of"), "{text}");
    }
}
