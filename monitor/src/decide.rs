//! The policy step of the agent's synchronize: a fresh [`NodeObservation`] becomes the
//! kubelet's signal observations, and the pure [`EvictionManager`] decides.
use crate::config::kubelet::KubeletConfig;
use crate::manager::{SyncSummary, Synchronizer};
use crate::notify::Wake;
use crate::observe::{FsStats, NodeObservation};
use crate::policy::eviction::{
    EvictionDecision, EvictionManager, NoNodeReclaim, NodeReclaimer, PodWithStats, SyncInput,
    SyncOutcome,
};
use crate::policy::signal::{Observations, Signal, SignalObservation};
use crate::policy::types::NodeConditionType;
use crate::policy::types::Time;
use crate::state::{SharedState, SignalStatus, ThresholdStatus};

/// The signals of one observation (kubelet: makeSignalObservations).
pub fn signal_observations(
    node: &NodeObservation,
    kubelet: &KubeletConfig,
    time: Time,
) -> Observations {
    let mut out = Observations::new();
    let mut put = |signal, available: u64, capacity: u64| {
        out.insert(
            signal,
            SignalObservation {
                available: available as i64,
                capacity: capacity as i64,
                time,
            },
        );
    };
    let memory = &node.memory;
    put(
        Signal::MemoryAvailable,
        memory.available_bytes,
        memory.capacity_bytes,
    );
    match &node.allocatable {
        Some(pods) => put(
            Signal::AllocatableMemoryAvailable,
            pods.available_bytes,
            pods.capacity_bytes,
        ),
        None => {
            // No pods cgroup to read: no pod uses memory, allocatable is what the
            // reservations leave.
            let allocatable = kubelet
                .allocatable("memory", memory.capacity_bytes as i64)
                .max(0) as u64;
            put(Signal::AllocatableMemoryAvailable, allocatable, allocatable);
        }
    }
    let mut fs = |bytes: Signal, inodes: Signal, stats: &FsStats| {
        put(bytes, stats.available_bytes, stats.capacity_bytes);
        put(inodes, stats.inodes_free, stats.inodes);
    };
    fs(
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        &node.nodefs,
    );
    // Without a dedicated image filesystem, images live on nodefs (kubelet: imagefs
    // stats are the nodefs stats); containers' writable layers live with the images.
    let imagefs = node.imagefs.as_ref().unwrap_or(&node.nodefs);
    fs(Signal::ImageFsAvailable, Signal::ImageFsInodesFree, imagefs);
    fs(
        Signal::ContainerFsAvailable,
        Signal::ContainerFsInodesFree,
        imagefs,
    );
    put(
        Signal::PidAvailable,
        node.pids.max.saturating_sub(node.pids.current),
        node.pids.max,
    );
    out
}

/// A boxed future the manager awaits.
pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// Where the running pods and their stats come from, how node-level reclaim is done, and
/// who kills. The agent's own pod runtime implements it; without one, there are no pods.
pub trait PodRuntime: Send + 'static {
    /// The active pods with FRESH stats (read now).
    fn pods(&mut self) -> Vec<PodWithStats>;
    fn reclaimer(&mut self) -> &mut dyn NodeReclaimer;
    /// The node conditions changed (admission reads them).
    fn conditions_changed(&mut self, _conditions: &[NodeConditionType]) {}
    /// Carries out an eviction; resolves once the pod is gone (or the kill timed out),
    /// with whether it was evicted.
    fn evict(&mut self, _decision: EvictionDecision) -> BoxFuture<bool> {
        Box::pin(async { false })
    }
}

/// No pods: the decision chain still runs (thresholds, conditions), nothing to evict.
#[derive(Default)]
pub struct NoPods {
    reclaim: NoNodeReclaim,
}

impl PodRuntime for NoPods {
    fn pods(&mut self) -> Vec<PodWithStats> {
        Vec::new()
    }
    fn reclaimer(&mut self) -> &mut dyn NodeReclaimer {
        &mut self.reclaim
    }
}

/// Runs the eviction policy at every synchronize, and has the runtime carry out its
/// evictions before the next one.
pub struct PolicySynchronizer<R> {
    pub manager: EvictionManager,
    pub kubelet: KubeletConfig,
    pub runtime: R,
    pub last_outcome: Option<SyncOutcome>,
    pub state: SharedState,
    /// Evictions decided and not yet carried out.
    pending: Vec<EvictionDecision>,
}

impl<R: PodRuntime> PolicySynchronizer<R> {
    pub fn new(kubelet: KubeletConfig, runtime: R) -> Self {
        Self::with_state(kubelet, runtime, SharedState::default())
    }

    pub fn with_state(kubelet: KubeletConfig, runtime: R, state: SharedState) -> Self {
        PolicySynchronizer {
            manager: EvictionManager::new(kubelet.eviction.clone()),
            kubelet,
            runtime,
            last_outcome: None,
            state,
            pending: Vec::new(),
        }
    }

    /// Publishes each signal against its thresholds, and the conditions.
    fn publish(&self, observations: &Observations, outcome: &SyncOutcome) {
        let mut signals = Vec::new();
        for (signal, observed) in observations {
            let thresholds: Vec<ThresholdStatus> = self
                .kubelet
                .eviction
                .thresholds
                .iter()
                .filter(|t| t.signal == *signal)
                .map(|t| {
                    let met = outcome.thresholds_met.iter().find(|m| m.threshold == *t);
                    ThresholdStatus {
                        value: crate::policy::signal::format_value(t.value),
                        quantity: t.quantity(observed.capacity),
                        kind: if t.is_hard() { "hard" } else { "soft" }.to_string(),
                        grace_period: (!t.is_hard())
                            .then(|| crate::config::kubelet::format_go_duration(t.grace_period)),
                        met: met.is_some(),
                        grace_period_met: met.is_some_and(|m| m.grace_period_met),
                    }
                })
                .collect();
            signals.push(SignalStatus {
                signal: signal.as_str().to_string(),
                available: observed.available,
                capacity: observed.capacity,
                thresholds,
            });
        }
        let mut state = self.state.lock();
        state.signals = signals;
        state.conditions = outcome
            .conditions
            .iter()
            .map(|c| c.as_str().to_string())
            .collect();
    }
}

impl<R: PodRuntime> Synchronizer for PolicySynchronizer<R> {
    fn synchronize(&mut self, node: &NodeObservation, _wakes: &[Wake], now: Time) -> SyncSummary {
        let input = SyncInput {
            observations: signal_observations(node, &self.kubelet, now),
            pods: self.runtime.pods(),
            dedicated_imagefs: node.imagefs.is_some(),
        };
        let outcome = self
            .manager
            .synchronize(&input, self.runtime.reclaimer(), now);
        self.runtime.conditions_changed(&outcome.conditions);
        self.publish(&input.observations, &outcome);
        self.pending = outcome.evictions.clone();
        let text = summarize(&input.observations, &outcome);
        if outcome.thresholds_met.is_empty() {
            tracing::debug!("synchronize: {text}");
        } else {
            tracing::info!("synchronize: {text}");
        }
        self.last_outcome = Some(outcome);
        SyncSummary { text }
    }

    fn next_deadline(&self, now: Time) -> Option<Time> {
        self.manager.next_grace_deadline(now)
    }

    fn act(&mut self) -> Option<BoxFuture<()>> {
        if self.pending.is_empty() {
            return None;
        }
        let evictions: Vec<(EvictionDecision, BoxFuture<bool>)> = std::mem::take(&mut self.pending)
            .into_iter()
            .map(|d| {
                let done = self.runtime.evict(d.clone());
                (d, done)
            })
            .collect();
        let state = self.state.clone();
        Some(Box::pin(async move {
            for (decision, done) in evictions {
                // The kill timeout bounds the wait: a pod that will not die must not stall
                // every later decision.
                let evicted = tokio::time::timeout(
                    decision.kill_timeout + std::time::Duration::from_secs(1),
                    done,
                )
                .await
                .unwrap_or(false);
                if evicted {
                    let signal = decision
                        .signal
                        .map(|s| s.as_str())
                        .unwrap_or(decision.resource.as_str())
                        .to_string();
                    *state.lock().metrics.evictions.entry(signal).or_default() += 1;
                }
            }
        }))
    }
}

fn summarize(observations: &Observations, outcome: &SyncOutcome) -> String {
    let mib = |b: i64| b / (1 << 20);
    let mut parts = Vec::new();
    for signal in [Signal::MemoryAvailable, Signal::AllocatableMemoryAvailable] {
        if let Some(o) = observations.get(&signal) {
            parts.push(format!("{}={}Mi", signal.as_str(), mib(o.available)));
        }
    }
    for met in &outcome.thresholds_met {
        parts.push(format!(
            "threshold met: {}<{}{}",
            met.threshold.signal.as_str(),
            crate::policy::signal::format_value(met.threshold.value),
            if met.grace_period_met {
                ""
            } else {
                " (grace period running)"
            }
        ));
    }
    if !outcome.conditions.is_empty() {
        let names: Vec<&str> = outcome.conditions.iter().map(|c| c.as_str()).collect();
        parts.push(format!("conditions: {}", names.join(", ")));
    }
    for eviction in &outcome.evictions {
        parts.push(format!(
            "evict {} (grace {} s): {}",
            eviction.pod_key, eviction.grace_period_seconds, eviction.message
        ));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::kubelet::load_kubelet_config;
    use crate::observe::{AllocatableMemory, MemoryStats, NodeMemory, PidStats};
    use crate::policy::types::NodeConditionType;

    const GI: u64 = 1 << 30;
    const MI: u64 = 1 << 20;

    fn node(available: u64, pods_available: Option<u64>) -> NodeObservation {
        NodeObservation {
            taken_at_ns: 0,
            memory: NodeMemory {
                capacity_bytes: 10 * GI,
                usage_bytes: 10 * GI - available,
                inactive_file_bytes: 0,
                working_set_bytes: 10 * GI - available,
                available_bytes: available,
            },
            allocatable: pods_available.map(|a| AllocatableMemory {
                capacity_bytes: GI,
                stats: MemoryStats {
                    usage_bytes: GI - a,
                    inactive_file_bytes: Some(0),
                    limit_bytes: Some(GI),
                    working_set_bytes: GI - a,
                },
                available_bytes: a,
            }),
            nodefs: FsStats {
                capacity_bytes: 100 * GI,
                available_bytes: 50 * GI,
                inodes: 1000,
                inodes_free: 900,
            },
            imagefs: None,
            pids: PidStats {
                max: 4096,
                current: 96,
            },
            psi: None,
        }
    }

    #[test]
    fn observations_cover_every_signal() {
        let (kubelet, _) =
            load_kubelet_config("systemReserved: {memory: 1.5Gi}\n", "k.yaml").unwrap();
        let o = signal_observations(&node(3 * GI, None), &kubelet, Time::from_secs(1));
        assert_eq!(o[&Signal::MemoryAvailable].available, (3 * GI) as i64);
        // 10Gi − 1.5Gi system-reserved − 100Mi default hard threshold.
        assert_eq!(
            o[&Signal::AllocatableMemoryAvailable].capacity,
            (10 * GI - 1536 * MI - 100 * MI) as i64
        );
        assert_eq!(o[&Signal::ImageFsAvailable], o[&Signal::NodeFsAvailable]);
        assert_eq!(o[&Signal::NodeFsInodesFree].available, 900);
        assert_eq!(o[&Signal::PidAvailable].available, 4000);
        let o = signal_observations(&node(3 * GI, Some(200 * MI)), &kubelet, Time::ZERO);
        assert_eq!(
            o[&Signal::AllocatableMemoryAvailable].available,
            (200 * MI) as i64
        );
    }

    #[test]
    fn the_policy_runs_on_fresh_observations() {
        let (kubelet, _) = load_kubelet_config(
            "evictionHard: {allocatableMemory.available: 300Mi}\n",
            "k.yaml",
        )
        .unwrap();
        let mut sync = PolicySynchronizer::new(kubelet, NoPods::default());
        let calm = sync.synchronize(&node(5 * GI, Some(800 * MI)), &[], Time::from_secs(1));
        assert!(
            sync.last_outcome
                .as_ref()
                .unwrap()
                .thresholds_met
                .is_empty(),
            "{}",
            calm.text
        );
        let pressed = sync.synchronize(&node(5 * GI, Some(200 * MI)), &[], Time::from_secs(2));
        let outcome = sync.last_outcome.as_ref().unwrap();
        assert_eq!(
            outcome.conditions,
            vec![NodeConditionType::MemoryPressure],
            "{}",
            pressed.text
        );
        assert!(
            pressed.text.contains("allocatableMemory.available<300Mi"),
            "{}",
            pressed.text
        );
    }
}
