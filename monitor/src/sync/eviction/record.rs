//! The decisions of a pass, written into the decision record with the observation they
//! were made on (see [`crate::decisions`]).
use super::*;
use crate::decisions::{Decision, RANKED_KEPT, Ranked, SignalSeen, Timings};
use crate::policy::types::Resource;

/// What a pass decided on, for its record.
pub(super) struct Seen<'a> {
    pub(super) observations: &'a Observations,
    pub(super) outcome: &'a SyncOutcome,
    pub(super) pods: &'a [PodWithStats],
    /// When the observation was read (CLOCK_MONOTONIC ns; 0 unknown).
    pub(super) taken_at_ns: u64,
}

impl Seen<'_> {
    /// The record of `decision` (`action`: `evict`, `hotKill`, ...).
    pub(super) fn decision(
        &self,
        action: &str,
        shadow: bool,
        decision: &EvictionDecision,
    ) -> Decision {
        let uid = self
            .pods
            .iter()
            .find(|p| p.pod.key() == decision.pod_key)
            .map(|p| p.pod.metadata.uid.clone());
        Decision {
            at: crate::state::now_rfc3339(),
            action: action.to_string(),
            shadow,
            pod: Some(decision.pod_key.clone()),
            uid,
            signal: Some(crate::state::eviction_signal(decision).to_string()),
            message: decision.message.trim_end().to_string(),
            signals: signals_seen(self.observations),
            thresholds_met: thresholds_met(self.outcome),
            ranking: self.ranked(decision.resource),
            timings: Timings {
                observed_to_decision_us: (self.taken_at_ns != 0)
                    .then(|| crate::clock::monotonic_ns().saturating_sub(self.taken_at_ns) / 1000),
                ..Timings::default()
            },
        }
    }

    /// What the pre-kill hook reads about `decision`.
    pub(super) fn notice(&self, decision: &EvictionDecision) -> super::hook::HookDocument {
        let pod = self.pods.iter().find(|p| p.pod.key() == decision.pod_key);
        let threshold = decision.signal.and_then(|signal| {
            self.outcome
                .thresholds_met
                .iter()
                .find(|m| m.threshold.signal == signal)
        });
        let (namespace, name) = decision
            .pod_key
            .split_once('/')
            .map(|(ns, n)| (ns.to_string(), n.to_string()))
            .unwrap_or_default();
        let deadline = time::OffsetDateTime::now_utc()
            + std::time::Duration::from_secs(decision.grace_period_seconds.max(0).unsigned_abs());
        super::hook::HookDocument {
            pod: decision.pod_key.clone(),
            namespace,
            name,
            uid: pod.map(|p| p.pod.metadata.uid.clone()).unwrap_or_default(),
            qos: pod
                .map(|p| p.pod.qos_class().as_str().to_string())
                .unwrap_or_default(),
            priority: pod.map(|p| p.pod.priority()).unwrap_or_default(),
            signal: crate::state::eviction_signal(decision).to_string(),
            threshold: threshold.map(|m| threshold_text(&m.threshold)),
            observed: decision
                .signal
                .and_then(|s| self.observations.get(&s))
                .map(|o| o.available),
            rank: self
                .outcome
                .ranking
                .iter()
                .position(|k| *k == decision.pod_key)
                .map(|i| i + 1),
            grace_period_seconds: decision.grace_period_seconds,
            deadline: deadline
                .replace_nanosecond(0)
                .unwrap_or(deadline)
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            message: decision.message.trim_end().to_string(),
        }
    }

    /// The first pods of the pass's ranking, with their use of `resource`.
    fn ranked(&self, resource: Resource) -> Vec<Ranked> {
        self.outcome
            .ranking
            .iter()
            .take(RANKED_KEPT)
            .filter_map(|key| self.pods.iter().find(|p| p.pod.key() == *key))
            .map(|p| ranked(p, resource))
            .collect()
    }
}

/// A pod of a ranking, with its use and request of `resource`.
pub(super) fn ranked(pod: &PodWithStats, resource: Resource) -> Ranked {
    let (usage, request) = match resource {
        Resource::Memory => (
            pod.stats.memory_working_set_bytes,
            Some(pod.pod.ranking_request("memory").value()),
        ),
        Resource::EphemeralStorage | Resource::Inodes => (
            pod.stats.ephemeral_storage_used_bytes,
            Some(pod.pod.ranking_request("ephemeral-storage").value()),
        ),
        Resource::Pids => (pod.stats.process_count, None),
    };
    Ranked {
        pod: pod.pod.key(),
        qos: pod.pod.qos_class().as_str().to_string(),
        priority: pod.pod.priority(),
        usage,
        request: request.filter(|r| *r > 0),
    }
}

pub(super) fn signals_seen(observations: &Observations) -> Vec<SignalSeen> {
    observations
        .iter()
        .map(|(signal, o)| SignalSeen {
            signal: signal.as_str().to_string(),
            available: o.available,
            capacity: o.capacity,
        })
        .collect()
}

pub(super) fn thresholds_met(outcome: &SyncOutcome) -> Vec<String> {
    outcome
        .thresholds_met
        .iter()
        .map(|m| threshold_text(&m.threshold))
        .collect()
}

/// The record of a node-level reclaim: what it freed for `signal` (in shadow mode,
/// nothing: it only would have run).
pub(super) fn reclaim(
    resource: Resource,
    signal: Signal,
    freed: ReclaimResult,
    shadow: bool,
    observations: &Observations,
) -> Decision {
    let message = format!(
        "node-level reclaim of {}: freed {} bytes, {} inodes",
        resource.as_str(),
        freed.freed_bytes,
        freed.freed_inodes
    );
    node_action("reclaim", signal, message, shadow, observations)
}

/// The record of an action on the node rather than on a pod (`reclaim`, `relieve`), for
/// `signal`, on the pass's `observations`.
pub(super) fn node_action(
    action: &str,
    signal: Signal,
    message: String,
    shadow: bool,
    observations: &Observations,
) -> Decision {
    Decision {
        at: crate::state::now_rfc3339(),
        action: action.to_string(),
        shadow,
        pod: None,
        uid: None,
        signal: Some(signal.as_str().to_string()),
        message,
        signals: signals_seen(observations),
        thresholds_met: Vec::new(),
        ranking: Vec::new(),
        timings: Timings::default(),
    }
}

/// The record of a hot kill (or, in shadow mode, of the kill it would have been), on
/// what the hot path read at the crossing.
pub(super) fn hot_kill(kill: &HotKill) -> Decision {
    let signals = match (kill.decision.signal, kill.signal_available) {
        (Some(signal), Some(available)) => vec![SignalSeen {
            signal: signal.as_str().to_string(),
            available,
            capacity: 0,
        }],
        _ => Vec::new(),
    };
    Decision {
        at: crate::state::now_rfc3339(),
        action: "hotKill".into(),
        shadow: kill.shadow,
        pod: Some(kill.decision.pod_key.clone()),
        uid: None,
        signal: Some(crate::state::eviction_signal(&kill.decision).to_string()),
        message: kill.decision.message.trim_end().to_string(),
        signals,
        thresholds_met: Vec::new(),
        ranking: Vec::new(),
        timings: Timings {
            crossing_to_kill_us: Some(kill.killed_ns.saturating_sub(kill.detected_ns) / 1000),
            source: Some(kill.source.to_string()),
            ..Timings::default()
        },
    }
}
