//! What the agent computes from a pod it has read: everything the policy, the runtime and
//! the API derive from a manifest, so that a value that parses but breaks a later step
//! is found too.
use std::collections::BTreeMap;

use monitor::policy::pod::Pod;
use monitor::policy::qos::{
    CgroupOptions, container_resource_config, oom_score_adj, pod_resource_config, qos_tier_configs,
};
use monitor::policy::quantity::Quantity;

pub fn exercise_pod(pod: &Pod) {
    let _ = (pod.key(), pod.qos_class(), pod.priority());
    let _ = (pod.is_critical(), pod.is_node_critical(), pod.is_terminal());
    let _ = pod.termination_grace_period_seconds();
    let _ = pod.has_pod_level_resources();
    for resource in [
        "cpu",
        "memory",
        "ephemeral-storage",
        "pods",
        "hugepages-2Mi",
    ] {
        let _ = pod.requests(resource).to_string();
        let _ = pod.ranking_request(resource).value();
        let _ = pod.limits(resource).map(|q| q.to_string());
    }
    for container in pod.all_containers() {
        let _ = (container.pull_policy(), container.is_restartable_init());
        let _ = pod.uses_image(&container.image);
    }
    // The cgroup settings and OOM scores the runtime writes for the pod.
    let options = CgroupOptions::default();
    let _ = pod_resource_config(pod, &options).cpu_weight();
    for container in pod.all_containers() {
        let _ = container_resource_config(container, &options).cpu_weight();
        for capacity in [0, 1 << 30, i64::MAX] {
            let _ = oom_score_adj(pod, container, capacity);
        }
    }
    for memory in [
        Quantity::ZERO,
        Quantity::from_units(1 << 30),
        Quantity::from_units(i64::MAX),
    ] {
        let allocatable = BTreeMap::from([("memory".to_string(), memory)]);
        let _ = qos_tier_configs(std::slice::from_ref(pod), &allocatable, Some(50));
    }
    let _ = serde_json::to_string(pod);
}
