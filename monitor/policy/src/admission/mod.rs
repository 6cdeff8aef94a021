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
mod tests;
