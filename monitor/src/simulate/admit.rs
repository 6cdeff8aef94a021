//! Admission of a step's `admit:` pods, after that step's eviction pass: the eviction
//! manager's pressure check, the resource fit, and for a critical pod that does not fit,
//! preemption of running pods (kubelet: pkg/kubelet/preemption, HandleAdmissionFailure).
use crate::policy::admission::admit_pod;
use crate::policy::pod::{Pod, ResourceList};
use crate::policy::types::NodeConditionType;

/// One pod's admission, as printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionRow {
    pub pod: String,
    pub admitted: bool,
    pub reason: String,
    pub message: String,
}

/// The admissions of a step and the pods preempted for them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdmissionDecision {
    pub results: Vec<AdmissionRow>,
    /// Keys of the running pods preempted to admit critical pods, in order.
    pub preempted: Vec<String>,
}

/// Admits `candidates` in order against `running` (which admitted pods join and
/// preempted pods leave), under `conditions`, with `allocatable` the node's allocatable.
pub fn admit_pods(
    candidates: &[Pod],
    running: &mut Vec<Pod>,
    conditions: &[NodeConditionType],
    allocatable: &ResourceList,
) -> AdmissionDecision {
    let mut decision = AdmissionDecision::default();
    for pod in candidates {
        let result = admit_pod(pod, conditions, running, allocatable);
        if result.admitted {
            running.push(pod.clone());
        }
        decision.results.push(AdmissionRow {
            pod: pod.key(),
            admitted: result.admitted,
            reason: result.reason,
            message: result.message,
        });
    }
    decision
}
