//! What the policy knows of a pod's usage: the Summary API's pod stats, as plain data.
//! Eviction (messages, local storage limits) and ranking both read these.
use super::pod::Pod;

/// A container's stats (Summary API `containers[]`): its memory working set and its
/// writable layer and logs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerStats {
    pub name: String,
    /// `memory.workingSetBytes`: names the container in memory eviction messages.
    pub memory_working_set_bytes: Option<u64>,
    pub rootfs_used_bytes: Option<u64>,
    pub rootfs_inodes_used: Option<u64>,
    pub logs_used_bytes: Option<u64>,
    pub logs_inodes_used: Option<u64>,
}

/// A pod volume's usage (Summary API `volume[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeStats {
    pub name: String,
    pub used_bytes: Option<u64>,
    pub inodes_used: Option<u64>,
}

/// A pod's usage (Summary API `pods[]`). `PodStats::default()` stands for "no stats were
/// found for this pod", which the rankings treat as the kubelet does (such pods first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodStats {
    pub memory_working_set_bytes: Option<u64>,
    pub containers: Vec<ContainerStats>,
    pub volumes: Vec<VolumeStats>,
    /// Total local ephemeral storage the pod uses (rootfs, logs, emptyDirs, etc-hosts).
    pub ephemeral_storage_used_bytes: Option<u64>,
    pub process_count: Option<u64>,
}

impl PodStats {
    /// True when nothing at all is known about the pod's usage.
    pub fn is_missing(&self) -> bool {
        *self == PodStats::default()
    }
}

/// An active pod and its current usage.
#[derive(Clone, Debug, PartialEq)]
pub struct PodWithStats {
    pub pod: std::sync::Arc<Pod>,
    pub stats: PodStats,
}
