//! Pod conditions: the `status.conditions[]` entries of a Kubernetes pod, of which the
//! policy sets one, `DisruptionTarget`, on the pods the kubelet itself ends.
//!
//! Since KEP-3329 (pod disruption conditions, GA in 1.31) the kubelet marks a pod it
//! terminates for node pressure or for critical-pod preemption with `DisruptionTarget`,
//! status `True`, reason `TerminationByKubelet` (staging/src/k8s.io/api/core/v1/types.go:
//! DisruptionTarget, PodReasonTerminationByKubelet). The message is the eviction message for
//! a node-pressure eviction (pkg/kubelet/eviction/eviction_manager.go, synchronize), and a
//! fixed sentence of its own for preemption (pkg/kubelet/preemption/preemption.go,
//! evictPodsToFreeRequests). Evictions for local-storage limits (emptyDir sizeLimit, pod or
//! container ephemeral-storage limits) get no condition: the kubelet's localStorageEviction
//! passes none to evictPod.
//!
//! Pure like the rest of the policy: the caller passes the time the condition takes.
use serde::{Deserialize, Deserializer, Serialize, de};

use super::eviction::{EvictionDecision, EvictionReason};

/// The condition type of a pod the kubelet is about to end (v1.DisruptionTarget).
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// The reason of that condition when the kubelet itself ends the pod
/// (v1.PodReasonTerminationByKubelet).
pub const TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";
/// The condition's message on a pod preempted to admit a critical pod: the kubelet's
/// sentence, kept as it writes it (pkg/kubelet/preemption/preemption.go). The pod's own
/// status message says something else ("Preempted in order to admit critical pod").
pub const PREEMPTION_CONDITION_MESSAGE: &str =
    "Pod was preempted by Kubelet to accommodate a critical pod.";

/// A condition's status (v1.ConditionStatus).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// One entry of a pod's `status.conditions` (v1.PodCondition), in the API's JSON shape.
/// `lastProbeTime` is left out: the kubelet never sets it on the conditions it manages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCondition {
    /// "DisruptionTarget", ...
    #[serde(rename = "type")]
    pub kind: String,
    pub status: ConditionStatus,
    /// Machine-readable, CamelCase; left out when empty, as the API's `omitempty` does.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the status last changed, RFC 3339. `null` where no wall clock is known
    /// (`monitor simulate`, whose steps are offsets from an unknown start): that is how
    /// the API writes an unset `metav1.Time`.
    #[serde(default, deserialize_with = "rfc3339_or_null")]
    pub last_transition_time: Option<String>,
}

impl PodCondition {
    /// `DisruptionTarget`, `True`, `TerminationByKubelet`, with `message`, changed at `at`.
    pub fn disruption_target(message: &str, at: Option<String>) -> PodCondition {
        PodCondition {
            kind: DISRUPTION_TARGET.to_string(),
            status: ConditionStatus::True,
            reason: TERMINATION_BY_KUBELET.to_string(),
            message: message.to_string(),
            last_transition_time: at,
        }
    }
}

/// The condition a node-pressure eviction sets on its pod: `DisruptionTarget` with the
/// eviction message for a threshold eviction (the hot path's kills included, which are
/// threshold evictions worded after the kill), none for a local-storage limit eviction
/// (kubelet: eviction_manager.go builds the condition in synchronize's threshold loop
/// only; localStorageEviction calls evictPod without one).
pub fn eviction_condition(decision: &EvictionDecision, at: Option<String>) -> Option<PodCondition> {
    match decision.reason {
        EvictionReason::Threshold => Some(PodCondition::disruption_target(&decision.message, at)),
        EvictionReason::EmptyDirSizeLimit
        | EvictionReason::PodEphemeralStorageLimit
        | EvictionReason::ContainerEphemeralStorageLimit => None,
    }
}

/// The condition set on a pod preempted to admit a critical pod (kubelet:
/// preemption.go evictPodsToFreeRequests).
pub fn preemption_condition(at: Option<String>) -> PodCondition {
    PodCondition::disruption_target(PREEMPTION_CONDITION_MESSAGE, at)
}

/// Puts `condition` in `conditions`, replacing the one of its type. A condition whose
/// status does not change keeps its `lastTransitionTime` (reason and message are the new
/// ones), as the kubelet's status manager does (pkg/kubelet/status/status_manager.go,
/// updateLastTransitionTime): a pod evicted a second time, after a kill that did not
/// finish, still says when it first became a disruption target.
pub fn set_condition(conditions: &mut Vec<PodCondition>, mut condition: PodCondition) {
    match conditions.iter_mut().find(|c| c.kind == condition.kind) {
        Some(old) => {
            if old.status == condition.status {
                condition.last_transition_time = old.last_transition_time.take();
            }
            *old = condition;
        }
        None => conditions.push(condition),
    }
}

/// The condition of `kind` in `conditions`, if any.
pub fn find_condition<'a>(conditions: &'a [PodCondition], kind: &str) -> Option<&'a PodCondition> {
    conditions.iter().find(|c| c.kind == kind)
}

/// A `lastTransitionTime` that is RFC 3339 or `null`: anything else is refused with the
/// text it got, so a record or document with a mangled time says so instead of showing it.
fn rfc3339_or_null<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    let Some(text) = Option::<String>::deserialize(deserializer)? else {
        return Ok(None);
    };
    time::OffsetDateTime::parse(&text, &time::format_description::well_known::Rfc3339)
        .map_err(|_| {
            de::Error::custom(format!(
                "lastTransitionTime {text:?} is not an RFC 3339 timestamp (expected e.g. 2024-05-01T10:00:00Z)"
            ))
        })?;
    Ok(Some(text))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rstest::rstest;

    use super::*;
    use crate::signal::Signal;
    use crate::types::Resource;

    const T0: &str = "2026-11-26T10:00:00Z";
    const T1: &str = "2026-11-26T10:05:00Z";

    fn decision(reason: EvictionReason, signal: Option<Signal>) -> EvictionDecision {
        EvictionDecision {
            pod_key: "default/hog".into(),
            signal,
            resource: Resource::Memory,
            reason,
            grace_period_seconds: 0,
            immediate: true,
            kill_timeout: Duration::from_secs(2),
            message: "The node was low on resource: memory. Threshold quantity: 500Mi, available: 200Mi. "
                .into(),
        }
    }

    #[test]
    fn a_threshold_eviction_makes_its_pod_a_disruption_target_with_the_eviction_message() {
        let d = decision(EvictionReason::Threshold, Some(Signal::MemoryAvailable));
        let condition = eviction_condition(&d, Some(T0.into())).expect("a condition");
        assert_eq!(
            condition,
            PodCondition {
                kind: "DisruptionTarget".into(),
                status: ConditionStatus::True,
                reason: "TerminationByKubelet".into(),
                message: d.message.clone(),
                last_transition_time: Some(T0.into()),
            }
        );
    }

    #[rstest]
    #[case::empty_dir(EvictionReason::EmptyDirSizeLimit)]
    #[case::pod_ephemeral_storage(EvictionReason::PodEphemeralStorageLimit)]
    #[case::container_ephemeral_storage(EvictionReason::ContainerEphemeralStorageLimit)]
    fn a_local_storage_limit_eviction_sets_no_condition(#[case] reason: EvictionReason) {
        assert_eq!(
            eviction_condition(&decision(reason, None), Some(T0.into())),
            None
        );
    }

    #[test]
    fn preemption_uses_the_kubelets_own_condition_message() {
        let condition = preemption_condition(Some(T0.into()));
        assert_eq!(
            (
                condition.kind.as_str(),
                condition.status,
                condition.reason.as_str(),
                condition.message.as_str()
            ),
            (
                "DisruptionTarget",
                ConditionStatus::True,
                "TerminationByKubelet",
                "Pod was preempted by Kubelet to accommodate a critical pod."
            )
        );
    }

    #[test]
    fn setting_a_condition_again_keeps_its_transition_time_while_the_status_holds() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            PodCondition::disruption_target("first", Some(T0.into())),
        );
        set_condition(
            &mut conditions,
            PodCondition::disruption_target("second", Some(T1.into())),
        );
        assert_eq!(
            conditions.len(),
            1,
            "one condition per type: {conditions:?}"
        );
        assert_eq!(conditions[0].message, "second");
        assert_eq!(conditions[0].last_transition_time.as_deref(), Some(T0));
        // A change of status is a transition: the new time.
        let mut flipped = PodCondition::disruption_target("third", Some(T1.into()));
        flipped.status = ConditionStatus::False;
        set_condition(&mut conditions, flipped);
        assert_eq!(conditions[0].status, ConditionStatus::False);
        assert_eq!(conditions[0].last_transition_time.as_deref(), Some(T1));
        // Another type is added beside it.
        let mut ready = PodCondition::disruption_target("", Some(T1.into()));
        ready.kind = "Ready".into();
        set_condition(&mut conditions, ready);
        assert_eq!(conditions.len(), 2);
        assert!(find_condition(&conditions, "Ready").is_some());
        assert!(find_condition(&conditions, "PodScheduled").is_none());
    }

    #[test]
    fn the_json_is_the_apis_pod_condition() {
        let value = serde_json::to_value(preemption_condition(Some(T0.into()))).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": "Pod was preempted by Kubelet to accommodate a critical pod.",
                "lastTransitionTime": T0,
            })
        );
        let unknown_time =
            serde_json::to_value(PodCondition::disruption_target("m", None)).unwrap();
        assert!(
            unknown_time["lastTransitionTime"].is_null(),
            "{unknown_time}"
        );
        let back: PodCondition = serde_json::from_value(value).unwrap();
        assert_eq!(back, preemption_condition(Some(T0.into())));
    }

    #[rstest]
    #[case::not_a_time(
        r#"{"type": "DisruptionTarget", "status": "True", "lastTransitionTime": "yesterday"}"#,
        "lastTransitionTime \"yesterday\" is not an RFC 3339 timestamp"
    )]
    #[case::bad_status(
        r#"{"type": "DisruptionTarget", "status": "true"}"#,
        "unknown variant `true`"
    )]
    #[case::no_type(r#"{"status": "True"}"#, "missing field `type`")]
    fn bad_conditions_are_refused_with_a_clear_error(#[case] text: &str, #[case] expected: &str) {
        let err = serde_json::from_str::<PodCondition>(text).expect_err(text);
        assert!(err.to_string().contains(expected), "{err}");
    }

    #[test]
    fn reason_message_and_time_may_be_left_out() {
        let condition: PodCondition =
            serde_json::from_str(r#"{"type": "Ready", "status": "Unknown"}"#).unwrap();
        assert_eq!(condition.status, ConditionStatus::Unknown);
        assert_eq!(
            (condition.reason.as_str(), condition.message.as_str()),
            ("", "")
        );
        assert_eq!(condition.last_transition_time, None);
        let value = serde_json::to_value(&condition).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"type": "Ready", "status": "Unknown", "lastTransitionTime": null})
        );
    }
}
