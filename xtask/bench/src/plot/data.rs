//! What the charts show, from the trials: CDF steps, thinned curves, trials grouped and
//! aligned on their crossing, the stages of the races beside many pods.
use crate::scaling::ScaleRun;
use crate::trial::Trial;

/// The empirical CDF of `values` as a step line over `total` trials: (latency, fraction
/// of the trials at or below it). Trials without a value (no kill before the kernel's
/// OOM kill, say) count in `total`, so the line stops below 1 when some never got there.
pub(super) fn cdf_steps(values: &[f64], total: usize) -> Vec<(f64, f64)> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let total = total.max(sorted.len()).max(1) as f64;
    let mut out = Vec::with_capacity(sorted.len() * 2);
    for (i, v) in sorted.iter().enumerate() {
        out.push((*v, i as f64 / total));
        out.push((*v, (i + 1) as f64 / total));
    }
    out
}

/// Fewer points for a working-set curve without changing its picture: a sample is kept
/// when it moved by at least `min_mib` or `max_gap_ms` passed since the last one kept
/// (the flat stretches of a 1 ms sampler), and the last sample always.
pub(crate) fn thin(curve: &[(f64, f64)], min_mib: f64, max_gap_ms: f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (i, &(t, m)) in curve.iter().enumerate() {
        let keep = match out.last() {
            None => true,
            Some(&(lt, lm)) => {
                (m - lm).abs() >= min_mib || t - lt >= max_gap_ms || i + 1 == curve.len()
            }
        };
        if keep {
            out.push((t, m));
        }
    }
    out
}

/// The trials of each (rate, mode), in the order they ran.
pub(super) fn groups(trials: &[Trial]) -> Vec<(&str, &str, Vec<&Trial>)> {
    let mut out: Vec<(&str, &str, Vec<&Trial>)> = Vec::new();
    for t in trials {
        match out
            .iter_mut()
            .find(|(r, m, _)| *r == t.rate && *m == t.mode)
        {
            Some((_, _, ts)) => ts.push(t),
            None => out.push((&t.rate, &t.mode, vec![t])),
        }
    }
    out
}

/// One trial, shifted so that its threshold crossing is at 0 ms; the marks are placed on
/// the curve at their times.
#[derive(Debug, PartialEq)]
pub(super) struct Aligned {
    pub(super) curve: Vec<(f64, f64)>,
    pub(super) wake: Option<(f64, f64)>,
    pub(super) kill: Option<(f64, f64)>,
    pub(super) oom: Option<(f64, f64)>,
    /// No crossing was sampled (the agent killed within the sampler's 1 ms): aligned on
    /// the kill instead.
    pub(super) on_kill: bool,
}

/// The working set at `t` on a time-sorted curve (the last sample at or before it).
pub(super) fn at(curve: &[(f64, f64)], t: f64) -> Option<f64> {
    let i = curve.partition_point(|p| p.0 <= t);
    curve.get(i.checked_sub(1)?).or(curve.first()).map(|p| p.1)
}

/// A trial aligned on its crossing, or on the agent's kill when the sampler saw no
/// crossing; none without either, or without a curve.
pub(super) fn aligned(trial: &Trial) -> Option<Aligned> {
    let c = trial.crossing_ms.or(trial.kill_ms)?;
    if trial.curve.is_empty() {
        return None;
    }
    let curve: Vec<(f64, f64)> = trial.curve.iter().map(|(t, m)| (t - c, *m)).collect();
    let mark = |t: Option<f64>| t.and_then(|t| Some((t - c, at(&curve, t - c)?)));
    Some(Aligned {
        wake: mark(trial.wake_ms),
        kill: mark(trial.kill_ms),
        oom: mark(trial.oom_ms),
        on_kill: trial.crossing_ms.is_none(),
        curve,
    })
}

/// The median of each stage of one race beside many pods, µs: crossing→told,
/// told→SIGKILL, SIGKILL→freed.
#[derive(Debug, PartialEq)]
pub(super) struct StageBar {
    pub(super) label: String,
    pub(super) stages_us: [Option<f64>; 3],
}

pub(super) const STAGES: [&str; 3] = [
    "crossing → hot path told",
    "told → SIGKILL",
    "SIGKILL → memory freed",
];

pub(super) fn stage_bars(runs: &[ScaleRun]) -> Vec<StageBar> {
    runs.iter()
        .map(|r| StageBar {
            label: format!("{} pods, {} MiB", r.pods, r.headroom_mib),
            stages_us: [
                r.stage_p50_us[0],
                r.stage_p50_us[1],
                r.signal_to_freed_ms.p50_ms.map(|ms| ms * 1000.0),
            ],
        })
        .collect()
}

/// Which latency a CDF chart shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Latency {
    Kill,
    Wake,
}

/// One mode's latencies for a CDF.
#[derive(Debug, PartialEq)]
pub(super) struct Measured {
    /// ms, one per trial that has the latency.
    pub(super) values: Vec<f64>,
    /// Trials the CDF is a share of: those with the latency and those where the agent
    /// never got there (the kernel's OOM kill came first, say).
    pub(super) total: usize,
    /// Trials where the agent got there but the latency is unknown: the sampler never saw
    /// the working set over the threshold before the kill, and no kernel stamp.
    pub(super) unmeasured: usize,
}

/// A mode's latencies: crossing→kill kernel-stamped where the detector ran (µs-exact,
/// where the sampler is only good to its 1 ms), else both latencies from the sampler.
pub(super) fn measured(trials: &[&Trial], latency: Latency) -> Measured {
    let mut out = Measured {
        values: Vec::new(),
        total: 0,
        unmeasured: 0,
    };
    for t in trials {
        let (value, reached) = match latency {
            Latency::Kill => (
                t.kernel_crossing_to_kill_us
                    .map(|us| us / 1000.0)
                    .or(t.crossing_to_kill_ms),
                t.kill_ms.is_some(),
            ),
            Latency::Wake => (t.crossing_to_wake_ms, t.wake_ms.is_some()),
        };
        match value {
            Some(v) => {
                out.values.push(v);
                out.total += 1;
            }
            None if reached => out.unmeasured += 1,
            None => out.total += 1,
        }
    }
    out
}
