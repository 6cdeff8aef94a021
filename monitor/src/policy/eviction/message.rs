//! Eviction messages worded as the kubelet's (kubelet: helpers.go evictionMessage,
//! getThresholdMetInfo), so users searching for them find the Kubernetes docs.
use crate::policy::quantity::{Quantity, QuantityOrPercent};
use crate::policy::signal::{Observations, Threshold, format_amount};
use crate::policy::stats::PodWithStats;
use crate::policy::types::Resource;

/// "The node was low on resource: memory. Threshold quantity: 500Mi, available: 300Mi.
/// Pod default/hog was using 2Gi, request is 100Mi, has larger consumption of memory."
///
/// Differs from the kubelet for memory: the kubelet names each container above its
/// request; pod stats here carry the pod's working set only, so the pod is named (in the
/// kubelet's wording for pod-level resources).
pub fn eviction_message(
    resource: Resource,
    victim: &PodWithStats,
    thresholds: &[Threshold],
    observations: &Observations,
) -> String {
    let mut message = format!("The node was low on resource: {}. ", resource.as_str());
    if let Some((quantity, available)) = threshold_met_info(resource, thresholds, observations) {
        message.push_str(&format!(
            "Threshold quantity: {quantity}, available: {available}. "
        ));
    }
    if victim.stats.is_missing() {
        return message.trim_end().to_string();
    }
    match resource {
        Resource::Memory => {
            if let Some(usage) = victim.stats.memory_working_set_bytes {
                let request = victim.pod.requests("memory");
                let usage = bytes(usage);
                if usage > request {
                    message.push_str(&format!(
                        "Pod {} was using {usage}, request is {request}, has larger consumption of memory. ",
                        victim.pod.metadata.name
                    ));
                }
            }
        }
        Resource::EphemeralStorage => {
            for stats in &victim.stats.containers {
                let Some(container) = victim.pod.all_containers().find(|c| c.name == stats.name)
                else {
                    continue;
                };
                let (Some(rootfs), Some(logs)) = (stats.rootfs_used_bytes, stats.logs_used_bytes)
                else {
                    continue;
                };
                let usage = bytes(rootfs.saturating_add(logs));
                let request = container
                    .resources
                    .requests
                    .get("ephemeral-storage")
                    .copied()
                    .unwrap_or_default();
                if usage > request {
                    message.push_str(&format!(
                        "Container {} was using {usage}, request is {request}, has larger consumption of ephemeral-storage. ",
                        container.name
                    ));
                }
            }
        }
        Resource::Inodes | Resource::Pids => {}
    }
    message.trim_end().to_string()
}

fn bytes(value: u64) -> Quantity {
    Quantity::from_units(i64::try_from(value).unwrap_or(i64::MAX))
}

/// The threshold quantity and available amount of the first threshold of `resource` that
/// has an observation (kubelet: getThresholdMetInfo).
fn threshold_met_info(
    resource: Resource,
    thresholds: &[Threshold],
    observations: &Observations,
) -> Option<(String, String)> {
    thresholds
        .iter()
        .filter(|t| t.signal.resource() == resource)
        .find_map(|t| {
            let observed = observations.get(&t.signal)?;
            let quantity = match t.value {
                QuantityOrPercent::Quantity(q) => q.to_string(),
                QuantityOrPercent::Percent(_) => {
                    format_amount(t.signal, t.quantity(observed.capacity))
                }
            };
            Some((quantity, format_amount(t.signal, observed.available)))
        })
}
