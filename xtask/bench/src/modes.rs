//! The modes and allocation rates the benchmark runs, and the labels of the VM's races.
use anyhow::{Context, Result};

use crate::harness::Mode;
use crate::race::Rate;

const fn mode(name: &'static str, sources: [bool; 4], housekeeping: &'static str) -> Mode {
    Mode {
        name,
        ebpf: sources[0],
        memcg_thresholds: sources[1],
        memory_events: sources[2],
        psi: sources[3],
        housekeeping,
        monitor_keys: "",
    }
}

/// [ebpf, memcgThresholds, memoryEvents, psi]. memory.events is cgroup v2 only: on this
/// v1 host the memcg mode is the threshold eventfd.
pub(crate) const MODES: &[Mode] = &[
    mode("poll-10s", [false; 4], "10s"),
    mode("poll-1s", [false; 4], "1s"),
    mode("poll-100ms", [false; 4], "100ms"),
    mode("memcg", [false, true, true, false], "10s"),
    mode("ebpf", [true, false, false, false], "10s"),
    mode("psi", [false, false, false, true], "10s"),
    mode("all", [true; 4], "10s"),
];

/// The VM's pods race with every source and memory relief off: beside `all` (relief on,
/// the default), what relief costs a full-speed hard crossing.
pub(crate) const VM_RELIEF_OFF: Mode = Mode {
    monitor_keys: "  memoryRelief: {enabled: false}\n",
    ..mode("all-relief-off", [true; 4], "10s")
};

/// The label of the VM's trials in the table (full speed, cgroup v2, under qemu).
pub(crate) const VM_RATE: &str = "vm-v2";
/// The VM's node-level race (memory.available): the agent and the earlyoom peer.
pub(crate) const VM_NODE_RATE: &str = "vm-v2-node";
/// The agent's modes in the node-level race: polling at earlyoom's own pace, the eBPF
/// programs alone (kswapd and direct reclaim are node-level events), and all sources.
pub(crate) const VM_NODE_MODES: &[&str] = &["poll-100ms", "ebpf", "all"];

/// The hard threshold's headrooms of the VM's races (MiB, `--vm-headrooms`): every mode
/// races at the first; at each further one the pods and node races run the agent's
/// `VM_TIGHT_MODES` alone, and the node race earlyoom beside them.
pub(crate) const VM_HEADROOMS: &[u64] = &[200, 50];
/// The agent's modes raced at the VM's further headrooms: every kernel notifier, and the
/// crossing detector alone (a cgroup v2 node's fastest notifier).
pub(crate) const VM_TIGHT_MODES: &[&str] = &["ebpf", "all"];

/// The label of a VM race (`VM_RATE` or `VM_NODE_RATE`) at `headroom_mib`: the bare
/// label at the harness's headroom (as runs before several headrooms were labelled),
/// `LABEL-50Mi` at another.
pub(crate) fn vm_label(base: &str, headroom_mib: u64) -> String {
    if headroom_mib == crate::harness::HEADROOM_MIB {
        base.to_string()
    } else {
        format!("{base}-{headroom_mib}Mi")
    }
}

/// Whether a trial's rate label is one of the VM's races.
pub(crate) fn is_vm(rate: &str) -> bool {
    rate.starts_with(VM_RATE)
}

/// Whether a trial's rate label is the VM's node-level race, at any headroom.
pub(crate) fn is_vm_node(rate: &str) -> bool {
    rate.starts_with(VM_NODE_RATE)
}

pub(crate) const RATES: &[Rate] = &[
    // As fast as the hog can touch pages (about 2 GiB/s here).
    Rate {
        name: "full",
        step_mib: 8,
        pause_ms: 0,
    },
    // 4 MiB every ~15 ms: a few hundred MiB/s (measured per trial).
    Rate {
        name: "slow",
        step_mib: 4,
        pause_ms: 15,
    },
];

pub(crate) fn pick<T: Copy>(
    all: &[T],
    wanted: &[String],
    name: impl Fn(&T) -> &str,
    what: &str,
) -> Result<Vec<T>> {
    if wanted.is_empty() {
        return Ok(all.to_vec());
    }
    wanted
        .iter()
        .map(|w| {
            all.iter().find(|m| name(m) == w).copied().with_context(|| {
                let names: Vec<&str> = all.iter().map(&name).collect();
                format!("unknown {what} {w:?} (known: {})", names.join(", "))
            })
        })
        .collect()
}
