//! What a pass reads beyond the node's own stats: a decision of the policy, made on the
//! node's stats before any pod is read. Pods' disk usage is read only while a disk
//! threshold is near; containers' memory only for the pod a memory eviction would take
//! (its eviction message names its containers).
use super::super::rank::memory_rank_key;
use super::super::signal::{Observations, Signal, Threshold};
use super::super::stats::PodWithStats;

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

/// The memory ranking of one pass: the first `count` pods a memory eviction would take,
/// most evictable first, critical pods left out, as indices into `pods` (of equal keys
/// the earlier first, as the kubelet's stable sort keeps them). One ranking answers for
/// the whole pass: whose containers' memory to read ([`container_memory_read`]), and the
/// hot path's candidates and victim
/// ([`EvictionManager::prospective_hot_eviction`](super::EvictionManager::prospective_hot_eviction)).
/// Both memory signals rank alike (by usage over request, then priority, then usage
/// over request in bytes) on pod-level stats only, so reading the containers afterwards
/// moves no pod.
pub fn memory_ranking(pods: &[PodWithStats], count: usize) -> Vec<usize> {
    let mut ranked: Vec<usize> = (0..pods.len())
        .filter(|&i| !pods[i].pod.is_critical())
        .collect();
    // Stable: the index goes with each cached key.
    ranked.sort_by_cached_key(|&i| memory_rank_key(&pods[i]));
    ranked.truncate(count);
    ranked
}

/// The pod whose containers' memory the pass reads (by index into the pass's pods): the
/// first of the memory `ranking`, when a memory threshold is configured. That pod is the
/// one a memory eviction at this pass, or the hot path's next kill, would take.
pub fn container_memory_read(thresholds: &[Threshold], ranking: &[usize]) -> Option<usize> {
    thresholds
        .iter()
        .any(|t| t.signal.is_memory())
        .then(|| ranking.first().copied())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::fixtures::{MI, pod};
    use crate::quantity::parse_quantity_or_percent;
    use crate::signal::SignalObservation;
    use crate::types::FsLayout;

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

    /// The pass's one ranking is the kubelet's memory order (its comparators, stable sort)
    /// with critical pods left out: ties, missing stats, requests and priorities included.
    #[test]
    fn the_memory_ranking_is_the_kubelets_order_without_critical_pods() {
        let pods = vec![
            pod("tie-a").working_set(200 * MI).build(),
            pod("under-request")
                .request("memory", "1Gi")
                .working_set(800 * MI)
                .build(),
            pod("no-stats").no_stats().build(),
            pod("critical").static_pod().working_set(900 * MI).build(),
            pod("tie-b").working_set(200 * MI).build(),
            pod("high-priority")
                .priority(1000)
                .working_set(700 * MI)
                .build(),
            pod("over-request")
                .request("memory", "100Mi")
                .working_set(300 * MI)
                .build(),
        ];
        let kubelet: Vec<String> =
            crate::rank::rank_pods(Signal::MemoryAvailable, FsLayout::Shared, &pods)
                .into_iter()
                .filter(|p| !p.pod.is_critical())
                .map(|p| p.pod.key())
                .collect();
        let ranking = memory_ranking(&pods, pods.len());
        let ours: Vec<String> = ranking.iter().map(|&i| pods[i].pod.key()).collect();
        assert_eq!(ours, kubelet);
        assert_eq!(memory_ranking(&pods, 2), ranking[..2]);
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
        let ranking = memory_ranking(&pods, 16);
        assert_eq!(ranking, vec![1, 3, 0]);
        assert_eq!(container_memory_read(&memory, &ranking), Some(1));
        // No memory threshold: nobody's containers.
        let disk = [hard(Signal::NodeFsAvailable, "100Mi")];
        assert_eq!(container_memory_read(&disk, &ranking), None);
    }
}
