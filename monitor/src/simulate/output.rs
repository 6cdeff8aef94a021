//! The JSON object printed for each step (one per line); docs/simulate.md, "Output",
//! lists every key, `evictedAll` and the `minReclaim` + `gracePeriodMet` of
//! `thresholdsMet` entries included.
use serde::Serialize;

use crate::policy::condition::PodCondition;

/// The decisions of one step.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepOutput {
    /// The step's time since the start, as a Go duration ("1m30s").
    pub(crate) at: String,
    pub(crate) thresholds_met: Vec<ThresholdMetOutput>,
    /// Node condition types in effect after this step ("MemoryPressure", ...), including
    /// those held by the pressure transition period.
    pub(crate) conditions: Vec<String>,
    /// Resources the node is starved of ("memory", "ephemeral-storage", "inodes", "pids").
    pub(crate) starved_resources: Vec<String>,
    pub(crate) node_reclaim: NodeReclaimOutput,
    /// Pod keys ("namespace/name"), most evictable first; empty when no eviction is due.
    pub(crate) ranking: Vec<String>,
    /// The first pod evicted at this step, if any.
    pub(crate) evicted: Option<EvictedOutput>,
    /// Every pod evicted at this step (more than one only for local-storage limits).
    pub(crate) evicted_all: Vec<EvictedOutput>,
    pub(crate) admission: Vec<AdmissionOutput>,
    /// Pods preempted to admit critical pods ("namespace/name").
    pub(crate) preempted: Vec<String>,
    /// Image ids removed by node-level reclaim and image GC at this step.
    pub(crate) images_removed: Vec<String>,
    /// The PSI contention conditions after this step (only with the PSINodeCondition
    /// gate on; the key is left out otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) contention_conditions: Vec<crate::policy::contention::ContentionStatus>,
    /// The memory relief pass before the eviction pass (only when one ran: a memory
    /// signal below its relief level, and pods with `reclaimable` page cache).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) memory_relief: Option<ReliefOutput>,
}

/// What memory relief took before the eviction pass.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReliefOutput {
    /// The signal relieved ("memory.available", "allocatableMemory.available").
    pub(crate) signal: String,
    /// Its available bytes before relief, and its relief level.
    pub(crate) observed: i64,
    pub(crate) relief_level: i64,
    /// What the pass wanted, and what the pods gave (credited to both memory signals
    /// before the eviction pass decides).
    pub(crate) wanted_bytes: u64,
    pub(crate) freed_bytes: u64,
    /// Each pod asked, in the order asked, with what it gave.
    pub(crate) pods: Vec<ReliefPodOutput>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReliefPodOutput {
    pub(crate) pod: String,
    pub(crate) qos: String,
    pub(crate) bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ThresholdMetOutput {
    /// "memory.available", ...
    pub(crate) signal: String,
    /// "LessThan" (the only operator the kubelet has).
    pub(crate) operator: String,
    /// The threshold as configured: "500Mi" or "10%".
    pub(crate) value: String,
    /// The grace period as a Go duration; "0s" for a hard threshold.
    pub(crate) grace_period: String,
    /// The signal's available amount at this observation, in bytes (or inodes, pids).
    pub(crate) observed: i64,
    /// The minimum reclaim as configured, or null.
    pub(crate) min_reclaim: Option<String>,
    /// Whether the grace period has passed (always true for a hard threshold).
    pub(crate) grace_period_met: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeReclaimOutput {
    pub(crate) attempted: bool,
    pub(crate) freed_bytes: u64,
    /// Whether node-level reclaim alone resolved the pressure (no pod eviction needed).
    pub(crate) sufficient: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EvictedOutput {
    pub(crate) pod: String,
    /// The signal whose threshold drove the eviction; null for local-storage limit
    /// evictions, which no signal drives.
    pub(crate) signal: Option<String>,
    /// The grace period the pod is killed with: for hard thresholds and local-storage
    /// limits `monitor.hardEvictionGracePeriodSeconds` (0 unless set to 1; docs/simulate.md
    /// says why), min(pod's, evictionMaxPodGracePeriod) for soft (the pod's when the
    /// cap is 0; 0 when the cap is negative).
    pub(crate) grace_period_seconds: i64,
    pub(crate) message: String,
    /// The pod's status conditions after the eviction, in the API's PodCondition shape:
    /// `DisruptionTarget` (`True`, `TerminationByKubelet`, the eviction message) for a
    /// threshold eviction, none for a local-storage limit eviction, as the kubelet sets
    /// them. `lastTransitionTime` is `null`: a simulation has no wall clock (the step's
    /// `at` says when).
    pub(crate) conditions: Vec<PodCondition>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AdmissionOutput {
    pub(crate) pod: String,
    pub(crate) admitted: bool,
    pub(crate) reason: String,
    pub(crate) message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_output_has_exactly_the_documented_keys() {
        let out = StepOutput {
            at: "0s".into(),
            thresholds_met: vec![ThresholdMetOutput {
                signal: "memory.available".into(),
                operator: "LessThan".into(),
                value: "500Mi".into(),
                grace_period: "0s".into(),
                observed: 1,
                min_reclaim: None,
                grace_period_met: true,
            }],
            conditions: vec![],
            starved_resources: vec![],
            node_reclaim: NodeReclaimOutput::default(),
            ranking: vec![],
            evicted: None,
            evicted_all: vec![],
            admission: vec![],
            preempted: vec![],
            images_removed: vec![],
            // Left out when empty (the PSINodeCondition gate off).
            contention_conditions: vec![],
            memory_relief: None,
        };
        let value = serde_json::to_value(&out).unwrap_or_else(|e| panic!("serialize: {e}"));
        let keys: Vec<&str> = value
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = vec![
            "at",
            "thresholdsMet",
            "conditions",
            "starvedResources",
            "nodeReclaim",
            "ranking",
            "evicted",
            "evictedAll",
            "admission",
            "preempted",
            "imagesRemoved",
        ];
        let mut keys_sorted = keys.clone();
        keys_sorted.sort_unstable();
        expected.sort_unstable();
        assert_eq!(keys_sorted, expected);
        let entry = value["thresholdsMet"][0].as_object().expect("entry");
        let mut entry_keys: Vec<&str> = entry.keys().map(String::as_str).collect();
        entry_keys.sort_unstable();
        assert_eq!(
            entry_keys,
            [
                "gracePeriod",
                "gracePeriodMet",
                "minReclaim",
                "observed",
                "operator",
                "signal",
                "value"
            ]
        );
        assert!(value["evicted"].is_null());
        assert_eq!(
            value["nodeReclaim"],
            serde_json::json!({"attempted": false, "freedBytes": 0, "sufficient": false})
        );
    }

    #[test]
    fn an_evicted_entry_has_exactly_the_documented_keys_and_its_conditions() {
        let message = "The node was low on resource: memory. ";
        let entry = EvictedOutput {
            pod: "default/hog".into(),
            signal: Some("memory.available".into()),
            grace_period_seconds: 0,
            message: message.into(),
            conditions: vec![PodCondition::disruption_target(message, None)],
        };
        let value = serde_json::to_value(&entry).unwrap_or_else(|e| panic!("serialize: {e}"));
        let mut keys: Vec<&str> = value
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "conditions",
                "gracePeriodSeconds",
                "message",
                "pod",
                "signal"
            ]
        );
        assert_eq!(
            value["conditions"],
            serde_json::json!([{
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": message,
                "lastTransitionTime": null,
            }])
        );
    }
}
