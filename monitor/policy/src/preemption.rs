//! Critical-pod preemption at admission: when a critical pod fails admission only for
//! lack of resources, the kubelet evicts running pods to make room instead of rejecting
//! it. Any other failure (node pressure, the pod's OS, node name, host ports, an
//! untolerated taint) is one the kubelet does not let evicting pods fix, even where it
//! would (a host port held by a preemptable pod): the pod is rejected for it and nothing
//! is preempted.
//!
//! kubelet: pkg/kubelet/preemption/preemption.go (CriticalPodAdmissionHandler,
//! getPodsToPreempt, getPodsToPreemptByDistance) and pkg/kubelet/types Preemptable.
use super::admission::{
    AdmissionFailure, AdmissionNode, AdmitResult, UNEXPECTED_ADMISSION_ERROR, admit_pod_on,
    request_units,
};
use super::pod::{Pod, ResourceList};
use super::types::{NodeConditionType, QosClass};

/// An amount of one resource that must be freed, in the units of
/// [`request_units`] (millicores for cpu, a count for pods, base units otherwise).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionRequirement {
    pub resource: String,
    pub quantity: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreemptionError {
    /// Even evicting every preemptable pod would not free enough.
    #[error("no set of running pods found to reclaim resources: {}", describe(.0))]
    NoPodsToReclaim(Vec<AdmissionRequirement>),
}

/// The kubelet's rendering of a requirement list: `[(res: cpu, q: 500), ]`.
fn describe(requirements: &[AdmissionRequirement]) -> String {
    let items: String = requirements
        .iter()
        .map(|r| format!("(res: {}, q: {}), ", r.resource, r.quantity))
        .collect();
    format!("[{items}]")
}

/// What admission decided once preemption had its say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdmissionOutcome {
    Admitted,
    /// Admitted once these pods (keys, in eviction order) are preempted.
    AdmittedAfterPreempting(Vec<String>),
    Rejected(AdmitResult),
}

/// Whether `preemptor` may preempt `preemptee` (kubelet types Preemptable): a critical
/// pod may preempt any non-critical pod; otherwise only a pod of strictly higher priority,
/// and only when both set a priority.
pub fn preemptable(preemptor: &Pod, preemptee: &Pod) -> bool {
    if preemptor.is_critical() && !preemptee.is_critical() {
        return true;
    }
    match (preemptor.spec.priority, preemptee.spec.priority) {
        (Some(a), Some(b)) => a > b,
        _ => false,
    }
}

/// The requirements left after the given pods are gone (admissionRequirementList.subtract).
fn subtract(requirements: &[AdmissionRequirement], pods: &[&Pod]) -> Vec<AdmissionRequirement> {
    requirements
        .iter()
        .filter_map(|req| {
            let mut remaining = req.quantity;
            for pod in pods {
                remaining = remaining.saturating_sub(request_units(pod, &req.resource));
                if remaining <= 0 {
                    break;
                }
            }
            (remaining > 0).then(|| AdmissionRequirement {
                resource: req.resource.clone(),
                quantity: remaining,
            })
        })
        .collect()
}

/// How far evicting `pod` leaves us from the requirements: the sum over requirements of
/// the squared fraction still missing, so each resource weighs the same whatever its
/// magnitude (admissionRequirementList.distance).
fn distance(requirements: &[AdmissionRequirement], pod: &Pod) -> f64 {
    requirements
        .iter()
        .filter(|req| req.quantity > 0)
        .map(|req| {
            let remaining = req
                .quantity
                .saturating_sub(request_units(pod, &req.resource));
            if remaining > 0 {
                (remaining as f64 / req.quantity as f64).powi(2)
            } else {
                0.0
            }
        })
        .sum()
}

/// Whether `a` requests no more than `b`, comparing memory then CPU
/// (smallerResourceRequest). Equal requests count as smaller, as in the kubelet: among
/// pods equal in distance and requests, the last one scanned wins.
fn smaller_resource_request(a: &Pod, b: &Pod) -> bool {
    for resource in ["memory", "cpu"] {
        let (ra, rb) = (request_units(a, resource), request_units(b, resource));
        if ra != rb {
            return ra < rb;
        }
    }
    true
}

/// Picks pods from `pods` until the requirements are met, each round taking the pod that
/// leaves the smallest distance (ties: the smaller request, and among equal ones the
/// later pod), which tends to minimise the number of pods (getPodsToPreemptByDistance).
/// The candidate list shrinks by swapping the chosen pod with the last one, as the
/// kubelet's does, so tie breaks follow the same order.
fn pods_to_preempt_by_distance(
    mut pods: Vec<&Pod>,
    mut requirements: Vec<AdmissionRequirement>,
) -> Result<Vec<&Pod>, PreemptionError> {
    let mut chosen = Vec::new();
    while !requirements.is_empty() {
        if pods.is_empty() {
            return Err(PreemptionError::NoPodsToReclaim(requirements));
        }
        // Every distance is below the number of requirements (each term is at most 1).
        let mut best_distance = requirements.len() as f64 + 1.0;
        let mut best = 0;
        for (i, pod) in pods.iter().enumerate() {
            let d = distance(&requirements, pod);
            if d < best_distance
                || (d == best_distance && smaller_resource_request(pod, pods[best]))
            {
                best_distance = d;
                best = i;
            }
        }
        let pod = pods.swap_remove(best);
        requirements = subtract(&requirements, &[pod]);
        chosen.push(pod);
    }
    Ok(chosen)
}

fn concat<'a>(a: &[&'a Pod], b: &[&'a Pod]) -> Vec<&'a Pod> {
    a.iter().chain(b).copied().collect()
}

/// The running pods to evict so that `pod` fits (getPodsToPreempt), as keys in eviction
/// order: BestEffort pods first, then Burstable, then Guaranteed.
///
/// Only pods `pod` may preempt are candidates. The cheapest QoS classes are used up
/// first: Guaranteed pods are taken only for what all BestEffort and Burstable pods
/// together cannot free, Burstable pods only for what the BestEffort pods and those
/// Guaranteed pods cannot, and BestEffort pods for what remains.
pub fn pods_to_preempt(
    pod: &Pod,
    running_pods: &[Pod],
    requirements: &[AdmissionRequirement],
) -> Result<Vec<String>, PreemptionError> {
    let requirements: Vec<AdmissionRequirement> = requirements
        .iter()
        .filter(|r| r.quantity > 0)
        .cloned()
        .collect();
    let own_key = pod.key();
    let (mut best_effort, mut burstable, mut guaranteed) = (Vec::new(), Vec::new(), Vec::new());
    for candidate in running_pods
        .iter()
        .filter(|p| p.key() != own_key && preemptable(pod, p))
    {
        match candidate.qos_class() {
            QosClass::BestEffort => best_effort.push(candidate),
            QosClass::Burstable => burstable.push(candidate),
            QosClass::Guaranteed => guaranteed.push(candidate),
        }
    }

    let all: Vec<&Pod> = best_effort
        .iter()
        .chain(&burstable)
        .chain(&guaranteed)
        .copied()
        .collect();
    let unreachable = subtract(&requirements, &all);
    if !unreachable.is_empty() {
        return Err(PreemptionError::NoPodsToReclaim(unreachable));
    }
    let guaranteed_to_evict = pods_to_preempt_by_distance(
        guaranteed,
        subtract(&requirements, &concat(&best_effort, &burstable)),
    )?;
    let burstable_to_evict = pods_to_preempt_by_distance(
        burstable,
        subtract(&requirements, &concat(&best_effort, &guaranteed_to_evict)),
    )?;
    let best_effort_to_evict = pods_to_preempt_by_distance(
        best_effort,
        subtract(
            &requirements,
            &concat(&burstable_to_evict, &guaranteed_to_evict),
        ),
    )?;
    Ok(best_effort_to_evict
        .iter()
        .chain(&burstable_to_evict)
        .chain(&guaranteed_to_evict)
        .map(|p| p.key())
        .collect())
}

/// The kubelet's admission-failure handler (CriticalPodAdmissionHandler.HandleAdmissionFailure):
/// a non-critical pod stays rejected with its first failure. A critical pod with any
/// failure that is not an insufficient resource is rejected with the first such failure
/// (resource shortages are dropped from its reasons) and nothing is preempted. A critical
/// pod short of resources only is admitted once the chosen pods are preempted, or rejected
/// with "UnexpectedAdmissionError" when no set of pods frees enough.
pub fn handle_admission_failure(
    pod: &Pod,
    failure: AdmitResult,
    running_pods: &[Pod],
) -> AdmissionOutcome {
    if failure.admitted {
        return AdmissionOutcome::Admitted;
    }
    // A rejection without typed failures is not a predicate's: nothing to recover.
    if !pod.is_critical() || failure.failures.is_empty() {
        return AdmissionOutcome::Rejected(failure);
    }
    let mut requirements = Vec::new();
    let mut others = Vec::new();
    for f in &failure.failures {
        match f {
            AdmissionFailure::InsufficientResource(r) => requirements.push(AdmissionRequirement {
                resource: r.resource.clone(),
                quantity: r.insufficient_amount(),
            }),
            other => others.push(other.clone()),
        }
    }
    if !others.is_empty() {
        return AdmissionOutcome::Rejected(AdmitResult::from_failures(others));
    }
    match pods_to_preempt(pod, running_pods, &requirements) {
        Ok(keys) => AdmissionOutcome::AdmittedAfterPreempting(keys),
        Err(err) => AdmissionOutcome::Rejected(AdmitResult::reject(
            UNEXPECTED_ADMISSION_ERROR,
            format!(
                "Unexpected error while attempting to recover from admission failure: preemption: error finding a set of pods to preempt: {err}"
            ),
        )),
    }
}

/// Admission with preemption on a node known by its conditions and allocatable only (the
/// agent's view): see [`admit_with_preemption_on`].
pub fn admit_with_preemption(
    pod: &Pod,
    node_conditions: &[NodeConditionType],
    running_pods: &[Pod],
    node_allocatable: &ResourceList,
) -> AdmissionOutcome {
    admit_with_preemption_on(
        pod,
        &AdmissionNode::new(node_conditions, node_allocatable),
        running_pods,
    )
}

/// Admission with preemption, end to end: [`admit_pod_on`], then
/// [`handle_admission_failure`].
pub fn admit_with_preemption_on(
    pod: &Pod,
    node: &AdmissionNode<'_>,
    running_pods: &[Pod],
) -> AdmissionOutcome {
    let result = admit_pod_on(pod, node, running_pods);
    handle_admission_failure(pod, result, running_pods)
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::admission::{InsufficientResource, Taint};
    use crate::testing::{list, pod};

    fn critical(mut pod: Pod) -> Pod {
        pod.spec.priority = Some(2_000_000_000);
        pod
    }

    fn running() -> Vec<Pod> {
        vec![
            pod("be1", "", ""),
            pod("bu1", "cpu=100m,memory=100Mi", ""),
            pod("bu2", "cpu=300m,memory=300Mi", ""),
            pod("gu1", "cpu=1,memory=1Gi", "cpu=1,memory=1Gi"),
            critical(pod("crit", "cpu=4,memory=4Gi", "")),
        ]
    }

    fn req(items: &[(&str, i64)]) -> Vec<AdmissionRequirement> {
        items
            .iter()
            .map(|(r, q)| AdmissionRequirement {
                resource: r.to_string(),
                quantity: *q,
            })
            .collect()
    }

    const MI: i64 = 1 << 20;

    #[rstest]
    #[case::nothing_needed(req(&[]), &[])]
    #[case::cpu_from_cheapest_burstable(req(&[("cpu", 50)]), &["default/bu1"])]
    #[case::pod_slot_from_best_effort(req(&[("pods", 1)]), &["default/be1"])]
    #[case::two_burstable_closest_first(req(&[("cpu", 350)]), &["default/bu2", "default/bu1"])]
    #[case::guaranteed_only_when_needed(req(&[("cpu", 500)]), &["default/gu1"])]
    #[case::memory_and_cpu(req(&[("cpu", 100), ("memory", 300 * MI)]), &["default/bu2"])]
    #[case::two_pod_slots(req(&[("pods", 2)]), &["default/be1", "default/bu1"])]
    #[case::everything(req(&[("pods", 4)]), &["default/be1", "default/bu1", "default/bu2", "default/gu1"])]
    fn chooses(#[case] requirements: Vec<AdmissionRequirement>, #[case] expected: &[&str]) {
        let preemptor = critical(pod("new", "cpu=1", ""));
        let got = pods_to_preempt(&preemptor, &running(), &requirements)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, expected);
    }

    #[rstest]
    #[case::more_cpu_than_all(req(&[("cpu", 1401)]), "[(res: cpu, q: 1), ]")]
    #[case::critical_pods_are_not_candidates(req(&[("memory", 2048 * MI)]), "[(res: memory, q: 654311424), ]")]
    #[case::unknown_resource(req(&[("example.com/gpu", 1)]), "[(res: example.com/gpu, q: 1), ]")]
    fn fails_when_no_set_suffices(
        #[case] requirements: Vec<AdmissionRequirement>,
        #[case] left: &str,
    ) {
        let preemptor = critical(pod("new", "cpu=1", ""));
        match pods_to_preempt(&preemptor, &running(), &requirements) {
            Ok(keys) => panic!("expected an error, chose {keys:?}"),
            Err(e) => assert_eq!(
                e.to_string(),
                format!("no set of running pods found to reclaim resources: {left}")
            ),
        }
    }

    #[test]
    fn ties_go_to_the_last_pod_scanned_as_in_the_kubelet() {
        // Equal distance and requests: the kubelet's comparison is not strict, so each
        // later pod replaces the best; c first, then (after the swap-remove) b.
        let pods = vec![pod("a", "", ""), pod("b", "", ""), pod("c", "", "")];
        let preemptor = critical(pod("new", "", ""));
        let got = pods_to_preempt(&preemptor, &pods, &req(&[("pods", 2)]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, ["default/c", "default/b"]);
    }

    /// The pods of the kubelet's preemption_test.go getTestPods.
    fn kubelet_test_pod(name: &str) -> Pod {
        let mut p = match name {
            "bestEffort" => pod(name, "", ""),
            "burstable" => pod(name, "cpu=100m,memory=100Mi", ""),
            "high-request-burstable" => pod(name, "cpu=300m,memory=300Mi", ""),
            "guaranteed" => pod(name, "cpu=100m,memory=100Mi", "cpu=100m,memory=100Mi"),
            "high-request-guaranteed" => {
                pod(name, "cpu=300m,memory=300Mi", "cpu=300m,memory=300Mi")
            }
            "cluster-critical" | "node-critical" => pod(name, "cpu=100m,memory=100Mi", ""),
            other => panic!("no test pod {other}"),
        };
        if name.ends_with("critical") {
            p.metadata.namespace = "kube-system".into();
            p.spec.priority = Some(if name == "node-critical" {
                2_000_000_100
            } else {
                2_000_000_000
            });
        }
        p
    }

    /// getAdmissionRequirementList(cpu millicores, memory Mi, pods) of the kubelet's tests.
    fn kubelet_requirements(cpu: i64, memory_mi: i64, pods: i64) -> Vec<AdmissionRequirement> {
        req(&[("cpu", cpu), ("memory", memory_mi * MI), ("pods", pods)])
            .into_iter()
            .filter(|r| r.quantity > 0)
            .collect()
    }

    // The cases of the kubelet's TestGetPodsToPreempt and TestEvictPodsToFreeRequests
    // (which compare the chosen pods as sets; the order here is the one getPodsToPreempt
    // returns). `None`: no set of pods frees enough.
    #[rstest]
    #[case::no_requirements("cluster-critical", &[], (0, 0, 0), Some(&[][..]))]
    #[case::no_pods("cluster-critical", &[], (0, 0, 1), None)]
    #[case::equal_pods_and_resources_requirements("cluster-critical", &["burstable"], (100, 100, 1), Some(&["burstable"][..]))]
    #[case::higher_requirements_than_pod_requests("cluster-critical", &["burstable"], (200, 200, 2), None)]
    #[case::choose_between_best_effort_and_burstable("cluster-critical", &["burstable", "bestEffort"], (0, 0, 1), Some(&["bestEffort"][..]))]
    #[case::choose_between_burstable_and_guaranteed("cluster-critical", &["burstable", "guaranteed"], (0, 0, 1), Some(&["burstable"][..]))]
    #[case::choose_lower_request_burstable_if_it_meets_requirements("cluster-critical",
        &["bestEffort", "high-request-burstable", "burstable"], (100, 100, 0), Some(&["burstable"][..]))]
    #[case::choose_higher_request_burstable_if_lower_does_not_meet_requirements("cluster-critical",
        &["bestEffort", "burstable", "high-request-burstable"], (150, 150, 0), Some(&["high-request-burstable"][..]))]
    #[case::multiple_pods_required("cluster-critical",
        &["bestEffort", "burstable", "high-request-burstable", "guaranteed", "high-request-guaranteed"],
        (350, 350, 0), Some(&["high-request-burstable", "burstable"][..]))]
    #[case::evict_guaranteed_when_we_have_to_and_not_the_extra_burstable("cluster-critical",
        &["bestEffort", "burstable", "high-request-burstable", "guaranteed", "high-request-guaranteed"],
        (0, 550, 0), Some(&["high-request-burstable", "high-request-guaranteed"][..]))]
    #[case::evict_cluster_critical_pod_for_node_critical_pod("node-critical", &["cluster-critical"], (100, 0, 0), Some(&["cluster-critical"][..]))]
    #[case::cannot_evict_node_critical_pod_for_cluster_critical_pod("cluster-critical", &["node-critical"], (100, 0, 0), None)]
    #[case::best_effort_pods_free_no_memory("cluster-critical", &["bestEffort"], (0, 1, 0), None)]
    fn kubelet_get_pods_to_preempt(
        #[case] preemptor: &str,
        #[case] running: &[&str],
        #[case] (cpu, memory_mi, pods): (i64, i64, i64),
        #[case] expected: Option<&[&str]>,
    ) {
        let preemptor = kubelet_test_pod(preemptor);
        let running: Vec<Pod> = running.iter().map(|n| kubelet_test_pod(n)).collect();
        let got = pods_to_preempt(
            &preemptor,
            &running,
            &kubelet_requirements(cpu, memory_mi, pods),
        );
        let expected: Option<Vec<String>> =
            expected.map(|names| names.iter().map(|n| kubelet_test_pod(n).key()).collect());
        assert_eq!(got.ok(), expected);
    }

    #[test]
    fn equidistant_pods_prefer_the_smaller_request() {
        // Both free all the CPU; b asks for less memory, so it goes first.
        let pods = vec![
            pod("a", "cpu=1,memory=2Gi", ""),
            pod("b", "cpu=1,memory=1Gi", ""),
        ];
        let preemptor = critical(pod("new", "", ""));
        let got = pods_to_preempt(&preemptor, &pods, &req(&[("cpu", 500)]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, ["default/b"]);
    }

    fn with_priority(name: &str, priority: Option<i32>) -> Pod {
        let mut p = pod(name, "", "");
        p.spec.priority = priority;
        p
    }

    #[rstest]
    #[case::critical_over_normal(
        critical(pod("a", "", "")),
        with_priority("b", Some(1_000_000)),
        true
    )]
    #[case::critical_over_critical_by_priority(
        critical(pod("a", "", "")),
        critical(pod("b", "", "")),
        false
    )]
    #[case::higher_priority(with_priority("a", Some(10)), with_priority("b", Some(5)), true)]
    #[case::equal_priority(with_priority("a", Some(5)), with_priority("b", Some(5)), false)]
    #[case::lower_priority(with_priority("a", Some(1)), with_priority("b", Some(5)), false)]
    #[case::missing_priority(with_priority("a", Some(10)), with_priority("b", None), false)]
    fn preemptable_rules(#[case] preemptor: Pod, #[case] preemptee: Pod, #[case] expected: bool) {
        assert_eq!(preemptable(&preemptor, &preemptee), expected);
    }

    #[test]
    fn end_to_end_critical_pod_preempts() {
        let node = list("cpu=2,memory=4Gi,pods=10");
        let new = critical(pod("new", "cpu=1", ""));
        // Running: 100m + 300m + 1 + 4 (critical) = 5.4 cores > 2: the critical "crit"
        // alone overcommits, so no set of preemptable pods can make room.
        match admit_with_preemption(&new, &[], &running(), &node) {
            AdmissionOutcome::Rejected(r) => {
                assert_eq!(r.reason, "UnexpectedAdmissionError");
                assert!(
                    r.message.contains("no set of running pods found"),
                    "{}",
                    r.message
                );
            }
            other => panic!("expected rejection, got {other:?}"),
        }
        let without_crit: Vec<Pod> = running()
            .into_iter()
            .filter(|p| p.metadata.name != "crit")
            .collect();
        // Used 1400m of 2000m: needs 400m more, which bu2 then bu1 free.
        assert_eq!(
            admit_with_preemption(&new, &[], &without_crit, &node),
            AdmissionOutcome::AdmittedAfterPreempting(vec![
                "default/bu2".into(),
                "default/bu1".into()
            ])
        );
    }

    #[test]
    fn non_critical_pods_are_rejected_and_fitting_pods_admitted() {
        let node = list("cpu=2,memory=4Gi,pods=10");
        let without_crit: Vec<Pod> = running()
            .into_iter()
            .filter(|p| p.metadata.name != "crit")
            .collect();
        match admit_with_preemption(&pod("new", "cpu=1", ""), &[], &without_crit, &node) {
            AdmissionOutcome::Rejected(r) => assert_eq!(r.reason, "OutOfcpu"),
            other => panic!("expected OutOfcpu, got {other:?}"),
        }
        assert_eq!(
            admit_with_preemption(&pod("new", "cpu=100m", ""), &[], &without_crit, &node),
            AdmissionOutcome::Admitted
        );
    }

    fn cpu_short(requested: i64) -> AdmissionFailure {
        AdmissionFailure::InsufficientResource(InsufficientResource {
            resource: "cpu".into(),
            requested,
            used: 1400,
            capacity: 2000,
        })
    }

    fn bound_elsewhere() -> AdmissionFailure {
        AdmissionFailure::Predicate {
            name: "NodeName".into(),
            description: "node(s) didn't match the requested node name".into(),
        }
    }

    fn ports_taken() -> AdmissionFailure {
        AdmissionFailure::Predicate {
            name: "NodePorts".into(),
            description: "node(s) didn't have free ports for the requested pod ports".into(),
        }
    }

    // HandleAdmissionFailure: only insufficient resources may be preempted away; with any
    // other reason the critical pod is rejected for the first such reason, and the
    // resource shortages are dropped from what it reports.
    #[rstest]
    #[case::pressure_alongside_a_shortage(
        vec![cpu_short(1000), AdmissionFailure::NodeCondition(vec![NodeConditionType::DiskPressure])],
        "Evicted", "The node had condition: [DiskPressure]. ", 1)]
    #[case::node_name_after_a_shortage(vec![cpu_short(1000), bound_elsewhere()],
        "NodeName", "Predicate NodeName failed: node(s) didn't match the requested node name", 1)]
    #[case::node_name_and_taint(vec![bound_elsewhere(), AdmissionFailure::Predicate {
            name: "TaintToleration".into(),
            description: "node(s) had taints that the pod didn't tolerate".into(),
        }],
        "NodeName", "Predicate NodeName failed: node(s) didn't match the requested node name", 2)]
    #[case::host_ports_after_a_shortage(vec![cpu_short(1000), ports_taken()],
        "NodePorts", "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports", 1)]
    #[case::os_label(vec![AdmissionFailure::OsLabelMismatch], "PodOSSelectorNodeLabelDoesNotMatch",
        "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label", 1)]
    #[case::os_field(vec![AdmissionFailure::OsFieldMismatch], "PodOSNotSupported",
        "Failed to admit pod as the OS field doesn't match node OS", 1)]
    fn other_failures_reject_the_critical_pod_without_preempting(
        #[case] failures: Vec<AdmissionFailure>,
        #[case] reason: &str,
        #[case] message: &str,
        #[case] kept: usize,
    ) {
        let failure = AdmitResult::from_failures(failures);
        let outcome =
            handle_admission_failure(&critical(pod("new", "cpu=1", "")), failure, &running());
        match outcome {
            AdmissionOutcome::Rejected(r) => {
                assert_eq!((r.reason.as_str(), r.message.as_str()), (reason, message));
                assert_eq!(r.failures.len(), kept, "{r:?}");
                assert!(
                    r.failures
                        .iter()
                        .all(|f| !matches!(f, AdmissionFailure::InsufficientResource(_))),
                    "{r:?}"
                );
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn only_shortages_are_preempted_away() {
        // 400m short: bu2 (300m) then bu1 (100m), as in end_to_end_critical_pod_preempts.
        let failure = AdmitResult::from_failures(vec![cpu_short(1000)]);
        assert_eq!(
            handle_admission_failure(&critical(pod("new", "cpu=1", "")), failure, &running()),
            AdmissionOutcome::AdmittedAfterPreempting(vec![
                "default/bu2".into(),
                "default/bu1".into()
            ])
        );
    }

    #[test]
    fn a_non_critical_pod_keeps_every_reason_and_the_first_one() {
        let failure = AdmitResult::from_failures(vec![cpu_short(1000), bound_elsewhere()]);
        let outcome =
            handle_admission_failure(&pod("new", "cpu=1", ""), failure.clone(), &running());
        assert_eq!(outcome, AdmissionOutcome::Rejected(failure.clone()));
        assert_eq!(failure.reason, "OutOfcpu");
    }

    #[test]
    fn a_rejection_without_typed_failures_stays_as_it_is() {
        let failure = AdmitResult::reject(UNEXPECTED_ADMISSION_ERROR, "something broke");
        let outcome =
            handle_admission_failure(&critical(pod("new", "", "")), failure.clone(), &running());
        assert_eq!(outcome, AdmissionOutcome::Rejected(failure));
    }

    fn tolerating_nothing_node<'a>(
        allocatable: &'a ResourceList,
        taints: &'a [Taint],
    ) -> AdmissionNode<'a> {
        AdmissionNode {
            name: Some("machine1"),
            taints,
            ..AdmissionNode::new(&[], allocatable)
        }
    }

    #[test]
    fn end_to_end_a_critical_pod_bound_elsewhere_preempts_nobody() {
        let allocatable = list("cpu=2,memory=4Gi,pods=10");
        let node = tolerating_nothing_node(&allocatable, &[]);
        let without_crit: Vec<Pod> = running()
            .into_iter()
            .filter(|p| p.metadata.name != "crit")
            .collect();
        let mut new = critical(pod("new", "cpu=1", ""));
        new.spec.node_name = Some("machine2".into());
        match admit_with_preemption_on(&new, &node, &without_crit) {
            AdmissionOutcome::Rejected(r) => assert_eq!(r.reason, "NodeName"),
            other => panic!("expected a NodeName rejection, got {other:?}"),
        }
        // Bound here, the same pod preempts (400m short).
        new.spec.node_name = Some("machine1".into());
        assert!(matches!(
            admit_with_preemption_on(&new, &node, &without_crit),
            AdmissionOutcome::AdmittedAfterPreempting(_)
        ));
    }

    #[test]
    fn end_to_end_an_untolerated_no_execute_taint_preempts_nobody() {
        let allocatable = list("cpu=2,memory=4Gi,pods=10");
        let taints = [Taint {
            key: "node.kubernetes.io/unreachable".into(),
            effect: "NoExecute".into(),
            ..Default::default()
        }];
        let node = tolerating_nothing_node(&allocatable, &taints);
        let without_crit: Vec<Pod> = running()
            .into_iter()
            .filter(|p| p.metadata.name != "crit")
            .collect();
        match admit_with_preemption_on(&critical(pod("new", "cpu=1", "")), &node, &without_crit) {
            AdmissionOutcome::Rejected(r) => assert_eq!(
                r.message,
                "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
            ),
            other => panic!("expected a TaintToleration rejection, got {other:?}"),
        }
    }

    fn holding_port(mut pod: Pod, host_port: i32) -> Pod {
        pod.spec.containers[0].ports = vec![crate::pod::ContainerPort {
            container_port: host_port,
            host_port,
            protocol: "TCP".into(),
            ..Default::default()
        }];
        pod
    }

    #[test]
    fn end_to_end_a_critical_pod_whose_host_port_is_taken_preempts_nobody() {
        // bu2 holds port 8080 and is preemptable; the critical pod is short of 400m
        // cpu, which bu2 and bu1 would free. The kubelet still refuses it for the port
        // and evicts nothing, since only resource shortages go to preemption.
        let allocatable = list("cpu=2,memory=4Gi,pods=10");
        let node = tolerating_nothing_node(&allocatable, &[]);
        let running: Vec<Pod> = running()
            .into_iter()
            .filter(|p| p.metadata.name != "crit")
            .map(|p| {
                if p.metadata.name == "bu2" {
                    holding_port(p, 8080)
                } else {
                    p
                }
            })
            .collect();
        let new = holding_port(critical(pod("new", "cpu=1", "")), 8080);
        match admit_with_preemption_on(&new, &node, &running) {
            AdmissionOutcome::Rejected(r) => {
                assert_eq!(r.reason, "NodePorts");
                assert_eq!(r.failures, vec![ports_taken()], "the shortage is dropped");
            }
            other => panic!("expected a NodePorts rejection, got {other:?}"),
        }
        // On a free port the same pod preempts for its cpu.
        let elsewhere = holding_port(critical(pod("new", "cpu=1", "")), 9090);
        assert!(matches!(
            admit_with_preemption_on(&elsewhere, &node, &running),
            AdmissionOutcome::AdmittedAfterPreempting(_)
        ));
    }

    /// A critical pod short of 400m cpu that names windows in its `spec.os`.
    fn critical_for_windows_by_field() -> Pod {
        let mut new = critical(pod("new", "cpu=1", ""));
        new.spec.os = Some(crate::pod::PodOs {
            name: "windows".into(),
        });
        new
    }

    /// The same, by its `kubernetes.io/os` label.
    fn critical_for_windows_by_label() -> Pod {
        let mut new = critical(pod("new", "cpu=1", ""));
        new.metadata
            .labels
            .insert("kubernetes.io/os".into(), "windows".into());
        new
    }

    #[rstest]
    #[case::os_field(critical_for_windows_by_field(), AdmissionFailure::OsFieldMismatch)]
    #[case::os_label(critical_for_windows_by_label(), AdmissionFailure::OsLabelMismatch)]
    fn end_to_end_a_critical_pod_for_another_os_preempts_nobody(
        #[case] new: Pod,
        #[case] expected: AdmissionFailure,
    ) {
        let allocatable = list("cpu=2,memory=4Gi,pods=10");
        let node = AdmissionNode {
            os: "linux",
            ..tolerating_nothing_node(&allocatable, &[])
        };
        let without_crit: Vec<Pod> = running()
            .into_iter()
            .filter(|p| p.metadata.name != "crit")
            .collect();
        // The shortage alone would preempt; the OS check comes first and ends admission.
        match admit_with_preemption_on(&new, &node, &without_crit) {
            AdmissionOutcome::Rejected(r) => assert_eq!(r.failures, vec![expected]),
            other => panic!("expected an OS rejection, got {other:?}"),
        }
    }
}
