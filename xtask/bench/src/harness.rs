//! The agent under test in a race: its configuration for a mode (which event sources,
//! which housekeeping interval) on a bounded node, the pod manifests, the agent started on
//! a fresh run directory with a guard that stops it and removes its cgroups, and the pod
//! records it writes.
use std::path::{Path, PathBuf};
use std::process::Child;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::util;

pub(crate) const MIB: u64 = 1 << 20;
/// The node: the pods cgroup's memory limit.
pub(crate) const NODE_MIB: u64 = 1024;
/// The hard eviction threshold's headroom (allocatableMemory.available<HEADROOM_MIB).
pub(crate) const HEADROOM_MIB: u64 = 200;
/// The namespace of the benchmark's pods.
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
    /// Lines added under the configuration's `monitor:` key (two-space indented), for a
    /// mode that differs from the defaults in more than its sources.
    pub(crate) monitor_keys: &'static str,
}

impl Mode {
    /// The agent as deployed (every kernel source on, the kubelet's default 10 s
    /// housekeeping), under `name`.
    pub(crate) const fn deployed(name: &'static str) -> Mode {
        Mode {
            name,
            ebpf: true,
            memcg_thresholds: true,
            memory_events: true,
            psi: true,
            housekeeping: "10s",
            monitor_keys: "",
        }
    }

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

/// The node's size and the hard threshold of an agent run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// The pods cgroup's limit (Level::Pods only).
    pub(crate) node_mib: u64,
    /// The hard threshold: the available memory, in MiB, below which the agent evicts
    /// (allocatableMemory.available on the pods cgroup, memory.available on the node).
    pub(crate) threshold_mib: u64,
}

impl Bounds {
    /// The race's: a 1 GiB node, 200 MiB headroom.
    pub(crate) const RACE: Bounds = Bounds {
        node_mib: NODE_MIB,
        threshold_mib: HEADROOM_MIB,
    };
}

fn config(dir: &Path, id: &str, mode: &Mode, extra: &str, level: Level, bounds: Bounds) -> String {
    let Bounds {
        node_mib,
        threshold_mib,
    } = bounds;
    let (eviction, limit) = match level {
        // The node here is the agent's cgroup root, about the size of the pods cgroup: its
        // own threshold stays below the headroom raced, or it would be met first.
        Level::Pods => (
            format!(
                "{{allocatableMemory.available: {threshold_mib}Mi, memory.available: {}Mi}}",
                threshold_mib / 2
            ),
            format!("  podsMemoryLimit: {node_mib}Mi\n"),
        ),
        Level::Node => (
            format!("{{memory.available: {threshold_mib}Mi}}"),
            String::new(),
        ),
    };
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: {pods}\n\
         housekeepingInterval: {hk}\n{extra}\
         evictionHard: {eviction}\n\
         monitor:\n{limit}  cgroupRoot: {id}\n  stateDir: {state}\n  podLogDir: {logs}\n  socket: {sock}\n\
         \x20 sources: {{ebpf: {e}, memcgThresholds: {m}, memoryEvents: {v}, psi: {p}}}\n{keys}",
        pods = dir.join("pods").display(),
        hk = mode.housekeeping,
        state = dir.join("state").display(),
        logs = dir.join("logs").display(),
        sock = dir.join("monitor.sock").display(),
        e = mode.ebpf,
        m = mode.memcg_thresholds,
        v = mode.memory_events,
        p = mode.psi,
        keys = mode.monitor_keys,
    )
}

/// A pod manifest; `restartPolicy: Never` so an OOM-killed hog does not come back.
pub(crate) fn manifest(
    namespace: &str,
    name: &str,
    command: &[String],
    resources: &str,
    env: &str,
) -> String {
    let command: Vec<String> = command.iter().map(|c| format!("\"{c}\"")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: main\n    image: none\n    command: [{}]\n{env}{resources}",
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
        util::monitor_run(&bin.join("monitor"), &dir.join("config.yaml"), &log)?
            // Debug of the synchronize loop only: its "synchronize done" lines carry the duration.
            .env("RUST_LOG", "info,monitor::sync=debug")
            .spawn()
            .with_context(|| format!("starting {} run", bin.join("monitor").display()))?,
    );
    Ok(())
}

/// The pods cgroup in the memory hierarchy and whether it is cgroup v1.
pub(crate) fn pods_cgroup(id: &str) -> Result<(PathBuf, bool)> {
    let (_, memory_root, v1) = util::cgroup_mounts();
    let root = memory_root.context("no cgroup hierarchy with the memory controller")?;
    Ok((root.join(id).join("kubepods"), v1))
}

/// Stops the agent and removes its cgroups and (unless kept) its run directory, whichever
/// way the run ends.
pub(crate) struct Guard {
    pub(crate) agent: Option<Child>,
    pub(crate) cgroup_root: String,
    pub(crate) dir: PathBuf,
    pub(crate) keep: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            // SAFETY: plain kill of the agent process we started.
            unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
            let _ = agent.wait();
        }
        util::remove_cgroup_root(&self.cgroup_root);
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A pod record from the agent's state directory.
pub(crate) struct Record {
    pub(crate) name: String,
    pub(crate) phase: String,
    pub(crate) reason: String,
    pub(crate) pids: Vec<u64>,
}

pub(crate) fn records(state: &Path) -> Vec<Record> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(state.join("pods"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        out.push(Record {
            name: v["pod"]["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            phase: v["phase"].as_str().unwrap_or("").to_string(),
            reason: v["reason"].as_str().unwrap_or("").to_string(),
            pids: v["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["pid"].as_u64())
                .collect(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

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
            monitor_keys: "",
        };
        assert_eq!(mode.housekeeping_ns(), ns);
        assert!(mode.polling());
    }
}
