//! Critical-pod preemption at admission: when a critical pod does not fit for lack of
//! resources, the kubelet evicts running pods to make room instead of rejecting it.
//!
//! kubelet: pkg/kubelet/preemption/preemption.go (CriticalPodAdmissionHandler,
//! getPodsToPreempt, getPodsToPreemptByDistance) and pkg/kubelet/types Preemptable.
use super::admission::{AdmitResult, UNEXPECTED_ADMISSION_ERROR, admit_pod, request_units};
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

/// Whether `a` requests less than `b`, comparing memory then CPU (smallerResourceRequest).
fn smaller_resource_request(a: &Pod, b: &Pod) -> bool {
    for resource in ["memory", "cpu"] {
        let (ra, rb) = (request_units(a, resource), request_units(b, resource));
        if ra != rb {
            return ra < rb;
        }
    }
    false
}

/// Picks pods from `pods` until the requirements are met, each round taking the pod that
/// leaves the smallest distance (ties: the smaller request, then the earlier pod), which
/// tends to minimise the number of pods (getPodsToPreemptByDistance). The candidate list
/// shrinks by swapping the chosen pod with the last one, as the kubelet's does, so tie
/// breaks follow the same order.
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
/// a non-critical pod, or a failure that is not about resources, stays rejected; a
/// critical pod short of resources is admitted once the chosen pods are preempted, or
/// rejected with "UnexpectedAdmissionError" when no set of pods frees enough.
pub fn handle_admission_failure(
    pod: &Pod,
    failure: AdmitResult,
    running_pods: &[Pod],
) -> AdmissionOutcome {
    if failure.admitted {
        return AdmissionOutcome::Admitted;
    }
    if !pod.is_critical() || failure.insufficient.is_empty() {
        return AdmissionOutcome::Rejected(failure);
    }
    let requirements: Vec<AdmissionRequirement> = failure
        .insufficient
        .iter()
        .map(|r| AdmissionRequirement {
            resource: r.resource.clone(),
            quantity: r.insufficient_amount(),
        })
        .collect();
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

/// Admission with preemption, end to end: [`admit_pod`], then [`handle_admission_failure`].
pub fn admit_with_preemption(
    pod: &Pod,
    node_conditions: &[NodeConditionType],
    running_pods: &[Pod],
    node_allocatable: &ResourceList,
) -> AdmissionOutcome {
    let result = admit_pod(pod, node_conditions, running_pods, node_allocatable);
    handle_admission_failure(pod, result, running_pods)
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::policy::testing::{list, pod};

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
    fn ties_follow_the_kubelets_swap_remove_order() {
        let pods = vec![pod("a", "", ""), pod("b", "", ""), pod("c", "", "")];
        let preemptor = critical(pod("new", "", ""));
        let got = pods_to_preempt(&preemptor, &pods, &req(&[("pods", 2)]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, ["default/a", "default/c"]);
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

    #[test]
    fn pressure_rejection_is_not_preempted_away() {
        let failure = AdmitResult::reject("Evicted", "The node had condition: [DiskPressure]. ");
        let outcome =
            handle_admission_failure(&critical(pod("new", "", "")), failure.clone(), &running());
        assert_eq!(outcome, AdmissionOutcome::Rejected(failure));
    }
}
