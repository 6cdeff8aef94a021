//! The kubelet Summary API (`/stats/summary`), the subset the eviction manager reads.
//!
//! Field names follow k8s.io/kubelet/pkg/apis/stats/v1alpha1 types.go exactly (camelCase,
//! except `ephemeral-storage` and `process_stats`, which are spelled that way upstream).
//! Every statistic is optional, as upstream: a kernel or runtime may not report it, and a
//! missing statistic means "no observation", never an error. Unknown fields are ignored so
//! a real `kubectl get --raw /api/v1/nodes/NODE/proxy/stats/summary` document loads.
use serde::Deserialize;

use super::timestamp::Timestamp;

/// The whole summary document.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Summary {
    pub(crate) node: NodeStats,
    pub(crate) pods: Vec<PodStats>,
}

/// Node-level statistics (`summary.node`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct NodeStats {
    pub(crate) node_name: String,
    /// Stats of the node's system containers: "kubelet", "runtime", "misc" and "pods" (the
    /// cgroup that holds every pod; the kubelet derives allocatableMemory.available from it).
    pub(crate) system_containers: Vec<ContainerStats>,
    pub(crate) memory: Option<MemoryStats>,
    /// I/O statistics: only their PSI is read (the disk contention conditions).
    pub(crate) io: Option<IoStats>,
    pub(crate) fs: Option<FsStats>,
    pub(crate) runtime: Option<RuntimeStats>,
    pub(crate) rlimit: Option<RlimitStats>,
}

/// Memory statistics (node, pod, container).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct MemoryStats {
    pub(crate) time: Option<Timestamp>,
    pub(crate) available_bytes: Option<u64>,
    pub usage_bytes: Option<u64>,
    pub(crate) working_set_bytes: Option<u64>,
    pub(crate) rss_bytes: Option<u64>,
    pub(crate) page_faults: Option<u64>,
    pub(crate) major_page_faults: Option<u64>,
    /// Stall information (kubelet 1.33+, KubeletPSI): read for the contention conditions.
    pub(crate) psi: Option<PsiStats>,
}

/// I/O statistics (node, system container); only `psi` is read.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct IoStats {
    pub(crate) psi: Option<PsiStats>,
}

/// Pressure stall information of one resource (`some` and `full`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct PsiStats {
    pub(crate) full: Option<PsiData>,
    pub(crate) some: Option<PsiData>,
}

/// One PSI line: the share of wall time stalled, in percent, over 10 s, 60 s and 300 s.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct PsiData {
    pub(crate) avg10: f64,
    pub(crate) avg60: f64,
    pub(crate) avg300: f64,
}

/// Filesystem statistics (node fs, image fs, container rootfs and logs, volumes).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct FsStats {
    pub(crate) time: Option<Timestamp>,
    pub(crate) available_bytes: Option<u64>,
    pub(crate) capacity_bytes: Option<u64>,
    pub(crate) used_bytes: Option<u64>,
    pub(crate) inodes_free: Option<u64>,
    pub(crate) inodes: Option<u64>,
    pub(crate) inodes_used: Option<u64>,
}

/// The container runtime's filesystems (`node.runtime`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct RuntimeStats {
    /// Where images (and, unless `containerFs` is split off, writable layers) live.
    pub(crate) image_fs: Option<FsStats>,
    /// Where writable layers live when the runtime splits them from images (KEP-4191).
    pub(crate) container_fs: Option<FsStats>,
}

/// Process limits (`node.rlimit`): pid.available = maxpid − curproc.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct RlimitStats {
    pub(crate) time: Option<Timestamp>,
    pub(crate) maxpid: Option<u64>,
    pub(crate) curproc: Option<u64>,
}

/// Per-pod statistics (`summary.pods[]`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct PodStats {
    pub(crate) pod_ref: PodReference,
    pub(crate) containers: Vec<ContainerStats>,
    pub(crate) memory: Option<MemoryStats>,
    pub(crate) volume: Vec<VolumeStats>,
    #[serde(rename = "ephemeral-storage")]
    pub(crate) ephemeral_storage: Option<FsStats>,
    #[serde(rename = "process_stats")]
    pub(crate) process_stats: Option<ProcessStats>,
}

/// Identifies the pod a `PodStats` belongs to.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct PodReference {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) uid: String,
}

/// Per-container (and system container) statistics.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ContainerStats {
    pub(crate) name: String,
    pub(crate) memory: Option<MemoryStats>,
    /// Read for the "pods" system container's disk contention condition.
    pub(crate) io: Option<IoStats>,
    pub(crate) rootfs: Option<FsStats>,
    pub(crate) logs: Option<FsStats>,
}

/// A pod volume's usage; upstream embeds `FsStats` inline.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct VolumeStats {
    pub(crate) name: String,
    #[serde(flatten)]
    pub(crate) fs: FsStats,
}

/// `process_stats` of a pod.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ProcessStats {
    pub(crate) process_count: Option<u64>,
}

impl NodeStats {
    /// The `full` stall averages a contention condition follows, from the summary's node
    /// memory and I/O and the "pods" system container's, as the kubelet reads them.
    pub(crate) fn stall_averages(
        &self,
        condition: crate::policy::contention::ContentionCondition,
    ) -> Option<crate::policy::contention::StallAverages> {
        use crate::policy::contention::{ContentionCondition, StallAverages};
        let pods = self.system_container("pods");
        let psi = match condition {
            ContentionCondition::SystemMemory => self.memory.as_ref()?.psi.as_ref(),
            ContentionCondition::SystemDisk => self.io.as_ref()?.psi.as_ref(),
            ContentionCondition::KubepodsMemory => pods?.memory.as_ref()?.psi.as_ref(),
            ContentionCondition::KubepodsDisk => pods?.io.as_ref()?.psi.as_ref(),
        };
        let full = psi?.full?;
        Some(StallAverages {
            avg10: full.avg10,
            avg60: full.avg60,
        })
    }

    /// A system container by name ("pods", "kubelet", "runtime", "misc").
    pub(crate) fn system_container(&self, name: &str) -> Option<&ContainerStats> {
        self.system_containers.iter().find(|c| c.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trimmed but verbatim-shaped `/stats/summary` answer from a kubelet.
    const REAL_SHAPED: &str = r#"{
      "node": {
        "nodeName": "worker-1",
        "systemContainers": [
          {"name": "kubelet", "startTime": "2024-05-01T09:00:00Z",
           "memory": {"time": "2024-05-01T10:00:00Z", "usageBytes": 60000000, "workingSetBytes": 50000000}},
          {"name": "pods", "startTime": "2024-05-01T09:00:00Z",
           "memory": {"time": "2024-05-01T10:00:00Z", "availableBytes": 1000, "usageBytes": 3000, "workingSetBytes": 2000}}
        ],
        "cpu": {"time": "2024-05-01T10:00:00Z", "usageNanoCores": 1000},
        "memory": {"time": "2024-05-01T10:00:00Z", "availableBytes": 524288000, "usageBytes": 10200547328,
                   "workingSetBytes": 10213228544, "rssBytes": 1, "pageFaults": 2, "majorPageFaults": 3},
        "fs": {"time": "2024-05-01T10:00:00Z", "availableBytes": 5, "capacityBytes": 10, "usedBytes": 5,
               "inodesFree": 7, "inodes": 9, "inodesUsed": 2},
        "runtime": {"imageFs": {"time": "2024-05-01T10:00:00Z", "availableBytes": 5, "capacityBytes": 10}},
        "rlimit": {"time": "2024-05-01T10:00:00Z", "maxpid": 4194304, "curproc": 1234}
      },
      "pods": [{
        "podRef": {"name": "web-0", "namespace": "shop", "uid": "u-1"},
        "startTime": "2024-05-01T09:30:00Z",
        "containers": [{"name": "app", "memory": {"workingSetBytes": 100},
                        "rootfs": {"usedBytes": 10, "inodesUsed": 1}, "logs": {"usedBytes": 20}}],
        "memory": {"workingSetBytes": 120},
        "volume": [{"name": "cache", "usedBytes": 30, "inodesUsed": 3, "pvcRef": {"name": "x"}}],
        "ephemeral-storage": {"usedBytes": 60},
        "process_stats": {"process_count": 4}
      }]
    }"#;

    #[test]
    fn real_shaped_summary_loads_every_field_the_eviction_manager_reads() {
        let s: Summary =
            serde_json::from_str(REAL_SHAPED).unwrap_or_else(|e| panic!("summary: {e}"));
        let mem = s.node.memory.as_ref().expect("node.memory");
        assert_eq!(mem.available_bytes, Some(524_288_000));
        assert_eq!(mem.working_set_bytes, Some(10_213_228_544));
        assert_eq!(s.node.fs.as_ref().and_then(|f| f.inodes_free), Some(7));
        let image_fs = s
            .node
            .runtime
            .as_ref()
            .and_then(|r| r.image_fs.as_ref())
            .expect("imageFs");
        assert_eq!(image_fs.capacity_bytes, Some(10));
        let rlimit = s.node.rlimit.as_ref().expect("rlimit");
        assert_eq!(
            (rlimit.maxpid, rlimit.curproc),
            (Some(4_194_304), Some(1234))
        );
        let pods = s
            .node
            .system_container("pods")
            .and_then(|c| c.memory.as_ref())
            .expect("pods container");
        assert_eq!(pods.available_bytes, Some(1000));
        let pod = &s.pods[0];
        assert_eq!(
            (pod.pod_ref.namespace.as_str(), pod.pod_ref.name.as_str()),
            ("shop", "web-0")
        );
        assert_eq!(pod.volume[0].name, "cache");
        assert_eq!(pod.volume[0].fs.used_bytes, Some(30));
        assert_eq!(
            pod.ephemeral_storage.as_ref().and_then(|e| e.used_bytes),
            Some(60)
        );
        assert_eq!(
            pod.process_stats.as_ref().and_then(|p| p.process_count),
            Some(4)
        );
        assert_eq!(
            pod.containers[0].logs.as_ref().and_then(|l| l.used_bytes),
            Some(20)
        );
    }
}
