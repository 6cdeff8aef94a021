//! The eviction manager's synchronize as a state machine over explicit time
//! (kubelet: pkg/kubelet/eviction/eviction_manager.go synchronize).
//!
//! One pass of the kubelet's loop, minus its I/O, is [`EvictionManager::decide`] and, when
//! node-level reclaim is due, [`EvictionManager::after_reclaim`]: the caller brings fresh
//! observations and pod stats and `now`; `decide` either finishes the pass or stops at
//! [`Step::Reclaim`], naming the resource and filesystem to garbage-collect. The caller
//! runs that reclaim (it deletes files: I/O that does not belong here), then hands what it
//! freed to `after_reclaim`, which finishes the pass. The steps, in the kubelet's order:
//!
//! 1. thresholds met by the observations, plus those met earlier and not yet resolved by
//!    their minimum reclaim;
//! 2. when each was first met; node conditions, held for the pressure transition period;
//! 3. thresholds whose grace period has passed (this set is remembered for step 1);
//! 4. of those, only thresholds whose stats are newer than at the previous pass (stale
//!    stats never evict twice);
//! 5. local storage limits (emptyDir sizeLimit, pod and container ephemeral-storage
//!    limits): every offending pod is evicted and the pass ends;
//! 6. the resource to reclaim (memory first); node-level reclaim (dead containers, unused
//!    images), whose freed bytes are credited to the observations: if every threshold of
//!    that resource is then resolved past its minimum reclaim, nobody is evicted;
//! 7. otherwise pods are ranked and the first one that is not critical is evicted: at
//!    most one pod per pass.
//!
//! Grace periods reported in [`EvictionDecision`]: a hard threshold or a local storage
//! limit evicts immediately (`immediate: true`) with
//! [`EvictionConfig::hard_eviction_grace_period_seconds`]: 0 by default (SIGKILL at once,
//! the documented meaning of a hard threshold), or 1 as the kubelet passes since 1.31
//! (SIGTERM, SIGKILL 1 s later; before 1.31 it passed 0, which its pod workers read as
//! "the pod's own grace period"). A soft threshold gives the pod its
//! `terminationGracePeriodSeconds`, capped by `evictionMaxPodGracePeriod` when that is
//! not 0; a negative cap makes it 0, SIGKILL at once (see
//! [`EvictionManager::grace_period_seconds`]). The kill timeout, after which the runtime
//! stops waiting and kills, is max(2 s, 1.5 × grace).
use std::time::Duration;

use super::pod::Pod;
use super::signal::{Observations, Signal, SignalObservation, Threshold};
use super::stats::PodWithStats;
use super::threshold::{self, NodeConditionsObservedAt, ThresholdsObservedAt};
use super::types::{FsLayout, NodeConditionType, Resource, Time};

#[cfg(any(test, feature = "testing"))]
pub mod fixtures;
pub mod local_storage;
mod message;
pub mod reads;
mod reclaim;
#[cfg(test)]
mod tests;

pub use reclaim::{NodeReclaimFunc, credit_reclaim, node_reclaim_funcs, same_filesystem_signals};

/// Default grace period, in seconds, for evictions that must happen now (hard thresholds
/// and local storage limits): SIGKILL at once. See the module docs.
pub const IMMEDIATE_GRACE_PERIOD_SECONDS: i64 = 0;

/// The grace period the kubelet passes to immediate evictions since 1.31
/// (`immediateEvictionGracePeriodSeconds`), the other allowed value of
/// [`EvictionConfig::hard_eviction_grace_period_seconds`].
pub const KUBELET_IMMEDIATE_GRACE_PERIOD_SECONDS: i64 = 1;

/// The shortest kill timeout given to any eviction.
pub const MIN_KILL_TIMEOUT: Duration = Duration::from_secs(2);

/// The eviction settings of a KubeletConfiguration, as the policy uses them.
#[derive(Clone, Debug, PartialEq)]
pub struct EvictionConfig {
    /// Hard and soft thresholds, with their minimum reclaims (and, when node allocatable is
    /// enforced on pods, the derived `allocatableMemory.available` thresholds).
    pub thresholds: Vec<Threshold>,
    /// How long a node condition stays reported after its last threshold stopped being met.
    pub pressure_transition_period: Duration,
    /// Cap on a pod's grace period for soft evictions (evictionMaxPodGracePeriod, an
    /// int32): 0 means no cap, a negative value evicts with no grace at all.
    pub max_pod_grace_period_seconds: i64,
    /// Evict pods that exceed emptyDir size limits or ephemeral-storage limits
    /// (KubeletConfiguration localStorageCapacityIsolation, default true).
    pub local_storage_capacity_isolation: bool,
    /// Grace period of immediate evictions (hard thresholds, local storage limits): 0 or
    /// 1 (the agent's `monitor.hardEvictionGracePeriodSeconds`).
    pub hard_eviction_grace_period_seconds: i64,
}

impl Default for EvictionConfig {
    /// No thresholds, the kubelet's 5 minute transition period, no grace cap.
    fn default() -> Self {
        EvictionConfig {
            thresholds: Vec::new(),
            pressure_transition_period: Duration::from_secs(5 * 60),
            max_pod_grace_period_seconds: 0,
            local_storage_capacity_isolation: true,
            hard_eviction_grace_period_seconds: IMMEDIATE_GRACE_PERIOD_SECONDS,
        }
    }
}

/// Everything one synchronize looks at.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SyncInput {
    pub observations: Observations,
    /// The active pods, the candidates for eviction.
    pub pods: Vec<PodWithStats>,
    /// Where images and writable layers live (kubelet: withImageFs, and the split image
    /// filesystem of KubeletSeparateDiskGC).
    pub fs_layout: FsLayout,
}

/// What node-level reclaim freed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReclaimResult {
    pub freed_bytes: u64,
    pub freed_inodes: u64,
    /// Part of what was removed is freed by the runtime later, in the background
    /// (containerd deletes a removed container's writable layer at its next garbage
    /// collection), so neither `freed_bytes` nor a fresh observation shows it yet.
    pub released_later: bool,
}

/// A threshold found met at this pass (or still unresolved by its minimum reclaim).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThresholdMet {
    pub threshold: Threshold,
    pub observed: SignalObservation,
    pub grace_period_met: bool,
}

/// What node-level reclaim did at this pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeReclaimOutcome {
    pub attempted: bool,
    /// The signal whose filesystem was reclaimed.
    pub signal: Option<Signal>,
    pub freed_bytes: u64,
    pub freed_inodes: u64,
    /// Reclaim resolved every threshold of the starved resource: no pod is evicted.
    pub sufficient: bool,
}

/// Why a pod was evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionReason {
    /// An eviction threshold (hard or soft) drove the eviction.
    Threshold,
    /// An emptyDir volume used more than its sizeLimit.
    EmptyDirSizeLimit,
    /// The pod used more ephemeral storage than its containers' limits add up to.
    PodEphemeralStorageLimit,
    /// A container used more ephemeral storage than its limit.
    ContainerEphemeralStorageLimit,
}

/// A pod to evict and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvictionDecision {
    pub pod_key: String,
    /// The signal whose threshold drove the eviction; `None` for local storage limits.
    pub signal: Option<Signal>,
    pub resource: Resource,
    pub reason: EvictionReason,
    /// Seconds between SIGTERM and SIGKILL; 0 is SIGKILL at once.
    pub grace_period_seconds: i64,
    /// A hard threshold or a local storage limit: the pod must go now, whatever
    /// `grace_period_seconds` (0 or 1) says. Soft thresholds are never immediate.
    pub immediate: bool,
    /// How long to wait for the pod to stop before killing it outright.
    pub kill_timeout: Duration,
    /// The kubelet's eviction message, for the pod's status and the event.
    pub message: String,
}

/// The decisions of one synchronize.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SyncOutcome {
    /// Every threshold met at this observation or still unresolved by its minimum
    /// reclaim, whether or not its grace period has passed.
    pub thresholds_met: Vec<ThresholdMet>,
    /// The node conditions now reported (transition period included).
    pub conditions: Vec<NodeConditionType>,
    /// Resources whose thresholds (grace period passed, fresh stats) call for reclaim,
    /// most urgent first.
    pub starved_resources: Vec<Resource>,
    pub node_reclaim: NodeReclaimOutcome,
    /// Pod keys, most evictable first; empty when no threshold eviction is due.
    pub ranking: Vec<String>,
    /// At most one for thresholds; one per offending pod for local storage limits.
    pub evictions: Vec<EvictionDecision>,
}

/// Where [`EvictionManager::decide`] stopped.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// The pass is complete.
    Done(SyncOutcome),
    /// Node-level reclaim is due before anyone is ranked: the caller reclaims
    /// [`PendingReclaim::resource`] on the filesystem of [`PendingReclaim::signal`] and
    /// finishes with [`EvictionManager::after_reclaim`].
    Reclaim(PendingReclaim),
}

/// A pass waiting for node-level reclaim.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingReclaim {
    /// The pass so far (thresholds, conditions, starved resources).
    outcome: SyncOutcome,
    /// The thresholds in force at this pass (containerfs ones derived).
    configured: Vec<Threshold>,
    /// Thresholds whose grace period passed, on fresh stats.
    updated: Vec<Threshold>,
    /// The threshold that picked the resource to reclaim.
    to_reclaim: Threshold,
    resource: Resource,
}

impl PendingReclaim {
    /// The resource to reclaim.
    pub fn resource(&self) -> Resource {
        self.resource
    }

    /// The signal whose filesystem to collect.
    pub fn signal(&self) -> Signal {
        self.to_reclaim.signal
    }

    /// The pass so far, before reclaim (for reporting while it runs).
    pub fn outcome(&self) -> &SyncOutcome {
        &self.outcome
    }
}

/// The kubelet's eviction manager state, driven by explicit time.
#[derive(Clone, Debug)]
pub struct EvictionManager {
    config: EvictionConfig,
    /// Conditions reported after the last pass (what admission looks at).
    node_conditions: Vec<NodeConditionType>,
    thresholds_first_observed_at: ThresholdsObservedAt,
    node_conditions_last_observed_at: NodeConditionsObservedAt,
    /// Thresholds met with their grace period at the last pass, carried so pressure
    /// counts as resolved only past their minimum reclaim.
    thresholds_met: Vec<Threshold>,
    last_observations: Observations,
}

impl EvictionManager {
    pub fn new(config: EvictionConfig) -> Self {
        EvictionManager {
            config,
            node_conditions: Vec::new(),
            thresholds_first_observed_at: Vec::new(),
            node_conditions_last_observed_at: NodeConditionsObservedAt::new(),
            thresholds_met: Vec::new(),
            last_observations: Observations::new(),
        }
    }

    pub fn config(&self) -> &EvictionConfig {
        &self.config
    }

    /// The node conditions currently reported, for admission.
    pub fn conditions(&self) -> Vec<NodeConditionType> {
        self.node_conditions.clone()
    }

    /// The earliest moment after `now` at which a threshold already met reaches the end of
    /// its grace period. The kubelet only notices that at its next 10 s poll; a caller
    /// that wakes itself then acts on time.
    pub fn next_grace_deadline(&self, now: Time) -> Option<Time> {
        self.thresholds_first_observed_at
            .iter()
            .map(|(threshold, first)| *first + threshold.grace_period)
            .filter(|deadline| *deadline > now)
            .min()
    }

    /// Steps 1 to 6 of one pass at `now`: either the whole pass ([`Step::Done`]) or a
    /// stop for node-level reclaim ([`Step::Reclaim`]), to be finished by
    /// [`EvictionManager::after_reclaim`] with what the reclaim freed.
    pub fn decide(&mut self, input: &SyncInput, now: Time) -> Step {
        let observations = &input.observations;
        let configured =
            threshold::update_container_fs_thresholds(&self.config.thresholds, input.fs_layout);

        // 1. Met now, plus met before and not yet past their minimum reclaim.
        let mut met = threshold::thresholds_met(&configured, observations, false);
        if !self.thresholds_met.is_empty() {
            let unresolved = threshold::thresholds_met(&self.thresholds_met, observations, true);
            met = threshold::merge_thresholds(&met, &unresolved);
        }

        // 2. First-observed times and node conditions with the transition period.
        let first_observed =
            threshold::thresholds_first_observed(&met, &self.thresholds_first_observed_at, now);
        let observed_conditions = threshold::node_conditions(&met);
        let conditions_last_observed_at = threshold::node_conditions_last_observed_at(
            &observed_conditions,
            &self.node_conditions_last_observed_at,
            now,
        );
        let conditions = threshold::node_conditions_observed_since(
            &conditions_last_observed_at,
            self.config.pressure_transition_period,
            now,
        );

        // 3. Grace periods.
        let grace_met = threshold::thresholds_met_grace_period(&first_observed, now);

        // 4. Only thresholds with fresh stats act.
        let updated =
            threshold::thresholds_updated_stats(&grace_met, observations, &self.last_observations);

        self.node_conditions = conditions.clone();
        self.thresholds_first_observed_at = first_observed;
        self.node_conditions_last_observed_at = conditions_last_observed_at;
        self.thresholds_met = grace_met.clone();
        self.last_observations = observations.clone();

        let mut outcome = SyncOutcome {
            thresholds_met: met
                .iter()
                .filter_map(|t| {
                    observations.get(&t.signal).map(|observed| ThresholdMet {
                        threshold: *t,
                        observed: *observed,
                        grace_period_met: grace_met.contains(t),
                    })
                })
                .collect(),
            conditions,
            starved_resources: threshold::starved_resources(&updated),
            ..SyncOutcome::default()
        };

        // 5. Local storage limits.
        if self.config.local_storage_capacity_isolation {
            outcome.evictions = local_storage::local_storage_evictions(
                &input.pods,
                input.fs_layout.has_imagefs(),
                self.config.hard_eviction_grace_period_seconds,
            );
            if !outcome.evictions.is_empty() {
                return Step::Done(outcome);
            }
        }

        // 6. The resource to reclaim, and node-level reclaim first.
        let Some((to_reclaim, resource)) = threshold::reclaimable_threshold(&updated) else {
            return Step::Done(outcome);
        };
        let pending = PendingReclaim {
            outcome,
            configured,
            updated,
            to_reclaim,
            resource,
        };
        if node_reclaim_funcs(to_reclaim.signal, input.fs_layout).is_empty() {
            return Step::Done(self.rank_and_evict(pending, input));
        }
        Step::Reclaim(pending)
    }

    /// Finishes a pass stopped at [`Step::Reclaim`]: credits what node-level reclaim freed
    /// to the observations; when every threshold of the starved resource is then resolved
    /// past its minimum reclaim nobody is evicted, else step 7 ranks and evicts. `input`
    /// is the one given to [`EvictionManager::decide`].
    pub fn after_reclaim(
        &self,
        pending: PendingReclaim,
        input: &SyncInput,
        freed: ReclaimResult,
    ) -> SyncOutcome {
        let signal = pending.to_reclaim.signal;
        let credited = credit_reclaim(&input.observations, signal, input.fs_layout, freed);
        let of_resource: Vec<Threshold> = pending
            .configured
            .iter()
            .filter(|t| t.signal.resource() == pending.resource)
            .copied()
            .collect();
        let sufficient = threshold::thresholds_met(&of_resource, &credited, true).is_empty();
        let mut pending = pending;
        pending.outcome.node_reclaim = NodeReclaimOutcome {
            attempted: true,
            signal: Some(signal),
            freed_bytes: freed.freed_bytes,
            freed_inodes: freed.freed_inodes,
            sufficient,
        };
        if sufficient {
            return pending.outcome;
        }
        self.rank_and_evict(pending, input)
    }

    /// 7. Rank and evict at most one pod, never a critical one.
    fn rank_and_evict(&self, pending: PendingReclaim, input: &SyncInput) -> SyncOutcome {
        let PendingReclaim {
            mut outcome,
            updated,
            to_reclaim,
            resource,
            ..
        } = pending;
        let ranked = super::rank::rank_pods(to_reclaim.signal, input.fs_layout, &input.pods);
        outcome.ranking = ranked.iter().map(|p| p.pod.key()).collect();
        if let Some(victim) = ranked.iter().find(|p| !p.pod.is_critical()) {
            let grace_period_seconds = self.grace_period_seconds(&to_reclaim, &victim.pod);
            outcome.evictions.push(EvictionDecision {
                pod_key: victim.pod.key(),
                signal: Some(to_reclaim.signal),
                resource,
                reason: EvictionReason::Threshold,
                grace_period_seconds,
                immediate: to_reclaim.is_hard(),
                kill_timeout: kill_timeout(grace_period_seconds),
                message: message::eviction_message(resource, victim, &updated, &input.observations),
            });
        }
        outcome
    }

    /// The eviction a hard threshold on `signal` would call for if it were met now, on the
    /// stats of `input`: see [`hard_eviction`]. The hot path holds this victim's
    /// candidates ready so that a crossing is answered before any synchronize.
    pub fn prospective_eviction(
        &self,
        input: &SyncInput,
        signal: Signal,
    ) -> Option<EvictionDecision> {
        hard_eviction(&self.config, input, signal)
    }

    /// The hot path's victim: [`EvictionManager::prospective_eviction`] for the hard memory
    /// threshold the node is nearest to crossing (least headroom between the signal's
    /// available and its threshold), since that is the crossing that fires the kill; the
    /// eviction then names the signal that really crossed. The two memory signals rank
    /// pods alike, so only the signal, threshold and message depend on this choice.
    ///
    /// `ranking` is the pass's [`reads::memory_ranking`] of `input.pods`: its first pod is
    /// the victim.
    pub fn prospective_hot_eviction(
        &self,
        input: &SyncInput,
        ranking: &[usize],
    ) -> Option<EvictionDecision> {
        let victim = *ranking.first()?;
        let mut signals: Vec<(i64, Signal)> =
            [Signal::MemoryAvailable, Signal::AllocatableMemoryAvailable]
                .into_iter()
                .filter_map(|signal| {
                    let threshold = self
                        .config
                        .thresholds
                        .iter()
                        .find(|t| t.signal == signal && t.is_hard())?;
                    let observed = input.observations.get(&signal)?;
                    let headroom = observed
                        .available
                        .saturating_sub(threshold.quantity(observed.capacity));
                    Some((headroom, signal))
                })
                .collect();
        signals.sort();
        signals
            .into_iter()
            .find_map(|(_, signal)| hard_eviction_of(&self.config, input, signal, victim))
    }

    /// A whole pass, with node-level reclaim done by `reclaim` (given the resource and the
    /// signal whose filesystem to collect) when the pass calls for it. For callers whose
    /// reclaim is itself pure (the simulator, tests); the agent runs the two halves itself
    /// so that its reclaim runs off the decision path.
    pub fn synchronize_with(
        &mut self,
        input: &SyncInput,
        now: Time,
        reclaim: impl FnOnce(Resource, Signal) -> ReclaimResult,
    ) -> SyncOutcome {
        match self.decide(input, now) {
            Step::Done(outcome) => outcome,
            Step::Reclaim(pending) => {
                let freed = reclaim(pending.resource, pending.to_reclaim.signal);
                self.after_reclaim(pending, input, freed)
            }
        }
    }

    /// The grace period for evicting `pod` because of `threshold`: the immediate one for a
    /// hard threshold; for a soft one the grace the kubelet's pod would get.
    ///
    /// The eviction manager (eviction_manager.go synchronize) passes
    /// min(evictionMaxPodGracePeriod, the pod's terminationGracePeriodSeconds) as the
    /// override. Its pod workers (pod_workers.go calculateEffectiveGracePeriod) read an
    /// override of 0 as none, so an unset (0) cap leaves the pod its own grace; any
    /// other override is taken as given, a negative one included, and then raised to
    /// their floor of 1 s. So a negative cap is the quickest kill the kubelet makes. The
    /// agent has no such floor (a pod whose own grace is 0 is killed at once), so here a
    /// negative cap gives 0: SIGKILL at once, where the kubelet sends SIGTERM and
    /// SIGKILL 1 s later.
    pub fn grace_period_seconds(&self, threshold: &Threshold, pod: &Pod) -> i64 {
        if threshold.is_hard() {
            return self.config.hard_eviction_grace_period_seconds;
        }
        let own = pod.termination_grace_period_seconds().max(0);
        match self.config.max_pod_grace_period_seconds {
            0 => own,
            max => own.min(max).max(0),
        }
    }
}

/// The eviction a hard threshold on `signal` calls for on the stats and observations of
/// `input`: the pod the signal's ranking puts first, never a critical one, with the hard
/// grace period, worded in the kubelet's message format on these observations. `None`
/// without such a threshold or a candidate. The hot path calls it at a crossing with the
/// working sets read then and the signal as it was crossed.
pub fn hard_eviction(
    config: &EvictionConfig,
    input: &SyncInput,
    signal: Signal,
) -> Option<EvictionDecision> {
    hard_eviction_of(config, input, signal, hard_eviction_victim(input, signal)?)
}

/// [`hard_eviction`] of `input.pods[victim]`: the eviction of the pod the hot path
/// picked with [`hard_eviction_victim`] and killed, worded after the kill.
pub fn hard_eviction_of(
    config: &EvictionConfig,
    input: &SyncInput,
    signal: Signal,
    victim: usize,
) -> Option<EvictionDecision> {
    let threshold = config
        .thresholds
        .iter()
        .find(|t| t.signal == signal && t.is_hard())?;
    let resource = signal.resource();
    let victim = input.pods.get(victim)?;
    let grace_period_seconds = config.hard_eviction_grace_period_seconds;
    Some(EvictionDecision {
        pod_key: victim.pod.key(),
        signal: Some(signal),
        resource,
        reason: EvictionReason::Threshold,
        grace_period_seconds,
        immediate: true,
        kill_timeout: kill_timeout(grace_period_seconds),
        message: message::eviction_message(
            resource,
            victim,
            std::slice::from_ref(threshold),
            &input.observations,
        ),
    })
}

/// The pod [`hard_eviction`] evicts on `input` for `signal`, as an index into
/// `input.pods`: the first of the signal's ranking that is not critical. The hot path
/// kills it before it words the eviction.
pub fn hard_eviction_victim(input: &SyncInput, signal: Signal) -> Option<usize> {
    if super::rank::rank_func(signal, input.fs_layout) == super::rank::RankFunc::Memory {
        // The ranking's first by its key, in one pass (the first of equals, as the
        // stable sort keeps them).
        return input
            .pods
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.pod.is_critical())
            .min_by_key(|(_, p)| super::rank::memory_rank_key(p))
            .map(|(index, _)| index);
    }
    let ranked = super::rank::rank_pods(signal, input.fs_layout, &input.pods);
    let victim = ranked.into_iter().find(|p| !p.pod.is_critical())?;
    input.pods.iter().position(|p| std::ptr::eq(p, victim))
}

/// How long to wait for a pod given `grace_period_seconds` before killing it outright:
/// max(2 s, 1.5 × grace).
pub fn kill_timeout(grace_period_seconds: i64) -> Duration {
    let grace_ms = u64::try_from(grace_period_seconds)
        .unwrap_or(0)
        .saturating_mul(1500);
    Duration::from_millis(grace_ms).max(MIN_KILL_TIMEOUT)
}
