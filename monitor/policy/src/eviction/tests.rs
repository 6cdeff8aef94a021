use std::time::Duration;

use rstest::rstest;

use super::fixtures::{GI, MI, pod};
use super::*;
use crate::quantity::parse_quantity_or_percent;
use crate::signal::SignalObservation;

/// Records what node-level reclaim was asked for and frees a fixed amount.
#[derive(Default)]
struct RecordingReclaimer {
    calls: Vec<(Resource, Signal)>,
    frees: ReclaimResult,
}

impl RecordingReclaimer {
    fn reclaim(&mut self, resource: Resource, signal: Signal) -> ReclaimResult {
        self.calls.push((resource, signal));
        self.frees
    }
}

fn secs(s: u64) -> Time {
    Duration::from_secs(s)
}

fn hard(signal: Signal, value: &str) -> Threshold {
    Threshold::hard(signal, parse_quantity_or_percent(value).unwrap())
}

fn soft(signal: Signal, value: &str, grace: u64) -> Threshold {
    Threshold::soft(
        signal,
        parse_quantity_or_percent(value).unwrap(),
        secs(grace),
    )
}

fn with_min_reclaim(threshold: Threshold, value: &str) -> Threshold {
    threshold.with_min_reclaim(parse_quantity_or_percent(value).unwrap())
}

fn manager(thresholds: Vec<Threshold>) -> EvictionManager {
    EvictionManager::new(EvictionConfig {
        thresholds,
        ..EvictionConfig::default()
    })
}

fn observe(signals: &[(Signal, u64, u64)], at: u64) -> Observations {
    signals
        .iter()
        .map(|(signal, available, capacity)| {
            (
                *signal,
                SignalObservation {
                    available: *available as i64,
                    capacity: *capacity as i64,
                    time: secs(at),
                },
            )
        })
        .collect()
}

fn memory_input(available: u64, at: u64, pods: Vec<PodWithStats>) -> SyncInput {
    SyncInput {
        observations: observe(&[(Signal::MemoryAvailable, available, 10 * GI)], at),
        pods,
        fs_layout: FsLayout::with_imagefs(false),
    }
}

fn three_pods() -> Vec<PodWithStats> {
    vec![
        pod("guaranteed")
            .request("memory", "2Gi")
            .working_set(GI)
            .build(),
        pod("hog").working_set(4 * GI).build(),
        pod("small").working_set(100 * MI).build(),
    ]
}

fn evicted(outcome: &SyncOutcome) -> Vec<&str> {
    outcome
        .evictions
        .iter()
        .map(|e| e.pod_key.as_str())
        .collect()
}

fn sync(m: &mut EvictionManager, input: &SyncInput, at: u64) -> SyncOutcome {
    m.synchronize_with(input, secs(at), |_, _| ReclaimResult::default())
}

#[test]
fn seed_hard_memory_threshold_evicts_one_pod_at_once() {
    // 10Gi node, memory.available<500Mi, 300Mi available.
    let mut m = manager(vec![hard(Signal::MemoryAvailable, "500Mi")]);
    let outcome = sync(&mut m, &memory_input(300 * MI, 10, three_pods()), 10);
    assert_eq!(outcome.conditions, vec![NodeConditionType::MemoryPressure]);
    assert_eq!(m.conditions(), vec![NodeConditionType::MemoryPressure]);
    assert_eq!(outcome.starved_resources, vec![Resource::Memory]);
    assert_eq!(
        outcome.ranking,
        vec!["default/hog", "default/small", "default/guaranteed"]
    );
    assert!(
        !outcome.node_reclaim.attempted,
        "memory has no node-level reclaim"
    );
    assert_eq!(outcome.evictions.len(), 1, "at most one pod per pass");
    let eviction = &outcome.evictions[0];
    assert_eq!(eviction.pod_key, "default/hog");
    assert_eq!(eviction.signal, Some(Signal::MemoryAvailable));
    assert_eq!(eviction.resource, Resource::Memory);
    assert_eq!(eviction.reason, EvictionReason::Threshold);
    assert_eq!(eviction.grace_period_seconds, 0);
    assert_eq!(eviction.kill_timeout, secs(2));
    // kubelet: helpers.go evictionMessage, the container sentence of
    // TestEvictonMessageWithResourceResize; the trailing space is the kubelet's.
    assert_eq!(
        eviction.message,
        "The node was low on resource: memory. Threshold quantity: 500Mi, available: 300Mi. \
         Container main was using 4Gi, request is 0, has larger consumption of memory. "
    );
    let met = &outcome.thresholds_met[0];
    assert!(met.grace_period_met);
    assert_eq!(met.observed.available, (300 * MI) as i64);
}

#[test]
fn no_pressure_no_decision() {
    let mut m = manager(vec![hard(Signal::MemoryAvailable, "500Mi")]);
    let outcome = sync(&mut m, &memory_input(2 * GI, 0, three_pods()), 0);
    assert_eq!(outcome, SyncOutcome::default());
}

#[test]
fn critical_pods_are_never_chosen() {
    let mut m = manager(vec![hard(Signal::MemoryAvailable, "500Mi")]);
    let pods = vec![
        pod("static-hog").static_pod().working_set(8 * GI).build(),
        pod("critical")
            .priority(crate::types::SYSTEM_CRITICAL_PRIORITY)
            .working_set(6 * GI)
            .build(),
        pod("app").working_set(GI).build(),
    ];
    let outcome = sync(&mut m, &memory_input(100 * MI, 0, pods.clone()), 0);
    assert_eq!(
        outcome.ranking[0], "default/static-hog",
        "ranked first, yet skipped"
    );
    assert_eq!(evicted(&outcome), vec!["default/app"]);

    let only_critical = pods[..2].to_vec();
    let outcome = sync(&mut m, &memory_input(100 * MI, 1, only_critical), 1);
    assert!(outcome.evictions.is_empty(), "{:?}", outcome.evictions);
    assert_eq!(outcome.ranking.len(), 2);
}

#[rstest]
// (pod grace, evictionMaxPodGracePeriod, reported grace, kill timeout ms)
#[case(30, 0, 30, 45_000)] // no cap: the pod's own
#[case(30, 10, 10, 15_000)] // capped
#[case(5, 60, 5, 7_500)] // the pod's own is shorter
#[case(1, 0, 1, 2_000)] // kill timeout never below 2 s
#[case(0, 0, 0, 2_000)]
// A negative cap (the kubelet takes any int32): min(cap, pod's) is negative, which the
// kubelet's pod workers take as an override and raise to their 1 s floor; with no floor
// here it is 0, SIGKILL at once.
#[case(30, -1, 0, 2_000)]
#[case(0, -1, 0, 2_000)]
#[case(30, i64::from(i32::MIN), 0, 2_000)]
fn soft_eviction_grace(
    #[case] pod_grace: i64,
    #[case] max: i64,
    #[case] grace: i64,
    #[case] kill_ms: u64,
) {
    let mut m = EvictionManager::new(EvictionConfig {
        thresholds: vec![soft(Signal::MemoryAvailable, "1Gi", 90)],
        max_pod_grace_period_seconds: max,
        ..EvictionConfig::default()
    });
    let pods = vec![pod("app").grace(pod_grace).working_set(GI).build()];
    assert!(
        sync(&mut m, &memory_input(500 * MI, 0, pods.clone()), 0)
            .evictions
            .is_empty()
    );
    let outcome = sync(&mut m, &memory_input(500 * MI, 90, pods), 90);
    assert_eq!(outcome.evictions.len(), 1);
    assert_eq!(outcome.evictions[0].grace_period_seconds, grace);
    assert_eq!(
        outcome.evictions[0].kill_timeout,
        Duration::from_millis(kill_ms)
    );
}

#[test]
fn soft_threshold_waits_for_its_grace_period() {
    let mut m = manager(vec![soft(Signal::MemoryAvailable, "1Gi", 90)]);
    let pods = three_pods();
    for (at, expect_eviction) in [
        (0, false),
        (60, false),
        (89, false),
        (90, true),
        (100, true),
    ] {
        let outcome = sync(&mut m, &memory_input(500 * MI, at, pods.clone()), at);
        assert_eq!(
            outcome.conditions,
            vec![NodeConditionType::MemoryPressure],
            "condition at once, at {at}s"
        );
        assert_eq!(outcome.thresholds_met.len(), 1, "at {at}s");
        assert_eq!(
            outcome.thresholds_met[0].grace_period_met, expect_eviction,
            "at {at}s"
        );
        assert_eq!(
            outcome.evictions.len(),
            usize::from(expect_eviction),
            "at {at}s"
        );
        assert_eq!(
            outcome.ranking.is_empty(),
            !expect_eviction,
            "ranking only when evicting, at {at}s"
        );
    }
}

#[test]
fn soft_threshold_grace_restarts_after_recovery() {
    let mut m = manager(vec![soft(Signal::MemoryAvailable, "1Gi", 90)]);
    let pods = three_pods();
    sync(&mut m, &memory_input(500 * MI, 0, pods.clone()), 0);
    sync(&mut m, &memory_input(2 * GI, 60, pods.clone()), 60); // recovered
    let outcome = sync(&mut m, &memory_input(500 * MI, 100, pods.clone()), 100);
    assert!(
        outcome.evictions.is_empty(),
        "grace counts from 100 s, not 0 s"
    );
    let outcome = sync(&mut m, &memory_input(500 * MI, 190, pods), 190);
    assert_eq!(outcome.evictions.len(), 1);
}

#[rstest]
#[case(0, true)]
#[case(10, true)]
#[case(299, true)]
#[case(300, false)]
fn pressure_condition_holds_for_the_transition_period(#[case] later: u64, #[case] reported: bool) {
    let mut m = manager(vec![hard(Signal::MemoryAvailable, "500Mi")]);
    sync(&mut m, &memory_input(300 * MI, 10, Vec::new()), 10);
    let at = 10 + later;
    let outcome = sync(&mut m, &memory_input(5 * GI, at + 1, Vec::new()), at);
    if later == 0 {
        assert_eq!(outcome.conditions, vec![NodeConditionType::MemoryPressure]);
        return;
    }
    assert!(outcome.thresholds_met.is_empty());
    assert_eq!(
        !outcome.conditions.is_empty(),
        reported,
        "{later}s after the pressure ended"
    );
    assert_eq!(!m.conditions().is_empty(), reported);
}

#[test]
fn stale_stats_do_not_evict_twice() {
    let mut m = manager(vec![hard(Signal::MemoryAvailable, "500Mi")]);
    let pods = three_pods();
    let first = sync(&mut m, &memory_input(300 * MI, 10, pods.clone()), 10);
    assert_eq!(first.evictions.len(), 1);
    // A wake-up at 12 s that sees the same 10 s reading: still under pressure, no eviction.
    let stale = sync(&mut m, &memory_input(300 * MI, 10, pods.clone()), 12);
    assert!(stale.evictions.is_empty(), "{:?}", stale.evictions);
    assert!(stale.starved_resources.is_empty());
    assert_eq!(stale.conditions, vec![NodeConditionType::MemoryPressure]);
    // A fresh reading still under the threshold evicts again.
    let fresh = sync(&mut m, &memory_input(300 * MI, 13, pods), 13);
    assert_eq!(fresh.evictions.len(), 1);
}

fn nodefs_input(available: u64, at: u64) -> SyncInput {
    SyncInput {
        observations: observe(&[(Signal::NodeFsAvailable, available, 100 * GI)], at),
        pods: vec![
            pod("writer").container_fs(10 * GI, GI, 100, 10).build(),
            pod("idle").build(),
        ],
        fs_layout: FsLayout::with_imagefs(false),
    }
}

#[test]
fn seed_min_reclaim_keeps_evicting_until_past_threshold_plus_reclaim() {
    // nodefs.available<1Gi with 500Mi minimum reclaim: resolved only at 1.5Gi available.
    let mut m = manager(vec![with_min_reclaim(
        hard(Signal::NodeFsAvailable, "1Gi"),
        "500Mi",
    )]);
    let steps = [
        (900 * MI, 0, true),
        (1200 * MI, 10, true),
        (1600 * MI, 20, false),
        (1200 * MI, 30, false),
    ];
    for (available, at, expect_eviction) in steps {
        let outcome = sync(&mut m, &nodefs_input(available, at), at);
        assert_eq!(
            outcome.evictions.len(),
            usize::from(expect_eviction),
            "{}Mi at {at}s",
            available / MI
        );
        assert_eq!(
            outcome.conditions,
            vec![NodeConditionType::DiskPressure],
            "at {at}s"
        );
    }
}

#[rstest]
// (freed bytes, sufficient): 900Mi available, resolved at 1024 + 500 = 1524Mi
#[case(624 * MI, true)]
#[case(700 * MI, true)]
#[case(623 * MI, false)]
#[case(0, false)]
fn seed_node_reclaim_credits_freed_bytes(#[case] freed: u64, #[case] sufficient: bool) {
    let mut m = manager(vec![with_min_reclaim(
        hard(Signal::NodeFsAvailable, "1Gi"),
        "500Mi",
    )]);
    let mut reclaimer = RecordingReclaimer {
        frees: ReclaimResult {
            freed_bytes: freed,
            freed_inodes: 0,
            released_later: false,
        },
        ..Default::default()
    };
    let outcome = m.synchronize_with(&nodefs_input(900 * MI, 0), secs(0), |r, s| {
        reclaimer.reclaim(r, s)
    });
    assert_eq!(
        reclaimer.calls,
        vec![(Resource::EphemeralStorage, Signal::NodeFsAvailable)]
    );
    assert_eq!(
        outcome.node_reclaim,
        NodeReclaimOutcome {
            attempted: true,
            signal: Some(Signal::NodeFsAvailable),
            freed_bytes: freed,
            freed_inodes: 0,
            sufficient
        }
    );
    assert_eq!(outcome.evictions.len(), usize::from(!sufficient));
    assert_eq!(outcome.ranking.is_empty(), sufficient);
    if !sufficient {
        assert_eq!(outcome.evictions[0].pod_key, "default/writer");
        assert!(
            outcome.evictions[0].message.starts_with(
                "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 900Mi. \
                 Container main was using 11Gi, request is 0"
            ),
            "{}",
            outcome.evictions[0].message
        );
    }
}

#[rstest]
// (signal under pressure, dedicated imagefs, reclaim expected)
#[case(Signal::NodeFsAvailable, false, true)]
#[case(Signal::ImageFsAvailable, false, true)]
#[case(Signal::NodeFsAvailable, true, false)]
#[case(Signal::ImageFsAvailable, true, true)]
#[case(Signal::NodeFsInodesFree, true, false)]
#[case(Signal::ImageFsInodesFree, true, true)]
fn node_reclaim_with_and_without_imagefs(
    #[case] signal: Signal,
    #[case] dedicated: bool,
    #[case] attempted: bool,
) {
    let mut m = manager(vec![hard(signal, "10%")]);
    let mut reclaimer = RecordingReclaimer::default();
    let input = SyncInput {
        observations: observe(&[(signal, 5, 100)], 0),
        pods: vec![pod("p").build()],
        fs_layout: FsLayout::with_imagefs(dedicated),
    };
    let outcome = m.synchronize_with(&input, secs(0), |r, s| reclaimer.reclaim(r, s));
    assert_eq!(outcome.node_reclaim.attempted, attempted);
    assert_eq!(reclaimer.calls.len(), usize::from(attempted));
    assert_eq!(
        outcome.evictions.len(),
        1,
        "nothing freed: a pod is evicted"
    );
}

#[test]
fn reclaim_on_a_dedicated_imagefs_does_not_relieve_nodefs() {
    // Both filesystems under pressure; reclaim frees plenty on the imagefs only.
    let mut m = manager(vec![
        hard(Signal::ImageFsAvailable, "10Gi"),
        hard(Signal::NodeFsAvailable, "10Gi"),
    ]);
    let mut reclaimer = RecordingReclaimer {
        frees: ReclaimResult {
            freed_bytes: 50 * GI,
            freed_inodes: 0,
            released_later: false,
        },
        ..Default::default()
    };
    let input = SyncInput {
        observations: observe(
            &[
                (Signal::ImageFsAvailable, GI, 100 * GI),
                (Signal::NodeFsAvailable, GI, 100 * GI),
            ],
            0,
        ),
        pods: vec![pod("p").container_fs(GI, GI, 1, 1).build()],
        fs_layout: FsLayout::with_imagefs(true),
    };
    let outcome = m.synchronize_with(&input, secs(0), |r, s| reclaimer.reclaim(r, s));
    assert_eq!(
        reclaimer.calls,
        vec![(Resource::EphemeralStorage, Signal::ImageFsAvailable)]
    );
    assert!(
        !outcome.node_reclaim.sufficient,
        "nodefs is still under its threshold"
    );
    assert_eq!(outcome.evictions.len(), 1);
}

#[test]
fn memory_is_handled_before_disk() {
    let mut m = manager(vec![
        hard(Signal::NodeFsAvailable, "10%"),
        hard(Signal::MemoryAvailable, "500Mi"),
    ]);
    let mut reclaimer = RecordingReclaimer::default();
    let input = SyncInput {
        observations: observe(
            &[
                (Signal::NodeFsAvailable, 5, 100),
                (Signal::MemoryAvailable, 100 * MI, 10 * GI),
            ],
            0,
        ),
        pods: three_pods(),
        fs_layout: FsLayout::with_imagefs(false),
    };
    let outcome = m.synchronize_with(&input, secs(0), |r, s| reclaimer.reclaim(r, s));
    assert_eq!(
        outcome.starved_resources,
        vec![Resource::Memory, Resource::EphemeralStorage]
    );
    assert_eq!(
        outcome.conditions,
        vec![
            NodeConditionType::MemoryPressure,
            NodeConditionType::DiskPressure
        ]
    );
    assert!(reclaimer.calls.is_empty());
    assert_eq!(outcome.evictions[0].signal, Some(Signal::MemoryAvailable));
}

#[test]
fn containerfs_thresholds_follow_nodefs() {
    let mut m = manager(vec![hard(Signal::NodeFsAvailable, "10%")]);
    let input = SyncInput {
        observations: observe(
            &[
                (Signal::NodeFsAvailable, 50, 100),
                (Signal::ContainerFsAvailable, 5, 100),
            ],
            0,
        ),
        pods: vec![pod("p").build()],
        fs_layout: FsLayout::with_imagefs(false),
    };
    let outcome = sync(&mut m, &input, 0);
    let signals: Vec<Signal> = outcome
        .thresholds_met
        .iter()
        .map(|t| t.threshold.signal)
        .collect();
    assert_eq!(signals, vec![Signal::ContainerFsAvailable]);
    assert_eq!(outcome.conditions, vec![NodeConditionType::DiskPressure]);
}

fn no_thresholds() -> EvictionManager {
    manager(Vec::new())
}

fn storage_input(pods: Vec<PodWithStats>, dedicated: bool) -> SyncInput {
    SyncInput {
        observations: Observations::new(),
        pods,
        fs_layout: FsLayout::with_imagefs(dedicated),
    }
}

#[test]
fn local_storage_limits_evict_every_offender_without_pressure() {
    let mut m = no_thresholds();
    let pods = vec![
        pod("scratch")
            .empty_dir("cache", Some("1Gi"), 2 * GI, 1)
            .build(),
        pod("within").empty_dir("cache", Some("1Gi"), GI, 1).build(),
        pod("pod-total")
            .limit("ephemeral-storage", "1Gi")
            .ephemeral_used(3 * GI)
            .container_fs(0, 0, 0, 0)
            .build(),
        pod("logs")
            .limit("ephemeral-storage", "2Gi")
            .container_fs(0, 3 * GI, 0, 0)
            .ephemeral_used(GI)
            .build(),
        pod("static")
            .static_pod()
            .empty_dir("cache", Some("1Mi"), GI, 1)
            .build(),
        pod("unknown")
            .empty_dir("cache", Some("1Mi"), GI, 1)
            .no_stats()
            .build(),
    ];
    let outcome = sync(&mut m, &storage_input(pods, false), 0);
    let decisions: Vec<(&str, EvictionReason)> = outcome
        .evictions
        .iter()
        .map(|e| (e.pod_key.as_str(), e.reason))
        .collect();
    assert_eq!(
        decisions,
        vec![
            ("default/scratch", EvictionReason::EmptyDirSizeLimit),
            (
                "default/pod-total",
                EvictionReason::PodEphemeralStorageLimit
            ),
            (
                "default/logs",
                EvictionReason::ContainerEphemeralStorageLimit
            ),
        ]
    );
    for eviction in &outcome.evictions {
        assert_eq!(
            (
                eviction.grace_period_seconds,
                eviction.kill_timeout,
                eviction.signal
            ),
            (0, secs(2), None)
        );
        assert_eq!(eviction.resource, Resource::EphemeralStorage);
    }
    assert_eq!(
        outcome.evictions[0].message,
        "Usage of EmptyDir volume \"cache\" exceeds the limit \"1Gi\". "
    );
    assert_eq!(
        outcome.evictions[1].message,
        "Pod ephemeral local storage usage exceeds the total limit of containers 1Gi. "
    );
    assert_eq!(
        outcome.evictions[2].message,
        "Container main exceeded its local ephemeral storage limit \"2Gi\". "
    );
}

#[rstest]
// writable layer 3Gi, logs 500Mi, limit 2Gi: the layer only counts when it shares nodefs
#[case(false, true)]
#[case(true, false)]
fn container_limit_counts_rootfs_only_without_imagefs(
    #[case] dedicated: bool,
    #[case] evict: bool,
) {
    let mut m = no_thresholds();
    let pods = vec![
        pod("p")
            .limit("ephemeral-storage", "2Gi")
            .container_fs(3 * GI, 500 * MI, 0, 0)
            .ephemeral_used(0)
            .build(),
    ];
    let outcome = sync(&mut m, &storage_input(pods, dedicated), 0);
    assert_eq!(outcome.evictions.len(), usize::from(evict));
}

#[test]
fn local_storage_eviction_preempts_threshold_eviction() {
    let mut m = manager(vec![hard(Signal::MemoryAvailable, "500Mi")]);
    let mut pods = three_pods();
    pods.push(
        pod("scratch")
            .empty_dir("cache", Some("1Gi"), 2 * GI, 1)
            .build(),
    );
    let outcome = sync(&mut m, &memory_input(100 * MI, 0, pods), 0);
    assert_eq!(evicted(&outcome), vec!["default/scratch"]);
    assert!(outcome.ranking.is_empty());
    assert_eq!(outcome.conditions, vec![NodeConditionType::MemoryPressure]);
}

#[test]
fn local_storage_isolation_can_be_off() {
    let mut m = EvictionManager::new(EvictionConfig {
        local_storage_capacity_isolation: false,
        ..EvictionConfig::default()
    });
    let pods = vec![
        pod("scratch")
            .empty_dir("cache", Some("1Gi"), 2 * GI, 1)
            .build(),
    ];
    assert!(
        sync(&mut m, &storage_input(pods, false), 0)
            .evictions
            .is_empty()
    );
}

#[test]
fn no_active_pods_no_eviction() {
    let mut m = manager(vec![hard(Signal::MemoryAvailable, "500Mi")]);
    let outcome = sync(&mut m, &memory_input(100 * MI, 0, Vec::new()), 0);
    assert!(outcome.evictions.is_empty() && outcome.ranking.is_empty());
    assert_eq!(outcome.starved_resources, vec![Resource::Memory]);
}

#[rstest]
#[case(0, 2_000)]
#[case(1, 2_000)]
#[case(2, 3_000)]
#[case(30, 45_000)]
#[case(-5, 2_000)]
#[case::near_forever(i64::MAX, u64::MAX)]
fn kill_timeouts(#[case] grace: i64, #[case] millis: u64) {
    assert_eq!(kill_timeout(grace), Duration::from_millis(millis));
}

#[rstest]
#[case(Signal::NodeFsAvailable, false, &[Signal::NodeFsAvailable, Signal::ImageFsAvailable, Signal::ContainerFsAvailable])]
#[case(Signal::ImageFsAvailable, true, &[Signal::ImageFsAvailable, Signal::ContainerFsAvailable])]
fn credit_goes_to_the_same_filesystem(
    #[case] signal: Signal,
    #[case] dedicated: bool,
    #[case] credited: &[Signal],
) {
    let all = [
        Signal::NodeFsAvailable,
        Signal::ImageFsAvailable,
        Signal::ContainerFsAvailable,
        Signal::NodeFsInodesFree,
    ];
    let before = observe(&all.map(|s| (s, 10, 100)), 0);
    let after = credit_reclaim(
        &before,
        signal,
        FsLayout::with_imagefs(dedicated),
        ReclaimResult {
            freed_bytes: 200,
            freed_inodes: 5,
            released_later: false,
        },
    );
    for s in all {
        let expected = if credited.contains(&s) {
            100 // capped at capacity
        } else if s == Signal::NodeFsInodesFree && !dedicated {
            15
        } else {
            10
        };
        assert_eq!(after[&s].available, expected, "{s}");
    }
}

#[test]
fn the_next_grace_deadline_is_first_observed_plus_grace() {
    let mut m = manager(vec![soft(Signal::MemoryAvailable, "1Gi", 90)]);
    let pods = three_pods();
    assert_eq!(
        m.next_grace_deadline(Duration::ZERO),
        None,
        "nothing met yet"
    );
    sync(&mut m, &memory_input(500 * MI, 10, pods.clone()), 10);
    assert_eq!(
        m.next_grace_deadline(Duration::from_secs(10)),
        Some(Duration::from_secs(100))
    );
    sync(&mut m, &memory_input(500 * MI, 50, pods.clone()), 50);
    assert_eq!(
        m.next_grace_deadline(Duration::from_secs(50)),
        Some(Duration::from_secs(100)),
        "first observed stays"
    );
    assert_eq!(
        m.next_grace_deadline(Duration::from_secs(100)),
        None,
        "past the deadline"
    );
    sync(&mut m, &memory_input(2 * GI, 60, pods), 60);
    assert_eq!(
        m.next_grace_deadline(Duration::from_secs(60)),
        None,
        "recovered: no deadline"
    );
}

fn with_hard_grace(thresholds: Vec<Threshold>, seconds: i64) -> EvictionManager {
    EvictionManager::new(EvictionConfig {
        thresholds,
        max_pod_grace_period_seconds: 5,
        hard_eviction_grace_period_seconds: seconds,
        ..EvictionConfig::default()
    })
}

// kubelet: eviction_manager_test.go TestMemoryPressure (the hard eviction is killed with a
// grace period override of 1 since 1.31, 0 before; the soft one with MaxPodGracePeriodSeconds).
// 0 is our default, 1 the `hardEvictionGracePeriodSeconds: 1` setting; either way immediate.
#[rstest]
#[case(0)]
#[case(1)]
fn hard_eviction_grace_period_is_the_setting_and_immediate(#[case] seconds: i64) {
    let mut m = with_hard_grace(
        vec![
            hard(Signal::MemoryAvailable, "500Mi"),
            soft(Signal::MemoryAvailable, "2Gi", 120),
        ],
        seconds,
    );
    let pods = vec![pod("app").grace(30).working_set(GI).build()];
    // Soft only, past its grace period: the pod's own 30 s capped at 5, not immediate.
    sync(&mut m, &memory_input(GI, 0, pods.clone()), 0);
    let soft = sync(&mut m, &memory_input(GI, 180, pods.clone()), 180);
    let eviction = &soft.evictions[0];
    assert_eq!(
        (eviction.grace_period_seconds, eviction.immediate),
        (5, false),
        "the setting leaves soft evictions alone"
    );
    // Recovered, then under both thresholds: only the hard one is past its grace period.
    sync(&mut m, &memory_input(3 * GI, 200, pods.clone()), 200);
    let hard = sync(&mut m, &memory_input(100 * MI, 210, pods), 210);
    // The setting's grace, immediate, and the 2 s floor of the kill timeout.
    let eviction = &hard.evictions[0];
    assert_eq!(eviction.signal, Some(Signal::MemoryAvailable));
    assert_eq!(
        (
            eviction.grace_period_seconds,
            eviction.immediate,
            eviction.kill_timeout
        ),
        (seconds, true, secs(2))
    );
}

// A negative evictionMaxPodGracePeriod shortens soft evictions only: the kubelet's hard
// evictions pass their own immediate grace whatever the cap (eviction_manager.go).
#[test]
fn a_negative_max_pod_grace_period_leaves_hard_evictions_alone() {
    let mut m = EvictionManager::new(EvictionConfig {
        thresholds: vec![
            hard(Signal::MemoryAvailable, "500Mi"),
            soft(Signal::MemoryAvailable, "2Gi", 120),
        ],
        max_pod_grace_period_seconds: -1,
        hard_eviction_grace_period_seconds: KUBELET_IMMEDIATE_GRACE_PERIOD_SECONDS,
        ..EvictionConfig::default()
    });
    let pods = vec![pod("app").grace(30).working_set(GI).build()];
    sync(&mut m, &memory_input(GI, 0, pods.clone()), 0);
    let soft = &sync(&mut m, &memory_input(GI, 180, pods.clone()), 180).evictions[0];
    assert_eq!(
        (soft.grace_period_seconds, soft.immediate, soft.kill_timeout),
        (0, false, secs(2)),
        "soft: no grace at all"
    );
    sync(&mut m, &memory_input(3 * GI, 200, pods.clone()), 200);
    let hard = &sync(&mut m, &memory_input(100 * MI, 210, pods), 210).evictions[0];
    assert_eq!(
        (hard.grace_period_seconds, hard.immediate, hard.kill_timeout),
        (1, true, secs(2)),
        "hard: the immediate grace, as without the cap"
    );
}

// kubelet: eviction_manager_test.go TestStorageLimitEvictions (every local storage limit
// eviction uses a grace period override of 1 since 1.31).
#[rstest]
#[case(0)]
#[case(1)]
fn local_storage_evictions_use_the_hard_grace_period(#[case] seconds: i64) {
    let mut m = with_hard_grace(Vec::new(), seconds);
    let pods = vec![
        pod("scratch")
            .grace(30)
            .empty_dir("cache", Some("1Gi"), 2 * GI, 1)
            .build(),
    ];
    let outcome = sync(&mut m, &storage_input(pods, false), 0);
    let eviction = &outcome.evictions[0];
    assert_eq!(
        (
            eviction.grace_period_seconds,
            eviction.immediate,
            eviction.kill_timeout
        ),
        (seconds, true, secs(2))
    );
}

// kubelet: buildSignalToNodeReclaimFuncs and UpdateContainerFsThresholds for a split image
// filesystem (KubeletSeparateDiskGC): images alone on the imagefs, writable layers on
// nodefs. imagefs pressure deletes unused images only; nodefs and containerfs pressure
// collects dead containers only; containerfs thresholds mirror nodefs ones.
#[rstest]
#[case::imagefs_deletes_images(Signal::ImageFsAvailable, &[NodeReclaimFunc::DeleteUnusedImages])]
#[case::imagefs_inodes_delete_images(Signal::ImageFsInodesFree, &[NodeReclaimFunc::DeleteUnusedImages])]
#[case::nodefs_collects_containers(Signal::NodeFsAvailable, &[NodeReclaimFunc::DeleteAllUnusedContainers])]
#[case::containerfs_collects_containers(Signal::ContainerFsInodesFree, &[NodeReclaimFunc::DeleteAllUnusedContainers])]
#[case::memory_has_none(Signal::MemoryAvailable, &[])]
fn split_imagefs_reclaim_funcs(#[case] signal: Signal, #[case] expected: &[NodeReclaimFunc]) {
    assert_eq!(node_reclaim_funcs(signal, FsLayout::SplitImageFs), expected);
}

#[test]
fn split_imagefs_mirrors_nodefs_thresholds_as_containerfs_and_credits_nodefs() {
    let thresholds = [
        hard(Signal::NodeFsAvailable, "10%"),
        hard(Signal::ImageFsAvailable, "15%"),
    ];
    let configured =
        crate::threshold::update_container_fs_thresholds(&thresholds, FsLayout::SplitImageFs);
    let container_fs: Vec<&Threshold> = configured
        .iter()
        .filter(|t| t.signal == Signal::ContainerFsAvailable)
        .collect();
    assert_eq!(container_fs.len(), 1);
    assert_eq!(
        container_fs[0].value, thresholds[0].value,
        "nodefs's 10%, not imagefs's 15%"
    );
    // Reclaim on nodefs frees the writable layers' filesystem: containerfs too, not imagefs.
    assert_eq!(
        same_filesystem_signals(Signal::NodeFsAvailable, FsLayout::SplitImageFs),
        &[
            Signal::NodeFsAvailable,
            Signal::ContainerFsAvailable,
            Signal::NodeFsInodesFree,
            Signal::ContainerFsInodesFree
        ]
    );
    assert_eq!(
        same_filesystem_signals(Signal::ImageFsAvailable, FsLayout::SplitImageFs),
        &[Signal::ImageFsAvailable, Signal::ImageFsInodesFree]
    );
}

#[test]
fn split_imagefs_pressure_reclaims_images_only_and_then_evicts_by_priority() {
    let mut m = manager(vec![hard(Signal::ImageFsAvailable, "1Gi")]);
    let mut reclaimer = RecordingReclaimer::default();
    let low = pod("low").priority(0).working_set(GI).build();
    let high = pod("high").priority(10).working_set(GI).build();
    let input = SyncInput {
        observations: observe(
            &[
                (Signal::ImageFsAvailable, 500 * MI, 100 * GI),
                (Signal::NodeFsAvailable, 50 * GI, 100 * GI),
            ],
            0,
        ),
        pods: vec![high, low],
        fs_layout: FsLayout::SplitImageFs,
    };
    let outcome = m.synchronize_with(&input, secs(0), |r, s| reclaimer.reclaim(r, s));
    assert_eq!(
        reclaimer.calls,
        vec![(Resource::EphemeralStorage, Signal::ImageFsAvailable)]
    );
    assert!(!outcome.node_reclaim.sufficient);
    // Pods own nothing on an image filesystem of images alone: priority decides.
    assert_eq!(outcome.ranking, vec!["default/low", "default/high"]);
}

// The hot path's victim: what a met hard memory threshold would evict, computed while it is
// not met (here 6Gi available against a 1Gi threshold), on the same ranking and never a
// critical pod.
#[test]
fn prospective_eviction_is_the_hard_thresholds_victim_on_todays_stats() {
    let m = manager(vec![
        hard(Signal::MemoryAvailable, "1Gi"),
        soft(Signal::NodeFsAvailable, "10%", 30),
    ]);
    let mut pods = three_pods();
    pods.push(pod("static-hog").static_pod().working_set(8 * GI).build());
    let input = memory_input(6 * GI, 0, pods);
    let d = m
        .prospective_eviction(&input, Signal::MemoryAvailable)
        .expect("a victim");
    assert_eq!(
        d.pod_key, "default/hog",
        "largest above its request; static pods never"
    );
    assert!(d.immediate);
    assert_eq!(d.grace_period_seconds, 0);
    assert!(
        d.message
            .starts_with("The node was low on resource: memory. "),
        "{}",
        d.message
    );
    // No hard threshold on the signal: nothing to hold ready.
    assert!(
        m.prospective_eviction(&input, Signal::AllocatableMemoryAvailable)
            .is_none()
    );
    let soft_only = manager(vec![soft(Signal::MemoryAvailable, "1Gi", 30)]);
    assert!(
        soft_only
            .prospective_eviction(&input, Signal::MemoryAvailable)
            .is_none()
    );
    // Nobody evictable: nothing.
    let critical_only = memory_input(
        6 * GI,
        0,
        vec![pod("static-hog").static_pod().working_set(8 * GI).build()],
    );
    assert!(
        m.prospective_eviction(&critical_only, Signal::MemoryAvailable)
            .is_none()
    );
}

// The hot path holds the victim of the hard memory threshold nearest to crossing: that
// crossing fires the kill, so the eviction names its signal.
#[rstest::rstest]
#[case::allocatable_nearer(6 * GI, 700 * MI, Signal::AllocatableMemoryAvailable)]
#[case::node_nearer(1200 * MI, 4 * GI, Signal::MemoryAvailable)]
fn the_hot_paths_victim_names_the_nearest_hard_memory_threshold(
    #[case] node_available: u64,
    #[case] allocatable_available: u64,
    #[case] expected: Signal,
) {
    let m = manager(vec![
        hard(Signal::MemoryAvailable, "1Gi"),
        hard(Signal::AllocatableMemoryAvailable, "500Mi"),
    ]);
    let input = SyncInput {
        observations: observe(
            &[
                (Signal::MemoryAvailable, node_available, 10 * GI),
                (
                    Signal::AllocatableMemoryAvailable,
                    allocatable_available,
                    8 * GI,
                ),
            ],
            0,
        ),
        pods: three_pods(),
        fs_layout: FsLayout::with_imagefs(false),
    };
    let ranking = reads::memory_ranking(&input.pods, 16);
    let d = m
        .prospective_hot_eviction(&input, &ranking)
        .expect("a victim");
    assert_eq!(d.signal, Some(expected));
    assert_eq!(d.pod_key, "default/hog");
    // The same pod as the eviction a hard threshold met now would take.
    assert_eq!(
        m.prospective_eviction(&input, expected).map(|e| e.pod_key),
        Some(d.pod_key.clone())
    );
    // Only one of them armed: that one, whatever the headroom.
    let node_only = manager(vec![hard(Signal::MemoryAvailable, "1Gi")]);
    assert_eq!(
        node_only
            .prospective_hot_eviction(&input, &ranking)
            .map(|d| d.signal),
        Some(Some(Signal::MemoryAvailable))
    );
}

/// The memory stall signal through the whole decision: a stall with memory short evicts
/// the memory ranking's first pod after the grace period, with MemoryPressure; the same
/// stall with memory plentiful (an I/O stall) never meets the threshold.
#[rstest]
#[case::memory_short(700 * MI, true)]
#[case::memory_plentiful(5 * GI, false)]
fn a_memory_stall_evicts_only_while_memory_is_short(#[case] available: u64, #[case] evicts: bool) {
    let stall = crate::stall::StallSettings {
        full: 0.20,
        margin: parse_quantity_or_percent("1Gi").unwrap(),
        grace_period: secs(30),
    };
    let thresholds = vec![hard(Signal::MemoryAvailable, "500Mi"), stall.threshold()];
    let mut m = manager(thresholds.clone());
    for (at, past_grace) in [(0, false), (29, false), (30, true)] {
        let mut input = memory_input(available, at, three_pods());
        let observed =
            crate::stall::observation(&stall, &thresholds, &input.observations, 0.35, secs(at));
        input.observations.insert(Signal::MemoryStall, observed);
        let outcome = sync(&mut m, &input, at);
        let expected_pressure = if evicts {
            vec![NodeConditionType::MemoryPressure]
        } else {
            vec![]
        };
        assert_eq!(outcome.conditions, expected_pressure, "at {at}s");
        if evicts && past_grace {
            assert_eq!(evicted(&outcome), vec!["default/hog"], "at {at}s");
            let message = &outcome.evictions[0].message;
            assert!(
                message.contains("65%") && message.contains("80%"),
                "{message}"
            );
        } else {
            assert!(outcome.evictions.is_empty(), "at {at}s: {outcome:?}");
        }
    }
}
