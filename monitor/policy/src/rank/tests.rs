use std::cmp::Ordering;

use rstest::rstest;

use super::*;
use crate::eviction::fixtures::{GI, MI, pod};

fn keys(ranked: &[&PodWithStats]) -> Vec<String> {
    ranked.iter().map(|p| p.pod.metadata.name.clone()).collect()
}

#[rstest]
#[case(true, true, Ordering::Equal)]
#[case(true, false, Ordering::Less)]
#[case(false, true, Ordering::Greater)]
#[case(false, false, Ordering::Equal)]
fn true_ranks_first(#[case] a: bool, #[case] b: bool, #[case] expected: Ordering) {
    assert_eq!(cmp_bool(a, b), expected);
}

#[rstest]
#[case(0, 1000, Ordering::Less)]
#[case(1000, 0, Ordering::Greater)]
#[case(-5, -5, Ordering::Equal)]
fn lower_priority_first(#[case] a: i32, #[case] b: i32, #[case] expected: Ordering) {
    assert_eq!(
        priority(&pod("a").priority(a).build(), &pod("b").priority(b).build()),
        expected
    );
}

#[rstest]
// (usage a, request a, usage b, request b, expected)
#[case(200 * MI, "100Mi", 50 * MI, "100Mi", Ordering::Less)] // only a exceeds
#[case(50 * MI, "100Mi", 200 * MI, "100Mi", Ordering::Greater)]
#[case(100 * MI, "100Mi", 0, "0", Ordering::Equal)] // equal to request does not exceed
#[case(1, "0", 5 * GI, "1Gi", Ordering::Equal)] // both exceed: undecided here
fn exceeding_memory_request_first(
    #[case] usage_a: u64,
    #[case] request_a: &str,
    #[case] usage_b: u64,
    #[case] request_b: &str,
    #[case] expected: Ordering,
) {
    let a = pod("a")
        .request("memory", request_a)
        .working_set(usage_a)
        .build();
    let b = pod("b")
        .request("memory", request_b)
        .working_set(usage_b)
        .build();
    assert_eq!(exceed_memory_requests(&a, &b), expected);
}

#[rstest]
#[case(300 * MI, "100Mi", 250 * MI, "100Mi", Ordering::Less)] // 200Mi above vs 150Mi above
#[case(300 * MI, "250Mi", 200 * MI, "0", Ordering::Greater)] // 50Mi above vs 200Mi above
#[case(100 * MI, "200Mi", 0, "0", Ordering::Greater)] // -100Mi vs 0: below request sorts later
#[case(100 * MI, "50Mi", 0, "50Mi", Ordering::Less)] // +50Mi vs -50Mi
fn larger_memory_above_request_first(
    #[case] usage_a: u64,
    #[case] request_a: &str,
    #[case] usage_b: u64,
    #[case] request_b: &str,
    #[case] expected: Ordering,
) {
    let a = pod("a")
        .request("memory", request_a)
        .working_set(usage_a)
        .build();
    let b = pod("b")
        .request("memory", request_b)
        .working_set(usage_b)
        .build();
    assert_eq!(memory(&a, &b), expected);
}

#[test]
fn more_processes_first() {
    let a = pod("a").processes(10).build();
    let b = pod("b").processes(200).build();
    assert_eq!(process(&a, &b), Ordering::Greater);
    assert_eq!(process(&b, &a), Ordering::Less);
}

#[test]
fn missing_stats_rank_first_in_every_stats_comparator() {
    let missing = pod("missing").no_stats().build();
    let heavy = pod("heavy")
        .working_set(10 * GI)
        .processes(1000)
        .container_fs(GI, GI, 1000, 1000)
        .build();
    let comparators: Vec<(&str, Comparator<'static>)> = vec![
        ("exceed_memory_requests", Box::new(exceed_memory_requests)),
        ("memory", Box::new(memory)),
        ("process", Box::new(process)),
        (
            "exceed_disk_requests",
            Box::new(|a, b| exceed_disk_requests(ALL_FS_STATS, Resource::EphemeralStorage, a, b)),
        ),
        (
            "disk",
            Box::new(|a, b| disk(ALL_FS_STATS, Resource::Inodes, a, b)),
        ),
    ];
    for (name, cmp) in comparators {
        assert_eq!(cmp(&missing, &heavy), Ordering::Less, "{name}");
        assert_eq!(cmp(&heavy, &missing), Ordering::Greater, "{name}");
    }
}

#[test]
fn memory_ranking_composes_request_priority_usage() {
    let pods = vec![
        // within its request, lowest priority: still after every pod above its request
        pod("guaranteed-low")
            .priority(-10)
            .request("memory", "1Gi")
            .working_set(512 * MI)
            .build(),
        pod("burstable-high")
            .priority(1000)
            .request("memory", "100Mi")
            .working_set(300 * MI)
            .build(),
        pod("besteffort-big").working_set(2 * GI).build(),
        pod("besteffort-small").working_set(100 * MI).build(),
        pod("no-stats").no_stats().build(),
    ];
    let ranked = rank_pods(
        Signal::MemoryAvailable,
        FsLayout::with_imagefs(false),
        &pods,
    );
    assert_eq!(
        keys(&ranked),
        vec![
            "no-stats",
            "besteffort-big",
            "besteffort-small",
            "burstable-high",
            "guaranteed-low"
        ]
    );
}

#[test]
fn pid_ranking_is_priority_then_processes() {
    let pods = vec![
        pod("many-high").priority(100).processes(5000).build(),
        pod("few-low").processes(3).build(),
        pod("many-low").processes(900).build(),
    ];
    assert_eq!(
        keys(&rank_pods(
            Signal::PidAvailable,
            FsLayout::with_imagefs(false),
            &pods
        )),
        vec!["many-low", "few-low", "many-high"]
    );
}

#[rstest]
// Without an imagefs every signal measures rootfs + logs + local volumes.
#[case(Signal::NodeFsAvailable, false, vec![FsStatsType::Root, FsStatsType::Logs, FsStatsType::LocalVolumeSource], Resource::EphemeralStorage)]
#[case(Signal::ImageFsInodesFree, false, vec![FsStatsType::Root, FsStatsType::Logs, FsStatsType::LocalVolumeSource], Resource::Inodes)]
// With one, nodefs measures logs + local volumes and imagefs/containerfs the writable layers.
#[case(Signal::NodeFsAvailable, true, vec![FsStatsType::Logs, FsStatsType::LocalVolumeSource], Resource::EphemeralStorage)]
#[case(Signal::NodeFsInodesFree, true, vec![FsStatsType::Logs, FsStatsType::LocalVolumeSource], Resource::Inodes)]
#[case(Signal::ImageFsAvailable, true, vec![FsStatsType::Root], Resource::EphemeralStorage)]
#[case(Signal::ContainerFsInodesFree, true, vec![FsStatsType::Root], Resource::Inodes)]
fn disk_rank_funcs(
    #[case] signal: Signal,
    #[case] dedicated: bool,
    #[case] fs: Vec<FsStatsType>,
    #[case] resource: Resource,
) {
    assert_eq!(
        rank_func(signal, FsLayout::with_imagefs(dedicated)),
        RankFunc::Disk {
            fs_stats: rank_fs(signal, dedicated),
            resource
        }
    );
    assert_eq!(rank_fs(signal, dedicated), fs.as_slice());
}

fn rank_fs(signal: Signal, dedicated: bool) -> &'static [FsStatsType] {
    match rank_func(signal, FsLayout::with_imagefs(dedicated)) {
        RankFunc::Disk { fs_stats, .. } => fs_stats,
        other => panic!("{signal} is not a disk signal: {other:?}"),
    }
}

#[rstest]
#[case(Signal::MemoryAvailable, RankFunc::Memory)]
#[case(Signal::AllocatableMemoryAvailable, RankFunc::Memory)]
#[case(Signal::PidAvailable, RankFunc::Pids)]
fn other_rank_funcs(#[case] signal: Signal, #[case] expected: RankFunc) {
    assert_eq!(rank_func(signal, FsLayout::with_imagefs(true)), expected);
    assert_eq!(rank_func(signal, FsLayout::with_imagefs(false)), expected);
}

#[test]
fn disk_usage_sums_the_measured_stats() {
    let p = pod("p")
        .container_fs(100, 10, 7, 3)
        .empty_dir("scratch", None, 1000, 50)
        .build();
    assert_eq!(
        pod_disk_usage(&p, ALL_FS_STATS, Resource::EphemeralStorage),
        1110
    );
    assert_eq!(pod_disk_usage(&p, ALL_FS_STATS, Resource::Inodes), 60);
    assert_eq!(
        pod_disk_usage(&p, NODEFS_WITH_IMAGEFS, Resource::EphemeralStorage),
        1010
    );
    assert_eq!(
        pod_disk_usage(&p, IMAGEFS_WITH_IMAGEFS, Resource::EphemeralStorage),
        100
    );
    assert_eq!(
        pod_disk_usage(&p, IMAGEFS_WITH_IMAGEFS, Resource::Inodes),
        7
    );
}

#[test]
fn memory_backed_and_unknown_volumes_are_not_local_disk() {
    let mut p = pod("p").empty_dir("tmpfs", None, 5000, 5).build();
    if let Some(empty_dir) = std::sync::Arc::make_mut(&mut p.pod).spec.volumes[0]
        .empty_dir
        .as_mut()
    {
        empty_dir.medium = "Memory".to_string();
    }
    assert_eq!(local_volume_names(&p.pod), Vec::<&str>::new());
    assert_eq!(
        pod_disk_usage(&p, ALL_FS_STATS, Resource::EphemeralStorage),
        0
    );
}

#[test]
fn disk_ranking_with_and_without_imagefs() {
    let pods = vec![
        // big writable layer, small logs
        pod("layers").container_fs(5 * GI, MI, 10, 1).build(),
        // small writable layer, big emptyDir
        pod("scratch")
            .container_fs(MI, MI, 1, 1)
            .empty_dir("data", None, 3 * GI, 5000)
            .build(),
        // within its ephemeral-storage request
        pod("requested")
            .request("ephemeral-storage", "20Gi")
            .container_fs(8 * GI, GI, 1, 1)
            .build(),
    ];
    assert_eq!(
        keys(&rank_pods(
            Signal::NodeFsAvailable,
            FsLayout::with_imagefs(false),
            &pods
        )),
        vec!["layers", "scratch", "requested"]
    );
    assert_eq!(
        keys(&rank_pods(
            Signal::NodeFsAvailable,
            FsLayout::with_imagefs(true),
            &pods
        )),
        vec!["scratch", "layers", "requested"]
    );
    assert_eq!(
        keys(&rank_pods(
            Signal::ImageFsAvailable,
            FsLayout::with_imagefs(true),
            &pods
        )),
        vec!["layers", "scratch", "requested"]
    );
    // inodes: no request for inodes, so "requested" exceeds too; most inodes first
    assert_eq!(
        keys(&rank_pods(
            Signal::NodeFsInodesFree,
            FsLayout::with_imagefs(false),
            &pods
        )),
        vec!["scratch", "layers", "requested"]
    );
}

#[test]
fn disk_ranking_priority_breaks_exceeding_ties() {
    let pods = vec![
        pod("high")
            .priority(10)
            .container_fs(9 * GI, 0, 0, 0)
            .build(),
        pod("low").priority(1).container_fs(GI, 0, 0, 0).build(),
    ];
    assert_eq!(
        keys(&rank_pods(
            Signal::NodeFsAvailable,
            FsLayout::with_imagefs(false),
            &pods
        )),
        vec!["low", "high"]
    );
}

#[test]
fn ties_keep_input_order() {
    let pods = vec![
        pod("first").build(),
        pod("second").build(),
        pod("third").build(),
    ];
    assert_eq!(
        keys(&rank_pods(
            Signal::MemoryAvailable,
            FsLayout::with_imagefs(false),
            &pods
        )),
        vec!["first", "second", "third"]
    );
}

// kubelet: eviction helpers_test.go TestOrderedByExceedsRequestMemory with pod-level
// resources: a pod whose pod-level request covers its usage does not exceed it, even when
// its containers request less.
#[test]
fn memory_ranking_reads_pod_level_requests() {
    let mut covered = pod("covered")
        .request("memory", "100Mi")
        .working_set(900 * MI)
        .build();
    std::sync::Arc::make_mut(&mut covered.pod).spec.resources =
        Some(crate::pod::ResourceRequirements {
            requests: crate::testing::list("memory=1Gi"),
            limits: crate::testing::list("memory=1Gi"),
        });
    let over = pod("over")
        .request("memory", "100Mi")
        .working_set(200 * MI)
        .build();
    assert_eq!(exceed_memory_requests(&covered, &over), Ordering::Greater);
    // Without the pod-level request, 900Mi against 100Mi exceeds and the bigger pod leads.
    std::sync::Arc::make_mut(&mut covered.pod).spec.resources = None;
    assert_eq!(exceed_memory_requests(&covered, &over), Ordering::Equal);
    assert_eq!(memory(&covered, &over), Ordering::Less);
}

// kubelet: buildSignalToRankFunc with a split image filesystem: nodefs and containerfs
// rank by logs, local volumes and writable layers; imagefs by images, which no pod owns.
#[test]
fn split_imagefs_rank_funcs() {
    let layout = FsLayout::SplitImageFs;
    for signal in [Signal::NodeFsAvailable, Signal::ContainerFsAvailable] {
        assert_eq!(
            rank_func(signal, layout),
            RankFunc::Disk {
                fs_stats: ALL_FS_STATS,
                resource: Resource::EphemeralStorage
            },
            "{signal:?}"
        );
    }
    assert_eq!(
        rank_func(Signal::ImageFsInodesFree, layout),
        RankFunc::Disk {
            fs_stats: &[],
            resource: Resource::Inodes
        }
    );
}

/// The memory ranking's key orders pods exactly as its comparators do, ties in input
/// order, over every mix of missing stats, usage at, under and over request, and priority.
#[test]
fn the_memory_rank_key_orders_as_the_comparators_do() {
    let mut pods = Vec::new();
    for (n, usage) in [None, Some(0), Some(50 * MI), Some(100 * MI), Some(300 * MI)]
        .into_iter()
        .enumerate()
    {
        for request in ["0", "100Mi"] {
            for priority in [0, 1000, -5] {
                let name = format!("p{n}-{request}-{priority}");
                let builder = pod(&name).request("memory", request).priority(priority);
                pods.push(match usage {
                    Some(bytes) => builder.working_set(bytes).build(),
                    None => builder.no_stats().build(),
                });
            }
        }
    }
    // Twice each, so that equal pods show their order is kept.
    let twice: Vec<PodWithStats> = pods.iter().chain(pods.iter()).cloned().collect();
    let by_comparators = rank_pods(Signal::MemoryAvailable, FsLayout::Shared, &twice);
    let mut by_key: Vec<&PodWithStats> = twice.iter().collect();
    by_key.sort_by_key(|p| memory_rank_key(p));
    let positions = |ranked: &[&PodWithStats]| -> Vec<usize> {
        ranked
            .iter()
            .map(|r| twice.iter().position(|p| std::ptr::eq(p, *r)).expect("in"))
            .collect()
    };
    assert_eq!(positions(&by_key), positions(&by_comparators));
}
