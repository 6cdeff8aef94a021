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
    pub node: NodeStats,
    pub pods: Vec<PodStats>,
}

/// Node-level statistics (`summary.node`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeStats {
    pub node_name: String,
    /// Stats of the node's system containers: "kubelet", "runtime", "misc" and "pods" (the
    /// cgroup that holds every pod; the kubelet derives allocatableMemory.available from it).
    pub system_containers: Vec<ContainerStats>,
    pub memory: Option<MemoryStats>,
    /// I/O statistics: only their PSI is read (the disk contention conditions).
    pub io: Option<IoStats>,
    pub fs: Option<FsStats>,
    pub runtime: Option<RuntimeStats>,
    pub rlimit: Option<RlimitStats>,
}

/// Memory statistics (node, pod, container).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MemoryStats {
    pub time: Option<Timestamp>,
    pub available_bytes: Option<u64>,
    pub usage_bytes: Option<u64>,
    pub working_set_bytes: Option<u64>,
    pub rss_bytes: Option<u64>,
    pub page_faults: Option<u64>,
    pub major_page_faults: Option<u64>,
    /// Stall information (kubelet 1.33+, KubeletPSI): read for the contention conditions.
    pub psi: Option<PsiStats>,
}

/// I/O statistics (node, system container); only `psi` is read.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IoStats {
    pub psi: Option<PsiStats>,
}

/// Pressure stall information of one resource (`some` and `full`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PsiStats {
    pub full: Option<PsiData>,
    pub some: Option<PsiData>,
}

/// One PSI line: the share of wall time stalled, in percent, over 10 s, 60 s and 300 s.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PsiData {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
}

/// Filesystem statistics (node fs, image fs, container rootfs and logs, volumes).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct FsStats {
    pub time: Option<Timestamp>,
    pub available_bytes: Option<u64>,
    pub capacity_bytes: Option<u64>,
    pub used_bytes: Option<u64>,
    pub inodes_free: Option<u64>,
    pub inodes: Option<u64>,
    pub inodes_used: Option<u64>,
}

/// The container runtime's filesystems (`node.runtime`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RuntimeStats {
    /// Where images (and, unless `containerFs` is split off, writable layers) live.
    pub image_fs: Option<FsStats>,
    /// Where writable layers live when the runtime splits them from images (KEP-4191).
    pub container_fs: Option<FsStats>,
}

/// Process limits (`node.rlimit`): pid.available = maxpid − curproc.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct RlimitStats {
    pub time: Option<Timestamp>,
    pub maxpid: Option<u64>,
    pub curproc: Option<u64>,
}

/// Per-pod statistics (`summary.pods[]`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodStats {
    pub pod_ref: PodReference,
    pub containers: Vec<ContainerStats>,
    pub memory: Option<MemoryStats>,
    pub volume: Vec<VolumeStats>,
    #[serde(rename = "ephemeral-storage")]
    pub ephemeral_storage: Option<FsStats>,
    #[serde(rename = "process_stats")]
    pub process_stats: Option<ProcessStats>,
}

/// Identifies the pod a `PodStats` belongs to.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

/// Per-container (and system container) statistics.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ContainerStats {
    pub name: String,
    pub memory: Option<MemoryStats>,
    /// Read for the "pods" system container's disk contention condition.
    pub io: Option<IoStats>,
    pub rootfs: Option<FsStats>,
    pub logs: Option<FsStats>,
}

/// A pod volume's usage; upstream embeds `FsStats` inline.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VolumeStats {
    pub name: String,
    #[serde(flatten)]
    pub fs: FsStats,
}

/// `process_stats` of a pod.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ProcessStats {
    pub process_count: Option<u64>,
}

impl NodeStats {
    /// The `full` stall averages a contention condition follows, from the summary's node
    /// memory and I/O and the "pods" system container's, as the kubelet reads them.
    pub fn stall_averages(
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
    pub fn system_container(&self, name: &str) -> Option<&ContainerStats> {
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
