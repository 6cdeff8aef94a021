//! PSI node conditions: the kubelet's resource contention conditions (KEP-5394, alpha in
//! 1.36 behind the `PSINodeCondition` gate). Four conditions, each from the `full` line of
//! one pressure file: the node's memory and I/O (`/proc/pressure/{memory,io}`) and the pods
//! cgroup's (`kubepods`' `memory.pressure` and `io.pressure`).
//!
//! A condition follows its stall averages against its threshold, a fraction of time
//! (0.9: 90 % of wall time stalled), with the KEP's hysteresis:
//! - avg60 and avg10 both at or over the threshold (pressure that lasts and still grows):
//!   the condition becomes true;
//! - avg60 under the threshold: it becomes false;
//! - avg60 over but avg10 under (pressure easing): it stays as it was.
//!
//! A threshold of 0 switches its condition off (the kubelet reports nothing for it). These
//! conditions only inform (status, metrics, events): the kubelet's admission and eviction
//! do not act on them, and neither does the agent.
use std::collections::BTreeMap;

use serde::Serialize;

/// One of the four contention conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum ContentionCondition {
    #[serde(rename = "SystemMemoryContentionPressure")]
    SystemMemory,
    #[serde(rename = "SystemDiskContentionPressure")]
    SystemDisk,
    #[serde(rename = "KubepodsMemoryContentionPressure")]
    KubepodsMemory,
    #[serde(rename = "KubepodsDiskContentionPressure")]
    KubepodsDisk,
}

impl ContentionCondition {
    pub const ALL: [ContentionCondition; 4] = [
        ContentionCondition::SystemMemory,
        ContentionCondition::SystemDisk,
        ContentionCondition::KubepodsMemory,
        ContentionCondition::KubepodsDisk,
    ];

    /// The node condition type, as the kubelet names it.
    pub fn as_str(self) -> &'static str {
        match self {
            ContentionCondition::SystemMemory => "SystemMemoryContentionPressure",
            ContentionCondition::SystemDisk => "SystemDiskContentionPressure",
            ContentionCondition::KubepodsMemory => "KubepodsMemoryContentionPressure",
            ContentionCondition::KubepodsDisk => "KubepodsDiskContentionPressure",
        }
    }

    /// The KubeletConfiguration key of its threshold.
    pub fn config_key(self) -> &'static str {
        match self {
            ContentionCondition::SystemMemory => "systemMemoryContentionThreshold",
            ContentionCondition::SystemDisk => "systemDiskContentionThreshold",
            ContentionCondition::KubepodsMemory => "kubepodsMemoryContentionThreshold",
            ContentionCondition::KubepodsDisk => "kubepodsDiskContentionThreshold",
        }
    }
}

impl std::fmt::Display for ContentionCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kubelet's default threshold for each condition: 90 % of the time stalled.
pub const DEFAULT_CONTENTION_THRESHOLD: f64 = 0.9;

/// Each condition's threshold, a fraction in [0, 1]; 0 switches the condition off.
#[derive(Clone, Debug, PartialEq)]
pub struct ContentionThresholds(BTreeMap<ContentionCondition, f64>);

impl Default for ContentionThresholds {
    fn default() -> Self {
        ContentionThresholds(
            ContentionCondition::ALL
                .iter()
                .map(|c| (*c, DEFAULT_CONTENTION_THRESHOLD))
                .collect(),
        )
    }
}

impl ContentionThresholds {
    pub fn get(&self, condition: ContentionCondition) -> f64 {
        self.0.get(&condition).copied().unwrap_or(0.0)
    }

    pub fn set(&mut self, condition: ContentionCondition, threshold: f64) {
        self.0.insert(condition, threshold);
    }
}

/// The `full` stall averages of one pressure file, in percent of wall time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct StallAverages {
    pub avg10: f64,
    pub avg60: f64,
}

/// The condition after one look: `previous` (none when not yet reported) moved by
/// `averages` against `threshold` with the hysteresis described above.
pub fn next_status(previous: Option<bool>, averages: StallAverages, threshold: f64) -> bool {
    let level = threshold * 100.0;
    if averages.avg60 < level {
        false
    } else if averages.avg10 >= level {
        true
    } else {
        previous.unwrap_or(false)
    }
}

/// One condition as reported.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContentionStatus {
    #[serde(rename = "type")]
    pub condition: ContentionCondition,
    pub status: bool,
    pub averages: StallAverages,
    /// The threshold, a fraction of wall time.
    pub threshold: f64,
}

/// The conditions reported so far, updated at each look.
#[derive(Clone, Debug, Default)]
pub struct ContentionConditions {
    reported: BTreeMap<ContentionCondition, ContentionStatus>,
}

impl ContentionConditions {
    /// Moves each condition with its averages (`None`: the pressure file could not be
    /// read, and the condition keeps its last status). Returns the conditions whose
    /// status changed, a condition reported for the first time counting as a change only
    /// when it is true.
    pub fn update(
        &mut self,
        thresholds: &ContentionThresholds,
        averages: impl Fn(ContentionCondition) -> Option<StallAverages>,
    ) -> Vec<ContentionStatus> {
        let mut changed = Vec::new();
        for condition in ContentionCondition::ALL {
            let threshold = thresholds.get(condition);
            if threshold <= 0.0 {
                self.reported.remove(&condition);
                continue;
            }
            let Some(averages) = averages(condition) else {
                continue;
            };
            let previous = self.reported.get(&condition).map(|s| s.status);
            let status = ContentionStatus {
                condition,
                status: next_status(previous, averages, threshold),
                averages,
                threshold,
            };
            if previous.unwrap_or(false) != status.status {
                changed.push(status);
            }
            self.reported.insert(condition, status);
        }
        changed
    }

    /// Every reported condition, in the order of [`ContentionCondition::ALL`].
    pub fn reported(&self) -> Vec<ContentionStatus> {
        self.reported.values().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    fn averages(avg10: f64, avg60: f64) -> StallAverages {
        StallAverages { avg10, avg60 }
    }

    // kubelet: the KEP's rules, with the thresholds and averages of its unit tests
    // (kubelet_node_status_test.go TestGetSystemMemoryPSI: threshold 0.05, averages 4 and 6).
    #[rstest]
    #[case::below(None, 4.0, 4.0, false)]
    #[case::avg10_over_avg60_under(None, 6.0, 4.0, false)]
    #[case::avg10_over_avg60_under_was_true(Some(true), 6.0, 4.0, false)]
    #[case::both_over(None, 6.0, 6.0, true)]
    #[case::both_at_the_threshold(None, 5.0, 5.0, true)]
    #[case::easing_stays_true(Some(true), 4.0, 6.0, true)]
    #[case::easing_stays_false(Some(false), 4.0, 6.0, false)]
    #[case::easing_first_look(None, 4.0, 6.0, false)]
    fn a_condition_follows_avg60_and_avg10_with_hysteresis(
        #[case] previous: Option<bool>,
        #[case] avg10: f64,
        #[case] avg60: f64,
        #[case] expected: bool,
    ) {
        assert_eq!(
            next_status(previous, averages(avg10, avg60), 0.05),
            expected
        );
    }

    #[test]
    fn a_zero_threshold_reports_nothing_and_an_unreadable_file_keeps_the_status() {
        let mut thresholds = ContentionThresholds::default();
        thresholds.set(ContentionCondition::SystemDisk, 0.0);
        let mut conditions = ContentionConditions::default();
        // kubelet_node_status_test.go TestNodeConditionFromSummaryAPI: averages of 100
        // against 0.9 make every condition true.
        let changed = conditions.update(&thresholds, |c| {
            (c != ContentionCondition::KubepodsDisk).then_some(averages(100.0, 100.0))
        });
        let names: Vec<_> = changed.iter().map(|s| s.condition.as_str()).collect();
        assert_eq!(
            names,
            [
                "SystemMemoryContentionPressure",
                "KubepodsMemoryContentionPressure"
            ]
        );
        assert!(changed.iter().all(|s| s.status));
        // Easing: avg10 down, avg60 still over: nothing changes (the pods' disk condition,
        // reported for the first time, starts false); then avg60 under: false.
        assert_eq!(
            conditions.update(&thresholds, |_| Some(averages(10.0, 95.0))),
            []
        );
        let reported = conditions.reported();
        assert_eq!(reported.len(), 3, "the disk one switched off: {reported:?}");
        assert!(reported[..2].iter().all(|s| s.status));
        let cleared = conditions.update(&thresholds, |c| {
            (c == ContentionCondition::SystemMemory).then_some(averages(0.0, 0.0))
        });
        assert_eq!(cleared.len(), 1);
        assert_eq!(cleared[0].condition, ContentionCondition::SystemMemory);
        assert!(!cleared[0].status);
        // The pods' memory file unreadable this time: its status stands.
        assert!(
            conditions
                .reported()
                .iter()
                .any(|s| s.condition == ContentionCondition::KubepodsMemory && s.status)
        );
    }
}
