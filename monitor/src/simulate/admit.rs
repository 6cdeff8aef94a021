//! Admission of a step's `admit:` pods, after that step's eviction pass: the eviction
//! manager's pressure check, the predicates (the pod's OS, resource fit, node name, host
//! ports, NoExecute taints),
//! and for a critical pod short of resources only, preemption of running pods (kubelet:
//! pkg/kubelet/preemption, HandleAdmissionFailure).
use super::node::Node;
use crate::policy::admission::AdmissionNode;
use crate::policy::pod::{Pod, ResourceList};
use crate::policy::preemption::{AdmissionOutcome, admit_with_preemption_on};
use crate::policy::types::NodeConditionType;

/// One pod's admission, as printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AdmissionRow {
    pub(crate) pod: String,
    pub(crate) admitted: bool,
    pub(crate) reason: String,
    pub(crate) message: String,
}

/// The admissions of a step and the pods preempted for them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct AdmissionDecision {
    pub(crate) results: Vec<AdmissionRow>,
    /// Keys of the running pods preempted to admit critical pods, in order.
    pub(crate) preempted: Vec<String>,
}

/// Admits `candidates` in order against `running` (which admitted pods join and
/// preempted pods leave), under `conditions`, with `allocatable` the node's allocatable;
/// `node`, when given, supplies the name and taints.
pub(crate) fn admit_pods(
    candidates: &[Pod],
    running: &mut Vec<Pod>,
    conditions: &[NodeConditionType],
    allocatable: &ResourceList,
    node: Option<&Node>,
) -> AdmissionDecision {
    let node = AdmissionNode {
        name: node.and_then(Node::name),
        taints: node.map(|n| n.spec.taints.as_slice()).unwrap_or_default(),
        ..AdmissionNode::new(conditions, allocatable)
    };
    let mut decision = AdmissionDecision::default();
    for pod in candidates {
        let row = |admitted: bool, reason: String, message: String| AdmissionRow {
            pod: pod.key(),
            admitted,
            reason,
            message,
        };
        match admit_with_preemption_on(pod, &node, running) {
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
