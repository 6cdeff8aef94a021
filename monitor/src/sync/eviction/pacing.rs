//! Pacing: when the next eviction may start. One at a time while an eviction that counts
//! as much runs; a memory eviction that gave back far less than its victim held (page
//! cache, tmpfs, shared pages stay charged) slows its signal to one eviction per
//! housekeeping interval, as the kubelet's loop is paced by itself; a disk signal whose
//! reclaim removed dead containers waits for the runtime to free their space.
use super::*;

/// An eviction held back at a pass, and what it waits for.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Deferred {
    pub(crate) decision: EvictionDecision,
    pub(crate) wait: Wait,
}

/// Why an eviction the policy asked for did not start at this pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// An eviction that counts as much is still running: its pod still holds what the
    /// same stats would pick a second victim for.
    UnderWay,
    /// The signal's last eviction freed far less than its victim held: one eviction per
    /// housekeeping interval.
    Paced,
    /// A reclaim removed dead containers whose space the runtime frees in the background.
    ReclaimSettling,
}

impl Wait {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Wait::UnderWay => "an eviction is under way",
            Wait::Paced => "the signal is paced after an ineffective eviction",
            Wait::ReclaimSettling => {
                "the runtime is still freeing the dead containers the reclaim removed"
            }
        }
    }
}

/// How long the evictions for a disk signal wait, at most, after a node-level reclaim
/// removed dead containers, for the runtime to delete their writable layers.
pub(crate) const RECLAIM_SETTLE: std::time::Duration = std::time::Duration::from_secs(5);

/// A memory eviction whose effect on its signal is still to be judged: the signal's
/// available when it was decided, and what the victim held then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Effect {
    pub(super) pod_key: String,
    pub(super) signal: Signal,
    pub(super) available_before: i64,
    pub(super) victim_bytes: u64,
}

impl Effect {
    /// Whether the signal, observed afresh after the eviction ended, came back by at
    /// least half of what the victim held. (Other pods' growth meanwhile counts against
    /// it; a fresh eviction is judged by what the node got back, as the pressure is.)
    fn was_effective(&self, available_after: i64) -> bool {
        let freed = available_after.saturating_sub(self.available_before);
        freed.saturating_mul(2) >= i64::try_from(self.victim_bytes).unwrap_or(i64::MAX)
    }
}

/// A victim holding less than this is not judged: its eviction could not have freed
/// a measurable share of the signal anyway.
pub(super) const JUDGED_FROM_BYTES: u64 = 4 << 20;

impl EvictionSync {
    /// Whether an eviction may start while others run. One eviction per pass, and no new
    /// one while an eviction that counts as much is under way (its pod still holds the
    /// memory or disk it is being evicted for, so the same stats would pick a second
    /// victim for the same pressure). The exception: an immediate eviction (a hard
    /// threshold or a local storage limit) starts while only soft ones run, so a hard
    /// crossing never waits out a soft eviction's grace period (kubelets that block on the
    /// soft eviction wait it out: kubernetes#123872). Immediate is the decision's flag, not a grace of 0: with
    /// `hardEvictionGracePeriodSeconds: 1` hard evictions have a grace of 1 s.
    /// A signal that is paced (see [`EvictionSync::judge_effects`]) starts one eviction
    /// per housekeeping interval, and one whose reclaim is settling (see
    /// [`EvictionSync::settle`]) none until its time is up.
    /// Returns what the decision waits for, or `None` when it may start now.
    pub(super) fn may_start(&self, decision: &EvictionDecision, now: Time) -> Option<Wait> {
        let until = |times: &std::collections::BTreeMap<Signal, Time>| {
            decision
                .signal
                .and_then(|s| times.get(&s))
                .is_some_and(|at| now < *at)
        };
        if self.in_flight.iter().any(|e| e.pod_key == decision.pod_key) {
            Some(Wait::UnderWay)
        } else if until(&self.paced) {
            Some(Wait::Paced)
        } else if until(&self.settling) {
            Some(Wait::ReclaimSettling)
        } else if self.in_flight.is_empty()
            || (decision.immediate && self.in_flight.iter().all(|e| !e.immediate))
        {
            None
        } else {
            Some(Wait::UnderWay)
        }
    }

    /// A reclaim for `signal` removed dead containers and the signal is still met: the
    /// runtime frees their writable layers in the background (containerd at its next
    /// garbage collection, which on a busy node comes seconds later), so the evictions
    /// for `signal` wait up to [`RECLAIM_SETTLE`] for a fresh observation to show the
    /// space. The wait is granted once per episode of pressure: a pod that keeps leaving
    /// dead containers cannot hold off evictions.
    pub(super) fn settle(&mut self, signal: Signal, now: Time) {
        if self.settling.contains_key(&signal) {
            return;
        }
        tracing::info!(
            signal = signal.as_str(),
            "node-level reclaim removed dead containers whose writable layers the runtime deletes in the background: evictions for this signal wait up to {} for the space to show",
            format_go_duration(RECLAIM_SETTLE)
        );
        self.settling.insert(signal, now + RECLAIM_SETTLE);
    }

    /// Remembers what a memory eviction should free, to judge it once it ended.
    pub(super) fn note_effect(&mut self, decision: &EvictionDecision, input: &SyncInput) {
        let Some(signal) = decision.signal.filter(|s| s.is_memory()) else {
            return;
        };
        let Some(observed) = input.observations.get(&signal) else {
            return;
        };
        let victim_bytes = input
            .pods
            .iter()
            .find(|p| p.pod.key() == decision.pod_key)
            .and_then(|p| p.stats.memory_working_set_bytes)
            .unwrap_or(0);
        self.effects.push(Effect {
            pod_key: decision.pod_key.clone(),
            signal,
            available_before: observed.available,
            victim_bytes,
        });
    }

    /// Judges the memory evictions that ended before this pass's observation: one that
    /// freed far less than its victim held is reported (a Warning `EvictionIneffective`
    /// and a metric) and paces its signal to one eviction per housekeeping interval, as
    /// the kubelet's loop does by itself. An effective one, or a signal whose thresholds
    /// are no longer met, ends the pacing (and a signal no longer met ends the wait for
    /// its reclaim's background release, see [`EvictionSync::settle`]).
    pub(super) fn judge_effects(
        &mut self,
        finished: &[FinishedEviction],
        observations: &Observations,
        outcome: &SyncOutcome,
        now: Time,
    ) {
        for done in finished {
            let Some(index) = self
                .effects
                .iter()
                .position(|e| e.pod_key == done.decision.pod_key)
            else {
                continue;
            };
            let effect = self.effects.swap_remove(index);
            // A pod found gone at the first attempt is gone all the same (the hot path's
            // kill, or its exit, came before the booking): what the signal got back is
            // judged on the node as it is now, whoever ended the pod.
            let gone = matches!(
                done.outcome,
                EvictionOutcome::Evicted | EvictionOutcome::AlreadyGone
            );
            if !gone || effect.victim_bytes < JUDGED_FROM_BYTES {
                continue;
            }
            let Some(after) = observations.get(&effect.signal) else {
                continue;
            };
            if effect.was_effective(after.available) {
                self.paced.remove(&effect.signal);
                continue;
            }
            let freed = after.available.saturating_sub(effect.available_before);
            self.state.event(
                crate::events::EventReason::EvictionIneffective,
                &effect.pod_key,
                format!(
                    "evicting it for {} gave back {} of the {} it held (its memory stays charged: page cache, tmpfs or shared pages); further evictions for this signal wait {} each until it moves",
                    effect.signal.as_str(),
                    format_value_bytes(freed),
                    format_value_bytes(i64::try_from(effect.victim_bytes).unwrap_or(i64::MAX)),
                    format_go_duration(self.kubelet.housekeeping_interval),
                ),
            );
            *self
                .state
                .lock()
                .metrics
                .ineffective_evictions
                .entry(effect.signal.as_str().to_string())
                .or_default() += 1;
            self.paced
                .entry(effect.signal)
                .or_insert(now + self.kubelet.housekeeping_interval);
        }
        let met: Vec<Signal> = outcome
            .thresholds_met
            .iter()
            .map(|m| m.threshold.signal)
            .collect();
        self.paced.retain(|signal, _| met.contains(signal));
        // A reclaim's background release is waited for within one episode of pressure.
        self.settling.retain(|signal, _| met.contains(signal));
    }
}
