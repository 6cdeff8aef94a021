use std::time::Duration;

use monitor_common::PressureEvent;
use rstest::rstest;

use super::*;
use crate::policy::quantity::QuantityOrPercent;
use crate::policy::signal::{Signal, SignalObservation, Threshold};
use crate::policy::types::Resource;

fn decision(signal: Option<Signal>, reason: EvictionReason) -> EvictionDecision {
    EvictionDecision {
        pod_key: "default/a".into(),
        signal,
        resource: Resource::EphemeralStorage,
        reason,
        grace_period_seconds: 0,
        immediate: true,
        kill_timeout: Duration::from_secs(2),
        message: String::new(),
    }
}

#[rstest]
#[case(
    Some(Signal::MemoryAvailable),
    EvictionReason::Threshold,
    "memory.available"
)]
#[case(
    Some(Signal::NodeFsInodesFree),
    EvictionReason::Threshold,
    "nodefs.inodesFree"
)]
#[case(None, EvictionReason::PodEphemeralStorageLimit, "ephemeralpodfs.limit")]
#[case(
    None,
    EvictionReason::ContainerEphemeralStorageLimit,
    "ephemeralcontainerfs.limit"
)]
#[case(None, EvictionReason::EmptyDirSizeLimit, "emptydirfs.limit")]
fn evictions_are_counted_by_the_kubelets_eviction_signal(
    #[case] signal: Option<Signal>,
    #[case] reason: EvictionReason,
    #[case] label: &str,
) {
    let mut metrics = Metrics::default();
    metrics.count_eviction(&decision(signal, reason));
    metrics.count_eviction(&decision(signal, reason));
    assert_eq!(metrics.evictions.get(label), Some(&2), "{metrics:?}");
}

#[rstest]
#[case("OutOfmemory", "OutOfmemory")]
#[case("OutOfpods", "OutOfpods")]
#[case("Evicted", "Evicted")]
#[case("TaintToleration", "TaintToleration")]
#[case("NodePorts", "NodePorts")]
#[case("PodOSNotSupported", "PodOSNotSupported")]
#[case(
    "PodOSSelectorNodeLabelDoesNotMatch",
    "PodOSSelectorNodeLabelDoesNotMatch"
)]
#[case("UnexpectedAdmissionError", "UnexpectedAdmissionError")]
#[case("OutOfnvidia.com/gpu", "OutOfExtendedResources")]
#[case("SomethingNew", "Other")]
fn admission_reasons_stay_bounded(#[case] reason: &str, #[case] label: &str) {
    assert_eq!(admission_rejection_reason(reason), label);
    let state = SharedState::default();
    state.record_admission_rejection(reason);
    assert_eq!(
        state.read().metrics.admission_rejections.get(label),
        Some(&1)
    );
}

#[test]
fn preemptions_are_counted_by_resource() {
    let state = SharedState::default();
    state.record_preemption("memory");
    state.record_preemption("memory");
    state.record_preemption("pods");
    let preemptions = state.read().metrics.preemptions;
    assert_eq!(preemptions.get("memory"), Some(&2));
    assert_eq!(preemptions.get("pods"), Some(&1));
}

fn met(signal: Signal, grace_period_met: bool) -> ThresholdMet {
    ThresholdMet {
        threshold: Threshold::hard(signal, QuantityOrPercent::Percent(0.1)),
        observed: SignalObservation {
            available: 1,
            capacity: 10,
            time: Duration::ZERO,
        },
        grace_period_met,
    }
}

#[test]
fn stats_age_counts_each_threshold_whose_grace_period_passed() {
    let state = SharedState::default();
    let taken = crate::clock::monotonic_ns().saturating_sub(3_000_000);
    state.record_stats_age(
        taken,
        &[
            met(Signal::MemoryAvailable, true),
            met(Signal::NodeFsAvailable, false),
        ],
    );
    let ages = state.read().metrics.eviction_stats_age;
    let memory = &ages["memory.available"];
    assert_eq!(memory.count, 1);
    assert!(memory.sum >= 0.003 && memory.sum < 1.0, "{memory:?}");
    assert!(
        !ages.contains_key("nodefs.available"),
        "grace period running"
    );
    // An observation without a stamp is not counted.
    state.record_stats_age(0, &[met(Signal::MemoryAvailable, true)]);
    assert_eq!(
        state.read().metrics.eviction_stats_age["memory.available"].count,
        1
    );
}

fn wake(source: WakeSource, received_ns: u64, detail: WakeDetail) -> Wake {
    Wake {
        source,
        received_ns,
        detail,
    }
}

fn record(kind: EventKind, timestamp_ns: u64, level_flags: u32) -> WakeDetail {
    WakeDetail::Kernel {
        event: PressureEvent {
            kind: kind as u32,
            pid: 1,
            timestamp_ns,
            cgroup_id: 7,
            suppressed: 0,
            level_flags,
            usage_bytes: 2000,
            level_bytes: 1000,
        },
        memcg: None,
    }
}

fn crossing(timestamp_ns: u64, level_flags: u32) -> WakeDetail {
    record(EventKind::Crossing, timestamp_ns, level_flags)
}

#[test]
fn a_detector_kill_is_timed_from_the_kernels_crossing() {
    // An earlier record (its wake came before the kill), then the record that fired
    // the kill (stamped at 900 in the kernel), then a wake of another source.
    let wakes = [
        wake(WakeSource::Ebpf, 500, crossing(400, LEVEL_HARD)),
        wake(WakeSource::Psi, 1_300, WakeDetail::None),
        wake(WakeSource::Ebpf, 1_400, crossing(900, LEVEL_HARD)),
    ];
    assert_eq!(
        CrossingStamp::of_kill(WakeSource::Ebpf, 1_000, 1_200, &wakes),
        (CrossingStamp::Kernel, 900)
    );
    let mut metrics = Metrics::default();
    metrics.observe_hot_kill(WakeSource::Ebpf, 1_000, 1_200, &wakes);
    let h = &metrics.crossing_to_kill[&WakeSource::Ebpf]["kernel"];
    assert_eq!(h.count, 1);
    assert!((h.sum - 300e-9).abs() < 1e-12, "{h:?}");
}

#[rstest]
// A notifier without a stamp of its own.
#[case::memcg(WakeSource::MemcgThreshold, WakeDetail::None)]
// A record of a soft level did not fire the kill.
#[case::soft_level(WakeSource::Ebpf, crossing(900, 0))]
// A reclaim record fired it: its stamp is no crossing.
#[case::reclaim(WakeSource::Ebpf, record(EventKind::MemcgReclaim, 900, 0))]
fn other_kills_are_timed_from_the_notifier(#[case] source: WakeSource, #[case] detail: WakeDetail) {
    let wakes = [wake(source, 1_400, detail)];
    assert_eq!(
        CrossingStamp::of_kill(source, 1_000, 1_200, &wakes),
        (CrossingStamp::Notifier, 1_000)
    );
    // Its wake fell into the next synchronize.
    assert_eq!(
        CrossingStamp::of_kill(source, 1_000, 1_200, &[]),
        (CrossingStamp::Notifier, 1_000)
    );
}

#[test]
fn histogram_is_cumulative() {
    let mut h = Histogram::new(&[1e-5, 5e-5, 1.0]);
    h.observe(2e-5);
    h.observe(0.2);
    assert_eq!(h.count, 2);
    assert_eq!(h.buckets, [(1e-5, 0), (5e-5, 1), (1.0, 2)]);
}

#[test]
fn events_are_bounded() {
    let state = SharedState::default();
    for i in 0..EVENTS_KEPT + 5 {
        state.event(EventReason::Started, "node", format!("event {i}"));
    }
    let events = state.read().events;
    assert_eq!(events.len(), EVENTS_KEPT);
    assert_eq!(events.front().unwrap().message, "event 5");
    assert_eq!(state.read().events_dropped, 5);
}

#[rstest]
#[case::short("evicted", "evicted")]
#[case::at_the_limit(&"a".repeat(1024), &"a".repeat(1024))]
#[case::over(&"a".repeat(5000), &format!("{}…", "a".repeat(1021)))]
// "é" is two bytes: a cut inside it moves back to the character's start.
#[case::multibyte(&"é".repeat(600), &format!("{}…", "é".repeat(510)))]
fn event_messages_are_bounded_like_the_kubelets_notes(#[case] message: &str, #[case] kept: &str) {
    let state = SharedState::default();
    state.event(EventReason::BadManifest, "node", message);
    let stored = state.read().events.back().unwrap().message.clone();
    assert!(stored.len() <= EVENT_MESSAGE_MAX_BYTES, "{}", stored.len());
    assert_eq!(stored, kept);
}

#[test]
fn rfc3339_looks_right() {
    let t = now_rfc3339();
    assert_eq!(t.len(), 20, "{t}");
    assert!(t.starts_with("20") && t.ends_with('Z'), "{t}");
}
