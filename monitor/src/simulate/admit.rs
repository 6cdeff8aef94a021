//! Admission of a step's `admit:` pods, after that step's eviction pass: the eviction
//! manager's pressure check, the resource fit, and for a critical pod that does not fit,
//! preemption of running pods (kubelet: pkg/kubelet/preemption, HandleAdmissionFailure).
use crate::policy::pod::{Pod, ResourceList};
use crate::policy::preemption::{AdmissionOutcome, admit_with_preemption};
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
        let row = |admitted: bool, reason: String, message: String| AdmissionRow {
            pod: pod.key(),
            admitted,
            reason,
            message,
        };
        match admit_with_preemption(pod, conditions, running, allocatable) {
            AdmissionOutcome::Admitted => {
                decision
                    .results
                    .push(row(true, String::new(), String::new()));
                running.push(pod.clone());
            }
            AdmissionOutcome::AdmittedAfterPreempting(keys) => {
                // The kubelet evicts the chosen pods, then admits the critical pod.
                running.retain(|p| !keys.contains(&p.key()));
                decision.preempted.extend(keys);
                decision
                    .results
                    .push(row(true, String::new(), String::new()));
                running.push(pod.clone());
            }
            AdmissionOutcome::Rejected(result) => {
                decision
                    .results
                    .push(row(false, result.reason, result.message));
            }
        }
    }
    decision
}
