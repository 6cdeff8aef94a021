//! The eviction message, character for character the kubelet's (pkg/kubelet/eviction
//! helpers.go evictionMessage and getThresholdMetInfo, read at 1.34): users grep it and
//! tools parse it.
//!
//! It is a run of sentences, each ending in ". ", the last one included: the kubelet
//! leaves that trailing space in the pod status and the event, so it stays here too.
//!
//! 1. `The node was low on resource: <resource>. `
//! 2. `Threshold quantity: <threshold>, available: <available>. ` for the first threshold
//!    of that resource, among those acting at this pass, that has an observation.
//! 3. Memory only, for a pod with pod-level resources and a pod-level memory request:
//!    `Pod <pod> was using <usage>, request is <request>, has larger consumption of
//!    memory. ` whether or not the usage exceeds the request (the kubelet compares only
//!    containers).
//! 4. For each container stats entry, in the stats' order, that names a regular or init
//!    container and whose usage exceeds that container's request for the resource:
//!    `Container <name> was using <usage>, request is <request>, has larger consumption
//!    of <resource>. ` Usage is the container's memory working set for memory, its
//!    writable layer plus logs for ephemeral-storage (both needed); a missing request is
//!    0. A container without that figure is not named; inodes and pids name nobody.
//!
//! Without any stats for the pod only sentences 1 and 2 are written.
//!
//! Quantities print as apimachinery's `Quantity.String()` (see [`Quantity`]'s Display):
//! usage and byte availability as binary amounts ("1536Mi", "1k"), inode and pid
//! availability as decimal ones ("200k"), requests and configured thresholds in the
//! format they were written in ("128M", "1Gi"), a percentage threshold as the binary
//! amount it resolves to, whatever the signal.
use crate::quantity::{Quantity, QuantityOrPercent};
use crate::signal::{Observations, Threshold, format_amount};
use crate::stats::{ContainerStats, PodWithStats};
use crate::types::Resource;

/// The kubelet's message for evicting `victim` to reclaim `resource`; `thresholds` are
/// the ones acting at this pass.
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
        return message;
    }
    if let Some((usage, request)) = pod_level_memory(resource, victim) {
        message.push_str(&format!(
            "Pod {} was using {usage}, request is {request}, has larger consumption of memory. ",
            victim.pod.metadata.name
        ));
    }
    for stats in &victim.stats.containers {
        // Ephemeral containers cannot set requests, so only these are looked at.
        let Some(container) = victim.pod.all_containers().find(|c| c.name == stats.name) else {
            continue;
        };
        let Some(usage) = container_usage(resource, stats) else {
            continue;
        };
        let request = container
            .resources
            .requests
            .get(resource.as_str())
            .copied()
            .unwrap_or_default();
        if usage > request {
            message.push_str(&format!(
                "Container {} was using {usage}, request is {request}, has larger consumption of {}. ",
                container.name,
                resource.as_str()
            ));
        }
    }
    message
}

/// Bytes as the kubelet holds usage (a BinarySI quantity).
fn bytes(value: u64) -> Quantity {
    Quantity::from_units(i64::try_from(value).unwrap_or(i64::MAX))
}

/// A container's usage of `resource`, when its stats have it.
fn container_usage(resource: Resource, stats: &ContainerStats) -> Option<Quantity> {
    match resource {
        Resource::Memory => stats.memory_working_set_bytes.map(bytes),
        Resource::EphemeralStorage => {
            let rootfs = stats.rootfs_used_bytes?;
            let logs = stats.logs_used_bytes?;
            Some(bytes(rootfs.saturating_add(logs)))
        }
        Resource::Inodes | Resource::Pids => None,
    }
}

/// The pod's working set and pod-level memory request, for the pod sentence: memory
/// only, pod-level resources set, a pod-level memory request present (even "0"), and a
/// pod working set known.
fn pod_level_memory(resource: Resource, victim: &PodWithStats) -> Option<(Quantity, Quantity)> {
    if resource != Resource::Memory || !victim.pod.has_pod_level_resources() {
        return None;
    }
    let request = victim
        .pod
        .spec
        .resources
        .as_ref()?
        .requests
        .get(resource.as_str())
        .copied()?;
    let usage = bytes(victim.stats.memory_working_set_bytes?);
    Some((usage, request))
}

/// The threshold and available amount for sentence 2 (kubelet: getThresholdMetInfo).
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
            if t.signal == crate::signal::Signal::MemoryStall {
                // The agent's own signal reads as shares of time not stalled.
                return Some((
                    format!(
                        "{} of time not stalled",
                        format_amount(t.signal, t.quantity(observed.capacity))
                    ),
                    format_amount(t.signal, observed.available),
                ));
            }
            let quantity = match t.value {
                QuantityOrPercent::Quantity(q) => q,
                // The kubelet resolves a percentage into a binary quantity, inodes included.
                QuantityOrPercent::Percent(_) => {
                    Quantity::from_units(t.quantity(observed.capacity))
                }
            };
            Some((
                quantity.to_string(),
                format_amount(t.signal, observed.available),
            ))
        })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rstest::rstest;

    use super::*;
    use crate::eviction::fixtures::{GI, MI};
    use crate::pod::{Pod, parse_pod_list};
    use crate::quantity::parse_quantity_or_percent;
    use crate::signal::{Signal, SignalObservation};
    use crate::stats::PodStats;

    const NODE_LOW_MEMORY: &str = "The node was low on resource: memory. ";

    fn pod(yaml: &str) -> Pod {
        let mut pods = parse_pod_list(yaml, "pod.yaml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pods.len(), 1, "one pod in {yaml}");
        pods.remove(0)
    }

    /// Stats with an entry per container: (name, working set, rootfs, logs).
    type Entry<'a> = (&'a str, Option<u64>, Option<u64>, Option<u64>);

    fn with_stats(pod: Pod, pod_working_set: Option<u64>, entries: &[Entry<'_>]) -> PodWithStats {
        let containers = entries
            .iter()
            .map(|(name, ws, rootfs, logs)| ContainerStats {
                name: name.to_string(),
                memory_working_set_bytes: *ws,
                rootfs_used_bytes: *rootfs,
                logs_used_bytes: *logs,
                ..ContainerStats::default()
            })
            .collect();
        PodWithStats {
            pod: pod.into(),
            stats: PodStats {
                memory_working_set_bytes: pod_working_set,
                containers,
                ..PodStats::default()
            },
        }
    }

    fn hard(signal: Signal, value: &str) -> Threshold {
        let value = parse_quantity_or_percent(value).unwrap_or_else(|e| panic!("{e}"));
        Threshold::hard(signal, value)
    }

    fn observed(signal: Signal, available: u64, capacity: u64) -> Observations {
        let observation = SignalObservation {
            available: available as i64,
            capacity: capacity as i64,
            time: Duration::ZERO,
        };
        [(signal, observation)].into_iter().collect()
    }

    /// The message for `victim` with no threshold sentence.
    fn bare(resource: Resource, victim: &PodWithStats) -> String {
        eviction_message(resource, victim, &[], &Observations::new())
    }

    const TWO_CONTAINERS: &str = "
metadata: {name: web}
spec:
  containers:
  - {name: app, resources: {requests: {memory: 100Mi, ephemeral-storage: 1Gi}}}
  - {name: helper, resources: {requests: {memory: 1Gi}}}
";

    // kubelet: helpers_test.go TestEvictonMessageWithResourceResize (a container using
    // 150Mi against a 100Mi request is named with both figures); the sentence wording and
    // trailing space are helpers.go containerMessageFmt.
    #[test]
    fn memory_names_each_container_over_its_request() {
        let victim = with_stats(
            pod(TWO_CONTAINERS),
            Some(GI),
            &[
                ("app", Some(150 * MI), None, None),
                ("helper", Some(512 * MI), None, None),
            ],
        );
        let thresholds = [hard(Signal::MemoryAvailable, "500Mi")];
        let observations = observed(Signal::MemoryAvailable, 300 * MI, 10 * GI);
        assert_eq!(
            eviction_message(Resource::Memory, &victim, &thresholds, &observations),
            "The node was low on resource: memory. Threshold quantity: 500Mi, available: 300Mi. \
             Container app was using 150Mi, request is 100Mi, has larger consumption of memory. "
        );
    }

    // kubelet: helpers.go evictionMessage loops over the pod's stats, not its spec: the
    // containers are named in the stats' order, and one without a working set is skipped.
    #[test]
    fn containers_are_named_in_stats_order_and_only_with_a_working_set() {
        let victim = with_stats(
            pod(TWO_CONTAINERS),
            Some(3 * GI),
            &[
                ("helper", Some(2 * GI), None, None),
                ("app", Some(GI), None, None),
            ],
        );
        assert_eq!(
            bare(Resource::Memory, &victim),
            format!(
                "{NODE_LOW_MEMORY}\
                 Container helper was using 2Gi, request is 1Gi, has larger consumption of memory. \
                 Container app was using 1Gi, request is 100Mi, has larger consumption of memory. "
            )
        );
        let victim = with_stats(
            pod(TWO_CONTAINERS),
            Some(3 * GI),
            &[("app", None, None, None)],
        );
        assert_eq!(bare(Resource::Memory, &victim), NODE_LOW_MEMORY);
    }

    // kubelet: kubernetes#124947 (1.31), helpers.go evictionMessage: init containers,
    // restartable (sidecars) or not, are named like regular ones; a stats entry that names
    // no regular or init container (an ephemeral container) is not.
    #[test]
    fn init_containers_count_and_ephemeral_ones_do_not() {
        let victim = with_stats(
            pod("
metadata: {name: web}
spec:
  initContainers:
  - {name: sidecar, restartPolicy: Always, resources: {requests: {memory: 10Mi}}}
  - {name: setup}
  containers:
  - {name: app, resources: {requests: {memory: 1Gi}}}
"),
            Some(GI),
            &[
                ("sidecar", Some(20 * MI), None, None),
                ("setup", Some(1000), None, None),
                ("app", Some(100 * MI), None, None),
                ("debugger", Some(GI), None, None),
            ],
        );
        assert_eq!(
            bare(Resource::Memory, &victim),
            format!(
                "{NODE_LOW_MEMORY}\
                 Container sidecar was using 20Mi, request is 10Mi, has larger consumption of memory. \
                 Container setup was using 1k, request is 0, has larger consumption of memory. "
            )
        );
    }

    // kubelet: helpers.go evictionMessage: for ephemeral-storage the usage is the writable
    // layer plus the logs, and a container missing either figure is not named.
    #[test]
    fn ephemeral_storage_names_containers_by_rootfs_plus_logs() {
        let victim = with_stats(
            pod(TWO_CONTAINERS),
            None,
            &[
                ("app", None, Some(GI), Some(512 * MI)),
                ("helper", None, Some(GI), None),
            ],
        );
        let thresholds = [hard(Signal::NodeFsAvailable, "10Gi")];
        let observations = observed(Signal::NodeFsAvailable, 7_366_280 << 10, 100 * GI);
        assert_eq!(
            eviction_message(
                Resource::EphemeralStorage,
                &victim,
                &thresholds,
                &observations
            ),
            "The node was low on resource: ephemeral-storage. \
             Threshold quantity: 10Gi, available: 7366280Ki. \
             Container app was using 1536Mi, request is 1Gi, has larger consumption of ephemeral-storage. "
        );
    }

    // kubelet: helpers.go evictionMessage computes no usage for inodes or pids.
    #[rstest]
    #[case(Resource::Inodes)]
    #[case(Resource::Pids)]
    fn inodes_and_pids_name_nobody(#[case] resource: Resource) {
        let victim = with_stats(
            pod(TWO_CONTAINERS),
            Some(GI),
            &[("app", Some(GI), Some(GI), Some(GI))],
        );
        assert_eq!(
            bare(resource, &victim),
            format!("The node was low on resource: {}. ", resource.as_str())
        );
    }

    // kubelet: helpers.go getThresholdMetInfo and makeSignalObservations: a percentage
    // threshold prints as the binary quantity it resolves to, even for inodes, while free
    // inodes print as a decimal count.
    #[test]
    fn inode_figures_print_as_the_kubelet_builds_them() {
        let victim = with_stats(pod(TWO_CONTAINERS), None, &[]);
        let thresholds = [hard(Signal::NodeFsInodesFree, "5%")];
        let observations = observed(Signal::NodeFsInodesFree, 200_000, 2_048_000);
        assert_eq!(
            eviction_message(Resource::Inodes, &victim, &thresholds, &observations),
            "The node was low on resource: inodes. Threshold quantity: 100Ki, available: 200k. "
        );
    }

    // kubelet: helpers.go getThresholdMetInfo: the first threshold of the resource that
    // has an observation; thresholds of other resources are passed over.
    #[test]
    fn the_threshold_sentence_uses_the_first_observed_threshold_of_the_resource() {
        let victim = with_stats(pod(TWO_CONTAINERS), None, &[]);
        let thresholds = [
            hard(Signal::NodeFsAvailable, "1Gi"),
            hard(Signal::AllocatableMemoryAvailable, "100Mi"),
            hard(Signal::MemoryAvailable, "1G"),
        ];
        let mut observations = observed(Signal::MemoryAvailable, 1000, 10 * GI);
        observations.extend(observed(Signal::NodeFsAvailable, MI, GI));
        assert_eq!(
            eviction_message(Resource::Memory, &victim, &thresholds, &observations),
            "The node was low on resource: memory. Threshold quantity: 1G, available: 1k. "
        );
        assert_eq!(
            eviction_message(Resource::Memory, &victim, &thresholds, &Observations::new()),
            NODE_LOW_MEMORY,
            "no observation: no threshold sentence"
        );
    }

    // kubelet: helpers.go evictionMessage returns after the threshold sentence when the
    // pod has no stats at all.
    #[test]
    fn a_pod_without_stats_gets_no_usage_sentence() {
        let victim = PodWithStats {
            pod: pod(TWO_CONTAINERS).into(),
            stats: PodStats::default(),
        };
        assert_eq!(bare(Resource::Memory, &victim), NODE_LOW_MEMORY);
    }

    // kubelet: helpers.go evictionMessage (kubernetes#132277, 1.34): with pod-level
    // resources and a pod-level memory request the pod is named first, whether or not it
    // uses more than its request; its containers follow as usual.
    #[test]
    fn pod_level_memory_requests_name_the_pod() {
        let yaml = "
metadata: {name: web}
spec:
  resources: {requests: {memory: 2Gi}, limits: {memory: 4Gi}}
  containers:
  - {name: app, resources: {requests: {memory: 128M}}}
";
        let victim = with_stats(pod(yaml), Some(GI), &[("app", Some(GI), None, None)]);
        assert_eq!(
            bare(Resource::Memory, &victim),
            format!(
                "{NODE_LOW_MEMORY}\
                 Pod web was using 1Gi, request is 2Gi, has larger consumption of memory. \
                 Container app was using 1Gi, request is 128M, has larger consumption of memory. "
            )
        );
        // Not for another resource, nor without a pod working set.
        let victim = with_stats(pod(yaml), None, &[("app", None, None, None)]);
        assert_eq!(bare(Resource::Memory, &victim), NODE_LOW_MEMORY);
        assert_eq!(
            bare(
                Resource::EphemeralStorage,
                &with_stats(pod(yaml), Some(GI), &[])
            ),
            "The node was low on resource: ephemeral-storage. "
        );
    }

    #[test]
    fn pod_level_resources_without_a_memory_request_do_not_name_the_pod() {
        let victim = with_stats(
            pod("
metadata: {name: web}
spec:
  resources: {requests: {cpu: 500m}}
  containers: [{name: app}]
"),
            Some(GI),
            &[],
        );
        assert_eq!(bare(Resource::Memory, &victim), NODE_LOW_MEMORY);
    }
}
