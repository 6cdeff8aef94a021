//! Ranking pods for eviction, as composed comparators (kubelet: pkg/kubelet/eviction/helpers.go
//! orderedBy, rankMemoryPressure, rankDiskPressureFunc, rankPIDPressure, buildSignalToRankFunc).
//!
//! Every comparator returns `Ordering::Less` when its first pod should be evicted first.
//! Pods whose stats are missing ([`PodStats::is_missing`]) rank first in every comparator
//! that needs stats, as the kubelet's do ("prioritize evicting the pod for which no stats
//! were found"). The sort is stable, so pods that tie on every comparator keep their input
//! order (the kubelet's sort is not stable; ties are arbitrary there).
use std::cmp::Ordering;

use super::pod::Pod;
use super::signal::Signal;
use super::stats::{PodStats, PodWithStats};
use super::types::{FsLayout, Resource};

/// One rule of a ranking; `Less` means `a` is evicted before `b`.
pub type Comparator<'a> = Box<dyn Fn(&PodWithStats, &PodWithStats) -> Ordering + 'a>;

/// Which of a pod's filesystem stats count towards a disk signal (kubelet: fsStatsType).
/// The kubelet also lists image layers (`fsStatsImages`), but its pod disk usage never adds
/// them, so they are left out here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsStatsType {
    /// Containers' writable layers.
    Root,
    /// Containers' logs.
    Logs,
    /// Local ephemeral volumes (emptyDir on disk).
    LocalVolumeSource,
}

const ALL_FS_STATS: &[FsStatsType] = &[
    FsStatsType::Root,
    FsStatsType::Logs,
    FsStatsType::LocalVolumeSource,
];
const NODEFS_WITH_IMAGEFS: &[FsStatsType] = &[FsStatsType::Logs, FsStatsType::LocalVolumeSource];
const IMAGEFS_WITH_IMAGEFS: &[FsStatsType] = &[FsStatsType::Root];

/// The ranking used for a signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankFunc {
    Memory,
    Pids,
    Disk {
        fs_stats: &'static [FsStatsType],
        resource: Resource,
    },
}

/// The ranking for `signal` (kubelet: buildSignalToRankFunc). On one filesystem every
/// disk signal measures everything a pod writes. With a dedicated imagefs, nodefs signals
/// measure logs and local volumes, imagefs/containerfs signals the writable layers. With a
/// split imagefs, nodefs and containerfs signals measure logs, local volumes and writable
/// layers, and imagefs signals measure nothing a pod owns (images are shared), so pods
/// rank by priority alone there.
pub fn rank_func(signal: Signal, layout: FsLayout) -> RankFunc {
    let disk = |fs_stats, resource| RankFunc::Disk { fs_stats, resource };
    let nodefs = matches!(signal, Signal::NodeFsAvailable | Signal::NodeFsInodesFree);
    let imagefs = matches!(signal, Signal::ImageFsAvailable | Signal::ImageFsInodesFree);
    match (signal, layout) {
        (Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable | Signal::MemoryStall, _) => {
            RankFunc::Memory
        }
        (Signal::PidAvailable, _) => RankFunc::Pids,
        (_, FsLayout::Shared) => disk(ALL_FS_STATS, signal.resource()),
        (_, FsLayout::DedicatedImageFs) if nodefs => disk(NODEFS_WITH_IMAGEFS, signal.resource()),
        (_, FsLayout::DedicatedImageFs) => disk(IMAGEFS_WITH_IMAGEFS, signal.resource()),
        (_, FsLayout::SplitImageFs) if imagefs => disk(&[], signal.resource()),
        (_, FsLayout::SplitImageFs) => disk(ALL_FS_STATS, signal.resource()),
    }
}

/// `pods` most evictable first for `signal`.
pub fn rank_pods(signal: Signal, layout: FsLayout, pods: &[PodWithStats]) -> Vec<&PodWithStats> {
    let mut ranked: Vec<&PodWithStats> = pods.iter().collect();
    let comparators = match rank_func(signal, layout) {
        RankFunc::Memory => memory_pressure_comparators(),
        RankFunc::Pids => pid_pressure_comparators(),
        RankFunc::Disk { fs_stats, resource } => disk_pressure_comparators(fs_stats, resource),
    };
    ranked.sort_by(|a, b| ordered_by(&comparators, a, b));
    ranked
}

/// The memory ranking of one pod as a key: ordering pods by it (lowest first, ties in
/// input order) is ordering them by [`memory_pressure_comparators`]. Each pod's request is
/// computed once instead of at every comparison: the hot path ranks its candidates with it
/// between a crossing and the kill.
pub fn memory_rank_key(p: &PodWithStats) -> MemoryRankKey {
    if p.stats.is_missing() {
        // Pods without stats first; among them, by priority alone.
        return (false, false, p.pod.priority(), std::cmp::Reverse(0));
    }
    memory_rank_key_at(
        memory_request_milli(&p.pod),
        p.pod.priority(),
        p.stats.memory_working_set_bytes.unwrap_or(0),
    )
}

/// A pod's place in the memory ranking (lower ranks first).
pub type MemoryRankKey = (bool, bool, i32, std::cmp::Reverse<i128>);

/// The memory ranking key of a pod with stats, its request (milli) and priority given, at
/// `working_set_bytes`. It never rises as the working set grows: a pod can rank no
/// earlier than its key at the most memory it could hold.
pub fn memory_rank_key_at(
    request_milli: i128,
    priority: i32,
    working_set_bytes: u64,
) -> MemoryRankKey {
    let above = i128::from(working_set_bytes) * 1000 - request_milli;
    (true, above <= 0, priority, std::cmp::Reverse(above))
}

/// The memory request the ranking compares usage with, in milli-bytes.
pub fn memory_request_milli(pod: &Pod) -> i128 {
    request_milli(pod, "memory")
}

/// Memory: usage above requests first, then lower priority, then larger usage above
/// request (kubelet: rankMemoryPressure).
pub fn memory_pressure_comparators() -> Vec<Comparator<'static>> {
    vec![
        Box::new(exceed_memory_requests),
        Box::new(priority),
        Box::new(memory),
    ]
}

/// PIDs: lower priority, then more processes (kubelet: rankPIDPressure).
pub fn pid_pressure_comparators() -> Vec<Comparator<'static>> {
    vec![Box::new(priority), Box::new(process)]
}

/// Disk bytes or inodes: usage above requests, then priority, then usage above request
/// (kubelet: rankDiskPressureFunc).
pub fn disk_pressure_comparators(
    fs_stats: &'static [FsStatsType],
    resource: Resource,
) -> Vec<Comparator<'static>> {
    vec![
        Box::new(move |a, b| exceed_disk_requests(fs_stats, resource, a, b)),
        Box::new(priority),
        Box::new(move |a, b| disk(fs_stats, resource, a, b)),
    ]
}

/// The first comparator that tells the pods apart decides (kubelet: orderedBy).
pub fn ordered_by(comparators: &[Comparator<'_>], a: &PodWithStats, b: &PodWithStats) -> Ordering {
    comparators
        .iter()
        .map(|cmp| cmp(a, b))
        .find(|ordering| ordering.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// `true` ranks before `false` (kubelet: cmpBool).
pub fn cmp_bool(a: bool, b: bool) -> Ordering {
    b.cmp(&a)
}

/// Pods without stats first; `None` when both have stats and the comparator must decide.
fn missing_stats_first(a: &PodWithStats, b: &PodWithStats) -> Option<Ordering> {
    let (a_missing, b_missing) = (a.stats.is_missing(), b.stats.is_missing());
    (a_missing || b_missing).then(|| cmp_bool(a_missing, b_missing))
}

/// Lower priority first (kubelet: priority).
pub fn priority(a: &PodWithStats, b: &PodWithStats) -> Ordering {
    a.pod.priority().cmp(&b.pod.priority())
}

/// A pod's memory usage (working set) in milli-bytes, 0 when unknown (kubelet: memoryUsage).
fn memory_usage_milli(stats: &PodStats) -> i128 {
    i128::from(stats.memory_working_set_bytes.unwrap_or(0)) * 1000
}

fn request_milli(pod: &Pod, resource: &str) -> i128 {
    i128::from(pod.ranking_request(resource).milli_value())
}

/// Pods using more memory than they request first (kubelet: exceedMemoryRequests).
pub fn exceed_memory_requests(a: &PodWithStats, b: &PodWithStats) -> Ordering {
    if let Some(ordering) = missing_stats_first(a, b) {
        return ordering;
    }
    let exceeds = |p: &PodWithStats| memory_usage_milli(&p.stats) > request_milli(&p.pod, "memory");
    cmp_bool(exceeds(a), exceeds(b))
}

/// Larger memory usage above request first (kubelet: memory).
pub fn memory(a: &PodWithStats, b: &PodWithStats) -> Ordering {
    if let Some(ordering) = missing_stats_first(a, b) {
        return ordering;
    }
    let above = |p: &PodWithStats| memory_usage_milli(&p.stats) - request_milli(&p.pod, "memory");
    above(b).cmp(&above(a))
}

/// More processes first (kubelet: process).
pub fn process(a: &PodWithStats, b: &PodWithStats) -> Ordering {
    if let Some(ordering) = missing_stats_first(a, b) {
        return ordering;
    }
    let count = |p: &PodWithStats| p.stats.process_count.unwrap_or(0);
    count(b).cmp(&count(a))
}

/// Names of the pod's volumes that use node-local disk (kubelet: localVolumeNames with
/// IsLocalEphemeralVolume). The pod model carries emptyDir sources only, so hostPath,
/// configMap and gitRepo volumes, which the kubelet also counts, are not seen here.
pub fn local_volume_names(pod: &Pod) -> Vec<&str> {
    pod.spec
        .volumes
        .iter()
        .filter(|v| v.empty_dir.as_ref().is_some_and(|e| e.medium.is_empty()))
        .map(|v| v.name.as_str())
        .collect()
}

/// A pod's disk usage (bytes, or inodes for `Resource::Inodes`) over the chosen stats
/// (kubelet: podDiskUsage). Missing fields count as zero.
pub fn pod_disk_usage(p: &PodWithStats, fs_stats: &[FsStatsType], resource: Resource) -> u128 {
    let inodes = resource == Resource::Inodes;
    let pick = |bytes: Option<u64>, inode_count: Option<u64>| {
        u128::from(if inodes { inode_count } else { bytes }.unwrap_or(0))
    };
    let mut total = 0u128;
    for container in &p.stats.containers {
        if fs_stats.contains(&FsStatsType::Root) {
            total += pick(container.rootfs_used_bytes, container.rootfs_inodes_used);
        }
        if fs_stats.contains(&FsStatsType::Logs) {
            total += pick(container.logs_used_bytes, container.logs_inodes_used);
        }
    }
    if fs_stats.contains(&FsStatsType::LocalVolumeSource) {
        for name in local_volume_names(&p.pod) {
            if let Some(volume) = p.stats.volumes.iter().find(|v| v.name == name) {
                total += pick(volume.used_bytes, volume.inodes_used);
            }
        }
    }
    total
}

/// The request a disk ranking compares usage with, in milli-units. There is no request for
/// inodes, so it is zero (kubelet: GetResourceRequestQuantity of "inodes").
fn disk_request_milli(pod: &Pod, resource: Resource) -> i128 {
    match resource {
        Resource::Inodes => 0,
        other => request_milli(pod, other.as_str()),
    }
}

fn disk_usage_milli(p: &PodWithStats, fs_stats: &[FsStatsType], resource: Resource) -> i128 {
    i128::try_from(pod_disk_usage(p, fs_stats, resource)).unwrap_or(i128::MAX / 2000) * 1000
}

/// Pods using more disk than they request first (kubelet: exceedDiskRequests).
pub fn exceed_disk_requests(
    fs_stats: &[FsStatsType],
    resource: Resource,
    a: &PodWithStats,
    b: &PodWithStats,
) -> Ordering {
    if let Some(ordering) = missing_stats_first(a, b) {
        return ordering;
    }
    let exceeds = |p: &PodWithStats| {
        disk_usage_milli(p, fs_stats, resource) > disk_request_milli(&p.pod, resource)
    };
    cmp_bool(exceeds(a), exceeds(b))
}

/// Larger disk usage above request first (kubelet: disk).
///
/// Differs from the kubelet for inodes: the kubelet subtracts the ephemeral-storage
/// request (bytes) from the inode count; we subtract the inode request (none), so inode
/// ranking is by inodes used.
pub fn disk(
    fs_stats: &[FsStatsType],
    resource: Resource,
    a: &PodWithStats,
    b: &PodWithStats,
) -> Ordering {
    if let Some(ordering) = missing_stats_first(a, b) {
        return ordering;
    }
    let above = |p: &PodWithStats| {
        disk_usage_milli(p, fs_stats, resource) - disk_request_milli(&p.pod, resource)
    };
    above(b).cmp(&above(a))
}

#[cfg(test)]
mod tests;
