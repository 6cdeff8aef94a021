//! Arming the kernel's memory notifiers: which usage levels, on which cgroups, must wake
//! the agent. Recomputed after every synchronize from the fresh observation (the levels
//! move with inactive_file and, on cgroup v2, with the rest of the node), and handed to
//! [`super::memcg`] only when they changed.
use std::path::{Path, PathBuf};

use super::memcg::{ArmedThreshold, ThresholdSpec};
use crate::observe::{CgroupVersion, NodeObservation};
use crate::policy::quantity::QuantityOrPercent;
use crate::policy::signal::Signal;

/// The memory thresholds to arm as kernel notifiers, as eviction threshold values of the
/// memory.available (node) and allocatableMemory.available (pods cgroup) signals.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryThresholds {
    pub node: Vec<MemoryThreshold>,
    pub pods: Vec<MemoryThreshold>,
    /// Memory relief's margin, when relief runs: each signal with thresholds also gets a
    /// level that much above its highest one, whose crossing wakes a synchronize (which
    /// relieves). Only the crossing detector arms it.
    pub relief_margin: Option<QuantityOrPercent>,
}

/// One memory eviction threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryThreshold {
    pub value: QuantityOrPercent,
    /// A hard threshold (acts at once); soft ones wait for their grace period.
    pub hard: bool,
}

/// The usage values at which the kernel must wake us: for each threshold T on a signal
/// with capacity C, the threshold is met once available < T, i.e. once the working set
/// passes C − T, so the first usage that meets it is C − T + 1 + inactive_file (the
/// kubelet's memory threshold notifier arms C − T + inactive_file, a byte short). A
/// level counts as passed exactly when its threshold is met: at available = T a level is
/// still armed, and relief's level (met below its own "available") likewise. Thresholds
/// at or above capacity are skipped (always met: nothing to wait for).
pub(crate) fn threshold_specs(
    observation: &NodeObservation,
    thresholds: &MemoryThresholds,
    memory_root: &Path,
    pods_cgroup: Option<&str>,
) -> Vec<ThresholdSpec> {
    let mut specs = Vec::new();
    let relief_margin = thresholds.relief_margin;
    let mut add = |cgroup: PathBuf,
                   signal: Signal,
                   capacity: u64,
                   usage: u64,
                   inactive_file: u64,
                   values: &[MemoryThreshold]| {
        let resolve = |value: QuantityOrPercent| value.resolve(capacity as i64).max(0) as u64;
        let highest = values.iter().map(|t| resolve(t.value)).max();
        let relief = relief_margin
            .zip(highest)
            .map(|(margin, highest)| (highest.saturating_add(resolve(margin)), false, true));
        let levels = values
            .iter()
            .map(|t| (resolve(t.value), t.hard, false))
            .chain(relief);
        for (quantity, hard, relief) in levels {
            if quantity >= capacity {
                continue;
            }
            let usage_bytes = capacity - quantity + 1 + inactive_file;
            let spec = ThresholdSpec {
                cgroup: cgroup.clone(),
                usage_bytes,
                hard,
                passed_when_armed: usage >= usage_bytes,
                threshold: Some(ArmedThreshold {
                    signal,
                    quantity_bytes: quantity,
                    capacity_bytes: capacity,
                    relief,
                }),
            };
            if !specs.contains(&spec) {
                specs.push(spec);
            }
        }
    };
    let memory = &observation.memory;
    add(
        memory_root.to_path_buf(),
        Signal::MemoryAvailable,
        memory.signal_capacity_bytes(),
        memory.usage_bytes,
        memory.inactive_file_bytes,
        &thresholds.node,
    );
    if let (Some(cgroup), Some(pods)) = (pods_cgroup, &observation.allocatable) {
        add(
            memory_root.join(cgroup.trim_start_matches('/')),
            Signal::AllocatableMemoryAvailable,
            pods.capacity_bytes,
            pods.stats.usage_bytes,
            pods.stats.inactive_file_bytes.unwrap_or(0),
            &thresholds.pods,
        );
    }
    specs
}

/// The memory.high values that stand in for usage thresholds on cgroup v2 (see
/// [`crate::notify::memcg::spawn_v2_high`]), from the specs of [`threshold_specs`]:
/// - only hard thresholds (soft ones may be exceeded for their grace period);
/// - the root has no memory.high, so the node's thresholds ride on the pods cgroup: the
///   node crosses once its usage grows by (threshold usage − node usage now), and while
///   the rest of the node holds still that growth is the pods'. Re-armed after every
///   synchronize, the offset follows the rest of the node;
/// - thresholds already crossed are left out: the synchronize at hand acts on them, and a
///   memory.high below the usage would only throttle the pods.
pub(crate) fn v2_high_specs(
    specs: &[ThresholdSpec],
    observation: &NodeObservation,
    memory_root: &Path,
    pods_cgroup: Option<&str>,
) -> Vec<ThresholdSpec> {
    let (Some(cgroup), Some(pods)) = (pods_cgroup, &observation.allocatable) else {
        return Vec::new();
    };
    let pods_dir = memory_root.join(cgroup.trim_start_matches('/'));
    let pods_usage = pods.stats.usage_bytes;
    let node_usage = observation.memory.usage_bytes;
    specs
        .iter()
        .filter(|spec| spec.hard)
        .filter_map(|spec| {
            let usage_bytes = if spec.cgroup == pods_dir {
                spec.usage_bytes
            } else if spec.cgroup == memory_root {
                pods_usage.checked_add(spec.usage_bytes.checked_sub(node_usage)?)?
            } else {
                return None;
            };
            (usage_bytes > pods_usage).then(|| ThresholdSpec {
                cgroup: pods_dir.clone(),
                usage_bytes,
                hard: true,
                passed_when_armed: false,
                threshold: spec.threshold,
            })
        })
        .collect()
}

/// The levels of the in-kernel crossing detector ([`crate::notify::detector`]), from the
/// specs of [`threshold_specs`]. The detector compares page counters, and the root's
/// counter does not hold what the node's usage counts (nothing on v2; on v1 only what
/// its children charge), so the node's thresholds ride on the pods cgroup as the
/// memory.high stand-ins do: at pods usage + (threshold usage − node usage). Unlike
/// memory.high they cost nothing when crossed, so soft thresholds and thresholds
/// already passed are armed too (passed ones wait for usage to fall back below them).
/// Without a pods cgroup only thresholds on other cgroups remain.
pub(crate) fn detector_specs(
    specs: &[ThresholdSpec],
    observation: &NodeObservation,
    memory_root: &Path,
    pods_cgroup: Option<&str>,
) -> Vec<ThresholdSpec> {
    let pods = pods_usage(observation, memory_root, pods_cgroup);
    let node_usage = observation.memory.usage_bytes;
    let mut out: Vec<ThresholdSpec> = Vec::new();
    for spec in specs {
        let moved = if spec.cgroup == memory_root {
            let Some((pods_dir, pods_usage)) = &pods else {
                continue;
            };
            // The rest of the node alone above the threshold: pods usage cannot bring
            // it back below, and nothing is left to arm.
            let Some(usage_bytes) = (pods_usage + spec.usage_bytes).checked_sub(node_usage) else {
                continue;
            };
            ThresholdSpec {
                cgroup: pods_dir.clone(),
                usage_bytes,
                hard: spec.hard,
                passed_when_armed: spec.passed_when_armed,
                threshold: spec.threshold,
            }
        } else {
            spec.clone()
        };
        if usage_bytes_armable(&moved) && !out.contains(&moved) {
            out.push(moved);
        }
    }
    out
}

/// The pods cgroup's directory and its usage in `observation`, when there is one.
pub(crate) fn pods_usage(
    observation: &NodeObservation,
    memory_root: &Path,
    pods_cgroup: Option<&str>,
) -> Option<(PathBuf, u64)> {
    pods_cgroup
        .zip(observation.allocatable.as_ref())
        .map(|(cgroup, pods)| {
            (
                memory_root.join(cgroup.trim_start_matches('/')),
                pods.stats.usage_bytes,
            )
        })
}

/// A zero level would fire on every charge.
fn usage_bytes_armable(spec: &ThresholdSpec) -> bool {
    spec.usage_bytes > 0
}

/// The levels the memcg notifier arms, from the specs of [`threshold_specs`]: the usage
/// thresholds themselves on cgroup v1, their memory.high stand-ins on cgroup v2.
pub(crate) fn notifier_specs(
    specs: Vec<ThresholdSpec>,
    observation: &NodeObservation,
    version: CgroupVersion,
    memory_root: &Path,
    pods_cgroup: Option<&str>,
) -> Vec<ThresholdSpec> {
    match version {
        CgroupVersion::V1 => specs,
        CgroupVersion::V2 => v2_high_specs(&specs, observation, memory_root, pods_cgroup),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::{AllocatableMemory, FsStats, MemoryStats, NodeMemory, PidStats};
    use crate::policy::quantity::Quantity;

    fn observation() -> NodeObservation {
        NodeObservation {
            taken_at_ns: 0,
            memory: NodeMemory {
                capacity_bytes: 10_000,
                usage_bytes: 5_000,
                inactive_file_bytes: 1_000,
                working_set_bytes: 4_000,
                available_bytes: 6_000,
                ..NodeMemory::default()
            },
            allocatable: Some(AllocatableMemory {
                capacity_bytes: 2_000,
                stats: MemoryStats {
                    usage_bytes: 500,
                    inactive_file_bytes: Some(100),
                    limit_bytes: Some(2_000),
                    working_set_bytes: 400,
                },
                available_bytes: 1_600,
            }),
            nodefs: Some(FsStats::default()),
            imagefs: None,
            pids: Some(PidStats::default()),
            pressure: Default::default(),
            dedicated_imagefs: false,
            failed: Vec::new(),
        }
    }

    fn hard(units: i64) -> MemoryThreshold {
        MemoryThreshold {
            value: QuantityOrPercent::Quantity(Quantity::from_units(units)),
            hard: true,
        }
    }

    #[test]
    fn hugepages_left_out_of_memory_available_lower_the_node_level() {
        let mut observed = observation();
        // 2_000 of the 10_000 are hugepages the root cgroup does not charge.
        observed.memory.hugepages_bytes = 2_000;
        observed.memory.hugepages_left_out_bytes = 2_000;
        let thresholds = MemoryThresholds {
            node: vec![hard(1_000)],
            pods: Vec::new(),
            relief_margin: None,
        };
        let specs = threshold_specs(&observed, &thresholds, Path::new("/cg"), None);
        // available = 8_000 − working set: below 1_000 once the working set passes 7_000,
        // i.e. from usage 7_001 + 1_000 inactive_file.
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].usage_bytes, 8_001);
        assert_eq!(specs[0].threshold.map(|t| t.capacity_bytes), Some(8_000));
    }

    #[test]
    fn thresholds_follow_capacity_and_inactive_file() {
        let thresholds = MemoryThresholds {
            node: vec![
                hard(1_000),
                MemoryThreshold {
                    value: QuantityOrPercent::Percent(0.5),
                    hard: false,
                },
            ],
            pods: vec![hard(300)],
            relief_margin: None,
        };
        let specs = threshold_specs(&observation(), &thresholds, Path::new("/cg"), Some("/pods"));
        let spec = |cgroup: &str, usage_bytes, hard, signal, quantity_bytes, capacity_bytes| {
            ThresholdSpec {
                cgroup: cgroup.into(),
                usage_bytes,
                hard,
                passed_when_armed: false,
                threshold: Some(ArmedThreshold {
                    signal,
                    quantity_bytes,
                    capacity_bytes,
                    relief: false,
                }),
            }
        };
        let (node, pods) = (Signal::MemoryAvailable, Signal::AllocatableMemoryAvailable);
        assert_eq!(
            specs,
            vec![
                // 10000 − 1000 + 1 + 1000 inactive: available 999 < 1000
                spec("/cg", 10_001, true, node, 1_000, 10_000),
                // 10000 − 5000 + 1 + 1000
                spec("/cg", 6_001, false, node, 5_000, 10_000),
                // 2000 − 300 + 1 + 100
                spec("/cg/pods", 1_801, true, pods, 300, 2_000),
            ]
        );
    }

    #[test]
    fn v2_node_thresholds_ride_on_the_pods_cgroup_and_crossed_ones_are_left_out() {
        let spec = |cgroup: &str, usage_bytes, hard| ThresholdSpec {
            cgroup: cgroup.into(),
            usage_bytes,
            hard,
            passed_when_armed: false,
            threshold: None,
        };
        // Node usage 5000, pods usage 500 (see observation()).
        let specs = vec![
            // The node may grow by 1000 more: the pods cgroup by as much, to 1500.
            spec("/cg", 6_000, true),
            // Soft: never a memory.high.
            spec("/cg", 5_500, false),
            // Already crossed (node usage 5000 ≥ 4000): left out.
            spec("/cg", 4_000, true),
            // The pods cgroup's own threshold stays as it is.
            spec("/cg/pods", 1_800, true),
            // Crossed on the pods cgroup (usage 500): left out.
            spec("/cg/pods", 450, true),
        ];
        assert_eq!(
            v2_high_specs(&specs, &observation(), Path::new("/cg"), Some("/pods")),
            vec![spec("/cg/pods", 1_500, true), spec("/cg/pods", 1_800, true)]
        );
        // Without a pods cgroup nothing can carry them.
        assert!(v2_high_specs(&specs, &observation(), Path::new("/cg"), None).is_empty());
    }

    #[test]
    fn detector_levels_carry_node_thresholds_on_the_pods_cgroup_soft_and_passed_included() {
        let spec = |cgroup: &str, usage_bytes, hard, passed| ThresholdSpec {
            cgroup: cgroup.into(),
            usage_bytes,
            hard,
            passed_when_armed: passed,
            threshold: None,
        };
        // Node usage 5000, pods usage 500 (see observation()).
        let specs = vec![
            spec("/cg", 6_000, true, false),
            spec("/cg", 5_500, false, false),
            // Passed by 200 on the node: 200 below the pods usage, waiting below.
            spec("/cg", 4_800, true, true),
            // The rest of the node (4500) alone is above it: nothing to arm.
            spec("/cg", 4_400, true, true),
            spec("/cg/pods", 1_800, true, false),
            spec("/cg/pods", 450, false, true),
        ];
        assert_eq!(
            detector_specs(&specs, &observation(), Path::new("/cg"), Some("/pods")),
            vec![
                spec("/cg/pods", 1_500, true, false),
                spec("/cg/pods", 1_000, false, false),
                spec("/cg/pods", 300, true, true),
                spec("/cg/pods", 1_800, true, false),
                spec("/cg/pods", 450, false, true),
            ]
        );
        // Without a pods cgroup the node's thresholds have nowhere to go.
        assert_eq!(
            detector_specs(&specs, &observation(), Path::new("/cg"), None),
            vec![
                spec("/cg/pods", 1_800, true, false),
                spec("/cg/pods", 450, false, true)
            ]
        );
    }

    #[test]
    fn a_level_the_observation_already_passed_is_marked() {
        // Node usage 5000 and 1000 inactive of 10000 (see observation()): available 6000.
        // A threshold of 6001 is met (passed); one of 6000 is not (available equals it),
        // so its level stays armed one byte above the usage.
        let thresholds = MemoryThresholds {
            node: vec![hard(6_001), hard(6_000), hard(1_000)],
            pods: vec![],
            relief_margin: None,
        };
        let specs = threshold_specs(&observation(), &thresholds, Path::new("/cg"), None);
        let passed: Vec<(u64, bool)> = specs
            .iter()
            .map(|s| (s.usage_bytes, s.passed_when_armed))
            .collect();
        assert_eq!(passed, vec![(5_000, true), (5_001, false), (10_001, false)]);
    }

    #[test]
    fn thresholds_at_or_above_capacity_are_not_armed() {
        let thresholds = MemoryThresholds {
            node: vec![
                hard(10_000),
                MemoryThreshold {
                    value: QuantityOrPercent::Percent(1.0),
                    hard: true,
                },
            ],
            pods: vec![],
            relief_margin: None,
        };
        assert!(threshold_specs(&observation(), &thresholds, Path::new("/cg"), None).is_empty());
    }
}
