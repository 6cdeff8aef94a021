//! Signal observations from a Summary API document, as the kubelet's
//! makeSignalObservations (pkg/kubelet/eviction/helpers.go) and
//! makeMemoryAvailableSignalObservation (helpers_linux.go) build them.
use super::summary::{FsStats, Summary};
use super::timestamp::Timestamp;
use crate::policy::signal::Observations;
use crate::policy::summary::{self, AllocatableStat, FsStat, MemoryStat, NodeStats, PidStat};
use crate::policy::types::{FsLayout, Time};

/// What the summary alone does not say, needed for allocatableMemory.available when the
/// summary has no "pods" system container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodsCgroupLimit {
    /// The pods cgroup's memory limit in bytes (node capacity − system-reserved −
    /// kube-reserved, as the kubelet sets it when enforcing node allocatable on pods).
    pub memory_bytes: Option<i64>,
}

/// Whether the image filesystem is dedicated (the kubelet's "withImageFs"): an explicit
/// choice wins; otherwise dedicated iff `node.runtime.imageFs` is present and differs from
/// `node.fs` in capacity or available bytes (docs/simulate.md, "Semantics").
pub(crate) fn has_dedicated_image_fs(summary: &Summary, explicit: Option<bool>) -> bool {
    if let Some(dedicated) = explicit {
        return dedicated;
    }
    let image_fs = summary
        .node
        .runtime
        .as_ref()
        .and_then(|r| r.image_fs.as_ref());
    match (image_fs, summary.node.fs.as_ref()) {
        (Some(image), Some(node)) => {
            image.capacity_bytes != node.capacity_bytes
                || image.available_bytes != node.available_bytes
        }
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// The observation time of a statistic: its own timestamp when the summary has one,
/// otherwise the step's time (docs/simulate.md: a summary without times is always fresh).
fn stat_time(time: Option<Timestamp>, step_time: Time) -> Time {
    time.map_or(step_time, Timestamp::since_epoch)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Builds the observations of one synchronize, with the policy's one builder
/// ([`crate::policy::summary::make_signal_observations`]) over the summary's stats:
///
/// * memory.available: node.memory.availableBytes; capacity = available + workingSet.
/// * allocatableMemory.available: from the "pods" system container the same way; when the
///   summary has none (a hand-written one), the pods cgroup limit minus the sum of the pods'
///   working sets, timed like node.memory.
/// * nodefs / imagefs / containerfs bytes and inodes from node.fs and node.runtime; a
///   missing containerFs is the imagefs when dedicated, else the nodefs (what the kubelet's
///   stats providers report for a runtime that does not split writable layers off).
/// * pid.available = rlimit.maxpid − rlimit.curproc, capacity maxpid.
///
/// A statistic with a missing field gives no observation, as upstream.
pub fn make_signal_observations(
    summary: &Summary,
    pods_limit: PodsCgroupLimit,
    layout: FsLayout,
    step_time: Time,
) -> Observations {
    summary::make_signal_observations(&node_stats(summary, pods_limit, step_time), layout)
}

/// The filesystem layout of the summary: one filesystem unless the imagefs is dedicated
/// (see [`has_dedicated_image_fs`]); a dedicated one is split (images alone on it, the
/// writable layers on nodefs: KubeletSeparateDiskGC) when the summary reports a
/// `node.runtime.containerFs` that differs from its `imageFs` in capacity or available
/// bytes, as a runtime with a separate image store reports it.
pub fn fs_layout(summary: &Summary, explicit_dedicated: Option<bool>) -> FsLayout {
    if !has_dedicated_image_fs(summary, explicit_dedicated) {
        return FsLayout::Shared;
    }
    let runtime = summary.node.runtime.as_ref();
    let image_fs = runtime.and_then(|r| r.image_fs.as_ref());
    let container_fs = runtime.and_then(|r| r.container_fs.as_ref());
    match (image_fs, container_fs) {
        (Some(image), Some(container))
            if image.capacity_bytes != container.capacity_bytes
                || image.available_bytes != container.available_bytes =>
        {
            FsLayout::SplitImageFs
        }
        _ => FsLayout::DedicatedImageFs,
    }
}

/// The summary's node stats in the policy's shape.
fn node_stats(summary: &Summary, pods_limit: PodsCgroupLimit, step_time: Time) -> NodeStats {
    let node = &summary.node;
    let memory_stat = |memory: &super::summary::MemoryStats| {
        Some(MemoryStat {
            available_bytes: memory.available_bytes?,
            working_set_bytes: memory.working_set_bytes?,
            time: stat_time(memory.time, step_time),
        })
    };
    let pods_container = node
        .system_container("pods")
        .and_then(|c| c.memory.as_ref())
        .and_then(memory_stat);
    let allocatable = match (pods_container, pods_limit.memory_bytes) {
        (Some(pods), _) => Some(AllocatableStat::PodsCgroup(pods)),
        (None, Some(limit_bytes)) => Some(AllocatableStat::Derived {
            limit_bytes,
            pods_working_set_bytes: summary
                .pods
                .iter()
                .map(|p| pod_working_set(p).unwrap_or(0))
                .fold(0u64, u64::saturating_add),
            time: stat_time(node.memory.as_ref().and_then(|m| m.time), step_time),
        }),
        (None, None) => None,
    };
    let fs_stat = |fs: &FsStats| FsStat {
        available_bytes: fs.available_bytes,
        capacity_bytes: fs.capacity_bytes,
        inodes_free: fs.inodes_free,
        inodes: fs.inodes,
        time: stat_time(fs.time, step_time),
    };
    let runtime = node.runtime.as_ref();
    NodeStats {
        memory: node.memory.as_ref().and_then(memory_stat),
        allocatable,
        nodefs: node.fs.as_ref().map(fs_stat),
        imagefs: runtime.and_then(|r| r.image_fs.as_ref()).map(fs_stat),
        containerfs: runtime.and_then(|r| r.container_fs.as_ref()).map(fs_stat),
        pids: node.rlimit.as_ref().and_then(|r| {
            Some(PidStat {
                max: r.maxpid?,
                current: r.curproc?,
                time: stat_time(r.time, step_time),
            })
        }),
    }
}

/// A pod's memory working set: the pod-level figure the kubelet ranks by, or, when a
/// hand-written summary gives only containers, their sum.
pub(crate) fn pod_working_set(pod: &super::summary::PodStats) -> Option<u64> {
    if let Some(ws) = pod.memory.as_ref().and_then(|m| m.working_set_bytes) {
        return Some(ws);
    }
    let per_container: Vec<u64> = pod
        .containers
        .iter()
        .filter_map(|c| c.memory.as_ref().and_then(|m| m.working_set_bytes))
        .collect();
    if per_container.is_empty() {
        None
    } else {
        Some(per_container.into_iter().fold(0u64, u64::saturating_add))
    }
}

/// The memory capacity the summary implies (available + working set), the kubelet's
/// definition of node memory capacity for eviction.
pub fn summary_memory_capacity(summary: &Summary) -> Option<i64> {
    let memory = summary.node.memory.as_ref()?;
    Some(to_i64(
        memory
            .available_bytes?
            .saturating_add(memory.working_set_bytes?),
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rstest::rstest;

    use super::*;
    use crate::policy::signal::Signal;

    const GI: u64 = 1 << 30;
    const MI: u64 = 1 << 20;

    fn summary(json: &str) -> Summary {
        serde_json::from_str(json).unwrap_or_else(|e| panic!("summary: {e}"))
    }

    #[test]
    fn memory_available_capacity_is_available_plus_working_set() {
        let s = summary(&format!(
            r#"{{"node": {{"memory": {{"time": "2024-05-01T10:00:00Z", "availableBytes": {}, "workingSetBytes": {}}}}}}}"#,
            300 * MI,
            10 * GI - 300 * MI
        ));
        let obs = make_signal_observations(
            &s,
            PodsCgroupLimit::default(),
            FsLayout::with_imagefs(false),
            Duration::from_secs(7),
        );
        let m = obs
            .get(&Signal::MemoryAvailable)
            .expect("memory.available observed");
        assert_eq!(
            (m.available, m.capacity),
            ((300 * MI) as i64, (10 * GI) as i64)
        );
        assert_eq!(
            m.time,
            Duration::from_secs(1_714_557_600),
            "the summary's own time, not the step's"
        );
        assert!(
            !obs.contains_key(&Signal::AllocatableMemoryAvailable),
            "no pods container, no limit: no signal"
        );
    }

    #[test]
    fn allocatable_memory_prefers_the_pods_system_container() {
        let s = summary(
            r#"{"node": {"systemContainers": [{"name": "pods", "memory": {"availableBytes": 100, "workingSetBytes": 900}}]},
                "pods": [{"podRef": {"name": "a"}, "memory": {"workingSetBytes": 5}}]}"#,
        );
        let limit = PodsCgroupLimit {
            memory_bytes: Some(10_000),
        };
        let obs = make_signal_observations(
            &s,
            limit,
            FsLayout::with_imagefs(false),
            Duration::from_secs(3),
        );
        let a = obs
            .get(&Signal::AllocatableMemoryAvailable)
            .expect("allocatable observed");
        assert_eq!(
            (a.available, a.capacity, a.time),
            (100, 1000, Duration::from_secs(3))
        );
    }

    #[test]
    fn allocatable_memory_falls_back_to_limit_minus_pod_working_sets() {
        let s = summary(
            r#"{"node": {},
                "pods": [{"podRef": {"name": "a"}, "memory": {"workingSetBytes": 3000}},
                         {"podRef": {"name": "b"}, "containers": [{"name": "c1", "memory": {"workingSetBytes": 1000}},
                                                                   {"name": "c2", "memory": {"workingSetBytes": 500}}]}]}"#,
        );
        let limit = PodsCgroupLimit {
            memory_bytes: Some(10_000),
        };
        let obs =
            make_signal_observations(&s, limit, FsLayout::with_imagefs(false), Duration::ZERO);
        let a = obs
            .get(&Signal::AllocatableMemoryAvailable)
            .expect("allocatable observed");
        assert_eq!((a.available, a.capacity), (5500, 10_000));
    }

    #[rstest]
    #[case::shared_fs_mirrors_nodefs(false, 40)]
    #[case::dedicated_imagefs_holds_layers(true, 70)]
    fn container_fs_defaults_to_the_filesystem_holding_writable_layers(
        #[case] dedicated: bool,
        #[case] available: i64,
    ) {
        let s = summary(
            r#"{"node": {"fs": {"availableBytes": 40, "capacityBytes": 100, "inodesFree": 4, "inodes": 10},
                         "runtime": {"imageFs": {"availableBytes": 70, "capacityBytes": 200}}}}"#,
        );
        let obs = make_signal_observations(
            &s,
            PodsCgroupLimit::default(),
            FsLayout::with_imagefs(dedicated),
            Duration::ZERO,
        );
        assert_eq!(
            obs.get(&Signal::ContainerFsAvailable).map(|o| o.available),
            Some(available)
        );
        assert_eq!(
            obs.get(&Signal::NodeFsInodesFree)
                .map(|o| (o.available, o.capacity)),
            Some((4, 10))
        );
        assert_eq!(
            obs.get(&Signal::ImageFsAvailable).map(|o| o.capacity),
            Some(200)
        );
        assert!(
            !obs.contains_key(&Signal::ImageFsInodesFree),
            "imageFs gave no inode counts"
        );
    }

    #[test]
    fn pid_available_is_maxpid_minus_curproc() {
        let s = summary(r#"{"node": {"rlimit": {"maxpid": 1000, "curproc": 990}}}"#);
        let obs = make_signal_observations(
            &s,
            PodsCgroupLimit::default(),
            FsLayout::with_imagefs(false),
            Duration::ZERO,
        );
        let p = obs
            .get(&Signal::PidAvailable)
            .expect("pid.available observed");
        assert_eq!((p.available, p.capacity), (10, 1000));
    }

    #[rstest]
    #[case::no_image_fs(
        r#"{"node": {"fs": {"availableBytes": 1, "capacityBytes": 2}}}"#,
        None,
        false
    )]
    #[case::same_as_nodefs(
        r#"{"node": {"fs": {"availableBytes": 1, "capacityBytes": 2}, "runtime": {"imageFs": {"availableBytes": 1, "capacityBytes": 2}}}}"#,
        None,
        false
    )]
    #[case::differs(
        r#"{"node": {"fs": {"availableBytes": 1, "capacityBytes": 2}, "runtime": {"imageFs": {"availableBytes": 5, "capacityBytes": 9}}}}"#,
        None,
        true
    )]
    #[case::explicit_wins(r#"{"node": {}}"#, Some(true), true)]
    fn dedicated_image_fs_detection(
        #[case] json: &str,
        #[case] explicit: Option<bool>,
        #[case] dedicated: bool,
    ) {
        assert_eq!(has_dedicated_image_fs(&summary(json), explicit), dedicated);
    }

    #[rstest]
    #[case::one_filesystem(
        r#"{"node": {"fs": {"availableBytes": 1, "capacityBytes": 2}}}"#,
        FsLayout::Shared
    )]
    #[case::imagefs_holds_the_writable_layers(
        r#"{"node": {"fs": {"availableBytes": 1, "capacityBytes": 2}, "runtime": {"imageFs": {"availableBytes": 5, "capacityBytes": 9}, "containerFs": {"availableBytes": 5, "capacityBytes": 9}}}}"#,
        FsLayout::DedicatedImageFs
    )]
    #[case::split_writable_layers_on_nodefs(
        r#"{"node": {"fs": {"availableBytes": 1, "capacityBytes": 2}, "runtime": {"imageFs": {"availableBytes": 5, "capacityBytes": 9}, "containerFs": {"availableBytes": 1, "capacityBytes": 2}}}}"#,
        FsLayout::SplitImageFs
    )]
    fn fs_layout_detection(#[case] json: &str, #[case] expected: FsLayout) {
        assert_eq!(fs_layout(&summary(json), None), expected);
    }

    #[test]
    fn split_layout_containerfs_signals_read_the_reported_containerfs_else_nodefs() {
        // kubelet: makeSignalObservations reads runtime.containerFs as is.
        let s = summary(
            r#"{"node": {"fs": {"availableBytes": 10, "capacityBytes": 20}, "runtime": {"imageFs": {"availableBytes": 50, "capacityBytes": 90}, "containerFs": {"availableBytes": 10, "capacityBytes": 20}}}}"#,
        );
        let obs = make_signal_observations(
            &s,
            PodsCgroupLimit::default(),
            FsLayout::SplitImageFs,
            Duration::ZERO,
        );
        assert_eq!(obs[&Signal::ContainerFsAvailable].available, 10);
        assert_eq!(obs[&Signal::ImageFsAvailable].available, 50);
    }
}
