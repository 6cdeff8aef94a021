//! Pod usage from the Summary API, matched to the running pods the way the kubelet's
//! cachedStatsFunc does (by pod UID), in the shape the eviction policy ranks by.
use std::collections::BTreeMap;

use super::observe::pod_working_set;
use super::summary::{self, Summary};
use crate::policy::pod::Pod;
use crate::policy::stats::{ContainerStats, PodStats, PodWithStats, VolumeStats};

/// Pairs every running pod with its stats. The kubelet keys pod stats by UID; hand-written
/// pod lists often have no UID, so a pod without one (or whose UID the summary lacks) is
/// matched by namespace/name. A pod with no stats gets `PodStats::default()`, which the
/// rankings treat as the kubelet does ("no stats found": evicted first).
pub fn pods_with_stats(pods: &[Pod], summary: &Summary) -> Vec<PodWithStats> {
    let mut by_uid: BTreeMap<&str, &summary::PodStats> = BTreeMap::new();
    let mut by_key: BTreeMap<String, &summary::PodStats> = BTreeMap::new();
    for stats in &summary.pods {
        if !stats.pod_ref.uid.is_empty() {
            by_uid.insert(stats.pod_ref.uid.as_str(), stats);
        }
        let namespace = if stats.pod_ref.namespace.is_empty() {
            "default"
        } else {
            stats.pod_ref.namespace.as_str()
        };
        by_key.insert(format!("{namespace}/{}", stats.pod_ref.name), stats);
    }
    pods.iter()
        .map(|pod| {
            let found = (!pod.metadata.uid.is_empty())
                .then(|| by_uid.get(pod.metadata.uid.as_str()))
                .flatten()
                .or_else(|| by_key.get(&pod.key()));
            PodWithStats {
                pod: pod.clone().into(),
                stats: found.map(|s| convert(s)).unwrap_or_default(),
            }
        })
        .collect()
}

/// The Summary API's pod stats in the policy's shape.
fn convert(stats: &summary::PodStats) -> PodStats {
    PodStats {
        memory_working_set_bytes: pod_working_set(stats),
        containers: stats
            .containers
            .iter()
            .map(|c| ContainerStats {
                name: c.name.clone(),
                memory_working_set_bytes: c.memory.as_ref().and_then(|m| m.working_set_bytes),
                rootfs_used_bytes: c.rootfs.as_ref().and_then(|f| f.used_bytes),
                rootfs_inodes_used: c.rootfs.as_ref().and_then(|f| f.inodes_used),
                logs_used_bytes: c.logs.as_ref().and_then(|f| f.used_bytes),
                logs_inodes_used: c.logs.as_ref().and_then(|f| f.inodes_used),
            })
            .collect(),
        volumes: stats
            .volume
            .iter()
            .map(|v| VolumeStats {
                name: v.name.clone(),
                used_bytes: v.fs.used_bytes,
                inodes_used: v.fs.inodes_used,
            })
            .collect(),
        ephemeral_storage_used_bytes: stats.ephemeral_storage.as_ref().and_then(|e| e.used_bytes),
        process_count: stats.process_stats.as_ref().and_then(|p| p.process_count),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::pod::parse_pod_list;

    fn pods(yaml: &str) -> Vec<Pod> {
        parse_pod_list(yaml, "pods.yaml").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn stats_match_by_uid_first_then_by_namespace_and_name() {
        let pods = pods(
            "items:
- metadata: {name: a, namespace: x, uid: u-a}
  spec: {containers: [{name: c, image: i}]}
- metadata: {name: b}
  spec: {containers: [{name: c, image: i}]}
- metadata: {name: c, namespace: x, uid: u-c}
  spec: {containers: [{name: c, image: i}]}
",
        );
        let summary: Summary = serde_json::from_str(
            r#"{"pods": [
                {"podRef": {"name": "renamed", "namespace": "x", "uid": "u-a"}, "memory": {"workingSetBytes": 1}},
                {"podRef": {"name": "b", "namespace": "default"}, "memory": {"workingSetBytes": 2},
                 "containers": [{"name": "c", "memory": {"workingSetBytes": 9}, "rootfs": {"usedBytes": 5, "inodesUsed": 6}, "logs": {"usedBytes": 7}}],
                 "volume": [{"name": "v", "usedBytes": 8}], "ephemeral-storage": {"usedBytes": 20},
                 "process_stats": {"process_count": 3}}
            ]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let with = pods_with_stats(&pods, &summary);
        assert_eq!(
            with[0].stats.memory_working_set_bytes,
            Some(1),
            "matched by uid despite the name"
        );
        let b = &with[1].stats;
        assert_eq!(
            b.memory_working_set_bytes,
            Some(2),
            "no uid: matched by default/b"
        );
        assert_eq!(b.containers[0].memory_working_set_bytes, Some(9));
        assert_eq!(b.containers[0].rootfs_used_bytes, Some(5));
        assert_eq!(b.containers[0].rootfs_inodes_used, Some(6));
        assert_eq!(b.containers[0].logs_used_bytes, Some(7));
        assert_eq!(b.volumes[0].used_bytes, Some(8));
        assert_eq!(b.ephemeral_storage_used_bytes, Some(20));
        assert_eq!(b.process_count, Some(3));
        assert!(with[2].stats.is_missing(), "no stats for x/c");
    }
}
