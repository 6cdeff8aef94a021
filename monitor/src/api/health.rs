//! `/healthz`: whether the agent is doing its job now. Healthy when a synchronize finished
//! within a few housekeeping intervals (the loop is not stuck) and no event source that was
//! asked for has failed (a failed source leaves a kind of pressure unseen until the next
//! poll). `monitor status --check` asks it and exits accordingly.
use serde::Serialize;

use crate::notify::SourceState;
use crate::state::AgentState;

/// Housekeeping intervals without a synchronize after which the loop counts as stalled:
/// the timer wakes it once per interval whatever else happens.
pub(crate) const STALLED_AFTER_INTERVALS: u32 = 3;

/// The least time without a synchronize that counts as stalled (a synchronize under heavy
/// load may take seconds; a short interval must not make that an alarm).
const STALLED_AFTER_AT_LEAST: std::time::Duration = std::time::Duration::from_secs(30);

/// The answer of `/healthz`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    pub(crate) healthy: bool,
    /// What is wrong, one sentence each; empty when healthy.
    pub(crate) problems: Vec<String>,
    /// Seconds since the last synchronize finished.
    pub(crate) last_sync_age_seconds: Option<f64>,
}

/// How long without a synchronize counts as a stalled loop.
fn stalled_after(state: &AgentState) -> std::time::Duration {
    (state.housekeeping * STALLED_AFTER_INTERVALS).max(STALLED_AFTER_AT_LEAST)
}

/// Whether the synchronize loop stopped finishing synchronizes (at monotonic `now_ns`).
/// Before the first one it is starting, not stalled.
pub(crate) fn loop_stalled(state: &AgentState, now_ns: u64) -> bool {
    state
        .last_sync
        .as_ref()
        .is_some_and(|s| s.age(now_ns) > stalled_after(state))
}

/// The agent's health at monotonic time `now_ns`.
pub fn health(state: &AgentState, now_ns: u64) -> Health {
    let mut problems = Vec::new();
    let stalled_after = stalled_after(state);
    let age = state.last_sync.as_ref().map(|s| s.age(now_ns));
    match age {
        None => problems.push("no synchronize has finished yet".to_string()),
        Some(age) if age > stalled_after => problems.push(format!(
            "the synchronize loop is stalled: the last synchronize finished {:.0} s ago (more than {} s)",
            age.as_secs_f64(),
            stalled_after.as_secs()
        )),
        Some(_) => {}
    }
    for source in state
        .sources
        .iter()
        .filter(|s| s.state == SourceState::Failed)
    {
        problems.push(format!(
            "event source {} failed: {}",
            source.source, source.detail
        ));
    }
    Health {
        healthy: problems.is_empty(),
        problems,
        last_sync_age_seconds: age.map(|a| a.as_secs_f64()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::notify::{SourceStatus, WakeSource};
    use crate::state::LastSync;

    const S: u64 = 1_000_000_000;

    fn state(synced_at_ns: Option<u64>) -> AgentState {
        AgentState {
            housekeeping: Duration::from_secs(10),
            last_sync: synced_at_ns.map(|finished_ns| LastSync {
                finished_unix_seconds: 0.0,
                sequence: 1,
                at: String::new(),
                wake_sources: Vec::new(),
                wake_latency_us: 0,
                duration_us: 0,
                summary: String::new(),
                finished_ns,
            }),
            sources: vec![SourceStatus::running(WakeSource::Timer, "every 10s")],
            ..AgentState::default()
        }
    }

    #[test]
    fn a_recent_synchronize_with_every_source_up_is_healthy() {
        let h = health(&state(Some(100 * S)), 105 * S);
        assert!(h.healthy, "{h:?}");
        assert!(h.problems.is_empty());
        assert_eq!(h.last_sync_age_seconds, Some(5.0));
    }

    #[test]
    fn no_synchronize_yet_or_a_stalled_loop_is_unhealthy() {
        let h = health(&state(None), 5 * S);
        assert!(!h.healthy);
        assert_eq!(h.problems, ["no synchronize has finished yet"]);
        // Three 10 s intervals, but never less than 30 s: 31 s is stalled, 29 s is not.
        assert!(health(&state(Some(100 * S)), 129 * S).healthy);
        let h = health(&state(Some(100 * S)), 131 * S);
        assert!(!h.healthy);
        assert!(h.problems[0].contains("stalled"), "{h:?}");
        // A longer interval allows longer.
        let mut slow = state(Some(100 * S));
        slow.housekeeping = Duration::from_secs(60);
        assert!(health(&slow, 250 * S).healthy);
        assert!(!health(&slow, 290 * S).healthy);
    }

    #[test]
    fn a_failed_source_is_unhealthy_a_disabled_one_is_not() {
        let mut s = state(Some(100 * S));
        s.sources.push(SourceStatus {
            source: WakeSource::Psi,
            state: SourceState::Disabled,
            detail: "off in the configuration".into(),
        });
        assert!(health(&s, 101 * S).healthy);
        s.sources.push(SourceStatus {
            source: WakeSource::Ebpf,
            state: SourceState::Failed,
            detail: "loading the program: EPERM".into(),
        });
        let h = health(&s, 101 * S);
        assert!(!h.healthy);
        assert_eq!(h.problems.len(), 1, "{h:?}");
        assert!(h.problems[0].contains("EPERM"), "{h:?}");
    }
}
