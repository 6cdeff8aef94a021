//! The decision chain of a synchronize, one small pure function per step
//! (kubelet: pkg/kubelet/eviction/helpers.go). `EvictionManager::synchronize` composes them.
use std::collections::BTreeMap;
use std::time::Duration;

use super::signal::{Observations, Signal, Threshold};
use super::types::{FsLayout, NodeConditionType, Resource, Time};

/// When each active threshold was first seen met (kubelet: thresholdsObservedAt). A list
/// keyed by threshold value, as the kubelet's map is, in the order thresholds were met.
pub type ThresholdsObservedAt = Vec<(Threshold, Time)>;

/// When each node condition was last seen (kubelet: nodeConditionsObservedAt).
pub type NodeConditionsObservedAt = BTreeMap<NodeConditionType, Time>;

/// Whether `threshold` is met by `observations`. With `enforce_min_reclaim`, the threshold
/// is raised by its minimum reclaim, so pressure only counts as resolved once the signal
/// is back above threshold + min reclaim. No observation for the signal: not met.
/// (kubelet: thresholdsMet, for one threshold.)
pub fn threshold_met(
    threshold: &Threshold,
    observations: &Observations,
    enforce_min_reclaim: bool,
) -> bool {
    let Some(observed) = observations.get(&threshold.signal) else {
        return false;
    };
    let mut quantity = threshold.quantity(observed.capacity);
    if enforce_min_reclaim {
        quantity = quantity.saturating_add(threshold.min_reclaim_quantity(observed.capacity));
    }
    match threshold.operator {
        super::signal::Operator::LessThan => observed.available < quantity,
    }
}

/// The thresholds met by `observations`, independent of grace periods (kubelet: thresholdsMet).
pub fn thresholds_met(
    thresholds: &[Threshold],
    observations: &Observations,
    enforce_min_reclaim: bool,
) -> Vec<Threshold> {
    thresholds
        .iter()
        .filter(|t| threshold_met(t, observations, enforce_min_reclaim))
        .copied()
        .collect()
}

/// `a` followed by the thresholds of `b` not already in `a` (kubelet: mergeThresholds).
pub fn merge_thresholds(a: &[Threshold], b: &[Threshold]) -> Vec<Threshold> {
    let mut merged = a.to_vec();
    for threshold in b {
        if !merged.contains(threshold) {
            merged.push(*threshold);
        }
    }
    merged
}

/// Carries over when each threshold was first met; thresholds met for the first time get
/// `now`, thresholds no longer met are forgotten (kubelet: thresholdsFirstObservedAt).
pub fn thresholds_first_observed(
    thresholds: &[Threshold],
    last: &ThresholdsObservedAt,
    now: Time,
) -> ThresholdsObservedAt {
    thresholds
        .iter()
        .map(|threshold| {
            let at = last
                .iter()
                .find(|(t, _)| t == threshold)
                .map_or(now, |(_, at)| *at);
            (*threshold, at)
        })
        .collect()
}

/// The thresholds that have been met for at least their grace period; hard thresholds at
/// once (kubelet: thresholdsMetGracePeriod).
pub fn thresholds_met_grace_period(
    observed_at: &ThresholdsObservedAt,
    now: Time,
) -> Vec<Threshold> {
    observed_at
        .iter()
        .filter(|(threshold, at)| now.saturating_sub(*at) >= threshold.grace_period)
        .map(|(threshold, _)| *threshold)
        .collect()
}

/// The thresholds whose signal has a newer reading than at the previous synchronize.
/// A threshold crossed only in stale stats must not evict again: the kubelet acts once per
/// reading (kubelet: thresholdsUpdatedStats). A signal seen for the first time counts as
/// updated.
pub fn thresholds_updated_stats(
    thresholds: &[Threshold],
    observations: &Observations,
    last_observations: &Observations,
) -> Vec<Threshold> {
    thresholds
        .iter()
        .filter(|threshold| {
            let Some(observed) = observations.get(&threshold.signal) else {
                return false;
            };
            match last_observations.get(&threshold.signal) {
                None => true,
                Some(last) => observed.time > last.time,
            }
        })
        .copied()
        .collect()
}

/// The node conditions implied by `thresholds`, each once, in order (kubelet: nodeConditions).
pub fn node_conditions(thresholds: &[Threshold]) -> Vec<NodeConditionType> {
    let mut conditions = Vec::new();
    for threshold in thresholds {
        let condition = threshold.signal.node_condition();
        if !has_node_condition(&conditions, condition) {
            conditions.push(condition);
        }
    }
    conditions
}

/// Conditions observed now get `now`; the others keep the time they were last seen
/// (kubelet: nodeConditionsLastObservedAt).
pub fn node_conditions_last_observed_at(
    conditions: &[NodeConditionType],
    last: &NodeConditionsObservedAt,
    now: Time,
) -> NodeConditionsObservedAt {
    let mut observed = last.clone();
    for condition in conditions {
        observed.insert(*condition, now);
    }
    observed
}

/// The conditions seen within the last `period`: a condition stays reported for the
/// pressure transition period after its thresholds stop being met, so it does not
/// oscillate (kubelet: nodeConditionsObservedSince).
///
/// Differs from the kubelet in one corner: a condition observed at this very synchronize
/// is reported even when `period` is zero (the kubelet's `now - at < 0` would hide it; its
/// configuration cannot produce a zero period, ours can when built in code).
pub fn node_conditions_observed_since(
    observed_at: &NodeConditionsObservedAt,
    period: Duration,
    now: Time,
) -> Vec<NodeConditionType> {
    observed_at
        .iter()
        .filter(|(_, at)| {
            let since = now.saturating_sub(**at);
            since < period || since.is_zero()
        })
        .map(|(condition, _)| *condition)
        .collect()
}

pub fn has_node_condition(conditions: &[NodeConditionType], condition: NodeConditionType) -> bool {
    conditions.contains(&condition)
}

/// Orders thresholds for reclaim: memory signals first, the rest in their given order
/// (kubelet: byEvictionPriority; the kubelet's sort is unstable, ours keeps input order
/// among equals so results are reproducible).
pub fn sort_by_eviction_priority(thresholds: &mut [Threshold]) {
    thresholds.sort_by_key(|t| !t.signal.is_memory());
}

/// The threshold to act on and the resource it reclaims: the first in eviction priority
/// (kubelet: getReclaimableThreshold after sort.Sort(byEvictionPriority)).
pub fn reclaimable_threshold(thresholds: &[Threshold]) -> Option<(Threshold, Resource)> {
    let mut sorted = thresholds.to_vec();
    sort_by_eviction_priority(&mut sorted);
    sorted.first().map(|t| (*t, t.signal.resource()))
}

/// The starved resources, most urgent first (memory before the others), each once.
pub fn starved_resources(thresholds: &[Threshold]) -> Vec<Resource> {
    let mut sorted = thresholds.to_vec();
    sort_by_eviction_priority(&mut sorted);
    let mut resources = Vec::new();
    for threshold in sorted {
        let resource = threshold.signal.resource();
        if !resources.contains(&resource) {
            resources.push(resource);
        }
    }
    resources
}

/// The containerfs thresholds in force: the kubelet ignores user-given containerfs
/// thresholds and mirrors nodefs (one filesystem, or a split where containers live on
/// nodefs) or imagefs (a dedicated imagefs that also holds the writable layers)
/// (kubelet: UpdateContainerFsThresholds). Only thresholds that exist are mirrored: the
/// kubelet appends an empty, never-met threshold where its source is missing.
pub fn update_container_fs_thresholds(
    thresholds: &[Threshold],
    layout: FsLayout,
) -> Vec<Threshold> {
    let on_imagefs = layout.containers_on_imagefs();
    let mirror = |signal: Signal| match signal {
        Signal::NodeFsAvailable if !on_imagefs => Some(Signal::ContainerFsAvailable),
        Signal::NodeFsInodesFree if !on_imagefs => Some(Signal::ContainerFsInodesFree),
        Signal::ImageFsAvailable if on_imagefs => Some(Signal::ContainerFsAvailable),
        Signal::ImageFsInodesFree if on_imagefs => Some(Signal::ContainerFsInodesFree),
        _ => None,
    };
    let mut result: Vec<Threshold> = thresholds
        .iter()
        .filter(|t| {
            !matches!(
                t.signal,
                Signal::ContainerFsAvailable | Signal::ContainerFsInodesFree
            )
        })
        .copied()
        .collect();
    let mirrored: Vec<Threshold> = result
        .iter()
        .filter_map(|t| mirror(t.signal).map(|signal| Threshold { signal, ..*t }))
        .collect();
    result.extend(mirrored);
    result
}

/// Adds `allocatableMemory.available` copies of the hard `memory.available` thresholds,
/// done when node allocatable is enforced on pods (kubelet: addAllocatableThresholds).
pub fn add_allocatable_thresholds(thresholds: &[Threshold]) -> Vec<Threshold> {
    let mut result = thresholds.to_vec();
    for threshold in thresholds {
        if threshold.signal == Signal::MemoryAvailable && threshold.is_hard() {
            result.push(Threshold {
                signal: Signal::AllocatableMemoryAvailable,
                ..*threshold
            });
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::quantity::parse_quantity_or_percent;
    use crate::signal::SignalObservation;

    const MI: i64 = 1 << 20;
    const GI: i64 = 1 << 30;

    fn secs(s: u64) -> Time {
        Duration::from_secs(s)
    }

    fn value(text: &str) -> crate::quantity::QuantityOrPercent {
        parse_quantity_or_percent(text).unwrap()
    }

    fn obs(signal: Signal, available: i64, capacity: i64, at: u64) -> Observations {
        Observations::from([(
            signal,
            SignalObservation {
                available,
                capacity,
                time: secs(at),
            },
        )])
    }

    #[rstest]
    // memory.available<500Mi on a 10Gi node
    #[case("500Mi", None, false, 300 * MI, 10 * GI, true)]
    #[case("500Mi", None, false, 500 * MI, 10 * GI, false)] // equal is not less
    #[case("500Mi", None, false, 501 * MI, 10 * GI, false)]
    // percentages resolve against capacity: 10% of 10Gi = 1Gi
    #[case("10%", None, false, GI - 1, 10 * GI, true)]
    #[case("10%", None, false, GI, 10 * GI, false)]
    // min reclaim only counts when enforced: nodefs.available<1Gi, min reclaim 500Mi
    #[case("1Gi", Some("500Mi"), false, 1200 * MI, 100 * GI, false)]
    #[case("1Gi", Some("500Mi"), true, 1200 * MI, 100 * GI, true)]
    #[case("1Gi", Some("500Mi"), true, 1524 * MI, 100 * GI, false)]
    #[case("1Gi", None, true, 1200 * MI, 100 * GI, false)]
    fn met(
        #[case] threshold: &str,
        #[case] min_reclaim: Option<&str>,
        #[case] enforce: bool,
        #[case] available: i64,
        #[case] capacity: i64,
        #[case] expected: bool,
    ) {
        let mut t = Threshold::hard(Signal::NodeFsAvailable, value(threshold));
        if let Some(m) = min_reclaim {
            t = t.with_min_reclaim(value(m));
        }
        let o = obs(Signal::NodeFsAvailable, available, capacity, 0);
        assert_eq!(
            threshold_met(&t, &o, enforce),
            expected,
            "{t} at {available}/{capacity}"
        );
    }

    #[test]
    fn no_observation_is_not_met() {
        let t = Threshold::hard(Signal::ImageFsAvailable, value("15%"));
        assert!(thresholds_met(&[t], &obs(Signal::NodeFsAvailable, 0, 100, 0), false).is_empty());
    }

    #[test]
    fn merge_keeps_order_and_drops_duplicates() {
        let a = Threshold::hard(Signal::MemoryAvailable, value("100Mi"));
        let b = Threshold::hard(Signal::NodeFsAvailable, value("10%"));
        let c = Threshold::soft(Signal::MemoryAvailable, value("100Mi"), secs(30));
        assert_eq!(merge_thresholds(&[a, b], &[b, c, a]), vec![a, b, c]);
    }

    #[test]
    fn first_observed_is_kept_while_met_and_forgotten_after() {
        let a = Threshold::soft(Signal::MemoryAvailable, value("1Gi"), secs(60));
        let b = Threshold::hard(Signal::NodeFsAvailable, value("1Gi"));
        let first = thresholds_first_observed(&[a], &Vec::new(), secs(10));
        assert_eq!(first, vec![(a, secs(10))]);
        let second = thresholds_first_observed(&[a, b], &first, secs(20));
        assert_eq!(second, vec![(a, secs(10)), (b, secs(20))]);
        // a stops being met: forgotten, so meeting it again restarts its grace period.
        let third = thresholds_first_observed(&[b], &second, secs(30));
        assert_eq!(third, vec![(b, secs(20))]);
        let fourth = thresholds_first_observed(&[a, b], &third, secs(40));
        assert_eq!(fourth[0], (a, secs(40)));
    }

    #[rstest]
    #[case(0, 10, 10, true)] // hard: at once
    #[case(90, 10, 10, false)]
    #[case(90, 10, 99, false)]
    #[case(90, 10, 100, true)] // exactly the grace period
    #[case(90, 10, 500, true)]
    fn grace_period(
        #[case] grace: u64,
        #[case] first: u64,
        #[case] now: u64,
        #[case] expected: bool,
    ) {
        let t = Threshold::soft(Signal::MemoryAvailable, value("1Gi"), secs(grace));
        let met = thresholds_met_grace_period(&vec![(t, secs(first))], secs(now));
        assert_eq!(
            !met.is_empty(),
            expected,
            "grace {grace}s, first {first}s, now {now}s"
        );
    }

    #[rstest]
    #[case(None, 10, true)] // first reading
    #[case(Some(5), 10, true)] // newer reading
    #[case(Some(10), 10, false)] // same reading: stale
    #[case(Some(12), 10, false)] // older reading: stale
    fn updated_stats(#[case] last: Option<u64>, #[case] now: u64, #[case] expected: bool) {
        let t = Threshold::hard(Signal::MemoryAvailable, value("1Gi"));
        let current = obs(Signal::MemoryAvailable, 0, GI, now);
        let previous = last.map_or_else(Observations::new, |at| {
            obs(Signal::MemoryAvailable, 0, GI, at)
        });
        assert_eq!(
            !thresholds_updated_stats(&[t], &current, &previous).is_empty(),
            expected
        );
    }

    #[test]
    fn conditions_from_thresholds_each_once() {
        let thresholds = [
            Threshold::hard(Signal::NodeFsAvailable, value("10%")),
            Threshold::hard(Signal::MemoryAvailable, value("1Gi")),
            Threshold::hard(Signal::ImageFsInodesFree, value("5%")),
            Threshold::hard(Signal::PidAvailable, value("100")),
        ];
        assert_eq!(
            node_conditions(&thresholds),
            vec![
                NodeConditionType::DiskPressure,
                NodeConditionType::MemoryPressure,
                NodeConditionType::PIDPressure
            ]
        );
    }

    #[rstest]
    // pressure seen at 100 s; transition period 300 s
    #[case(100, true)]
    #[case(399, true)]
    #[case(400, false)]
    fn transition_period(#[case] now: u64, #[case] reported: bool) {
        let period = secs(300);
        let seen = node_conditions_last_observed_at(
            &[NodeConditionType::MemoryPressure],
            &NodeConditionsObservedAt::new(),
            secs(100),
        );
        // later synchronizes no longer see the pressure: the old time is kept
        let later = node_conditions_last_observed_at(&[], &seen, secs(now));
        assert_eq!(later[&NodeConditionType::MemoryPressure], secs(100));
        let conditions = node_conditions_observed_since(&later, period, secs(now));
        assert_eq!(
            has_node_condition(&conditions, NodeConditionType::MemoryPressure),
            reported,
            "at {now}s"
        );
    }

    #[test]
    fn condition_seen_now_is_reported_with_zero_period() {
        let seen = node_conditions_last_observed_at(
            &[NodeConditionType::DiskPressure],
            &BTreeMap::new(),
            secs(5),
        );
        assert_eq!(
            node_conditions_observed_since(&seen, Duration::ZERO, secs(5)),
            vec![NodeConditionType::DiskPressure]
        );
        assert!(node_conditions_observed_since(&seen, Duration::ZERO, secs(6)).is_empty());
    }

    #[test]
    fn memory_is_reclaimed_first() {
        let disk = Threshold::hard(Signal::NodeFsAvailable, value("10%"));
        let pids = Threshold::hard(Signal::PidAvailable, value("100"));
        let alloc = Threshold::hard(Signal::AllocatableMemoryAvailable, value("100Mi"));
        let memory = Threshold::hard(Signal::MemoryAvailable, value("100Mi"));
        assert_eq!(
            reclaimable_threshold(&[disk, pids, alloc, memory]),
            Some((alloc, Resource::Memory))
        );
        assert_eq!(
            reclaimable_threshold(&[pids, disk]),
            Some((pids, Resource::Pids))
        );
        assert_eq!(reclaimable_threshold(&[]), None);
        assert_eq!(
            starved_resources(&[disk, pids, memory, alloc]),
            vec![Resource::Memory, Resource::EphemeralStorage, Resource::Pids]
        );
    }

    #[rstest]
    #[case(false, Signal::NodeFsAvailable)]
    #[case(true, Signal::ImageFsAvailable)]
    fn containerfs_mirrors_nodefs_or_imagefs(#[case] dedicated: bool, #[case] source: Signal) {
        let nodefs =
            Threshold::hard(Signal::NodeFsAvailable, value("10%")).with_min_reclaim(value("1Gi"));
        let imagefs = Threshold::soft(Signal::ImageFsAvailable, value("15%"), secs(60));
        let user = Threshold::hard(Signal::ContainerFsAvailable, value("50%"));
        let result = update_container_fs_thresholds(
            &[nodefs, user, imagefs],
            FsLayout::with_imagefs(dedicated),
        );
        let containerfs: Vec<_> = result
            .iter()
            .filter(|t| t.signal == Signal::ContainerFsAvailable)
            .collect();
        assert_eq!(
            containerfs.len(),
            1,
            "the user's containerfs threshold is replaced: {result:?}"
        );
        let from = if source == Signal::NodeFsAvailable {
            nodefs
        } else {
            imagefs
        };
        assert_eq!(
            *containerfs[0],
            Threshold {
                signal: Signal::ContainerFsAvailable,
                ..from
            }
        );
        assert_eq!(result.len(), 3);
    }

    #[test]
    fn allocatable_copies_hard_memory_thresholds_only() {
        let hard = Threshold::hard(Signal::MemoryAvailable, value("100Mi"))
            .with_min_reclaim(value("50Mi"));
        let soft = Threshold::soft(Signal::MemoryAvailable, value("1Gi"), secs(30));
        let disk = Threshold::hard(Signal::NodeFsAvailable, value("10%"));
        let result = add_allocatable_thresholds(&[hard, soft, disk]);
        assert_eq!(
            result,
            vec![
                hard,
                soft,
                disk,
                Threshold {
                    signal: Signal::AllocatableMemoryAvailable,
                    ..hard
                }
            ]
        );
    }
}
