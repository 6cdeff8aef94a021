//! Pod admission on this node: the eviction manager's pressure check followed by the
//! predicate check (resource fit, node name, NoExecute taints), as the kubelet's admit
//! handlers run them in that order.
//!
//! kubelet: pkg/kubelet/eviction/eviction_manager.go (managerImpl.Admit),
//! pkg/kubelet/lifecycle/predicate.go (predicateAdmitHandler.Admit, generalFilter) and the
//! scheduler's AdmissionCheck it calls. Every failure is typed ([`AdmissionFailure`]):
//! [`super::preemption`] may resolve a critical pod's failures only when all of them are
//! insufficient resources.
use serde::Deserialize;

use super::pod::{Pod, ResourceList};
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
    /// memory, ephemeral-storage, then the rest by name; then node name; then taints);
    /// `reason` and `message` are the first one's. Empty when admitted, and for a
    /// rejection that is no predicate's (UnexpectedAdmissionError).
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
    /// ("NodeName", "TaintToleration"), `description` why.
    Predicate { name: String, description: String },
}

impl AdmissionFailure {
    /// The pod status reason: "OutOf<resource>", "Evicted", or the predicate's name.
    pub fn reason(&self) -> String {
        match self {
            AdmissionFailure::InsufficientResource(r) => format!("OutOf{}", r.resource),
            AdmissionFailure::NodeCondition(_) => EVICTED_REASON.to_string(),
            AdmissionFailure::Predicate { name, .. } => name.clone(),
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
}

impl<'a> AdmissionNode<'a> {
    /// A node known only by its conditions and allocatable (the agent's view).
    pub fn new(conditions: &'a [NodeConditionType], allocatable: &'a ResourceList) -> Self {
        AdmissionNode {
            conditions,
            allocatable,
            name: None,
            taints: &[],
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
    let own_key = pod.key();
    let running: Vec<&Pod> = running_pods
        .iter()
        .filter(|p| !p.is_terminal() && p.key() != own_key)
        .collect();
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

/// The predicate check (predicateAdmitHandler's generalFilter), every failure in the
/// kubelet's order: insufficient resources, the node name (a pod bound to another node),
/// then NoExecute taints the pod does not tolerate (static pods skip this one).
///
/// Not evaluated, as the pod model does not read the fields they need: required node
/// affinity and nodeSelector, host ports, and the OS label and field checks.
pub fn admit_predicates(pod: &Pod, running_pods: &[Pod], node: &AdmissionNode<'_>) -> AdmitResult {
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
    use crate::policy::pod::Toleration;
    use crate::policy::testing::{list, pod};

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

    // The cases of the kubelet's TestGeneralPredicates this model can express (host
    // ports and node affinity are not read by the pod model), plus the order of mixed
    // failures: resources first, then node name, then taints.
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

    #[test]
    fn pressure_failure_is_typed() {
        let result = admit_under_pressure(&best_effort(), &[DiskPressure]);
        assert_eq!(
            result.failures,
            vec![AdmissionFailure::NodeCondition(vec![DiskPressure])]
        );
    }
}
