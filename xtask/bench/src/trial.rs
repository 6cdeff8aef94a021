//! One trial's record, and its analysis from what the race observed: the crossing
//! interpolated from the 1 ms samples, the allocation rate, and the times from the start.
use serde::{Deserialize, Serialize};

use crate::bpf::ProgStat;
use crate::harness::MIB;

/// What one trial saw; times in ms after the hog was told to start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Trial {
    pub(crate) mode: String,
    pub(crate) rate: String,
    pub(crate) trial: u32,
    /// The node's size in this trial (the pods cgroup limit, or the VM's MemTotal).
    pub(crate) node_mib: u64,
    /// The hard threshold's headroom: the threshold is this far below `node_mib` (runs
    /// recorded before the races had several headrooms all raced at 200 MiB).
    #[serde(default = "default_headroom")]
    pub(crate) headroom_mib: u64,
    /// Random delay before the start (polling modes): the phase of the housekeeping timer.
    pub(crate) phase_delay_ms: u64,
    /// Working set crossed the threshold (interpolated 1 ms sampler).
    pub(crate) crossing_ms: Option<f64>,
    /// Sampling interval around the crossing: the crossing's error bound.
    pub(crate) crossing_error_ms: Option<f64>,
    /// Allocation rate measured from the samples between 10 % and 90 % of the climb.
    pub(crate) measured_rate_mib_s: Option<f64>,
    /// The wake that led to the kill, or (no kill) the first synchronize after the crossing.
    pub(crate) wake_ms: Option<f64>,
    pub(crate) wake_source: Option<String>,
    pub(crate) sync_start_ms: Option<f64>,
    pub(crate) sync_end_ms: Option<f64>,
    /// The agent's Killing event for the hog (SIGKILL follows at once: hard threshold).
    pub(crate) kill_ms: Option<f64>,
    /// Working set back under the threshold after the kill.
    pub(crate) freed_ms: Option<f64>,
    pub(crate) freed_mib: Option<u64>,
    pub(crate) peak_mib: u64,
    /// oom_kill count of the pods cgroup at the end of the trial.
    pub(crate) oom_kills: u64,
    /// When the trial first saw the OOM kill count rise (2 ms polling).
    pub(crate) oom_ms: Option<f64>,
    /// The kernel OOM killer fired before the agent's kill (or without one).
    pub(crate) oom_first: bool,
    pub(crate) crossing_to_wake_ms: Option<f64>,
    pub(crate) crossing_to_kill_ms: Option<f64>,
    /// Synchronize durations of this agent run (ms), for the cost summary.
    pub(crate) sync_durations_ms: Vec<f64>,
    /// The agent's eBPF programs' run-time counters at the end of the trial (the guest
    /// sends them too: the VM's kernel runs the node-level programs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) bpf: Vec<ProgStat>,
    /// CPU time the pods cgroup (ballast and hog) used from the agent's start to the end
    /// of the trial, from cpuacct.usage (v1) or cpu.stat (v2): what the eBPF programs'
    /// run time is a share of.
    #[serde(default)]
    pub(crate) pods_cpu_ns: Option<u64>,
    /// cgroup v2: whether the pods cgroup's memory.high was ever below max during the
    /// race (2 ms polling); `None` on cgroup v1.
    #[serde(default)]
    pub(crate) memory_high_set: Option<bool>,
    /// From the crossing probe's record to the kernel's SIGKILL of the hog, both stamped
    /// in the kernel (µs); only on the pods-level race, where the agent killed.
    #[serde(default)]
    pub(crate) kernel_crossing_to_kill_us: Option<f64>,
    /// The killer's (the agent's or the peer's) first SIGKILL after the start, as the
    /// kernel stamped it (`signal:signal_generate`), ms after the start: the node-level
    /// race's kill time, whose crossing only the 1 ms sampler gives.
    #[serde(default)]
    pub(crate) kernel_kill_ms: Option<f64>,
    /// (ms, MiB) of the working set for the plot; emptied after plotting but for trial 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) curve: Vec<(f64, f64)>,
}

fn default_headroom() -> u64 {
    crate::harness::HEADROOM_MIB
}

/// Interpolated crossing time (ns) and the sampling interval around it.
pub(crate) fn crossing(
    samples: &[(u64, u64)],
    after_ns: u64,
    threshold: u64,
) -> Option<(f64, f64)> {
    let i = samples
        .iter()
        .position(|&(at, ws)| at >= after_ns && ws >= threshold)?;
    let (t1, w1) = samples[i];
    let Some(&(t0, w0)) = i.checked_sub(1).and_then(|j| samples.get(j)) else {
        return Some((t1 as f64, 0.0));
    };
    let span = w1.saturating_sub(w0) as f64;
    let fraction = if span > 0.0 {
        threshold.saturating_sub(w0) as f64 / span
    } else {
        1.0
    };
    let at = t0 as f64 + fraction.clamp(0.0, 1.0) * t1.saturating_sub(t0) as f64;
    Some((at, t1.saturating_sub(t0) as f64))
}

/// What a trial observed, in CLOCK_MONOTONIC nanoseconds: the input of [`from_points`].
pub(crate) struct Observed<'a> {
    pub(crate) mode: &'a str,
    pub(crate) rate: &'a str,
    pub(crate) n: u32,
    pub(crate) node_mib: u64,
    pub(crate) headroom_mib: u64,
    pub(crate) start_ns: u64,
    /// Usage at which the threshold is crossed, bytes.
    pub(crate) threshold: u64,
    /// (ns, bytes used) from the 1 ms sampler.
    pub(crate) points: &'a [(u64, u64)],
    /// (wake received, its source, synchronize start, synchronize end).
    pub(crate) wake: Option<(u64, String, Option<u64>, Option<u64>)>,
    pub(crate) kill_ns: Option<u64>,
    pub(crate) oom_ns: Option<u64>,
    pub(crate) oom_kills: u64,
    pub(crate) sync_durations_ms: Vec<f64>,
    pub(crate) bpf: Vec<ProgStat>,
}

/// The trial's record, times made relative to the start.
pub(crate) fn from_points(o: Observed) -> Trial {
    let start_ns = o.start_ns;
    let threshold = o.threshold;
    let points = o.points;
    let rel = |ns: f64| (ns - start_ns as f64) / 1e6;
    let crossed = crossing(points, start_ns, threshold);
    let kill_ns = o.kill_ns;
    let freed = kill_ns.and_then(|k| points.iter().find(|(at, ws)| *at > k && *ws < threshold));
    let at_kill = kill_ns.and_then(|k| points.iter().find(|(at, _)| *at >= k).map(|p| p.1));
    let after_min =
        kill_ns.and_then(|k| points.iter().filter(|(at, _)| *at >= k).map(|p| p.1).min());
    let peak = points
        .iter()
        .filter(|(at, _)| *at >= start_ns)
        .map(|p| p.1)
        .max()
        .unwrap_or(0);
    let oom_first = o.oom_kills > 0 && kill_ns.is_none_or(|k| o.oom_ns.is_none_or(|t| t < k));
    let crossing_ms = crossed.map(|(c, _)| rel(c));
    let wake_ms = o.wake.as_ref().map(|w| rel(w.0 as f64));
    let kill_ms = kill_ns.map(|k| rel(k as f64));
    let diff = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| b - a);
    // A plot needs a few hundred points, not thousands.
    let window: Vec<(u64, u64)> = points
        .iter()
        .copied()
        .filter(|(at, _)| *at + 50_000_000 >= start_ns)
        .collect();
    let step = (window.len() / 600).max(1);
    Trial {
        mode: o.mode.to_string(),
        rate: o.rate.to_string(),
        trial: o.n,
        node_mib: o.node_mib,
        headroom_mib: o.headroom_mib,
        phase_delay_ms: 0,
        crossing_ms,
        crossing_error_ms: crossed.map(|(_, e)| e / 1e6),
        measured_rate_mib_s: measured_rate(points, start_ns, threshold),
        wake_ms,
        wake_source: o.wake.as_ref().map(|w| w.1.clone()),
        sync_start_ms: o.wake.as_ref().and_then(|w| w.2).map(|s| rel(s as f64)),
        sync_end_ms: o.wake.as_ref().and_then(|w| w.3).map(|f| rel(f as f64)),
        kill_ms,
        freed_ms: freed.map(|(at, _)| rel(*at as f64)),
        freed_mib: at_kill
            .zip(after_min)
            .map(|(a, m)| a.saturating_sub(m) / MIB),
        peak_mib: peak / MIB,
        oom_kills: o.oom_kills,
        oom_ms: o.oom_ns.map(|t| rel(t as f64)),
        oom_first,
        crossing_to_wake_ms: diff(crossing_ms, wake_ms),
        crossing_to_kill_ms: diff(crossing_ms, kill_ms),
        sync_durations_ms: o.sync_durations_ms,
        bpf: o.bpf,
        pods_cpu_ns: None,
        memory_high_set: None,
        kernel_crossing_to_kill_us: None,
        kernel_kill_ms: None,
        curve: window
            .iter()
            .step_by(step)
            .map(|&(at, ws)| (rel(at as f64), ws as f64 / MIB as f64))
            .collect(),
    }
}

/// MiB/s between the first samples after the start at 10 % and 90 % of the climb from the
/// starting working set to the threshold.
pub(crate) fn measured_rate(points: &[(u64, u64)], start_ns: u64, threshold: u64) -> Option<f64> {
    let base = points.iter().find(|(at, _)| *at >= start_ns)?.1;
    let climb = threshold.checked_sub(base)?;
    let level = |f: u64| base.saturating_add(climb / 10 * f);
    let lo = points
        .iter()
        .find(|(at, ws)| *at >= start_ns && *ws >= level(1))?;
    let hi = points
        .iter()
        .find(|(at, ws)| *at >= lo.0 && *ws >= level(9))?;
    let seconds = hi.0.checked_sub(lo.0)? as f64 / 1e9;
    (seconds > 0.0).then(|| hi.1.saturating_sub(lo.1) as f64 / MIB as f64 / seconds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::halfway(&[(0, 0), (1_000_000, 100), (2_000_000, 200)], 150, Some((1_500_000.0, 1_000_000.0)))]
    #[case::exact_sample(&[(0, 0), (1_000_000, 100)], 100, Some((1_000_000.0, 1_000_000.0)))]
    #[case::first_sample_already_over(&[(5, 300)], 100, Some((5.0, 0.0)))]
    #[case::never(&[(0, 0), (1, 50)], 100, None)]
    #[case::before_start_ignored(&[(0, 500), (10, 0), (20, 200)], 100, Some((15.0, 10.0)))]
    fn crossing_is_interpolated(
        #[case] samples: &[(u64, u64)],
        #[case] threshold: u64,
        #[case] expected: Option<(f64, f64)>,
    ) {
        let after = if samples.len() == 3 && samples[0].1 == 500 {
            10
        } else {
            0
        };
        assert_eq!(crossing(samples, after, threshold), expected);
    }

    #[test]
    fn rate_is_measured_over_the_climb() {
        // 1 MiB per ms from 0 to 100 MiB: 1000 MiB/s.
        let points: Vec<(u64, u64)> = (0..=100).map(|i| (i * 1_000_000, i * MIB)).collect();
        let rate = measured_rate(&points, 0, 100 * MIB).expect("a rate");
        assert!((rate - 1000.0).abs() < 1.0, "rate {rate}");
        assert_eq!(measured_rate(&points, 0, 0), None, "no climb, no rate");
    }
}
