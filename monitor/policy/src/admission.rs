//! Pod admission on this node: the eviction manager's pressure check followed by the
//! predicate check (the pod's OS, then resource fit, node name, host ports, NoExecute
//! taints), as the kubelet's admit handlers run them in that order.
//!
//! kubelet: pkg/kubelet/eviction/eviction_manager.go (managerImpl.Admit),
//! pkg/kubelet/lifecycle/predicate.go (predicateAdmitHandler.Admit, generalFilter) and the
//! scheduler's AdmissionCheck it calls (pkg/scheduler/framework/plugins/nodeports for the
//! host ports). Every failure is typed ([`AdmissionFailure`]): [`super::preemption`] may
//! resolve a critical pod's failures only when all of them are insufficient resources.
use serde::Deserialize;

use super::pod::{ContainerPort, Pod, ResourceList};
use super::types::{NodeConditionType, QosClass};

/// Reason given when node pressure rejects a pod (eviction `Reason`).
pub const EVICTED_REASON: &str = "Evicted";
/// Reason given when recovering from a failed fit went wrong (e.g. preemption found no
/// set of pods to evict).
pub const UNEXPECTED_ADMISSION_ERROR: &str = "UnexpectedAdmissionError";
/// The taint a node under memory pressure carries; BestEffort pods tolerating it are
/// admitted anyway (v1.TaintNodeMemoryPressure, effect NoSchedule).
pub const TAINT_NODE_MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
/// The predicate that rejects a pod bound to another node (scheduler plugin NodeName).
pub const NODE_NAME_PREDICATE: &str = "NodeName";
const NODE_NAME_MISMATCH: &str = "node(s) didn't match the requested node name";
/// The predicate that rejects a pod not tolerating a NoExecute taint (TaintToleration).
pub const TAINT_TOLERATION_PREDICATE: &str = "TaintToleration";
const UNTOLERATED_TAINT: &str = "node(s) had taints that the pod didn't tolerate";
/// The predicate that rejects a pod whose host ports are taken (scheduler plugin NodePorts).
pub const NODE_PORTS_PREDICATE: &str = "NodePorts";
const HOST_PORTS_TAKEN: &str = "node(s) didn't have free ports for the requested pod ports";
/// Reason given when the pod's `kubernetes.io/os` label names another OS than the node's
/// (kubelet lifecycle.PodOSSelectorNodeLabelDoesNotMatch).
pub const POD_OS_SELECTOR_MISMATCH: &str = "PodOSSelectorNodeLabelDoesNotMatch";
/// Reason given when the pod's `spec.os.name` is not the node's OS
/// (kubelet lifecycle.PodOSNotSupported).
pub const POD_OS_NOT_SUPPORTED: &str = "PodOSNotSupported";
/// The well-known OS label (v1.LabelOSStable).
pub const OS_LABEL: &str = "kubernetes.io/os";
/// The node's OS, as the kubelet names it (its own runtime.GOOS): the agent runs on Linux
/// only (cgroups, PSI, eBPF), so its node is always "linux".
pub const NODE_OS: &str = "linux";
/// The scheduler's wildcard host address (DefaultBindAllHostIP).
const ANY_HOST_IP: &str = "0.0.0.0";

/// The outcome of admitting one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmitResult {
    pub admitted: bool,
    /// Machine-readable reason ("Evicted", "OutOfcpu", "OutOfmemory", "OutOfpods", …);
    /// empty when admitted.
    pub reason: String,
    /// Human-readable detail, as the kubelet writes it to the pod status.
    pub message: String,
    /// Every reason the pod failed, in the kubelet's order (resources first: pods, cpu,
    /// memory, ephemeral-storage, then the rest by name; then node name; then host
    /// ports; then taints); `reason` and `message` are the first one's. An OS mismatch
    /// is the only failure when there is one (the kubelet stops there). Empty when
    /// admitted, and for a rejection that is no predicate's (UnexpectedAdmissionError).
    pub failures: Vec<AdmissionFailure>,
}

impl AdmitResult {
    pub fn admit() -> Self {
        AdmitResult {
            admitted: true,
            reason: String::new(),
            message: String::new(),
            failures: Vec::new(),
        }
    }

    /// A rejection that carries no typed failure.
    pub fn reject(reason: impl Into<String>, message: impl Into<String>) -> Self {
        AdmitResult {
            admitted: false,
            reason: reason.into(),
            message: message.into(),
            failures: Vec::new(),
        }
    }

    /// Admitted when nothing failed; otherwise rejected with the first failure's reason
    /// and message, as the kubelet reports only the first.
    pub fn from_failures(failures: Vec<AdmissionFailure>) -> Self {
        match failures.first() {
            None => AdmitResult::admit(),
            Some(first) => AdmitResult {
                admitted: false,
                reason: first.reason(),
                message: first.message(),
                failures,
            },
        }
    }
}

/// Why admission turned a pod away (the kubelet's PredicateFailureReason kinds, plus the
/// eviction manager's rejection, which runs as its own admit handler).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdmissionFailure {
    /// The node lacks a resource (InsufficientResourceError): the only kind evicting
    /// pods can fix, so the only kind critical-pod preemption acts on.
    InsufficientResource(InsufficientResource),
    /// The node is under pressure (the eviction manager's Admit).
    NodeCondition(Vec<NodeConditionType>),
    /// Another predicate failed (PredicateFailureError): `name` is the predicate
    /// ("NodeName", "NodePorts", "TaintToleration"), `description` why.
    Predicate { name: String, description: String },
    /// The pod's `kubernetes.io/os` label names another OS than the node's
    /// (predicate.go rejectPodAdmissionBasedOnOSSelector).
    OsLabelMismatch,
    /// The pod's `spec.os.name` is not the node's OS
    /// (predicate.go rejectPodAdmissionBasedOnOSField).
    OsFieldMismatch,
}

impl AdmissionFailure {
    /// The pod status reason: "OutOf<resource>", "Evicted", or the predicate's name.
    pub fn reason(&self) -> String {
        match self {
            AdmissionFailure::InsufficientResource(r) => format!("OutOf{}", r.resource),
            AdmissionFailure::NodeCondition(_) => EVICTED_REASON.to_string(),
            AdmissionFailure::Predicate { name, .. } => name.clone(),
            AdmissionFailure::OsLabelMismatch => POD_OS_SELECTOR_MISMATCH.to_string(),
            AdmissionFailure::OsFieldMismatch => POD_OS_NOT_SUPPORTED.to_string(),
        }
    }

    /// The pod status message, in the kubelet's words.
    pub fn message(&self) -> String {
        match self {
            AdmissionFailure::InsufficientResource(r) => r.message(),
            AdmissionFailure::NodeCondition(conditions) => {
                let names: Vec<&str> = conditions.iter().map(|c| c.as_str()).collect();
                format!("The node had condition: [{}]. ", names.join(" "))
            }
            AdmissionFailure::Predicate { name, description } => {
                format!("Predicate {name} failed: {description}")
            }
            AdmissionFailure::OsLabelMismatch => {
                format!("Failed to admit pod as the `{OS_LABEL}` label doesn't match node label")
            }
            AdmissionFailure::OsFieldMismatch => {
                "Failed to admit pod as the OS field doesn't match node OS".to_string()
            }
        }
    }

    fn predicate(name: &str, description: &str) -> Self {
        AdmissionFailure::Predicate {
            name: name.to_string(),
            description: description.to_string(),
        }
    }
}

/// A node taint (`spec.taints[]` of a Node object); `timeAdded` is not read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Taint {
    pub key: String,
    pub value: String,
    /// "NoSchedule", "PreferNoSchedule" or "NoExecute".
    pub effect: String,
}

/// What admission knows of the node besides its running pods.
#[derive(Clone, Copy, Debug)]
pub struct AdmissionNode<'a> {
    pub conditions: &'a [NodeConditionType],
    pub allocatable: &'a ResourceList,
    /// The node's name; `None` when unknown, which skips the NodeName check.
    pub name: Option<&'a str>,
    pub taints: &'a [Taint],
    /// The node's OS as `spec.os.name` and the `kubernetes.io/os` label spell it.
    pub os: &'a str,
}

impl<'a> AdmissionNode<'a> {
    /// A node known only by its conditions and allocatable (the agent's view), running
    /// this agent's OS.
    pub fn new(conditions: &'a [NodeConditionType], allocatable: &'a ResourceList) -> Self {
        AdmissionNode {
            conditions,
            allocatable,
            name: None,
            taints: &[],
            os: NODE_OS,
        }
    }
}

/// A resource the node cannot give the pod (the scheduler's InsufficientResource).
/// Amounts are in the kubelet's units: millicores for "cpu", a count for "pods", base
/// units (bytes, devices) for everything else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InsufficientResource {
    pub resource: String,
    /// What the pod asks for.
    pub requested: i64,
    /// What the running pods already request.
    pub used: i64,
    /// The node's allocatable amount.
    pub capacity: i64,
}

impl InsufficientResource {
    /// How much must be freed for the pod to fit (GetInsufficientAmount).
    pub fn insufficient_amount(&self) -> i64 {
        self.requested
            .saturating_sub(self.capacity.saturating_sub(self.used))
    }

    /// The kubelet's wording (InsufficientResourceError.Error).
    pub fn message(&self) -> String {
        format!(
            "Node didn't have enough resource: {}, requested: {}, used: {}, capacity: {}",
            self.resource, self.requested, self.used, self.capacity
        )
    }
}

/// A pod's request for `resource` in the kubelet's units (resource GetResourceRequest):
/// each pod counts 1 toward "pods", CPU in millicores, the rest in base units.
pub fn request_units(pod: &Pod, resource: &str) -> i64 {
    match resource {
        "pods" => 1,
        "cpu" => pod.requests(resource).milli_value(),
        _ => pod.requests(resource).value(),
    }
}

/// `quantity` of a node resource in the same units as [`request_units`].
fn allocatable_units(allocatable: &ResourceList, resource: &str) -> Option<i64> {
    let quantity = allocatable.get(resource)?;
    Some(if resource == "cpu" {
        quantity.milli_value()
    } else {
        quantity.value()
    })
}

/// The eviction manager's admission check (managerImpl.Admit): with no pressure every
/// pod is admitted; critical pods always are; under MemoryPressure alone, pods that are
/// not BestEffort are admitted, and BestEffort pods only when they tolerate the
/// memory-pressure taint; any other condition (DiskPressure, PIDPressure, or
/// MemoryPressure together with another) rejects every non-critical pod.
pub fn admit_under_pressure(pod: &Pod, node_conditions: &[NodeConditionType]) -> AdmitResult {
    if node_conditions.is_empty() || pod.is_critical() {
        return AdmitResult::admit();
    }
    let only_memory_pressure = node_conditions
        .iter()
        .all(|c| *c == NodeConditionType::MemoryPressure);
    if only_memory_pressure {
        if pod.qos_class() != QosClass::BestEffort {
            return AdmitResult::admit();
        }
        let tolerates = pod
            .spec
            .tolerations
            .iter()
            .any(|t| t.tolerates(TAINT_NODE_MEMORY_PRESSURE, "", "NoSchedule"));
        if tolerates {
            return AdmitResult::admit();
        }
    }
    AdmitResult::from_failures(vec![AdmissionFailure::NodeCondition(
        node_conditions.to_vec(),
    )])
}

/// The resource-fit check alone (noderesources fitsRequest): see [`insufficient_resources`].
/// The first shortage becomes the reason ("OutOf<resource>").
pub fn admit_resource_fit(
    pod: &Pod,
    running_pods: &[Pod],
    node_allocatable: &ResourceList,
) -> AdmitResult {
    AdmitResult::from_failures(
        insufficient_resources(pod, running_pods, node_allocatable)
            .into_iter()
            .map(AdmissionFailure::InsufficientResource)
            .collect(),
    )
}

/// Every resource the node lacks for `pod`: its requests against the node's allocatable
/// minus what the running pods request, in the scheduler's order.
///
/// Deviations, all because the agent may not know the whole node: a resource missing
/// from `node_allocatable` is not checked (the kubelet drops only unknown extended
/// resources this way, and would read a missing "pods" as 0 allowed pods); the pod
/// itself and pods that have finished are not counted among `running_pods`.
pub fn insufficient_resources(
    pod: &Pod,
    running_pods: &[Pod],
    node_allocatable: &ResourceList,
) -> Vec<InsufficientResource> {
    let running = other_active_pods(pod, running_pods);
    let used = |resource: &str| {
        running.iter().fold(0i64, |sum, p| {
            sum.saturating_add(request_units(p, resource))
        })
    };

    let mut insufficient = Vec::new();
    if let Some(allowed) = allocatable_units(node_allocatable, "pods") {
        let count = i64::try_from(running.len()).unwrap_or(i64::MAX);
        if count.saturating_add(1) > allowed {
            insufficient.push(InsufficientResource {
                resource: "pods".into(),
                requested: 1,
                used: count,
                capacity: allowed,
            });
        }
    }
    // The scheduler checks the well-known resources first, then the scalar ones.
    let mut resources = vec![
        "cpu".to_string(),
        "memory".to_string(),
        "ephemeral-storage".to_string(),
    ];
    let mut others: Vec<String> = pod
        .all_containers()
        .flat_map(|c| c.resources.requests.keys())
        .filter(|name| !resources.contains(name) && name.as_str() != "pods")
        .cloned()
        .collect();
    others.sort();
    others.dedup();
    resources.extend(others);
    for resource in &resources {
        let requested = request_units(pod, resource);
        let Some(capacity) = allocatable_units(node_allocatable, resource) else {
            continue;
        };
        let used = used(resource);
        if requested > 0 && requested > capacity.saturating_sub(used) {
            insufficient.push(InsufficientResource {
                resource: resource.clone(),
                requested,
                used,
                capacity,
            });
        }
    }

    insufficient
}

/// The running pods that hold resources and ports beside `pod`: not finished, and not
/// `pod` itself.
fn other_active_pods<'a>(pod: &Pod, running_pods: &'a [Pod]) -> Vec<&'a Pod> {
    let own_key = pod.key();
    running_pods
        .iter()
        .filter(|p| !p.is_terminal() && p.key() != own_key)
        .collect()
}

/// The host ports the running pods hold, each as (address, protocol, port) with the
/// scheduler's reading of an empty address (every address, 0.0.0.0) and an empty
/// protocol (TCP) (framework HostPortInfo and its sanitize).
#[derive(Debug, Default)]
struct UsedHostPorts<'a> {
    used: Vec<(&'a str, &'a str, i32)>,
}

fn host_port_key(port: &ContainerPort) -> (&str, &str, i32) {
    let ip = if port.host_ip.is_empty() {
        ANY_HOST_IP
    } else {
        &port.host_ip
    };
    let protocol = if port.protocol.is_empty() {
        "TCP"
    } else {
        &port.protocol
    };
    (ip, protocol, port.host_port)
}

impl<'a> UsedHostPorts<'a> {
    fn of(pods: &[&'a Pod]) -> Self {
        UsedHostPorts {
            used: pods
                .iter()
                .flat_map(|p| p.host_ports())
                .map(host_port_key)
                .collect(),
        }
    }

    /// Whether `port` would clash with a port in use (HostPortInfo.CheckConflict): the
    /// same protocol and port number, on the same address, or where either side binds
    /// every address (0.0.0.0). A host port of 0 claims nothing and clashes with nothing.
    fn conflicts(&self, port: &ContainerPort) -> bool {
        if port.host_port <= 0 {
            return false;
        }
        let (ip, protocol, number) = host_port_key(port);
        self.used
            .iter()
            .any(|&(used_ip, used_protocol, used_number)| {
                used_protocol == protocol
                    && used_number == number
                    && (ip == ANY_HOST_IP || used_ip == ANY_HOST_IP || used_ip == ip)
            })
    }
}

/// Whether every host port the pod asks for is free on the node (nodeports Fits). The
/// pod's own ports are checked against the running pods only, not against each other,
/// as in the scheduler.
fn host_ports_fit(pod: &Pod, running: &[&Pod]) -> bool {
    let used = UsedHostPorts::of(running);
    !pod.host_ports().any(|port| used.conflicts(port))
}

/// The OS checks the kubelet runs before any predicate, as ones evicting pods cannot
/// help (predicateAdmitHandler.Admit). The label check (rejectPodAdmissionBasedOnOSSelector)
/// reads the pod's own `kubernetes.io/os` label, not its nodeSelector, and compares it
/// with the node's actual OS: the kubelet takes a node label that is missing or wrong as
/// its own OS, so only the pod's label matters. The field check
/// (rejectPodAdmissionBasedOnOSField) refuses a `spec.os.name` other than the node's OS.
fn os_mismatch(pod: &Pod, node_os: &str) -> Option<AdmissionFailure> {
    if let Some(label) = pod.metadata.labels.get(OS_LABEL)
        && label != node_os
    {
        return Some(AdmissionFailure::OsLabelMismatch);
    }
    if let Some(os) = &pod.spec.os
        && os.name != node_os
    {
        return Some(AdmissionFailure::OsFieldMismatch);
    }
    None
}

/// The predicate check (predicateAdmitHandler.Admit and its generalFilter). First the OS
/// checks ([`os_mismatch`]): a mismatch is the pod's only failure, as the kubelet returns
/// at once. Then every failure in the kubelet's order: insufficient resources, the node
/// name (a pod bound to another node), host ports taken by the running pods (NodePorts,
/// see [`Pod::host_ports`] for which ports count), then NoExecute taints the pod does not
/// tolerate (static pods skip this one).
///
/// Not evaluated, as the pod model does not read the fields they need: required node
/// affinity and nodeSelector, and the SupplementalGroupsPolicy check.
pub fn admit_predicates(pod: &Pod, running_pods: &[Pod], node: &AdmissionNode<'_>) -> AdmitResult {
    if let Some(mismatch) = os_mismatch(pod, node.os) {
        return AdmitResult::from_failures(vec![mismatch]);
    }
    let mut failures: Vec<AdmissionFailure> =
        insufficient_resources(pod, running_pods, node.allocatable)
            .into_iter()
            .map(AdmissionFailure::InsufficientResource)
            .collect();
    if let (Some(bound_to), Some(name)) = (pod.spec.node_name.as_deref(), node.name)
        && !bound_to.is_empty()
        && bound_to != name
    {
        failures.push(AdmissionFailure::predicate(
            NODE_NAME_PREDICATE,
            NODE_NAME_MISMATCH,
        ));
    }
    if !host_ports_fit(pod, &other_active_pods(pod, running_pods)) {
        failures.push(AdmissionFailure::predicate(
            NODE_PORTS_PREDICATE,
            HOST_PORTS_TAKEN,
        ));
    }
    if !pod.is_static() && has_untolerated_no_execute_taint(pod, node.taints) {
        failures.push(AdmissionFailure::predicate(
            TAINT_TOLERATION_PREDICATE,
            UNTOLERATED_TAINT,
        ));
    }
    AdmitResult::from_failures(failures)
}

/// Whether some NoExecute taint is tolerated by none of the pod's tolerations (the
/// kubelet only cares about NoExecute: the scheduler already honoured NoSchedule).
fn has_untolerated_no_execute_taint(pod: &Pod, taints: &[Taint]) -> bool {
    taints.iter().filter(|t| t.effect == "NoExecute").any(|t| {
        !pod.spec
            .tolerations
            .iter()
            .any(|tol| tol.tolerates(&t.key, &t.value, &t.effect))
    })
}

/// Both checks in the kubelet's order, on a node known by its conditions and allocatable
/// only: see [`admit_pod_on`].
pub fn admit_pod(
    pod: &Pod,
    node_conditions: &[NodeConditionType],
    running_pods: &[Pod],
    node_allocatable: &ResourceList,
) -> AdmitResult {
    admit_pod_on(
        pod,
        &AdmissionNode::new(node_conditions, node_allocatable),
        running_pods,
    )
}

/// Both checks in the kubelet's order: node pressure first (a rejection there ends
/// admission), then the predicates.
pub fn admit_pod_on(pod: &Pod, node: &AdmissionNode<'_>, running_pods: &[Pod]) -> AdmitResult {
    let pressure = admit_under_pressure(pod, node.conditions);
    if !pressure.admitted {
        return pressure;
    }
    admit_predicates(pod, running_pods, node)
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::pod::Toleration;
    use crate::testing::{list, pod};

    use NodeConditionType::{DiskPressure, MemoryPressure, PIDPressure};

    fn best_effort() -> Pod {
        pod("be", "", "")
    }
    fn burstable() -> Pod {
        pod("bu", "memory=1Gi", "")
    }
    fn guaranteed() -> Pod {
        pod("gu", "cpu=1,memory=1Gi", "cpu=1,memory=1Gi")
    }
    fn critical_best_effort() -> Pod {
        let mut p = best_effort();
        p.spec.priority = Some(2_000_000_000);
        p
    }
    fn static_best_effort() -> Pod {
        let mut p = best_effort();
        p.metadata
            .annotations
            .insert("kubernetes.io/config.source".into(), "file".into());
        p
    }
    fn tolerating(toleration: Toleration) -> Pod {
        let mut p = best_effort();
        p.spec.tolerations = vec![toleration];
        p
    }
    fn memory_pressure_toleration() -> Pod {
        tolerating(Toleration {
            key: TAINT_NODE_MEMORY_PRESSURE.into(),
            operator: "Exists".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        })
    }
    fn disk_pressure_toleration() -> Pod {
        tolerating(Toleration {
            key: "node.kubernetes.io/disk-pressure".into(),
            operator: "Exists".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        })
    }
    fn tolerates_everything() -> Pod {
        tolerating(Toleration {
            operator: "Exists".into(),
            ..Default::default()
        })
    }

    // The cases of the kubelet's TestAdmit and TestAdmitUnderNodeConditions.
    #[rstest]
    #[case::no_pressure_best_effort(vec![], best_effort(), true)]
    #[case::no_pressure_guaranteed(vec![], guaranteed(), true)]
    #[case::memory_best_effort(vec![MemoryPressure], best_effort(), false)]
    #[case::memory_burstable(vec![MemoryPressure], burstable(), true)]
    #[case::memory_guaranteed(vec![MemoryPressure], guaranteed(), true)]
    #[case::memory_critical_best_effort(vec![MemoryPressure], critical_best_effort(), true)]
    #[case::memory_static_best_effort(vec![MemoryPressure], static_best_effort(), true)]
    #[case::memory_tolerating_best_effort(vec![MemoryPressure], memory_pressure_toleration(), true)]
    #[case::memory_other_toleration(vec![MemoryPressure], disk_pressure_toleration(), false)]
    #[case::memory_wildcard_toleration(vec![MemoryPressure], tolerates_everything(), true)]
    #[case::disk_best_effort(vec![DiskPressure], best_effort(), false)]
    #[case::disk_guaranteed(vec![DiskPressure], guaranteed(), false)]
    #[case::disk_critical(vec![DiskPressure], critical_best_effort(), true)]
    #[case::disk_static(vec![DiskPressure], static_best_effort(), true)]
    #[case::pid_burstable(vec![PIDPressure], burstable(), false)]
    #[case::memory_and_disk_guaranteed(vec![MemoryPressure, DiskPressure], guaranteed(), false)]
    #[case::memory_and_disk_tolerating(vec![MemoryPressure, DiskPressure], memory_pressure_toleration(), false)]
    #[case::memory_and_disk_critical(vec![MemoryPressure, DiskPressure], critical_best_effort(), true)]
    fn admission_under_pressure(
        #[case] conditions: Vec<NodeConditionType>,
        #[case] pod: Pod,
        #[case] admitted: bool,
    ) {
        let result = admit_under_pressure(&pod, &conditions);
        assert_eq!(result.admitted, admitted, "{result:?}");
        if !admitted {
            assert_eq!(result.reason, "Evicted");
        }
    }

    #[test]
    fn pressure_message_names_the_conditions() {
        let result = admit_under_pressure(&best_effort(), &[MemoryPressure, DiskPressure]);
        assert_eq!(
            result.message,
            "The node had condition: [MemoryPressure DiskPressure]. "
        );
    }

    const NODE: &str = "cpu=2,memory=4Gi,pods=3,ephemeral-storage=10Gi";

    fn running() -> Vec<Pod> {
        vec![
            pod("r1", "cpu=1,memory=1Gi", ""),
            pod("r2", "cpu=500m,memory=2Gi", ""),
        ]
    }

    #[rstest]
    #[case::fits(pod("new", "cpu=500m,memory=1Gi", ""), NODE, vec![])]
    #[case::best_effort_fits(pod("new", "", ""), NODE, vec![])]
    #[case::cpu_short(pod("new", "cpu=600m", ""), NODE, vec![("cpu", 600, 1500, 2000)])]
    #[case::memory_short(pod("new", "memory=2Gi", ""), NODE, vec![("memory", 2 << 30, 3 << 30, 4 << 30)])]
    #[case::both_short_cpu_first(pod("new", "cpu=1,memory=2Gi", ""), NODE,
        vec![("cpu", 1000, 1500, 2000), ("memory", 2 << 30, 3 << 30, 4 << 30)])]
    #[case::too_many_pods(pod("new", "", ""), "cpu=2,memory=4Gi,pods=2", vec![("pods", 1, 2, 2)])]
    #[case::pods_and_cpu(pod("new", "cpu=1", ""), "cpu=2,memory=4Gi,pods=2", vec![("pods", 1, 2, 2), ("cpu", 1000, 1500, 2000)])]
    #[case::ephemeral_storage(pod("new", "ephemeral-storage=11Gi", ""), NODE, vec![("ephemeral-storage", 11 << 30, 0, 10 << 30)])]
    #[case::extended_resource(pod("new", "example.com/gpu=2", ""), "example.com/gpu=1", vec![("example.com/gpu", 2, 0, 1)])]
    #[case::unknown_resource_not_checked(pod("new", "example.com/gpu=2,cpu=100", ""), "memory=4Gi", vec![])]
    #[case::exactly_full(pod("new", "cpu=500m,memory=1Gi", ""), "cpu=2,memory=4Gi", vec![])]
    fn resource_fit(
        #[case] new: Pod,
        #[case] allocatable: &str,
        #[case] expected: Vec<(&str, i64, i64, i64)>,
    ) {
        let result = admit_resource_fit(&new, &running(), &list(allocatable));
        let got: Vec<(&str, i64, i64, i64)> = result
            .failures
            .iter()
            .map(|f| match f {
                AdmissionFailure::InsufficientResource(r) => {
                    (r.resource.as_str(), r.requested, r.used, r.capacity)
                }
                other => panic!("not a resource failure: {other:?}"),
            })
            .collect();
        assert_eq!(got, expected);
        assert_eq!(result.admitted, expected.is_empty());
        if let Some((resource, ..)) = expected.first() {
            assert_eq!(result.reason, format!("OutOf{resource}"));
        }
    }

    #[test]
    fn fit_message_and_insufficient_amount() {
        let result = admit_resource_fit(&pod("new", "cpu=600m", ""), &running(), &list(NODE));
        assert_eq!(
            result.message,
            "Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000"
        );
        let shortfall =
            insufficient_resources(&pod("new", "cpu=600m", ""), &running(), &list(NODE));
        assert_eq!(shortfall[0].insufficient_amount(), 100);
    }

    #[test]
    fn fit_ignores_finished_pods_and_the_pod_itself() {
        let mut done = pod("done", "cpu=2", "");
        done.status.phase = Some("Succeeded".into());
        let again = pod("new", "cpu=2", "");
        let result = admit_resource_fit(&pod("new", "cpu=2", ""), &[done, again], &list("cpu=2"));
        assert!(result.admitted, "{result:?}");
    }

    #[test]
    fn pressure_is_checked_before_fit() {
        let result = admit_pod(&best_effort(), &[DiskPressure], &running(), &list("pods=1"));
        assert_eq!(result.reason, "Evicted");
        let result = admit_pod(
            &burstable(),
            &[MemoryPressure],
            &running(),
            &list("memory=2Gi"),
        );
        assert_eq!(result.reason, "OutOfmemory");
        assert!(admit_pod(&burstable(), &[], &running(), &list(NODE)).admitted);
    }

    // The node of the kubelet's TestGeneralPredicates (predicate_test.go): machine1,
    // 10 millicores, 20 bytes of memory, 32 pods.
    const MACHINE1: &str = "cpu=10m,memory=20,pods=32";

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            ..Default::default()
        }
    }

    fn bound_to(node: &str) -> Pod {
        let mut p = best_effort();
        p.spec.node_name = Some(node.into());
        p
    }

    fn tolerating_keys(keys: &[&str]) -> Pod {
        let mut p = best_effort();
        p.spec.tolerations = keys
            .iter()
            .map(|k| Toleration {
                key: k.to_string(),
                ..Default::default()
            })
            .collect();
        p
    }

    fn needs_cpu_and_memory() -> Pod {
        pod("new", "cpu=8m,memory=10", "")
    }

    fn short_and_bound_elsewhere() -> Pod {
        let mut p = needs_cpu_and_memory();
        p.spec.node_name = Some("machine2".into());
        p
    }

    // The cases of the kubelet's TestGeneralPredicates this model can express (node
    // affinity is not read by the pod model; the "hostport conflict" case is in
    // `node_ports`), plus the order of mixed failures: resources first, then node name,
    // then taints.
    #[rstest]
    #[case::no_resources_port_or_host_always_fits(best_effort(), vec![], vec![])]
    #[case::not_enough_cpu_and_memory(needs_cpu_and_memory(), vec![], vec!["OutOfcpu", "OutOfmemory"])]
    #[case::host_not_match(bound_to("machine2"), vec![], vec!["NodeName"])]
    #[case::host_matches(bound_to("machine1"), vec![], vec![])]
    #[case::taint_toleration_match(tolerating_keys(&["foo", "bar"]),
        vec![taint("foo", "NoSchedule"), taint("bar", "NoExecute")], vec![])]
    #[case::no_schedule_taint_not_matched(best_effort(), vec![taint("foo", "NoSchedule")], vec![])]
    #[case::no_execute_taint_not_matched(best_effort(), vec![taint("bar", "NoExecute")], vec!["TaintToleration"])]
    #[case::prefer_no_schedule_taint_not_matched(best_effort(), vec![taint("baz", "PreferNoSchedule")], vec![])]
    #[case::static_pods_ignore_taints(static_best_effort(),
        vec![taint("foo", "NoSchedule"), taint("bar", "NoExecute")], vec![])]
    #[case::resources_then_node_name_then_taint(short_and_bound_elsewhere(),
        vec![taint("bar", "NoExecute")], vec!["OutOfcpu", "OutOfmemory", "NodeName", "TaintToleration"])]
    fn general_predicates(
        #[case] new: Pod,
        #[case] taints: Vec<Taint>,
        #[case] expected: Vec<&str>,
    ) {
        let running = vec![pod("r", "cpu=5m,memory=19", "")];
        let allocatable = list(MACHINE1);
        let node = AdmissionNode {
            name: Some("machine1"),
            taints: &taints,
            ..AdmissionNode::new(&[], &allocatable)
        };
        let result = admit_predicates(&new, &running, &node);
        let reasons: Vec<String> = result.failures.iter().map(|f| f.reason()).collect();
        assert_eq!(reasons, expected, "{result:?}");
        assert_eq!(result.admitted, expected.is_empty());
        assert_eq!(result.reason, expected.first().copied().unwrap_or(""));
    }

    #[test]
    fn predicate_failures_carry_the_kubelets_messages() {
        let allocatable = list(MACHINE1);
        let taints = [taint("bar", "NoExecute")];
        let node = AdmissionNode {
            name: Some("machine1"),
            taints: &taints,
            ..AdmissionNode::new(&[], &allocatable)
        };
        let result = admit_predicates(&bound_to("machine2"), &[], &node);
        assert_eq!(
            result.message,
            "Predicate NodeName failed: node(s) didn't match the requested node name"
        );
        assert_eq!(
            result.failures[1].message(),
            "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
        );
        // The kubelet's own "not enough cpu and memory" numbers.
        let result = admit_predicates(
            &needs_cpu_and_memory(),
            &[pod("r", "cpu=5m,memory=19", "")],
            &node,
        );
        assert_eq!(
            result.message,
            "Node didn't have enough resource: cpu, requested: 8, used: 5, capacity: 10"
        );
    }

    #[test]
    fn an_unknown_node_name_skips_the_node_name_check() {
        let allocatable = list(MACHINE1);
        let node = AdmissionNode::new(&[], &allocatable);
        assert!(admit_predicates(&bound_to("machine2"), &[], &node).admitted);
    }

    /// A pod whose one container has these ports, each "PROTOCOL/hostIP/hostPort" as in
    /// the scheduler's nodeports tests ("" for an unset protocol or address).
    fn with_host_ports(name: &str, ports: &[&str]) -> Pod {
        let mut p = pod(name, "", "");
        p.spec.containers[0].ports = ports
            .iter()
            .map(|spec| {
                let parts: Vec<&str> = spec.split('/').collect();
                let [protocol, host_ip, host_port] = parts[..] else {
                    panic!("bad port {spec}");
                };
                ContainerPort {
                    container_port: 80,
                    host_port: host_port.parse().unwrap_or_else(|e| panic!("{spec}: {e}")),
                    protocol: protocol.into(),
                    host_ip: host_ip.into(),
                    ..Default::default()
                }
            })
            .collect();
        p
    }

    fn node_ports_verdict(new: &Pod, running: &[Pod]) -> Vec<String> {
        let allocatable = list(MACHINE1);
        let node = AdmissionNode::new(&[], &allocatable);
        let result = admit_predicates(new, running, &node);
        result.failures.iter().map(|f| f.reason()).collect()
    }

    // The cases of the scheduler's TestNodePorts (nodeports/node_ports_test.go), plus the
    // kubelet's "hostport conflict" case of TestGeneralPredicates (port 123, protocol and
    // address unset on both sides) and the edges of HostPortInfo.CheckConflict.
    #[rstest]
    #[case::other_port(&["UDP/127.0.0.1/8080"], &["UDP/127.0.0.1/9090"], false)]
    #[case::same_udp_port(&["UDP/127.0.0.1/8080"], &["UDP/127.0.0.1/8080"], true)]
    #[case::same_tcp_port(&["TCP/127.0.0.1/8080"], &["TCP/127.0.0.1/8080"], true)]
    #[case::different_host_ip(&["TCP/127.0.0.1/8080"], &["TCP/127.0.0.2/8080"], false)]
    #[case::different_protocol(&["UDP/127.0.0.1/8080"], &["TCP/127.0.0.1/8080"], false)]
    #[case::second_udp_port_conflict(&["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"], &["UDP/127.0.0.1/8080"], true)]
    #[case::first_tcp_port_conflict(&["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"],
        &["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"], true)]
    #[case::first_tcp_port_conflict_due_to_wildcard_host_ip(&["TCP/0.0.0.0/8001"], &["TCP/127.0.0.1/8001"], true)]
    #[case::tcp_host_port_conflict_due_to_wildcard_host_ip(&["TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"],
        &["TCP/127.0.0.1/8001"], true)]
    #[case::second_tcp_port_conflict_to_wildcard_host_ip(&["TCP/127.0.0.1/8001"], &["TCP/0.0.0.0/8001"], true)]
    #[case::second_different_protocol(&["UDP/127.0.0.1/8001"], &["TCP/0.0.0.0/8001"], false)]
    #[case::udp_host_port_conflict_due_to_wildcard_host_ip(&["UDP/127.0.0.1/8001"],
        &["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"], true)]
    #[case::kubelet_hostport_conflict(&["//123"], &["//123"], true)]
    #[case::unset_address_is_the_wildcard(&["TCP/10.0.0.1/8080"], &["TCP//8080"], true)]
    #[case::unset_protocol_is_tcp(&["/127.0.0.1/8080"], &["TCP/127.0.0.1/8080"], true)]
    #[case::unset_protocol_is_not_udp(&["/127.0.0.1/8080"], &["UDP/127.0.0.1/8080"], false)]
    #[case::host_port_zero_claims_nothing(&["TCP//0"], &["TCP//0"], false)]
    #[case::no_ports_requested(&[], &["TCP//8080"], false)]
    fn node_ports(#[case] wanted: &[&str], #[case] used: &[&str], #[case] conflict: bool) {
        let running = vec![with_host_ports("r", used)];
        let expected: Vec<String> = if conflict {
            vec!["NodePorts".into()]
        } else {
            vec![]
        };
        assert_eq!(
            node_ports_verdict(&with_host_ports("new", wanted), &running),
            expected
        );
    }

    #[test]
    fn node_ports_message_is_the_schedulers() {
        let result = admit_predicates(
            &with_host_ports("new", &["TCP//8080"]),
            &[with_host_ports("r", &["TCP//8080"])],
            &AdmissionNode::new(&[], &list(MACHINE1)),
        );
        assert_eq!(
            result.message,
            "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
        );
    }

    #[test]
    fn ports_of_finished_pods_the_pod_itself_and_plain_init_containers_are_free() {
        let wanted = with_host_ports("new", &["TCP//8080"]);
        let mut finished = with_host_ports("done", &["TCP//8080"]);
        finished.status.phase = Some("Failed".into());
        // A pod already known under the same key (re-admission) does not clash with
        // itself.
        let itself = with_host_ports("new", &["TCP//8080"]);
        // An init container that is not a sidecar has finished before the pod runs.
        let mut with_init = pod("init", "", "");
        with_init.spec.init_containers = with_host_ports("x", &["TCP//8080"]).spec.containers;
        assert_eq!(
            node_ports_verdict(&wanted, &[finished, itself, with_init.clone()]),
            Vec::<String>::new()
        );
        // Made a sidecar, it holds the port for the pod's life.
        with_init.spec.init_containers[0].restart_policy = Some("Always".into());
        assert_eq!(node_ports_verdict(&wanted, &[with_init]), ["NodePorts"]);
    }

    #[test]
    fn a_container_port_alone_claims_nothing_even_beside_a_host_port() {
        // Our runtimes put every pod on the host network, but as in the kubelet only a
        // hostPort (set, or defaulted from containerPort for `hostNetwork: true`) counts.
        let mut bare = pod("bare", "", "");
        bare.spec.containers[0].ports = vec![ContainerPort {
            container_port: 8080,
            protocol: "TCP".into(),
            ..Default::default()
        }];
        assert_eq!(
            node_ports_verdict(&bare, &[with_host_ports("r", &["TCP//8080"])]),
            Vec::<String>::new()
        );
        assert_eq!(
            node_ports_verdict(&with_host_ports("new", &["TCP//8080"]), &[bare]),
            Vec::<String>::new()
        );
    }

    fn labelled_os(os: &str) -> Pod {
        let mut p = best_effort();
        p.metadata.labels.insert(OS_LABEL.into(), os.into());
        p
    }

    fn spec_os(os: &str) -> Pod {
        let mut p = best_effort();
        p.spec.os = Some(crate::pod::PodOs { name: os.into() });
        p
    }

    // The kubelet's TestRejectPodAdmissionBasedOnOSSelector and
    // TestRejectPodAdmissionBasedOnOSField (predicate_test.go), on a linux node. The
    // node's own label is never read: the kubelet resets it to its runtime's OS, so the
    // "dummyOS label on the node" cases reduce to the pod's label against linux.
    #[rstest]
    #[case::os_label_match(labelled_os("linux"), vec![])]
    #[case::os_label_mismatch(labelled_os("dummyOS"), vec!["PodOSSelectorNodeLabelDoesNotMatch"])]
    #[case::windows_label(labelled_os("windows"), vec!["PodOSSelectorNodeLabelDoesNotMatch"])]
    #[case::no_label_selector(best_effort(), vec![])]
    #[case::os_field_match(spec_os("linux"), vec![])]
    #[case::os_field_mismatch(spec_os("windows"), vec!["PodOSNotSupported"])]
    fn os_checks(#[case] new: Pod, #[case] expected: Vec<&str>) {
        let allocatable = list(MACHINE1);
        let node = AdmissionNode {
            os: "linux",
            ..AdmissionNode::new(&[], &allocatable)
        };
        let result = admit_predicates(&new, &[], &node);
        let reasons: Vec<String> = result.failures.iter().map(|f| f.reason()).collect();
        assert_eq!(reasons, expected, "{result:?}");
        assert_eq!(result.admitted, expected.is_empty());
    }

    #[test]
    fn os_rejections_carry_the_kubelets_messages() {
        let allocatable = list(MACHINE1);
        let node = AdmissionNode {
            os: "linux",
            ..AdmissionNode::new(&[], &allocatable)
        };
        let label = admit_predicates(&labelled_os("windows"), &[], &node);
        assert_eq!(
            (label.reason.as_str(), label.message.as_str()),
            (
                "PodOSSelectorNodeLabelDoesNotMatch",
                "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
            )
        );
        let field = admit_predicates(&spec_os("windows"), &[], &node);
        assert_eq!(
            (field.reason.as_str(), field.message.as_str()),
            (
                "PodOSNotSupported",
                "Failed to admit pod as the OS field doesn't match node OS"
            )
        );
    }

    #[test]
    fn an_os_mismatch_is_the_only_failure_reported() {
        // The kubelet returns at the OS checks, before the resource fit and the rest;
        // the label check comes before the field check.
        let mut new = needs_cpu_and_memory();
        new.spec.node_name = Some("machine2".into());
        new.spec.os = Some(crate::pod::PodOs {
            name: "windows".into(),
        });
        new.metadata
            .labels
            .insert(OS_LABEL.into(), "windows".into());
        let allocatable = list(MACHINE1);
        let node = AdmissionNode {
            name: Some("machine1"),
            os: "linux",
            ..AdmissionNode::new(&[], &allocatable)
        };
        let result = admit_predicates(&new, &[pod("r", "cpu=5m,memory=19", "")], &node);
        assert_eq!(result.failures, vec![AdmissionFailure::OsLabelMismatch]);
        new.metadata.labels.clear();
        let result = admit_predicates(&new, &[pod("r", "cpu=5m,memory=19", "")], &node);
        assert_eq!(result.failures, vec![AdmissionFailure::OsFieldMismatch]);
    }

    #[test]
    fn the_agents_node_runs_its_own_os() {
        let allocatable = list(MACHINE1);
        let node = AdmissionNode::new(&[], &allocatable);
        assert_eq!(node.os, std::env::consts::OS);
        assert!(admit_predicates(&spec_os(NODE_OS), &[], &node).admitted);
    }

    #[test]
    fn host_ports_come_after_the_node_name_and_before_taints() {
        // AdmissionCheck's order: resources, node affinity, node name, node ports; then
        // the kubelet's taint check.
        let mut new = with_host_ports("new", &["TCP//8080"]);
        new.spec.containers[0].resources.requests = list("cpu=8m");
        new.spec.node_name = Some("machine2".into());
        let mut running = with_host_ports("r", &["TCP//8080"]);
        running.spec.containers[0].resources.requests = list("cpu=5m");
        let allocatable = list(MACHINE1);
        let taints = [taint("bar", "NoExecute")];
        let node = AdmissionNode {
            name: Some("machine1"),
            taints: &taints,
            ..AdmissionNode::new(&[], &allocatable)
        };
        let result = admit_predicates(&new, &[running], &node);
        let reasons: Vec<String> = result.failures.iter().map(|f| f.reason()).collect();
        assert_eq!(
            reasons,
            ["OutOfcpu", "NodeName", "NodePorts", "TaintToleration"]
        );
    }

    #[test]
    fn pressure_failure_is_typed() {
        let result = admit_under_pressure(&best_effort(), &[DiskPressure]);
        assert_eq!(
            result.failures,
            vec![AdmissionFailure::NodeCondition(vec![DiskPressure])]
        );
    }
}
