//! One trial of the pressure race on this host: a bounded node (the pods cgroup limited to
//! `NODE_MIB`), a guaranteed ballast pod holding most of it, and a best-effort hog pod that
//! allocates at a set rate once told to. The hard threshold
//! allocatableMemory.available<HEADROOM_MIB must make the agent kill the hog before the
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
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::bpf::{self, ProgStat};
use super::logparse;
use crate::demo::{self, Guard, Sample};

pub(crate) const MIB: u64 = 1 << 20;
/// The node: the pods cgroup's memory limit.
pub(crate) const NODE_MIB: u64 = 1024;
/// The hard eviction threshold's headroom (allocatableMemory.available<HEADROOM_MIB).
pub(crate) const HEADROOM_MIB: u64 = 200;
/// Memory the guaranteed ballast holds before the race starts.
const BALLAST_MIB: u64 = 600;
pub(crate) const NAMESPACE: &str = "bench";
/// Node-level race: how far into the hog's allocation the crossing comes (as in the
/// earlyoom peer's race, so both see the same climb).
pub(crate) const HOG_TO_CROSSING_MIB: u64 = 224;

/// What the race bounds and which signal it watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// The pods cgroup limited to NODE_MIB, allocatableMemory.available<HEADROOM_MIB.
    Pods,
    /// The whole node (the VM), memory.available<HEADROOM_MIB: the race the earlyoom peer
    /// runs, for a like-for-like comparison. On cgroup v2 the agent's kernel notifier for
    /// it is memory.high on the pods cgroup, offset by the rest of the node.
    Node,
}

/// Which event sources run and how often the housekeeping timer fires.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Mode {
    pub(crate) name: &'static str,
    pub(crate) ebpf: bool,
    pub(crate) memcg_thresholds: bool,
    pub(crate) memory_events: bool,
    pub(crate) psi: bool,
    /// The KubeletConfiguration's housekeepingInterval (Go duration).
    pub(crate) housekeeping: &'static str,
}

impl Mode {
    pub(crate) fn polling(&self) -> bool {
        !(self.ebpf || self.memcg_thresholds || self.memory_events || self.psi)
    }

    /// The housekeeping interval in nanoseconds (ms and s only, as the modes use).
    pub(crate) fn housekeeping_ns(&self) -> u64 {
        let h = self.housekeeping;
        if let Some(ms) = h.strip_suffix("ms").and_then(|v| v.parse::<u64>().ok()) {
            return ms.saturating_mul(1_000_000);
        }
        h.strip_suffix('s')
            .and_then(|v| v.parse::<u64>().ok())
            .map(|s| s.saturating_mul(1_000_000_000))
            .unwrap_or(10_000_000_000)
    }
}

/// How fast the hog allocates: `hog anon TOTAL STEP_MIB PAUSE_MS`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Rate {
    pub(crate) name: &'static str,
    pub(crate) step_mib: u64,
    pub(crate) pause_ms: u64,
}

/// What one trial saw; times in ms after the hog was told to start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Trial {
    pub(crate) mode: String,
    pub(crate) rate: String,
    pub(crate) trial: u32,
    /// The node's size in this trial (the pods cgroup limit, or the VM's MemTotal).
    pub(crate) node_mib: u64,
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
    /// (ms, MiB) of the working set for the plot; emptied after plotting but for trial 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) curve: Vec<(f64, f64)>,
}

pub(crate) struct Setup<'a> {
    pub(crate) bin: &'a Path,
    pub(crate) keep: bool,
    pub(crate) level: Level,
}

/// The node's size and the hard threshold's headroom of an agent run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// The pods cgroup's limit (Level::Pods only).
    pub(crate) node_mib: u64,
    pub(crate) headroom_mib: u64,
}

impl Bounds {
    /// The race's: a 1 GiB node, 200 MiB headroom.
    pub(crate) const RACE: Bounds = Bounds {
        node_mib: NODE_MIB,
        headroom_mib: HEADROOM_MIB,
    };
}

fn config(dir: &Path, id: &str, mode: &Mode, extra: &str, level: Level, bounds: Bounds) -> String {
    let Bounds {
        node_mib,
        headroom_mib,
    } = bounds;
    let (eviction, limit) = match level {
        // The node here is the agent's cgroup root, about the size of the pods cgroup: its
        // own threshold stays below the headroom raced, or it would be met first.
        Level::Pods => (
            format!(
                "{{allocatableMemory.available: {headroom_mib}Mi, memory.available: {}Mi}}",
                headroom_mib / 2
            ),
            format!("  podsMemoryLimit: {node_mib}Mi\n"),
        ),
        Level::Node => (
            format!("{{memory.available: {headroom_mib}Mi}}"),
            String::new(),
        ),
    };
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: {pods}\n\
         housekeepingInterval: {hk}\n{extra}\
         evictionHard: {eviction}\n\
         monitor:\n{limit}  cgroupRoot: {id}\n  stateDir: {state}\n  podLogDir: {logs}\n  socket: {sock}\n\
         \x20 sources: {{ebpf: {e}, memcgThresholds: {m}, memoryEvents: {v}, psi: {p}}}\n",
        pods = dir.join("pods").display(),
        hk = mode.housekeeping,
        state = dir.join("state").display(),
        logs = dir.join("logs").display(),
        sock = dir.join("monitor.sock").display(),
        e = mode.ebpf,
        m = mode.memcg_thresholds,
        v = mode.memory_events,
        p = mode.psi,
    )
}

/// A pod manifest; `restartPolicy: Never` so an OOM-killed hog does not come back.
pub(crate) fn manifest(name: &str, command: &[String], resources: &str, env: &str) -> String {
    let command: Vec<String> = command.iter().map(|c| format!("\"{c}\"")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {NAMESPACE}}}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: main\n    image: none\n    command: [{}]\n{env}{resources}",
        command.join(", ")
    )
}

/// Starts the agent on a fresh run directory; the guard stops it and removes the cgroups.
pub(crate) fn start_agent(
    bin: &Path,
    id: &str,
    mode: &Mode,
    extra_config: &str,
    keep: bool,
    level: Level,
    bounds: Bounds,
) -> Result<(Guard, PathBuf)> {
    let dir = std::env::temp_dir().join(id);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("pods"))
        .with_context(|| format!("creating {}", dir.join("pods").display()))?;
    let mut guard = Guard {
        agent: None,
        cgroup_root: id.to_string(),
        dir: dir.clone(),
        keep,
    };
    let path = dir.join("config.yaml");
    std::fs::write(&path, config(&dir, id, mode, extra_config, level, bounds))
        .with_context(|| format!("writing {}", path.display()))?;
    spawn_agent(&mut guard, bin, &dir)?;
    Ok((guard, dir))
}

fn spawn_agent(guard: &mut Guard, bin: &Path, dir: &Path) -> Result<()> {
    let log_path = dir.join("agent.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    guard.agent = Some(
        Command::new(bin.join("monitor"))
            .args(["run", "--config"])
            .arg(dir.join("config.yaml"))
            // Debug of the synchronize loop only: its "synchronize done" lines carry the duration.
            .env("RUST_LOG", "info,monitor::sync=debug")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {} run", bin.join("monitor").display()))?,
    );
    Ok(())
}

/// The pods cgroup in the memory hierarchy and whether it is cgroup v1.
pub(crate) fn pods_cgroup(id: &str) -> Result<(PathBuf, bool)> {
    let (_, memory_root, v1) = demo::cgroup_mounts();
    let root = memory_root.context("no cgroup hierarchy with the memory controller")?;
    Ok((root.join(id).join("kubepods"), v1))
}

/// Runs one trial; the guard cleans up whichever way it ends.
pub(crate) fn trial(setup: &Setup, mode: &Mode, rate: &Rate, n: u32) -> Result<Trial> {
    let id = format!(
        "monitor-bench-{}-{}-{}-{}-{n}",
        std::process::id(),
        mode.name,
        rate.name,
        match setup.level {
            Level::Pods => "pods",
            Level::Node => "node",
        }
    );
    // The node's size, the usage at which the threshold is crossed, and the ballast.
    let (node_bytes, ballast_mib) = match setup.level {
        Level::Pods => (NODE_MIB * MIB, BALLAST_MIB),
        Level::Node => {
            let node = node_memory().context("reading /proc/meminfo")?;
            let available_mib = node.total.saturating_sub(node.working_set) / MIB;
            (
                node.total,
                available_mib.saturating_sub(HEADROOM_MIB + HOG_TO_CROSSING_MIB),
            )
        }
    };
    let threshold = node_bytes.saturating_sub(HEADROOM_MIB * MIB);
    let (guard, dir) = start_agent(
        setup.bin,
        &id,
        mode,
        "",
        setup.keep,
        setup.level,
        Bounds::RACE,
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
    let ballast = manifest(
        "ballast",
        &args(ballast_mib, 32, 0),
        &format!(
            "    resources:\n      requests: {{cpu: 2, memory: {m}Mi}}\n      limits: {{cpu: 2, memory: {m}Mi}}\n",
            m = ballast_mib + 40
        ),
        "",
    );
    let hog_pod = manifest(
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
    demo::wait(
        "the ballast and hog pods running",
        Duration::from_secs(30),
        || {
            let r = demo::records(&state);
            r.len() == 2 && r.iter().all(|r| r.phase == "Running" && !r.pids.is_empty())
        },
    )?;
    let (pods_dir, v1) = pods_cgroup(&id)?;
    demo::wait(
        &format!(
            "the ballast holding {ballast_mib} MiB in {}",
            pods_dir.display()
        ),
        Duration::from_secs(60),
        || crate::demo::working_set(&pods_dir, v1) >= ballast_mib.saturating_sub(8) * MIB,
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
        Level::Pods => demo::sampler(pods_dir.clone(), v1, stop.clone()),
        Level::Node => node_sampler(stop.clone()),
    };
    // The kernel's stamps come from the crossing probe, which looks at every charge (the
    // agent's own detector looks once per batch, and a fast kill can come first). The
    // pods-level race only: its signal is the pods cgroup's working set.
    let probe = match (setup.level, guard.agent.as_ref()) {
        (Level::Pods, Some(agent)) => super::probe::Probe::start(
            setup.bin,
            &pods_dir,
            threshold,
            agent.id(),
            dir.join("probe.log"),
        )
        .map_err(|err| println!("bench: no kernel stamps from the crossing probe: {err:#}"))
        .ok(),
        _ => None,
    };
    // On cgroup v2: did the agent throttle the pods with memory.high during the race?
    let high_file = (!v1).then(|| pods_dir.join("memory.high"));
    let mut memory_high_set = false;
    // Kernel OOM kills: in the pods cgroup, or anywhere on the node.
    let level = setup.level;
    let oom_kills = move || match level {
        Level::Pods => oom_kills(&pods_dir, v1),
        Level::Node => super::peer::vmstat("oom_kill "),
    };
    std::thread::sleep(Duration::from_millis(100));
    let oom_before = oom_kills();
    let mut oom_seen = oom_before;
    let start_ns = demo::monotonic_ns();
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
        let now = demo::monotonic_ns();
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
    let pods_cpu_ns = pods_cpu_ns(&id);
    stop.store(true, Ordering::Relaxed);
    let samples = sampler
        .join()
        .map_err(|_| anyhow::anyhow!("the 1 ms sampler thread panicked"))?;
    let oom_kills = oom_seen.max(oom_kills()).saturating_sub(oom_before);
    let log = std::fs::read_to_string(&log_path)
        .with_context(|| format!("reading {}", log_path.display()))?;
    // With the probe, its records alone (crossing, and the agent's SIGKILL); without it,
    // the agent's own detector's.
    let kernel_log = match probe {
        Some(probe) => probe.output(),
        None => log.clone(),
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
        node_bytes / MIB,
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
    Ok(trial)
}

/// CPU time of the agent's pods cgroup so far (children that are gone included), from
/// cpu.stat of the cgroup2 hierarchy: the memory hierarchy on v2, the unified one beside a
/// v1 memory controller (cgroup2 keeps CPU usage for every cgroup).
pub(crate) fn pods_cpu_ns(id: &str) -> Option<u64> {
    let rel = format!("{id}/kubepods");
    let (_, memory_root, v1) = demo::cgroup_mounts();
    let root = if v1 {
        PathBuf::from("/sys/fs/cgroup/unified")
    } else {
        memory_root?
    };
    let stat = std::fs::read_to_string(root.join(&rel).join("cpu.stat")).ok()?;
    stat.lines().find_map(|line| {
        let usec: u64 = line.strip_prefix("usage_usec ")?.trim().parse().ok()?;
        Some(usec * 1000)
    })
}

/// The node's memory as the agent reads it on cgroup v2: total, and the working set
/// MemTotal − MemFree − Inactive(file).
pub(crate) struct NodeMemory {
    pub(crate) total: u64,
    pub(crate) working_set: u64,
}

pub(crate) fn node_memory() -> Option<NodeMemory> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = |key: &str| super::peer::meminfo_field(&text, key).map(|v| v * 1024);
    let total = kib("MemTotal:")?;
    let used = total.saturating_sub(kib("MemFree:")?);
    Some(NodeMemory {
        total,
        working_set: used.saturating_sub(kib("Inactive(file):")?),
    })
}

/// Samples the node's working set every millisecond (the memory.available signal).
fn node_sampler(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Sample>> {
    std::thread::spawn(move || {
        let mut samples = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            if let Some(node) = node_memory() {
                let at_ns = demo::monotonic_ns();
                samples.push(Sample {
                    at_ns,
                    working_set: node.working_set,
                    usage: node.working_set,
                    usage_at_ns: at_ns,
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        samples
    })
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
        demo::monotonic_ns().wrapping_mul(0x9E37_79B9_7F4A_7C15)
    };
    value.checked_rem(bound).unwrap_or(0)
}

/// Kernel OOM kills under the pods cgroup. cgroup v2's memory.events counts the subtree;
/// cgroup v1 counts `oom_kill` in memory.oom_control of the victim's own memcg only, so on
/// v1 the whole subtree is summed.
fn oom_kills(dir: &Path, v1: bool) -> u64 {
    if !v1 {
        return demo::oom_kills(dir, false);
    }
    let mut total = demo::oom_kills(dir, true);
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            total = total.saturating_add(oom_kills(&entry.path(), true));
        }
    }
    total
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

#[expect(
    clippy::too_many_arguments,
    reason = "one trial's analysis reads every measurement of the trial"
)]
fn analyse(
    mode: &Mode,
    rate: &Rate,
    n: u32,
    node_mib: u64,
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

/// What a trial observed, in CLOCK_MONOTONIC nanoseconds: the input of [`from_points`].
pub(crate) struct Observed<'a> {
    pub(crate) mode: &'a str,
    pub(crate) rate: &'a str,
    pub(crate) n: u32,
    pub(crate) node_mib: u64,
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

    #[rstest]
    #[case::hundred_ms("100ms", 100_000_000)]
    #[case::one_s("1s", 1_000_000_000)]
    #[case::ten_s("10s", 10_000_000_000)]
    fn housekeeping(#[case] text: &'static str, #[case] ns: u64) {
        let mode = Mode {
            name: "x",
            ebpf: false,
            memcg_thresholds: false,
            memory_events: false,
            psi: false,
            housekeeping: text,
        };
        assert_eq!(mode.housekeeping_ns(), ns);
        assert!(mode.polling());
    }
}
