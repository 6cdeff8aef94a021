//! The pressure race at a pod count: the same bounded node, guaranteed ballast and
//! best-effort hog as [`super::race`], beside N idle pods (real processes in real cgroups),
//! with every kernel source on. One agent runs per (pods, headroom); its trials follow one
//! another, each with a new hog pod, so a thousand pods start once, not once per trial.
//!
//! Every stage is stamped where it happens, on CLOCK_MONOTONIC:
//! - crossing: the crossing probe's record ([`super::probe`]: the detector program, looking
//!   at every charge), stamped in the kernel at the charge that crossed the level. The
//!   agent's own detector looks once per batch of charges, and its early memcg watch can
//!   kill before that look;
//! - told: when a source told the hot path, having read its record or eventfd (the first
//!   of the detector and the memcg notifier);
//! - signal: the kernel's `signal:signal_generate` of the SIGKILL (in the kernel), which
//!   happens inside the agent's `cgroup.kill` write;
//! - freed: the 1 ms sampler sees the pods' working set back under the threshold;
//! - uncharged: the same sampler's read of the usage alone (the page counter, which the
//!   kernel's OOM decision looks at; no statistics flush in the way) back within a tenth
//!   of what the hog had added to it.
//!
//! The idle pods request 1 MiB of memory each and use about a quarter of it: the kubelet's ranking puts pods
//! over their request first, so the hog (best effort) is the victim, as it would be on a
//! node whose other pods stay within their requests.
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::costs;
use crate::harness::{self, Bounds, Level, MIB, Mode};
use crate::logparse;
use crate::memory;
use crate::probe::Probe;
use crate::stats::{Spread, percentile};
use crate::util;

/// The sources of the races beside many pods, by name: every kernel source that can tell
/// the hot path of a crossing (PSI only wakes the loop, so it is left off: the race
/// measures the kill), and the eBPF programs alone (the crossing detector, as on a cgroup
/// v2 node where no memcg eventfd exists); the housekeeping timer at the kubelet's default.
pub(crate) const SCALE_MODES: &[Mode] = &[
    Mode {
        name: "all",
        ebpf: true,
        memcg_thresholds: true,
        memory_events: true,
        psi: false,
        housekeeping: "10s",
        monitor_keys: "",
    },
    Mode {
        name: "ebpf",
        ebpf: true,
        memcg_thresholds: false,
        memory_events: false,
        psi: false,
        housekeeping: "10s",
        monitor_keys: "",
    },
];

/// What the ballast holds.
const BALLAST_MIB: u64 = 600;
/// Room for the idle pods' own memory (a sleeping process is charged well under this).
const IDLE_POD_MIB: u64 = 1;

/// One race at a pod count.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ScaleTrial {
    pub(crate) pods: usize,
    pub(crate) headroom_mib: u64,
    pub(crate) trial: u32,
    /// Which source told the hot path first ("ebpf", "memcg-threshold", …); none when the
    /// hot path did not kill.
    pub(crate) source: Option<String>,
    /// Stage durations in µs (see the module's documentation); none when a stamp is
    /// missing (no detector record, no hot kill).
    pub(crate) crossing_to_told_us: Option<f64>,
    pub(crate) told_to_signal_us: Option<f64>,
    pub(crate) crossing_to_signal_us: Option<f64>,
    pub(crate) signal_to_freed_ms: Option<f64>,
    /// From the SIGKILL to the pods' usage (the page counter, read alone) back within a
    /// tenth of what the hog had added to it: the victim's memory uncharged.
    #[serde(default)]
    pub(crate) signal_to_uncharged_ms: Option<f64>,
    /// Kernel OOM kills on the node during the trial (/proc/vmstat oom_kill).
    pub(crate) oom_kills: u64,
    /// The agent killed the hog (hot path or eviction), whether or not the crossing got a
    /// kernel stamp (a memcg notifier may beat the detector's sampled look).
    pub(crate) agent_killed: bool,
}

/// One (sources, pods, headroom) run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ScaleRun {
    /// The sources on ([`SCALE_MODES`]); runs recorded before there was a choice had all.
    #[serde(default = "all_sources")]
    pub(crate) sources: String,
    pub(crate) pods: usize,
    pub(crate) running: usize,
    pub(crate) headroom_mib: u64,
    pub(crate) planned: u32,
    pub(crate) trials: Vec<ScaleTrial>,
    /// Trials the agent won: its kill, no kernel OOM kill.
    pub(crate) avoided: usize,
    pub(crate) crossing_to_signal_us: Spread,
    /// p50 and p99 of crossing→told and told→signal, µs.
    pub(crate) stage_p50_us: [Option<f64>; 2],
    pub(crate) stage_p99_us: [Option<f64>; 2],
    pub(crate) signal_to_freed_ms: Spread,
    #[serde(default)]
    pub(crate) signal_to_uncharged_ms: Spread,
    /// Synchronize durations during the run's races (ms).
    pub(crate) synchronize_ms: Spread,
}

fn all_sources() -> String {
    "all".into()
}

/// Runs `trials` races with `pods` idle pods and a hard threshold `headroom_mib` below the
/// node's size, the agent's sources as `mode` says.
pub(crate) fn run(
    bin: &Path,
    mode: &Mode,
    pods: usize,
    headroom_mib: u64,
    trials: u32,
    start_limit: Duration,
    keep: bool,
) -> Result<ScaleRun> {
    let id = format!(
        "monitor-bench-{}-scale-{}-{pods}-{headroom_mib}",
        std::process::id(),
        mode.name
    );
    let pods_mib = u64::try_from(pods).unwrap_or(u64::MAX) * IDLE_POD_MIB;
    let bounds = Bounds {
        node_mib: harness::NODE_MIB + pods_mib,
        threshold_mib: headroom_mib,
    };
    let extra = format!("maxPods: {}\n", pods.saturating_add(10));
    let (guard, dir) = harness::start_agent(bin, &id, mode, &extra, keep, Level::Pods, bounds)?;
    costs::write_idle_pods(
        &dir,
        pods,
        "    resources:\n      requests: {memory: 1Mi}\n",
    )?;
    let hog = bin.join("hog").display().to_string();
    let args = |total: u64, step: u64| -> Vec<String> {
        vec![
            hog.clone(),
            "anon".into(),
            total.to_string(),
            step.to_string(),
            "0".into(),
            "3600".into(),
        ]
    };
    let ballast = harness::manifest(
        harness::NAMESPACE,
        "ballast",
        &args(BALLAST_MIB, 32),
        &format!(
            "    resources:\n      requests: {{cpu: 2, memory: {m}Mi}}\n      limits: {{cpu: 2, memory: {m}Mi}}\n",
            m = BALLAST_MIB + 40
        ),
        "",
    );
    let path = dir.join("pods").join("ballast.yaml");
    std::fs::write(&path, ballast).with_context(|| format!("writing {}", path.display()))?;
    let running = costs::wait_running(&dir, pods + 1, start_limit)?;
    let (pods_dir, v1) = harness::pods_cgroup(&id)?;
    util::wait(
        "the ballast holding its memory",
        Duration::from_secs(60),
        || memory::working_set(&pods_dir, v1) >= (BALLAST_MIB - 8) * MIB,
    )?;
    let node_bytes = bounds.node_mib * MIB;
    let threshold = node_bytes.saturating_sub(headroom_mib * MIB);
    let log_path = dir.join("agent.log");
    // The kernel's stamps of each crossing and SIGKILL (a look at every charge; the
    // level arms again once the killed hog's memory is gone).
    let agent = guard
        .agent
        .as_ref()
        .map(|a| a.id())
        .context("the agent is not running")?;
    let probe = Probe::start(bin, &pods_dir, threshold, agent, dir.join("probe.log"))?;
    let races = Races {
        dir: &dir,
        pods_dir: &pods_dir,
        v1,
        args: &args,
        node_bytes,
        threshold,
        probe: &probe,
    };
    let from_ns = util::monotonic_ns();
    let mut out = Vec::new();
    for n in 1..=trials {
        match one(&races, n) {
            Ok(mut t) => {
                t.pods = pods;
                t.headroom_mib = headroom_mib;
                println!("{}", line(&t));
                out.push(t);
            }
            Err(err) => println!(
                "bench: {pods} pods, {headroom_mib} MiB headroom, trial {n}: FAILED: {err:#}"
            ),
        }
    }
    let log = std::fs::read_to_string(&log_path)
        .with_context(|| format!("reading {}", log_path.display()))?;
    drop(guard);
    let syncs: Vec<f64> = logparse::syncs(&log)
        .iter()
        .filter(|s| s.started_ns >= from_ns)
        .filter_map(|s| s.duration_ns)
        .map(|d| d as f64 / 1e6)
        .collect();
    Ok(summarize(
        mode.name,
        pods,
        running,
        headroom_mib,
        trials,
        out,
        &syncs,
    ))
}

fn summarize(
    sources: &str,
    pods: usize,
    running: usize,
    headroom_mib: u64,
    planned: u32,
    trials: Vec<ScaleTrial>,
    syncs: &[f64],
) -> ScaleRun {
    let values =
        |f: fn(&ScaleTrial) -> Option<f64>| -> Vec<f64> { trials.iter().filter_map(f).collect() };
    let stages: [fn(&ScaleTrial) -> Option<f64>; 2] =
        [|t| t.crossing_to_told_us, |t| t.told_to_signal_us];
    let crossing_to_signal = Spread::of(&values(|t| t.crossing_to_signal_us));
    ScaleRun {
        sources: sources.to_string(),
        pods,
        running,
        headroom_mib,
        planned,
        avoided: trials
            .iter()
            .filter(|t| t.oom_kills == 0 && t.agent_killed)
            .count(),
        stage_p50_us: stages.map(|f| percentile(&values(f), 50.0)),
        stage_p99_us: stages.map(|f| percentile(&values(f), 99.0)),
        crossing_to_signal_us: crossing_to_signal,
        signal_to_freed_ms: Spread::of(&values(|t| t.signal_to_freed_ms)),
        signal_to_uncharged_ms: Spread::of(&values(|t| t.signal_to_uncharged_ms)),
        synchronize_ms: Spread::of(syncs),
        trials,
    }
}

/// What every race of one run shares.
struct Races<'a> {
    dir: &'a Path,
    pods_dir: &'a Path,
    v1: bool,
    /// The hog's command line for (total MiB, step MiB).
    args: &'a dyn Fn(u64, u64) -> Vec<String>,
    node_bytes: u64,
    /// The working set at which the hard threshold is met.
    threshold: u64,
    probe: &'a Probe,
}

/// One race: a new hog pod, told to start once the agent has ranked it.
fn one(races: &Races, n: u32) -> Result<ScaleTrial> {
    let Races {
        dir,
        pods_dir,
        v1,
        args,
        node_bytes,
        threshold,
        probe,
    } = *races;
    let name = format!("hog-{n}");
    let go = dir.join(format!("go-{n}"));
    // The hog tolerates the memory-pressure taint, as a batch job would: while the node
    // condition lingers after the previous race (its transition period), a BestEffort pod
    // without it is refused.
    let manifest = harness::manifest(
        harness::NAMESPACE,
        &name,
        &args(node_bytes / MIB * 2, 8),
        "  tolerations:\n  - {key: node.kubernetes.io/memory-pressure, operator: Exists, effect: NoSchedule}\n",
        &format!(
            "    env:\n    - {{name: HOG_START_FILE, value: \"{}\"}}\n",
            go.display()
        ),
    );
    let path = dir.join("pods").join(format!("{name}.yaml"));
    std::fs::write(&path, manifest).with_context(|| format!("writing {}", path.display()))?;
    let state = dir.join("state");
    let mut refused = None;
    util::wait(&format!("{name} running"), Duration::from_secs(30), || {
        harness::records(&state).iter().any(|r| {
            if r.name == name && r.phase == "Failed" {
                refused = Some(r.reason.clone());
            }
            r.name == name && (r.phase == "Failed" || (r.phase == "Running" && !r.pids.is_empty()))
        })
    })?;
    if let Some(reason) = refused {
        let _ = std::fs::remove_file(&path);
        bail!("{name} did not start: {reason}");
    }
    // The pod's start made the agent synchronize and arm its victim; give it the time.
    std::thread::sleep(Duration::from_millis(300));
    let stop = Arc::new(AtomicBool::new(false));
    // The working set counts only after the kill (freed); until then the sampler keeps
    // off memory.stat, whose flush the agent's own reads at the crossing would wait on.
    let sampler = memory::sampler_reading(
        pods_dir.to_path_buf(),
        v1,
        stop.clone(),
        memory::StatReads::WhileFalling,
    );
    std::thread::sleep(Duration::from_millis(20));
    let oom_before = memory::vmstat("oom_kill ");
    let start_ns = util::monotonic_ns();
    std::fs::write(&go, "").with_context(|| format!("writing {}", go.display()))?;
    let object = format!("{}/{name}", harness::NAMESPACE);
    let log_path = dir.join("agent.log");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut log;
    loop {
        std::thread::sleep(Duration::from_millis(5));
        log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let killed = logparse::hot_kill(&log, &object, start_ns).is_some()
            || logparse::event(&log, "Killing", &object, start_ns).is_some();
        if killed || memory::vmstat("oom_kill ") > oom_before {
            break;
        }
        if std::time::Instant::now() > deadline {
            break;
        }
    }
    // Let the memory go and the kernel's signal record reach the log.
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let samples = sampler
        .join()
        .map_err(|_| anyhow::anyhow!("the 1 ms sampler thread panicked"))?;
    let oom_kills = memory::vmstat("oom_kill ").saturating_sub(oom_before);
    log = std::fs::read_to_string(&log_path)
        .with_context(|| format!("reading {}", log_path.display()))?;
    // The hog goes: its manifest removed, the pod deleted.
    std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    let _ = std::fs::remove_file(&go);
    util::wait(&format!("{name} gone"), Duration::from_secs(30), || {
        !harness::records(&state).iter().any(|r| r.name == name)
    })?;

    let hot = logparse::hot_kill(&log, &object, start_ns);
    let agent_killed =
        hot.is_some() || logparse::event(&log, "Killing", &object, start_ns).is_some();
    let kernel = logparse::kernel_crossing_and_kill(&probe.output(), start_ns);
    let us = |from: Option<u64>, to: Option<u64>| -> Option<f64> {
        Some((to? as f64 - from? as f64) / 1000.0)
    };
    let crossed = kernel.map(|(c, _)| c);
    let signal = kernel.map(|(_, s)| s);
    let told = hot.as_ref().map(|h| h.detected_ns);
    // Freed: the first sample after the signal back under the threshold.
    let freed = signal.and_then(|s| {
        samples
            .iter()
            .find(|x| x.at_ns >= s && x.working_set < threshold)
            .map(|x| x.at_ns)
    });
    // Uncharged: the usage alone, back within a tenth of what the hog added to it.
    let uncharged = signal.and_then(|s| {
        let before = samples
            .iter()
            .rev()
            .find(|x| x.usage_at_ns < start_ns)?
            .usage;
        let at_kill = samples.iter().rev().find(|x| x.usage_at_ns <= s)?.usage;
        let back = before + at_kill.saturating_sub(before) / 10;
        samples
            .iter()
            .find(|x| x.usage_at_ns >= s && x.usage <= back)
            .map(|x| x.usage_at_ns)
    });
    Ok(ScaleTrial {
        pods: 0,
        headroom_mib: 0,
        trial: n,
        source: hot.map(|h| h.source),
        crossing_to_told_us: us(crossed, told),
        told_to_signal_us: us(told, signal),
        crossing_to_signal_us: us(crossed, signal),
        signal_to_freed_ms: us(signal, freed).map(|v| v / 1000.0),
        signal_to_uncharged_ms: us(signal, uncharged).map(|v| v / 1000.0),
        oom_kills,
        agent_killed,
    })
}

fn line(t: &ScaleTrial) -> String {
    let f = |v: Option<f64>| v.map_or("none".to_string(), |v| format!("{v:.0}"));
    format!(
        "bench: {:>4} pods {:>3} MiB #{:<2} crossing→SIGKILL {:>6} µs (told {} + signal {}) freed {} ms (uncharged {} ms) via {}  oom_kills {}",
        t.pods,
        t.headroom_mib,
        t.trial,
        f(t.crossing_to_signal_us),
        f(t.crossing_to_told_us),
        f(t.told_to_signal_us),
        t.signal_to_freed_ms
            .map_or("none".to_string(), |v| format!("{v:.1}")),
        t.signal_to_uncharged_ms
            .map_or("none".to_string(), |v| format!("{v:.1}")),
        t.source.as_deref().unwrap_or("no hot kill"),
        t.oom_kills
    )
}

/// The section of the report: a row per run.
pub(crate) fn table(runs: &[ScaleRun]) -> String {
    let us = |v: Option<f64>| v.map_or("none".to_string(), |v| format!("{v:.0}"));
    let ms = |v: Option<f64>| crate::stats::ms(v);
    let mut out = String::from(
        "| sources | pods | headroom MiB | OOM killer avoided | crossing→SIGKILL p50 / p99 / max µs | crossing→hot path told p50 / p99 µs | told→SIGKILL p50 / p99 µs | SIGKILL→freed p50 / p99 ms | SIGKILL→uncharged p50 / p99 ms | synchronize p50 / p99 ms |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in runs {
        let stage = |i: usize| format!("{} / {}", us(r.stage_p50_us[i]), us(r.stage_p99_us[i]));
        out.push_str(&format!(
            "| {} | {} ({} running) | {} | {}/{} | {} / {} / {} | {} | {} | {} / {} | {} / {} | {} / {} |\n",
            r.sources,
            r.pods,
            r.running.saturating_sub(1),
            r.headroom_mib,
            r.avoided,
            r.planned,
            us(r.crossing_to_signal_us.p50_ms),
            us(r.crossing_to_signal_us.p99_ms),
            us(r.crossing_to_signal_us.max_ms),
            stage(0),
            stage(1),
            ms(r.signal_to_freed_ms.p50_ms),
            ms(r.signal_to_freed_ms.p99_ms),
            ms(r.signal_to_uncharged_ms.p50_ms),
            ms(r.signal_to_uncharged_ms.p99_ms),
            ms(r.synchronize_ms.p50_ms),
            ms(r.synchronize_ms.p99_ms),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(n: u32, signal_us: Option<f64>, oom: u64) -> ScaleTrial {
        ScaleTrial {
            pods: 110,
            headroom_mib: 50,
            trial: n,
            source: Some("ebpf".into()),
            crossing_to_told_us: Some(10.0),
            told_to_signal_us: signal_us.map(|_| 25.0),
            crossing_to_signal_us: signal_us,
            signal_to_freed_ms: Some(2.0),
            signal_to_uncharged_ms: Some(1.0),
            oom_kills: oom,
            agent_killed: oom == 0 || signal_us.is_some(),
        }
    }

    #[test]
    fn a_run_counts_only_agent_kills_without_an_oom_kill_as_avoided() {
        let trials = vec![
            trial(1, Some(100.0), 0),
            trial(2, Some(300.0), 0),
            trial(3, Some(200.0), 1),
            trial(4, None, 1),
            // Killed by the agent, but the crossing got no kernel stamp: avoided all the same.
            trial(5, None, 0),
        ];
        let run = summarize("all", 110, 111, 50, 5, trials, &[1.0, 3.0]);
        assert_eq!(run.avoided, 3);
        assert_eq!(run.crossing_to_signal_us.count, 3);
        assert_eq!(run.crossing_to_signal_us.p50_ms, Some(200.0));
        assert_eq!(run.crossing_to_signal_us.max_ms, Some(300.0));
        assert_eq!(run.stage_p50_us[0], Some(10.0));
        let table = table(&[run]);
        assert!(
            table.contains("| 110 (110 running) | 50 | 3/5 | 200 / 300 / 300 |"),
            "{table}"
        );
    }
}
