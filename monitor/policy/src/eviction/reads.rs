//! What a pass reads beyond the node's own stats: a decision of the policy, made on the
//! node's stats before any pod is read. Pods' disk usage is read only while a disk
//! threshold is near; containers' memory only for the pod a memory eviction would take
//! (its eviction message names its containers).
use super::super::rank::{RankFunc, memory_rank_key, rank_func};
use super::super::signal::{Observations, Signal, Threshold};
use super::super::stats::PodWithStats;
use super::super::types::FsLayout;

/// Whether a disk threshold is met on `node_only` (observations made from the node's
/// filesystem stats alone) or still short of its minimum reclaim: only then does the pass
/// rank pods by disk usage, so only then is every pod's disk usage worth reading. A disk
/// signal without an observation counts as near.
pub fn disk_threshold_near(thresholds: &[Threshold], node_only: &Observations) -> bool {
    thresholds.iter().filter(|t| is_disk(t.signal)).any(|t| {
        node_only.get(&t.signal).is_none_or(|o| {
            let level = t
                .quantity(o.capacity)
                .saturating_add(t.min_reclaim_quantity(o.capacity));
            o.available < level
        })
    })
}

/// Whether `signal` is about a filesystem (bytes or inodes).
pub fn is_disk(signal: Signal) -> bool {
    !signal.is_memory() && signal != Signal::PidAvailable
}

/// The pod whose containers' memory the pass reads (by index into `pods`): the first pod,
/// critical ones left out, of the memory ranking, when a memory threshold is configured.
/// That pod is the one a memory eviction at this pass, or the hot path's next kill, would
/// take. Both memory signals rank alike (by usage over request, then priority), so one
/// scan answers for both; the ranking reads pod-level stats only, so filling the
/// containers in afterwards changes no choice.
pub fn container_memory_read(
    thresholds: &[Threshold],
    pods: &[PodWithStats],
    fs_layout: FsLayout,
) -> Option<usize> {
    let memory = thresholds.iter().find(|t| t.signal.is_memory())?;
    debug_assert_eq!(rank_func(memory.signal, fs_layout), RankFunc::Memory);
    pods.iter()
        .enumerate()
        .filter(|(_, p)| !p.pod.is_critical())
        .min_by_key(|(_, p)| memory_rank_key(p))
        .map(|(index, _)| index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::fixtures::{MI, pod};
    use crate::quantity::parse_quantity_or_percent;
    use crate::signal::SignalObservation;

    const MIB: i64 = MI as i64;

    fn hard(signal: Signal, value: &str) -> Threshold {
        Threshold::hard(signal, parse_quantity_or_percent(value).expect("quantity"))
    }

    fn nodefs_at(available: i64) -> Observations {
        let mut o = Observations::new();
        o.insert(
            Signal::NodeFsAvailable,
            SignalObservation {
                available,
                capacity: 1000 * MIB,
                time: Default::default(),
            },
        );
        o
    }

    #[test]
    fn disk_is_read_while_a_disk_threshold_is_met_or_short_of_its_minimum_reclaim() {
        let plain = [hard(Signal::NodeFsAvailable, "100Mi")];
        assert!(disk_threshold_near(&plain, &nodefs_at(99 * MIB)));
        assert!(!disk_threshold_near(&plain, &nodefs_at(101 * MIB)));
        // Past the threshold but within its minimum reclaim: that eviction is not over.
        let mut with_reclaim = hard(Signal::NodeFsAvailable, "100Mi");
        with_reclaim.min_reclaim = Some(parse_quantity_or_percent("50Mi").expect("quantity"));
        assert!(disk_threshold_near(&[with_reclaim], &nodefs_at(120 * MIB)));
        assert!(!disk_threshold_near(&[with_reclaim], &nodefs_at(151 * MIB)));
        // No observation: near (the pass cannot tell).
        assert!(disk_threshold_near(&plain, &Observations::new()));
        // Memory thresholds alone never ask for disk stats.
        let memory = [hard(Signal::MemoryAvailable, "100Mi")];
        assert!(!disk_threshold_near(&memory, &Observations::new()));
    }

    #[test]
    fn containers_are_read_for_the_memory_rankings_first_pod_only() {
        let memory = [hard(Signal::AllocatableMemoryAvailable, "100Mi")];
        let pods = vec![
            pod("small").working_set(10 * MI).build(),
            pod("big").working_set(500 * MI).build(),
            pod("critical").static_pod().working_set(900 * MI).build(),
            pod("medium").working_set(100 * MI).build(),
        ];
        assert_eq!(
            container_memory_read(&memory, &pods, FsLayout::Shared),
            Some(1)
        );
        // No memory threshold: nobody's containers.
        let disk = [hard(Signal::NodeFsAvailable, "100Mi")];
        assert_eq!(container_memory_read(&disk, &pods, FsLayout::Shared), None);
    }
}
