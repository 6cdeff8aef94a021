//! Pod admission on this node: the eviction manager's pressure check followed by the
//! resource-fit check, as the kubelet's admit handlers run them in that order.
//!
//! kubelet: pkg/kubelet/eviction/eviction_manager.go (managerImpl.Admit),
//! pkg/kubelet/lifecycle/predicate.go (predicateAdmitHandler.Admit) and the scheduler's
//! noderesources fitsRequest it calls. A failed fit of a critical pod is what
//! [`super::preemption`] resolves.
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

/// The outcome of admitting one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmitResult {
    pub admitted: bool,
    /// Machine-readable reason ("Evicted", "OutOfcpu", "OutOfmemory", "OutOfpods", …);
    /// empty when admitted.
    pub reason: String,
    /// Human-readable detail, as the kubelet writes it to the pod status.
    pub message: String,
    /// Every resource the node lacks, in the scheduler's order (pods, cpu, memory,
    /// ephemeral-storage, then the rest by name); empty unless the fit failed.
    pub insufficient: Vec<InsufficientResource>,
}

impl AdmitResult {
    pub fn admit() -> Self {
        AdmitResult {
            admitted: true,
            reason: String::new(),
            message: String::new(),
            insufficient: Vec::new(),
        }
    }

    pub fn reject(reason: impl Into<String>, message: impl Into<String>) -> Self {
        AdmitResult {
            admitted: false,
            reason: reason.into(),
            message: message.into(),
            insufficient: Vec::new(),
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
    let names: Vec<&str> = node_conditions.iter().map(|c| c.as_str()).collect();
    AdmitResult::reject(
        EVICTED_REASON,
        format!("The node had condition: [{}]. ", names.join(" ")),
    )
}

/// The resource-fit check (predicateAdmitHandler with noderesources fitsRequest): the
/// pod's requests against the node's allocatable minus what the running pods request.
/// The first shortage becomes the reason ("OutOf<resource>"); all are listed for
/// preemption.
///
/// Deviations, all because the agent may not know the whole node: a resource missing
/// from `node_allocatable` is not checked (the kubelet drops only unknown extended
/// resources this way, and would read a missing "pods" as 0 allowed pods); the pod
/// itself and pods that have finished are not counted among `running_pods`. The other
/// predicates of the kubelet's generalFilter (node name, host ports, node affinity,
/// taints) are out of scope.
pub fn admit_resource_fit(
    pod: &Pod,
    running_pods: &[Pod],
    node_allocatable: &ResourceList,
) -> AdmitResult {
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

    match insufficient.first() {
        None => AdmitResult::admit(),
        Some(first) => AdmitResult {
            admitted: false,
            reason: format!("OutOf{}", first.resource),
            message: first.message(),
            insufficient,
        },
    }
}

/// Both checks in the kubelet's order: node pressure first, then resource fit.
pub fn admit_pod(
    pod: &Pod,
    node_conditions: &[NodeConditionType],
    running_pods: &[Pod],
    node_allocatable: &ResourceList,
) -> AdmitResult {
    let pressure = admit_under_pressure(pod, node_conditions);
    if !pressure.admitted {
        return pressure;
    }
    admit_resource_fit(pod, running_pods, node_allocatable)
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
            .insufficient
            .iter()
            .map(|r| (r.resource.as_str(), r.requested, r.used, r.capacity))
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
        assert_eq!(result.insufficient[0].insufficient_amount(), 100);
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
}
