//! The crossing detector's cost as the pods see it: the `detector-cost` helper
//! (tests/src/bin/detector-cost.rs) runs a memory hog with the detector attached (going
//! to the armed depth, and walking every ancestor) and detached, rotating, per attach
//! point; this reads its lines back into one row per point. The kernel's BPF statistics are off meanwhile (they add to every program run).
//! The ratio is taken round by round (each round runs both, back to back), so a
//! drift of the machine over the run cancels out; the row gives their median.
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::stats::percentile;
use crate::util::field;

/// Rounds per attach point, and what the hog allocates in each run: on the host, and in
/// the VM (under emulation a run takes tens of times longer).
pub(crate) const HOST: Size = Size {
    rounds: 20,
    mib: 256,
};
pub(crate) const GUEST: Size = Size {
    rounds: 20,
    mib: 64,
};

#[derive(Clone, Copy, Debug)]
pub(crate) struct Size {
    pub(crate) rounds: u32,
    pub(crate) mib: u64,
}

/// One attach point's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DetectorCost {
    /// `fexit/page_counter_try_charge`, `fexit/try_charge_memcg` or
    /// `tp_btf/mod_memcg_lruvec_state`.
    pub(crate) point: String,
    /// Why the kernel refused it (then no figures).
    pub(crate) refused: Option<String>,
    /// Rounds with both runs measured, and the MiB the hog allocated in each run.
    pub(crate) rounds: usize,
    #[serde(default)]
    pub(crate) mib: u64,
    /// Median throughput, MiB per second of the hog's CPU time, with the detector on and
    /// off.
    pub(crate) on_mib_per_s: Option<f64>,
    pub(crate) off_mib_per_s: Option<f64>,
    /// Median over the rounds of (off / on − 1), in percent: what the detector takes from
    /// the allocating pod's throughput.
    pub(crate) cost_percent: Option<f64>,
    /// The same with the detector walking every ancestor of the charged cgroup instead
    /// of going to the armed depth (absent from runs before that choice existed).
    #[serde(default)]
    pub(crate) walk_mib_per_s: Option<f64>,
    #[serde(default)]
    pub(crate) walk_cost_percent: Option<f64>,
    /// From one more run with the kernel's BPF statistics on: how often the detector's
    /// program ran per MiB the hog charged, and its mean run time (runs before that
    /// measured did not have them).
    #[serde(default)]
    pub(crate) runs_per_mib: Option<f64>,
    #[serde(default)]
    pub(crate) ns_per_run: Option<f64>,
}

/// Runs the helper from `bin` and reads its lines.
pub(crate) fn run(bin: &Path, size: Size) -> Result<Vec<DetectorCost>> {
    Ok(parse(&output(bin, size)?))
}

/// Runs the helper from `bin`; its output.
pub(crate) fn output(bin: &Path, size: Size) -> Result<String> {
    let helper = bin.join("detector-cost");
    let _paused = crate::bpf::StatsSetting::pause();
    let output = Command::new(&helper)
        .arg(bin.join("hog"))
        .arg(size.rounds.to_string())
        .arg(size.mib.to_string())
        .output()
        .with_context(|| format!("running {}", helper.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "{} failed ({}): {}",
            helper.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(text.into_owned())
}

/// The rows of the helper's output (other lines are ignored: a console holds more).
pub(crate) fn parse(text: &str) -> Vec<DetectorCost> {
    let mut points: Vec<String> = Vec::new();
    let mut refused: Vec<(String, String)> = Vec::new();
    // (point, round, detector: on, walk or off) -> MiB/s
    let mut runs: Vec<(String, u32, String, f64)> = Vec::new();
    let mut mib = 0;
    // point -> (runs per MiB, ns per run)
    let mut programs: Vec<(String, f64, Option<f64>)> = Vec::new();
    for line in text.lines() {
        // The leading space stays: `field` looks for " key=".
        let Some(rest) = line.trim().strip_prefix("detector-cost:") else {
            continue;
        };
        let Some(point) = field(rest, "point") else {
            continue;
        };
        if !points.iter().any(|p| p == point) {
            points.push(point.to_string());
        }
        if let Some((_, why)) = rest.split_once(" refused: ") {
            refused.push((point.to_string(), why.to_string()));
            continue;
        }
        let counted = (
            field(rest, "runs").and_then(|v| v.parse::<u64>().ok()),
            field(rest, "run_ns").and_then(|v| v.parse::<u64>().ok()),
            field(rest, "mib").and_then(|v| v.parse::<u64>().ok()),
        );
        if let (Some(runs), Some(run_ns), Some(counted_mib)) = counted {
            if counted_mib > 0 {
                programs.push((
                    point.to_string(),
                    runs as f64 / counted_mib as f64,
                    (runs > 0).then(|| run_ns as f64 / runs as f64),
                ));
            }
            continue;
        }
        let parsed = (
            field(rest, "round").and_then(|v| v.parse().ok()),
            field(rest, "detector"),
            field(rest, "mib_per_s").and_then(|v| v.parse().ok()),
        );
        if let Some(m) = field(rest, "mib").and_then(|v| v.parse().ok()) {
            mib = m;
        }
        if let (Some(round), Some(detector), Some(mib_per_s)) = parsed {
            runs.push((point.to_string(), round, detector.to_string(), mib_per_s));
        }
    }
    points
        .into_iter()
        .map(|point| {
            let of = |detector: &str| -> Vec<(u32, f64)> {
                runs.iter()
                    .filter(|r| r.0 == point && r.2 == detector)
                    .map(|r| (r.1, r.3))
                    .collect()
            };
            let (on, walk, off) = (of("on"), of("walk"), of("off"));
            // Per round, off / with − 1: a drift of the machine cancels out.
            let costs = |with: &[(u32, f64)]| -> Vec<f64> {
                with.iter()
                    .filter_map(|(round, with)| {
                        let off = off.iter().find(|(r, _)| r == round)?.1;
                        (*with > 0.0).then(|| (off / with - 1.0) * 100.0)
                    })
                    .collect()
            };
            let values = |runs: &[(u32, f64)]| runs.iter().map(|r| r.1).collect::<Vec<_>>();
            let on_costs = costs(&on);
            let program = programs.iter().find(|p| p.0 == point);
            DetectorCost {
                runs_per_mib: program.map(|p| p.1),
                ns_per_run: program.and_then(|p| p.2),
                refused: refused
                    .iter()
                    .find(|(p, _)| *p == point)
                    .map(|(_, why)| why.clone()),
                rounds: on_costs.len(),
                mib,
                on_mib_per_s: percentile(&values(&on), 50.0),
                off_mib_per_s: percentile(&values(&off), 50.0),
                cost_percent: percentile(&on_costs, 50.0),
                walk_mib_per_s: percentile(&values(&walk), 50.0),
                walk_cost_percent: percentile(&costs(&walk), 50.0),
                point,
            }
        })
        .collect()
}

/// How the VM's figures are named, from how the VM ran ([`crate::VmRun::accel`]): with
/// instructions counted, a second of the hog's CPU is 10⁹ of its instructions.
pub(crate) fn vm_place(accel: &str) -> String {
    if accel.contains(INSTRUCTIONS_COUNTED) {
        "in the VM, instructions counted (a CPU-second is 10⁹ guest instructions)".to_string()
    } else {
        format!("in the VM ({accel})")
    }
}

/// What [`crate::VmRun::accel`] says of a boot whose clock counts instructions.
pub const INSTRUCTIONS_COUNTED: &str = "instructions counted";

/// The report's lines, one per attach point, under `place` ("on this host", "in the VM").
pub(crate) fn lines(rows: &[DetectorCost], place: &str) -> Vec<String> {
    rows.iter()
        .map(|row| match (&row.refused, row.cost_percent) {
            (Some(why), _) => format!("- crossing detector {} {place}: refused ({why})", row.point),
            (None, Some(cost)) => format!(
                "- crossing detector {} {place}: the hog allocates {cost:.1} % slower with it attached (median over {} rounds of {} MiB, three levels below the armed cgroup, attached and detached in turn; {:.0} vs {:.0} MiB per CPU-second of the hog){}{}",
                row.point,
                row.rounds,
                row.mib,
                row.on_mib_per_s.unwrap_or(0.0),
                row.off_mib_per_s.unwrap_or(0.0),
                match (row.walk_cost_percent, row.walk_mib_per_s) {
                    (Some(walk), Some(mib_per_s)) => format!(
                        "; walking every ancestor instead of going to the armed depth, {walk:.1} % ({mib_per_s:.0} MiB per CPU-second)"
                    ),
                    _ => String::new(),
                },
                match (row.runs_per_mib, row.ns_per_run) {
                    (Some(runs), Some(ns)) => format!(
                        "; its program ran {runs:.0} times per MiB charged, {ns:.0} ns a run (the kernel's BPF statistics, one more run)"
                    ),
                    (Some(runs), None) => format!("; its program ran {runs:.0} times per MiB charged"),
                    _ => String::new(),
                }
            ),
            (None, None) => format!("- crossing detector {} {place}: no complete round", row.point),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vm_place_says_how_the_clock_ran() {
        assert_eq!(
            vm_place("Tcg, instructions counted"),
            "in the VM, instructions counted (a CPU-second is 10⁹ guest instructions)"
        );
        assert_eq!(vm_place("Kvm"), "in the VM (Kvm)");
    }

    #[test]
    fn the_programs_counted_run_gives_runs_per_mib_and_time_per_run() {
        let text = "\
detector-cost: point=fexit/page_counter_try_charge detector=on round=1 mib=64 mib_per_s=680.0
detector-cost: point=fexit/page_counter_try_charge detector=off round=1 mib=64 mib_per_s=690.0
detector-cost: point=fexit/page_counter_try_charge runs=320 run_ns=64000 mib=64
detector-cost: point=tp_btf/mod_memcg_lruvec_state detector=on round=1 mib=64 mib_per_s=600.0
detector-cost: point=tp_btf/mod_memcg_lruvec_state detector=off round=1 mib=64 mib_per_s=690.0
detector-cost: point=tp_btf/mod_memcg_lruvec_state runs=0 run_ns=0 mib=64
";
        let rows = parse(text);
        assert_eq!(rows[0].runs_per_mib, Some(5.0));
        assert_eq!(rows[0].ns_per_run, Some(200.0));
        // The counted run is not a round.
        assert_eq!(rows[0].rounds, 1);
        assert_eq!(rows[1].runs_per_mib, Some(0.0));
        assert_eq!(rows[1].ns_per_run, None);
        let lines = lines(&rows, "on this host");
        assert!(
            lines[0].contains("ran 5 times per MiB charged, 200 ns a run"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].contains("ran 0 times per MiB charged"),
            "{}",
            lines[1]
        );
    }

    #[test]
    fn rounds_pair_up_and_refused_points_are_said() {
        let text = "\
noise
detector-cost: point=fexit/try_charge_memcg refused: attaching fexit: EINVAL
detector-cost: point=tp_btf/mod_memcg_lruvec_state detector=on round=1 mib=256 mib_per_s=900.0
detector-cost: point=tp_btf/mod_memcg_lruvec_state detector=off round=1 mib_per_s=1000.0
detector-cost: point=tp_btf/mod_memcg_lruvec_state detector=off round=2 mib_per_s=1100.0
detector-cost: point=tp_btf/mod_memcg_lruvec_state detector=on round=2 mib_per_s=1000.0
detector-cost: point=tp_btf/mod_memcg_lruvec_state detector=on round=3 mib_per_s=1000.0
detector-cost: point=tp_btf/mod_memcg_lruvec_state detector=walk round=1 mib_per_s=800.0
detector-cost: point=tp_btf/mod_memcg_lruvec_state detector=walk round=2 mib_per_s=880.0
";
        let rows = parse(text);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].point, "fexit/try_charge_memcg");
        assert_eq!(rows[0].refused.as_deref(), Some("attaching fexit: EINVAL"));
        assert_eq!(rows[0].rounds, 0);
        let tp = &rows[1];
        // Round 3 has no "off" run: left out of the ratio.
        assert_eq!(tp.rounds, 2);
        assert_eq!(tp.mib, 256);
        let cost = tp.cost_percent.unwrap();
        assert!((10.0..=11.2).contains(&cost), "{cost}");
        assert_eq!(tp.off_mib_per_s, Some(1000.0), "the lower middle of two");
        // Walking: 1000 / 800 and 1100 / 880, 25 % each.
        let walk = tp.walk_cost_percent.unwrap();
        assert!((24.9..=25.1).contains(&walk), "{walk}");
        assert_eq!(rows[0].walk_cost_percent, None);
        let lines = lines(&rows, "on this host");
        assert!(lines[0].contains("refused (attaching fexit: EINVAL)"));
        assert!(lines[1].contains("allocates 10."), "{}", lines[1]);
        assert!(
            lines[1].contains("every ancestor instead of going to the armed depth, 25.0 %"),
            "{}",
            lines[1]
        );
    }
}
