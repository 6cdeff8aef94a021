//! The agent's fresh observation in the shape the policy's signal builder reads
//! ([`crate::policy::summary::NodeStats`]): one set of rules for the agent and
//! `monitor simulate`.
use crate::config::kubelet::KubeletConfig;
use crate::observe::{FsStats, NodeObservation};
use crate::policy::stats::PodWithStats;
use crate::policy::summary::{AllocatableStat, FsStat, MemoryStat, NodeStats, PidStat};
use crate::policy::types::Time;

/// The node's stats at `time` (everything was read at this synchronize). Without a pods
/// cgroup to read, allocatableMemory.available is derived the kubelet's way: node
/// allocatable (capacity minus reservations and the hard eviction threshold) minus the
/// working sets of `pods`.
pub(crate) fn node_stats(
    node: &NodeObservation,
    kubelet: &KubeletConfig,
    pods: &[PodWithStats],
    time: Time,
) -> NodeStats {
    let memory = &node.memory;
    let allocatable = match &node.allocatable {
        Some(pods_cgroup) => AllocatableStat::PodsCgroup(MemoryStat {
            available_bytes: pods_cgroup.available_bytes,
            working_set_bytes: pods_cgroup
                .capacity_bytes
                .saturating_sub(pods_cgroup.available_bytes),
            time,
        }),
        None => AllocatableStat::Derived {
            limit_bytes: kubelet.allocatable_memory(
                i64::try_from(memory.capacity_bytes).unwrap_or(i64::MAX),
                i64::try_from(memory.hugepages_bytes).unwrap_or(i64::MAX),
            ),
            pods_working_set_bytes: pods
                .iter()
                .filter_map(|p| p.stats.memory_working_set_bytes)
                .fold(0, u64::saturating_add),
            time,
        },
    };
    let fs = |stats: &FsStats| FsStat {
        available_bytes: Some(stats.available_bytes),
        capacity_bytes: Some(stats.capacity_bytes),
        inodes_free: Some(stats.inodes_free),
        inodes: Some(stats.inodes),
        time,
    };
    NodeStats {
        memory: Some(MemoryStat {
            available_bytes: memory.available_bytes,
            working_set_bytes: memory
                .signal_capacity_bytes()
                .saturating_sub(memory.available_bytes),
            time,
        }),
        allocatable: Some(allocatable),
        nodefs: node.nodefs.as_ref().map(fs),
        imagefs: node.imagefs.as_ref().map(fs),
        containerfs: None,
        pids: node.pids.map(|pids| PidStat {
            max: pids.max,
            current: pids.current,
            time,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::kubelet::load_kubelet_config;
    use crate::observe::{AllocatableMemory, MemoryStats, NodeMemory, PidStats};
    use crate::policy::signal::Signal;
    use crate::policy::stats::PodStats;
    use crate::policy::summary::make_signal_observations;
    use crate::policy::types::FsLayout;

    const GI: u64 = 1 << 30;
    const MI: u64 = 1 << 20;

    fn node(available: u64, pods_available: Option<u64>) -> NodeObservation {
        NodeObservation {
            taken_at_ns: 0,
            memory: NodeMemory {
                capacity_bytes: 10 * GI,
                usage_bytes: 10 * GI - available,
                inactive_file_bytes: 0,
                working_set_bytes: 10 * GI - available,
                available_bytes: available,
                ..NodeMemory::default()
            },
            allocatable: pods_available.map(|a| AllocatableMemory {
                capacity_bytes: GI,
                stats: MemoryStats {
                    usage_bytes: GI - a,
                    inactive_file_bytes: Some(0),
                    limit_bytes: Some(GI),
                    working_set_bytes: GI - a,
                },
                available_bytes: a,
            }),
            nodefs: Some(FsStats {
                capacity_bytes: 100 * GI,
                available_bytes: 50 * GI,
                inodes: 1000,
                inodes_free: 900,
            }),
            imagefs: None,
            pids: Some(PidStats {
                max: 4096,
                current: 96,
            }),
            pressure: Default::default(),
            dedicated_imagefs: false,
            failed: Vec::new(),
        }
    }

    // kubelet: HugepageAwareEviction's Summary (adjustForHugePages) and nodestatus
    // MachineInfo (allocatable memory without hugepages).
    #[test]
    fn hugepages_shrink_memory_available_its_capacity_and_derived_allocatable() {
        let (kubelet, _) = load_kubelet_config("", "k.yaml").unwrap();
        let mut observed = node(3 * GI, None);
        observed.memory.hugepages_bytes = GI;
        observed.memory.hugepages_left_out_bytes = GI;
        observed.memory.available_bytes = 2 * GI;
        let o = make_signal_observations(
            &node_stats(&observed, &kubelet, &[], Time::from_secs(1)),
            FsLayout::with_imagefs(false),
        );
        assert_eq!(o[&Signal::MemoryAvailable].available, (2 * GI) as i64);
        assert_eq!(o[&Signal::MemoryAvailable].capacity, (9 * GI) as i64);
        // 10Gi − 100Mi default hard threshold − 1Gi of hugepages.
        let allocatable = (9 * GI - 100 * MI) as i64;
        assert_eq!(o[&Signal::AllocatableMemoryAvailable].capacity, allocatable);
    }

    #[test]
    fn observations_cover_every_signal() {
        let (kubelet, _) =
            load_kubelet_config("systemReserved: {memory: 1.5Gi}\n", "k.yaml").unwrap();
        let at = Time::from_secs(1);
        let o = make_signal_observations(
            &node_stats(&node(3 * GI, None), &kubelet, &[], at),
            FsLayout::with_imagefs(false),
        );
        assert_eq!(o[&Signal::MemoryAvailable].available, (3 * GI) as i64);
        assert_eq!(o[&Signal::MemoryAvailable].capacity, (10 * GI) as i64);
        // 10Gi − 1.5Gi system-reserved − 100Mi default hard threshold.
        let allocatable = (10 * GI - 1536 * MI - 100 * MI) as i64;
        assert_eq!(o[&Signal::AllocatableMemoryAvailable].capacity, allocatable);
        assert_eq!(
            o[&Signal::AllocatableMemoryAvailable].available,
            allocatable
        );
        assert_eq!(o[&Signal::ImageFsAvailable], o[&Signal::NodeFsAvailable]);
        assert_eq!(o[&Signal::NodeFsInodesFree].available, 900);
        assert_eq!(o[&Signal::PidAvailable].available, 4000);
        assert!(o.values().all(|obs| obs.time == at));
        let o = make_signal_observations(
            &node_stats(&node(3 * GI, Some(200 * MI)), &kubelet, &[], at),
            FsLayout::with_imagefs(false),
        );
        assert_eq!(
            o[&Signal::AllocatableMemoryAvailable].available,
            (200 * MI) as i64
        );
        assert_eq!(o[&Signal::AllocatableMemoryAvailable].capacity, GI as i64);
    }

    #[test]
    fn without_a_pods_cgroup_the_pods_working_sets_count_against_allocatable() {
        // The rule `monitor simulate` applies to a summary without a "pods" container.
        let (kubelet, _) = load_kubelet_config("evictionHard: {}\n", "k.yaml").unwrap();
        let pod = PodWithStats {
            pod: Default::default(),
            stats: PodStats {
                memory_working_set_bytes: Some(GI),
                ..PodStats::default()
            },
        };
        let stats = node_stats(&node(3 * GI, None), &kubelet, &[pod], Time::ZERO);
        let o = make_signal_observations(&stats, FsLayout::with_imagefs(false));
        let a = o[&Signal::AllocatableMemoryAvailable];
        assert_eq!(a.available, a.capacity - GI as i64);
    }
}
