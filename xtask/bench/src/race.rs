//! One trial of the pressure race on this host: a bounded node (the pods cgroup limited to
//! `NODE_MIB`), a guaranteed ballast pod holding most of it, and a best-effort hog pod that
//! allocates at a set rate once told to. The hard threshold
//! allocatableMemory.available<headroom (200 MiB, or as set) must make the agent kill the hog before the
//! kernel OOM killer does.
//!
//! Crossing time, two ways:
//! - in the kernel, on the pods-level race: the crossing probe's ([`super::probe`]) record
//!   of the crossing, from a look at every charge, and the kernel's
//!   `signal:signal_generate` record of the agent's SIGKILL. Where both are there, the
//!   mode's crossing→kill is theirs (µs-exact);
//! - a 1 ms sampler of the pods cgroup's working set (usage − inactive_file, the value
//!   the kubelet's signal uses), linearly interpolated between the last sample below and
//!   the first at or above the threshold: the same for every mode, the cross-check, and
//!   the only clock of the wake and of the node-level race. Its error is at most one
//!   sampling interval (recorded per trial), and it misses a crossing the kill beats.
use std::path::Path;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::bpf::{self, ProgStat};
use crate::harness::{
    self, Bounds, HOG_TO_CROSSING_MIB, Level, MIB, Mode, NAMESPACE, NODE_MIB, start_agent,
};
use crate::logparse;
use crate::memory::{self, Sample};
use crate::reserve::Reserve;
use crate::trial::{Observed, Trial, crossing, from_points};
use crate::util::{self, monotonic_ns};

/// Memory the guaranteed ballast holds before the race starts.
const BALLAST_MIB: u64 = 600;

/// How fast the hog allocates: `hog anon TOTAL STEP_MIB PAUSE_MS`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Rate {
    pub(crate) name: &'static str,
    pub(crate) step_mib: u64,
    pub(crate) pause_ms: u64,
}

pub(crate) struct Setup<'a> {
    pub(crate) bin: &'a Path,
    pub(crate) keep: bool,
    pub(crate) level: Level,
    /// The hard threshold's distance below the node's size.
    pub(crate) headroom_mib: u64,
}

/// Runs one trial; the guard cleans up whichever way it ends.
pub(crate) fn trial(setup: &Setup, mode: &Mode, rate: &Rate, n: u32) -> Result<Trial> {
    let headroom_mib = setup.headroom_mib;
    let id = format!(
        "monitor-bench-{}-{}-{}-{}-{headroom_mib}-{n}",
        std::process::id(),
        mode.name,
        rate.name,
        match setup.level {
            Level::Pods => "pods",
            Level::Node => "node",
        }
    );
    // The node's size, the hard threshold (the available memory below which the agent
    // evicts), and the ballast. On the pods cgroup the kernel kills at its limit, so the
    // threshold is the headroom; on the node it kills at its free-page reserve, so the
    // threshold is the headroom above that reserve ([`Reserve`]).
    let (node_bytes, threshold_mib, ballast_mib) = match setup.level {
        Level::Pods => (NODE_MIB * MIB, headroom_mib, BALLAST_MIB),
        Level::Node => {
            let reserve = Reserve::read()?;
            if n == 1 {
                println!("bench: node race: {}", reserve.describe(headroom_mib));
            }
            let threshold_mib = reserve.agent_threshold_mib(headroom_mib);
            let node = memory::node_memory().context("reading /proc/meminfo")?;
            let available_mib = node.total.saturating_sub(node.working_set) / MIB;
            (
                node.total,
                threshold_mib,
                available_mib.saturating_sub(threshold_mib + HOG_TO_CROSSING_MIB),
            )
        }
    };
    // The working set at which the threshold is crossed.
    let threshold = node_bytes.saturating_sub(threshold_mib * MIB);
    let (guard, dir) = start_agent(
        setup.bin,
        &id,
        mode,
        "",
        setup.keep,
        setup.level,
        Bounds {
            node_mib: NODE_MIB,
            threshold_mib,
        },
    )?;
    let hog = setup.bin.join("hog").display().to_string();
    let go = dir.join("go");
    let args = |total: u64, step: u64, pause: u64| -> Vec<String> {
        vec![
            hog.clone(),
            "anon".into(),
            total.to_string(),
            step.to_string(),
            pause.to_string(),
            "3600".into(),
        ]
    };
    let ballast = harness::manifest(
        NAMESPACE,
        "ballast",
        &args(ballast_mib, 32, 0),
        &format!(
            "    resources:\n      requests: {{cpu: 2, memory: {m}Mi}}\n      limits: {{cpu: 2, memory: {m}Mi}}\n",
            m = ballast_mib + 40
        ),
        "",
    );
    let hog_pod = harness::manifest(
        NAMESPACE,
        "hog",
        &args(node_bytes / MIB * 2, rate.step_mib, rate.pause_ms),
        "",
        &format!(
            "    env:\n    - {{name: HOG_START_FILE, value: \"{}\"}}\n",
            go.display()
        ),
    );
    for (name, text) in [("ballast", ballast), ("hog", hog_pod)] {
        let path = dir.join("pods").join(format!("{name}.yaml"));
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    let state = dir.join("state");
    util::wait(
        "the ballast and hog pods running",
        Duration::from_secs(30),
        || {
            let r = harness::records(&state);
            r.len() == 2 && r.iter().all(|r| r.phase == "Running" && !r.pids.is_empty())
        },
    )?;
    let (pods_dir, v1) = harness::pods_cgroup(&id)?;
    util::wait(
        &format!(
            "the ballast holding {ballast_mib} MiB in {}",
            pods_dir.display()
        ),
        Duration::from_secs(60),
        || memory::working_set(&pods_dir, v1) >= ballast_mib.saturating_sub(8) * MIB,
    )?;
    // The kubelet's timer has no relation to when a workload spikes: start the race at a
    // uniformly random phase of the housekeeping period, or a polling mode would always
    // be measured at the same point of its period (the agent starts just before).
    let phase_ms = if mode.polling() {
        random_below(mode.housekeeping_ns()) / 1_000_000
    } else {
        0
    };
    std::thread::sleep(Duration::from_millis(phase_ms));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = match setup.level {
        Level::Pods => memory::sampler(pods_dir.clone(), v1, stop.clone()),
        Level::Node => memory::node_sampler(stop.clone()),
    };
    // The kernel's stamps come from the crossing probe, which sees every charge batch (the
    // agent's own detector may sample, and a fast kill can come first). On the pods-level
    // race it watches the crossing too (the signal is the pods cgroup's working set); on
    // the node-level race only the agent's SIGKILL (the node's signal is no cgroup's:
    // its level is one the hog never reaches).
    let probe = guard.agent.as_ref().and_then(|agent| {
        let level = match setup.level {
            Level::Pods => threshold,
            Level::Node => crate::probe::NEVER,
        };
        crate::probe::Probe::start(
            setup.bin,
            &pods_dir,
            level,
            agent.id(),
            dir.join("probe.log"),
        )
        .map_err(|err| println!("bench: no kernel stamps from the crossing probe: {err:#}"))
        .ok()
    });
    // On cgroup v2: did the agent throttle the pods with memory.high during the race?
    let high_file = (!v1).then(|| pods_dir.join("memory.high"));
    let mut memory_high_set = false;
    // Kernel OOM kills: in the pods cgroup, or anywhere on the node.
    let level = setup.level;
    let oom_kills = move || match level {
        Level::Pods => memory::oom_kills(&pods_dir, v1),
        Level::Node => memory::vmstat("oom_kill "),
    };
    std::thread::sleep(Duration::from_millis(100));
    let oom_before = oom_kills();
    let mut oom_seen = oom_before;
    let start_ns = monotonic_ns();
    std::fs::write(&go, "").with_context(|| format!("writing {}", go.display()))?;

    // Until the hog is killed by the agent or the kernel; then, so that a polling mode's
    // wake is measured even when it comes after the OOM kill, until the first synchronize
    // after the crossing (bounded by one housekeeping interval).
    let log_path = dir.join("agent.log");
    let object = format!("{NAMESPACE}/hog");
    let mut oom_ns = None;
    let mut ended_ns = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        std::thread::sleep(Duration::from_millis(2));
        let now = monotonic_ns();
        if let Some(file) = &high_file
            && let Ok(text) = std::fs::read_to_string(file)
        {
            memory_high_set |= !matches!(text.trim(), "max" | "");
        }
        // The hog's cgroup goes away with it: keep the highest count seen.
        oom_seen = oom_seen.max(oom_kills());
        if oom_ns.is_none() && oom_seen > oom_before {
            oom_ns = Some(now);
        }
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let killed = logparse::hot_kill(&log, &object, start_ns)
            .map(|h| h.killed_ns)
            .or_else(|| logparse::event(&log, "Killing", &object, start_ns));
        if ended_ns.is_none() && (killed.is_some() || oom_ns.is_some()) {
            ended_ns = Some(now);
        }
        if let Some(end) = ended_ns {
            let settled = now.saturating_sub(end) >= 300_000_000;
            let woke = logparse::syncs(&log).iter().any(|s| s.started_ns >= end);
            let waited_out =
                now.saturating_sub(end) >= mode.housekeeping_ns().saturating_add(500_000_000);
            if settled && (killed.is_some() || woke || waited_out) {
                break;
            }
        }
        if Instant::now() > deadline {
            break;
        }
    }
    let bpf_stats = guard
        .agent
        .as_ref()
        .map(|a| bpf::prog_stats(a.id()))
        .unwrap_or_default();
    let pods_cpu_ns = memory::pods_cpu_ns(&id);
    stop.store(true, Ordering::Relaxed);
    let samples = sampler
        .join()
        .map_err(|_| anyhow::anyhow!("the 1 ms sampler thread panicked"))?;
    let oom_kills = oom_seen.max(oom_kills()).saturating_sub(oom_before);
    let log = std::fs::read_to_string(&log_path)
        .with_context(|| format!("reading {}", log_path.display()))?;
    // With the probe, its records alone (crossing, and the agent's SIGKILL); without it,
    // the agent's own detector's on the pods race. The node race has none: the node's
    // signal is no cgroup's working set, and the agent's records there are of levels it
    // derived on the pods cgroup (early, relief and hard alike), whose first one is not
    // the node's crossing. (Deriving the probe's level the same way was tried: against
    // the /proc/meminfo sampler it was off by tens of milliseconds either way under
    // emulation; the node's free-page count, which moves in per-CPU batches, is the
    // likely cause.)
    // On the node race the probe's log holds SIGKILL stamps alone (it arms no crossing).
    let kernel_log = match (probe, setup.level) {
        (Some(probe), _) => probe.output(),
        (None, Level::Pods) => log.clone(),
        (None, Level::Node) => String::new(),
    };
    drop(guard);
    if ended_ns.is_none() {
        bail!(
            "{} {} trial {n}: neither the agent nor the OOM killer ended the hog within 30 s (log {})",
            mode.name,
            rate.name,
            log_path.display()
        );
    }
    let mut trial = analyse(
        mode,
        rate,
        n,
        (node_bytes / MIB, headroom_mib),
        start_ns,
        threshold,
        &samples,
        &log,
        oom_ns,
        oom_kills,
        bpf_stats,
    );
    trial.phase_delay_ms = phase_ms;
    trial.pods_cpu_ns = pods_cpu_ns;
    trial.memory_high_set = high_file.map(|_| memory_high_set);
    trial.kernel_crossing_to_kill_us = logparse::kernel_crossing_and_kill(&kernel_log, start_ns)
        .map(|(crossed, killed)| killed.saturating_sub(crossed) as f64 / 1000.0);
    trial.kernel_kill_ms =
        logparse::kernel_kill(&kernel_log, start_ns).map(|killed| util::ms_after(start_ns, killed));
    // The OOM killer ended the trial: the kernel's report says why it found nothing to
    // reclaim while the agent's signal was where it was.
    if oom_kills > 0 {
        for line in util::last_oom_report(80) {
            println!("bench: OOM report: {line}");
        }
        // What the agent last saw before the OOM kill: its synchronizes started before it.
        let before: Vec<u64> = logparse::syncs(&log)
            .iter()
            .filter(|s| oom_ns.is_some_and(|oom| s.started_ns < oom))
            .map(|s| s.sequence)
            .collect();
        for sequence in &before[before.len().saturating_sub(3)..] {
            let tag = format!("synchronize{{sequence={sequence} ");
            for line in log
                .lines()
                .filter(|l| l.contains(&tag) && l.contains("synchronize:"))
            {
                println!("bench: OOM, a synchronize before it: {line}");
            }
        }
    }
    // A kill more than 10 ms after the crossing (the kernel's stamps on the pods race,
    // the sampler's crossing on the node race): the agent's hot path lines and its
    // synchronizes go to the output, for the reason (in the VM the run's directory goes
    // with it).
    let slow = match setup.level {
        Level::Pods => trial
            .kernel_crossing_to_kill_us
            .is_some_and(|us| us > 10_000.0),
        Level::Node => trial.crossing_to_kill_ms.is_some_and(|ms| ms > 10.0),
    };
    if slow {
        println!(
            "bench: slow kill: crossing at {:?} ms, first wake at {:?} ms, kill at {:?} ms (hog at {:?} MiB/s)",
            trial.crossing_ms, trial.wake_ms, trial.kill_ms, trial.measured_rate_mib_s
        );
        for line in log
            .lines()
            .filter(|l| {
                l.contains("hot path") || l.contains(": wake ") || l.contains("synchronize done")
            })
            .take(100)
        {
            println!("bench: slow kill, agent log: {line}");
        }
    }
    Ok(trial)
}

/// A uniformly distributed number below `bound` (0 when bound is 0), from getrandom(2).
fn random_below(bound: u64) -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most the buffer's length into our buffer.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    let value = if got == 8 {
        u64::from_ne_bytes(bytes)
    } else {
        // No entropy source: the clock's low bits are still unrelated to the timer.
        monotonic_ns().wrapping_mul(0x9E37_79B9_7F4A_7C15)
    };
    value.checked_rem(bound).unwrap_or(0)
}

#[expect(
    clippy::too_many_arguments,
    reason = "one trial's analysis reads every measurement of the trial"
)]
fn analyse(
    mode: &Mode,
    rate: &Rate,
    n: u32,
    (node_mib, headroom_mib): (u64, u64),
    start_ns: u64,
    threshold: u64,
    samples: &[Sample],
    log: &str,
    oom_ns: Option<u64>,
    oom_kills: u64,
    bpf: Vec<ProgStat>,
) -> Trial {
    let points: Vec<(u64, u64)> = samples.iter().map(|s| (s.at_ns, s.working_set)).collect();
    let crossed = crossing(&points, start_ns, threshold);
    let syncs = logparse::syncs(log);
    let object = format!("{NAMESPACE}/hog");
    // The hot path stamps its own kill (right after the cgroup.kill write) and the moment
    // its notifier told it; otherwise the kill is the Killing event of a synchronize.
    let hot = logparse::hot_kill(log, &object, start_ns);
    let kill_ns = hot
        .as_ref()
        .map(|h| h.killed_ns)
        .or_else(|| logparse::event(log, "Killing", &object, start_ns));
    let sync = match (kill_ns, crossed) {
        (Some(k), _) => logparse::deciding_sync(&syncs, k),
        (None, Some((c, _))) => logparse::first_sync_after(&syncs, c as u64),
        (None, None) => None,
    };
    from_points(Observed {
        mode: mode.name,
        rate: rate.name,
        n,
        node_mib,
        headroom_mib,
        start_ns,
        threshold,
        points: &points,
        wake: match &hot {
            Some(h) => Some((
                h.detected_ns,
                format!("{} (hot path)", h.source),
                None,
                None,
            )),
            None => sync.map(|s| {
                (
                    s.first_wake_ns,
                    s.sources.join("+"),
                    Some(s.started_ns),
                    s.finished_ns(),
                )
            }),
        },
        kill_ns,
        oom_ns,
        oom_kills,
        sync_durations_ms: syncs
            .iter()
            .filter_map(|s| s.duration_ns)
            .map(|d| d as f64 / 1e6)
            .collect(),
        bpf,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::zero(0)]
    #[case::one(1)]
    #[case::ten_seconds(10_000_000_000)]
    fn random_is_below_the_bound(#[case] bound: u64) {
        for _ in 0..100 {
            let r = random_below(bound);
            assert!(r < bound.max(1), "{r} not below {bound}");
        }
    }
}
