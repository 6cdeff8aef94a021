//! The kernel's memory counters as the races read them: a cgroup's usage and working set
//! (sampled every millisecond), its OOM kills, its CPU time, and the node's memory from
//! /proc/meminfo and /proc/vmstat.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::util::{self, monotonic_ns};
/// One reading of the 1 ms sampler.
pub(crate) struct Sample {
    pub(crate) at_ns: u64,
    pub(crate) working_set: u64,
    /// The usage alone (the page counter: memory.usage_in_bytes, memory.current), read
    /// first and stamped at `usage_at_ns`: what the kernel's OOM decision looks at, with
    /// no statistics flush in the way.
    pub(crate) usage: u64,
    pub(crate) usage_at_ns: u64,
}

/// A cgroup's usage now (memory.usage_in_bytes, memory.current).
pub(crate) fn usage(dir: &Path, v1: bool) -> u64 {
    let file = if v1 {
        "memory.usage_in_bytes"
    } else {
        "memory.current"
    };
    std::fs::read_to_string(dir.join(file))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// The working set of a cgroup now: usage − inactive_file, as the kubelet computes it.
pub(crate) fn working_set(dir: &Path, v1: bool) -> u64 {
    let inactive_key = if v1 {
        "total_inactive_file "
    } else {
        "inactive_file "
    };
    let stat = std::fs::read_to_string(dir.join("memory.stat")).unwrap_or_default();
    usage(dir, v1).saturating_sub(counter(&stat, inactive_key))
}

/// `key` of a cgroup v2 memory.stat, bytes (0 when absent).
pub(crate) fn stat(dir: &Path, key: &str) -> u64 {
    let text = std::fs::read_to_string(dir.join("memory.stat")).unwrap_or_default();
    counter(&text, &format!("{key} "))
}

/// The value of the line `key N` of a flat-keyed file (`key` with its trailing space); 0
/// when missing.
fn counter(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0)
}

/// When the sampler reads `memory.stat` for the working set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StatReads {
    /// At every sample.
    Always,
    /// Only once the usage has fallen below the highest it was: the working set of the
    /// others is recorded as the usage, which bounds it. For a race that looks at the
    /// working set only after the kill (until then the hog only adds to the usage, so the
    /// working set cannot fall before the usage does). A read of `memory.stat` flushes
    /// the kernel's statistics under a lock every reader of them shares: one per
    /// millisecond from the bench itself stood in the way of the agent's own reads at the
    /// crossing it times.
    WhileFalling,
}

/// Samples a cgroup's working set every millisecond (usage − inactive_file).
pub(crate) fn sampler(
    dir: PathBuf,
    v1: bool,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Sample>> {
    sampler_reading(dir, v1, stop, StatReads::Always)
}

/// [`sampler`], reading `memory.stat` as `reads` says.
pub(crate) fn sampler_reading(
    dir: PathBuf,
    v1: bool,
    stop: Arc<AtomicBool>,
    reads: StatReads,
) -> std::thread::JoinHandle<Vec<Sample>> {
    std::thread::spawn(move || {
        let mut samples = Vec::new();
        let mut highest = 0;
        while !stop.load(Ordering::Relaxed) {
            let usage = usage(&dir, v1);
            let usage_at_ns = monotonic_ns();
            highest = highest.max(usage);
            let working_set = if reads == StatReads::Always || usage < highest {
                working_set(&dir, v1)
            } else {
                usage
            };
            samples.push(Sample {
                at_ns: monotonic_ns(),
                working_set,
                usage,
                usage_at_ns,
            });
            std::thread::sleep(Duration::from_millis(1));
        }
        samples
    })
}

/// One "Key: N kB" field of /proc/meminfo text, in KiB; `key` includes the colon.
pub(crate) fn meminfo_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// One field of /proc/meminfo now, in KiB.
pub(crate) fn meminfo_kib(key: &str) -> Option<u64> {
    meminfo_field(&std::fs::read_to_string("/proc/meminfo").ok()?, key)
}

/// A counter of /proc/vmstat (`key` with its trailing space), 0 when missing.
pub(crate) fn vmstat(key: &str) -> u64 {
    counter(
        &std::fs::read_to_string("/proc/vmstat").unwrap_or_default(),
        key,
    )
}

/// CPU time of the agent's pods cgroup so far (children that are gone included), from
/// cpu.stat of the cgroup2 hierarchy: the memory hierarchy on v2, the unified one beside a
/// v1 memory controller (cgroup2 keeps CPU usage for every cgroup).
pub(crate) fn pods_cpu_ns(id: &str) -> Option<u64> {
    let rel = format!("{id}/kubepods");
    let (_, memory_root, v1) = util::cgroup_mounts();
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
    let kib = |key: &str| meminfo_field(&text, key).map(|v| v * 1024);
    let total = kib("MemTotal:")?;
    let used = total.saturating_sub(kib("MemFree:")?);
    Some(NodeMemory {
        total,
        working_set: used.saturating_sub(kib("Inactive(file):")?),
    })
}

/// Samples the node's working set every millisecond (the memory.available signal).
pub(crate) fn node_sampler(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Sample>> {
    std::thread::spawn(move || {
        let mut samples = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            if let Some(node) = node_memory() {
                let at_ns = monotonic_ns();
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

/// Kernel OOM kills under the pods cgroup. cgroup v2's memory.events counts the subtree;
/// cgroup v1 counts `oom_kill` in memory.oom_control of the victim's own memcg only, so on
/// v1 the whole subtree is summed.
pub(crate) fn oom_kills(dir: &Path, v1: bool) -> u64 {
    let file = if v1 {
        "memory.oom_control"
    } else {
        "memory.events"
    };
    let own = counter(
        &std::fs::read_to_string(dir.join(file)).unwrap_or_default(),
        "oom_kill ",
    );
    if !v1 {
        return own;
    }
    let mut total = own;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            total = total.saturating_add(oom_kills(&entry.path(), true));
        }
    }
    total
}
