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

/// The (rate label, mode) of every race the guest runs for `modes` at `headrooms`, in
/// its order (see [`crate::guest::run`]).
pub(crate) fn vm_groups(modes: &[Mode], headrooms: &[u64]) -> Vec<(String, &'static str)> {
    let (first, further) = headrooms
        .split_first()
        .unwrap_or((&crate::harness::HEADROOM_MIB, &[]));
    let node = |m: &&Mode| VM_NODE_MODES.contains(&m.name);
    let tight = |m: &&Mode| VM_TIGHT_MODES.contains(&m.name);
    let relief_off = modes
        .iter()
        .any(|m| m.name == crate::relief::RELIEF_ON_MODE)
        .then_some(crate::relief::RELIEF_OFF_MODE);
    let (pods, on_node) = (vm_label(VM_RATE, *first), vm_label(VM_NODE_RATE, *first));
    let mut groups: Vec<(String, &'static str)> = modes
        .iter()
        .map(|m| m.name)
        .chain(relief_off)
        .map(|m| (pods.clone(), m))
        .chain(modes.iter().filter(node).map(|m| (on_node.clone(), m.name)))
        .chain([(on_node.clone(), crate::peer::MODE)])
        .collect();
    for headroom in further {
        let (pods, on_node) = (
            vm_label(VM_RATE, *headroom),
            vm_label(VM_NODE_RATE, *headroom),
        );
        groups.extend(modes.iter().filter(tight).map(|m| (pods.clone(), m.name)));
        groups.extend(
            modes
                .iter()
                .filter(tight)
                .filter(node)
                .map(|m| (on_node.clone(), m.name)),
        );
        groups.push((on_node, crate::peer::MODE));
    }
    groups
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GuestPlan;

    #[test]
    fn a_race_at_the_harness_headroom_keeps_its_old_label_and_others_name_theirs() {
        assert_eq!(vm_label(VM_RATE, crate::harness::HEADROOM_MIB), "vm-v2");
        assert_eq!(vm_label(VM_NODE_RATE, 50), "vm-v2-node-50Mi");
        assert!(is_vm("vm-v2-50Mi") && !is_vm_node("vm-v2-50Mi"));
        assert!(is_vm_node("vm-v2-node-50Mi") && is_vm("vm-v2-node"));
        assert!(!is_vm("full") && !is_vm("slow"));
    }

    #[test]
    fn a_further_headroom_races_the_agents_tight_modes_and_earlyoom_only() {
        let groups = vm_groups(MODES, VM_HEADROOMS);
        let at = |rate: &str| -> Vec<&str> {
            groups
                .iter()
                .filter(|(r, _)| r == rate)
                .map(|(_, m)| *m)
                .collect()
        };
        assert_eq!(at("vm-v2").len(), MODES.len() + 1, "{groups:?}");
        assert_eq!(at("vm-v2-node"), ["poll-100ms", "ebpf", "all", "earlyoom"]);
        assert_eq!(at("vm-v2-50Mi"), ["ebpf", "all"]);
        assert_eq!(at("vm-v2-node-50Mi"), ["ebpf", "all", "earlyoom"]);
        // The guest's time limit counts the same races, and about three sets of relief.
        let plan = GuestPlan {
            modes: &[],
            trials: 10,
            headrooms: VM_HEADROOMS,
            relief_only: false,
        };
        assert_eq!(plan.race_sets(), groups.len() as u64 + 3);
        assert!(
            plan.command().ends_with(" --vm-headrooms 200,50"),
            "{}",
            plan.command()
        );
    }

    #[test]
    fn modes_without_a_tight_one_race_earlyoom_alone_at_a_further_headroom() {
        let poll: Vec<Mode> = MODES
            .iter()
            .copied()
            .filter(|m| m.name == "poll-100ms")
            .collect();
        let groups = vm_groups(&poll, &[200, 50]);
        assert_eq!(
            groups,
            [
                ("vm-v2".to_string(), "poll-100ms"),
                ("vm-v2-node".to_string(), "poll-100ms"),
                ("vm-v2-node".to_string(), "earlyoom"),
                ("vm-v2-node-50Mi".to_string(), "earlyoom"),
            ]
        );
    }
}
