//! The PSI contention conditions at each synchronize: the pressure files of the fresh
//! observation moved through [`crate::policy::contention`], the result published in the
//! agent's status and metrics, and each change said in an event.
use crate::events::EventReason;
use crate::observe::{NodePressure, Psi};
use crate::policy::contention::{
    ContentionCondition, ContentionConditions, ContentionThresholds, StallAverages,
};
use crate::state::SharedState;

/// The `full` averages of the file each condition follows.
fn averages(pressure: &NodePressure, condition: ContentionCondition) -> Option<StallAverages> {
    let psi: Option<Psi> = match condition {
        ContentionCondition::SystemMemory => pressure.memory,
        ContentionCondition::SystemDisk => pressure.io,
        ContentionCondition::KubepodsMemory => pressure.pods_memory,
        ContentionCondition::KubepodsDisk => pressure.pods_io,
    };
    let full = psi?.full?;
    Some(StallAverages {
        avg10: full.avg10,
        avg60: full.avg60,
    })
}

/// Moves the conditions with `pressure`, publishes them and says each change.
pub(crate) fn track(
    conditions: &mut ContentionConditions,
    thresholds: &ContentionThresholds,
    pressure: &NodePressure,
    state: &SharedState,
) {
    let changed = conditions.update(thresholds, |c| averages(pressure, c));
    state.lock().contention = conditions.reported();
    for status in changed {
        let verb = if status.status {
            "has"
        } else {
            "no longer has"
        };
        state.event(
            EventReason::Contention {
                condition: status.condition,
                present: status.status,
            },
            "node",
            format!(
                "the node {verb} {}: full stall avg10 {:.2} %, avg60 {:.2} % against a threshold of {:.0} %",
                status.condition,
                status.averages.avg10,
                status.averages.avg60,
                status.threshold * 100.0
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::parse::PsiLine;

    fn psi(avg10: f64, avg60: f64) -> Option<Psi> {
        let line = PsiLine {
            avg10,
            avg60,
            avg300: 0.0,
            total_us: 0,
        };
        Some(Psi {
            some: line,
            full: Some(line),
        })
    }

    #[test]
    fn each_condition_follows_its_own_file_and_its_changes_are_events() {
        let state = SharedState::default();
        let mut conditions = ContentionConditions::default();
        let thresholds = ContentionThresholds::default();
        let pressure = NodePressure {
            memory: psi(95.0, 92.0),
            io: psi(1.0, 1.0),
            pods_memory: None,
            pods_io: psi(0.0, 0.0),
        };
        track(&mut conditions, &thresholds, &pressure, &state);
        let snapshot = state.read();
        let reported: Vec<_> = snapshot
            .contention
            .iter()
            .map(|s| (s.condition.as_str(), s.status))
            .collect();
        assert_eq!(
            reported,
            [
                ("SystemMemoryContentionPressure", true),
                ("SystemDiskContentionPressure", false),
                ("KubepodsDiskContentionPressure", false),
            ]
        );
        let events: Vec<_> = snapshot.events.iter().map(|e| e.reason.clone()).collect();
        assert_eq!(events, ["SystemMemoryContentionPressure"]);
        assert!(snapshot.events[0].message.contains("avg60 92.00 %"));
    }
}
