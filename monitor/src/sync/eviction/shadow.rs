//! Shadow mode: the decisions of a synchronize and of the hot path, reported as the
//! actions they would have been (a `WouldEvict` or `WouldKill` event, a count in
//! `monitor_shadow_actions_total`, a log line with the time from the observation or the
//! crossing to the decision), and never carried out.
use super::*;

impl EvictionSync {
    /// Reports an eviction the policy decided at this pass. A pod is reported once per
    /// housekeeping interval while the pressure lasts: it is not gone, so each pass
    /// decides it again, where the kubelet's loop would have decided once per interval.
    /// Returns whether it was reported (and is to be recorded).
    pub(super) fn would_evict(
        &mut self,
        decision: &EvictionDecision,
        node: &NodeObservation,
        now: Time,
    ) -> bool {
        let interval = self.kubelet.housekeeping_interval;
        let Some(reported) = self.shadow.as_mut() else {
            return false;
        };
        // Only the reports of the last interval hold anything back.
        reported.retain(|_, at| now < *at + interval);
        if reported
            .get(&decision.pod_key)
            .is_some_and(|at| now < *at + interval)
        {
            return false;
        }
        reported.insert(decision.pod_key.clone(), now);
        let signal = crate::state::eviction_signal(decision);
        let decision_us = crate::clock::monotonic_ns().saturating_sub(node.taken_at_ns) / 1000;
        tracing::info!(
            pod = %decision.pod_key,
            eviction_signal = signal,
            grace_period_seconds = decision.grace_period_seconds,
            decision_us,
            "shadow: would evict; nothing done"
        );
        self.state.event(
            crate::events::EventReason::WouldEvict,
            &decision.pod_key,
            format!(
                "shadow: would evict with a grace period of {} s, decided {decision_us} µs after the observation. {}",
                decision.grace_period_seconds,
                decision.message.trim_end()
            ),
        );
        self.state
            .lock()
            .metrics
            .count_shadow_action("evict", signal);
        true
    }

    /// Reports a kill the hot path decided at a crossing (and did not write); the pass
    /// that books it reports no would-be eviction of the same pod.
    pub(super) fn book_would_kill(&mut self, kill: &HotKill, now: Time) {
        if let Some(reported) = self.shadow.as_mut() {
            reported.insert(kill.decision.pod_key.clone(), now);
        }
        let signal = crate::state::eviction_signal(&kill.decision);
        self.state.event(
            crate::events::EventReason::WouldKill,
            &kill.decision.pod_key,
            super::hot_kill_message(kill),
        );
        self.state
            .lock()
            .metrics
            .count_shadow_action("kill", signal);
    }
}
