//! The eviction part of a synchronize: a fresh observation becomes the kubelet's signal
//! observations, the pure policy ([`EvictionManager`]) decides, node-level reclaim runs
//! when the policy stops for it, and the evictions it asks for are started through the
//! runtime's ports. Evictions run as their own tasks, so a soft eviction's grace period
//! never holds up the next decision; when one ends, it wakes the loop to decide again on
//! fresh stats.
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::hot::{CANDIDATES, Candidates, HotKill, HotPath, Unarmed};
use super::signals::node_stats;
use crate::config::kubelet::{KubeletConfig, format_go_duration};
use crate::notify::{Wake, WakeDetail, WakeSender, WakeSource};
use crate::observe::NodeObservation;
use crate::policy::eviction::{
    EvictionConfig, EvictionDecision, EvictionManager, MIN_KILL_TIMEOUT, ReclaimResult, Step,
    SyncInput, SyncOutcome, reads,
};
use crate::policy::signal::{Observations, Signal, format_value};
use crate::policy::stats::PodWithStats;
use crate::policy::summary::make_signal_observations;
use crate::policy::types::{FsLayout, Time};
use crate::runtime::port::{EvictionOutcome, PodKiller, Ports, StatsNeeds};
use crate::state::{EVICTIONS_KEPT, EvictionView, SharedState, SignalStatus, ThresholdStatus};

/// What one synchronize decided and did about evictions.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct EvictionPass {
    /// The signals as observed at this pass.
    pub(crate) observations: Observations,
    /// The policy's outcome.
    pub(crate) outcome: SyncOutcome,
    /// Evictions started at this pass.
    pub(crate) started: Vec<EvictionDecision>,
    /// Evictions the policy asked for but held back (see [`EvictionSync::may_start`]);
    /// decided again at a later pass.
    pub(crate) deferred: Vec<Deferred>,
    /// Evictions that ended since the previous pass.
    pub(crate) finished: Vec<FinishedEviction>,
    /// Kills the hot path carried out since the previous pass; their evictions started
    /// at this pass.
    pub(crate) hot_kills: Vec<HotKill>,
}

/// An eviction that ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FinishedEviction {
    pub(crate) decision: EvictionDecision,
    pub(crate) outcome: EvictionOutcome,
    pub(crate) attempts: u32,
    /// CLOCK_MONOTONIC ns when it ended.
    pub(crate) ended_ns: u64,
}

/// Runs the eviction policy at every synchronize and carries out its decisions.
pub(crate) struct EvictionSync {
    manager: EvictionManager,
    kubelet: KubeletConfig,
    ports: Ports,
    state: SharedState,
    /// Wakes the loop when an eviction ends.
    wakes: WakeSender,
    /// The pod stats the configured thresholds read.
    needs: StatsNeeds,
    /// Evictions under way.
    in_flight: Vec<EvictionDecision>,
    /// Memory evictions under way, or ended and not yet judged, with what they should free.
    effects: Vec<Effect>,
    /// Signals whose last eviction freed far less than its victim held: the policy time
    /// before which no other eviction for that signal starts (one per housekeeping
    /// interval), until the signal's thresholds are no longer met or an eviction helps.
    paced: std::collections::BTreeMap<Signal, Time>,
    /// Disk signals whose node-level reclaim removed dead containers without yet
    /// relieving the signal: the runtime deletes their writable layers in the background,
    /// so no eviction for that signal starts before this time (see [`pacing::RECLAIM_SETTLE`]);
    /// after it, one starts if a fresh observation still finds the threshold met. Set
    /// once per episode of pressure; cleared when the signal's thresholds are no longer
    /// met.
    settling: std::collections::BTreeMap<Signal, Time>,
    /// Ended evictions received after this pass's observation was taken: held for the
    /// next pass, so that the signal is observed afresh after the victim is gone.
    later: Vec<FinishedEviction>,
    /// The eviction settings, shared with the hot path's fresh pick.
    config: Arc<EvictionConfig>,
    /// The hot kill path, when it runs.
    hot: Option<Arc<HotPath>>,
    /// The parts of the observation that failed at the last pass ("nodefs", "pids", …).
    unavailable: std::collections::BTreeSet<String>,
    /// The PSI contention conditions, when the PSINodeCondition gate is on.
    contention: Option<crate::policy::contention::ContentionConditions>,
    finished_tx: mpsc::UnboundedSender<FinishedEviction>,
    finished_rx: mpsc::UnboundedReceiver<FinishedEviction>,
    /// The pre-kill hook, if configured.
    hook: Option<Arc<crate::config::agent::PreKillHookSettings>>,
    /// Shadow mode: decisions are reported, never carried out. Holds, per pod, when its
    /// last would-be eviction was reported (one report per housekeeping interval while
    /// the pressure lasts, as the kubelet's loop would have decided again).
    shadow: Option<std::collections::HashMap<String, Time>>,
    /// Memory relief, when on and supported here.
    relief: Option<relief::Relief>,
    /// The memory stall signal, when configured.
    stall: Option<crate::policy::stall::StallSettings>,
}

impl EvictionSync {
    pub(crate) fn new(
        kubelet: KubeletConfig,
        ports: Ports,
        state: SharedState,
        wakes: WakeSender,
    ) -> Self {
        let (finished_tx, finished_rx) = mpsc::unbounded_channel();
        let contention = kubelet.contention().map(|_| Default::default());
        EvictionSync {
            contention,
            needs: stats_needs(&kubelet),
            config: Arc::new(kubelet.eviction.clone()),
            manager: EvictionManager::new(kubelet.eviction.clone()),
            kubelet,
            ports,
            state,
            wakes,
            in_flight: Vec::new(),
            effects: Vec::new(),
            paced: std::collections::BTreeMap::new(),
            settling: std::collections::BTreeMap::new(),
            later: Vec::new(),
            hot: None,
            unavailable: std::collections::BTreeSet::new(),
            finished_tx,
            finished_rx,
            shadow: None,
            hook: None,
            relief: None,
            stall: None,
        }
    }

    /// Runs `hook` before each eviction a synchronize starts (see [`hook`]).
    pub(crate) fn with_pre_kill_hook(
        mut self,
        hook: Option<crate::config::agent::PreKillHookSettings>,
    ) -> Self {
        self.hook = hook.map(Arc::new);
        self
    }

    /// The memory stall signal (see [`crate::policy::stall`]): its soft threshold joins
    /// the configured ones, and every pass observes it from the pressure files.
    pub(crate) fn with_memory_stall(
        mut self,
        stall: Option<crate::policy::stall::StallSettings>,
    ) -> Self {
        if let Some(settings) = stall {
            let mut config = self.kubelet.eviction.clone();
            config.thresholds.push(settings.threshold());
            self.manager = EvictionManager::new(config.clone());
            self.config = Arc::new(config);
        }
        self.stall = stall;
        self
    }

    /// Shadow mode: every decision is made as usual and reported as the action it would
    /// have been (event, metric, log); nothing is evicted or reclaimed.
    pub(crate) fn shadow(mut self) -> Self {
        self.shadow = Some(Default::default());
        self
    }

    /// Arms `hot` after every pass with the pod a hard memory threshold would evict.
    pub(crate) fn with_hot_path(mut self, hot: Arc<HotPath>) -> Self {
        self.hot = Some(hot);
        self
    }

    /// When the decision will change with time alone (a grace period ends, a paced
    /// signal may evict again, or a reclaim's background release has had its time).
    pub(crate) fn next_deadline(&self, now: Time) -> Option<Time> {
        let paced = self
            .paced
            .values()
            .chain(self.settling.values())
            .copied()
            .filter(|at| *at > now)
            .min();
        [self.manager.next_grace_deadline(now), paced]
            .into_iter()
            .flatten()
            .min()
    }

    /// One pass on a fresh observation at `now`.
    /// `wakes`: the wakes this synchronize coalesced (a hot kill's crossing is stamped from
    /// them when its notifier carried no stamp of its own).
    pub(crate) async fn synchronize(
        &mut self,
        node: &NodeObservation,
        now: Time,
        wakes: &[Wake],
    ) -> EvictionPass {
        let finished = self.collect_finished(node.taken_at_ns);
        // A pod the hot path killed: its eviction is under way from now on (record,
        // events, cgroups), and it is no candidate for this pass.
        let mut hot_kills = self.book_fired_hot_kills(wakes, now);
        if let Some(hot) = &self.hot {
            let mut state = self.state.lock();
            state.metrics.hot_watch_cpu_seconds = hot.watch_cpu().as_secs_f64();
            state.metrics.hot_watch_rehearsals = hot.rehearsals();
        }
        self.report_unavailable(node);
        let fs_layout = fs_layout(node);
        let needs = StatsNeeds {
            disk: self.needs.disk && self.disk_threshold_near(node, fs_layout, now),
            ..self.needs
        };
        // One blocking section for every read of the pass: each hands the runtime's
        // other tasks to another thread and back. The pass's one memory ranking, on the
        // pods' stats as read: it names whose containers to read, and arms the hot path.
        let (pods, memory_ranking) = blocking(|| {
            let mut pods = self
                .ports
                .pods
                .active_pods(needs)
                .into_iter()
                .filter(|p| !self.in_flight.iter().any(|e| e.pod_key == p.pod.key()))
                .collect::<Vec<_>>();
            let ranking = self
                .ranks_memory()
                .then(|| reads::memory_ranking(&pods, CANDIDATES));
            if self.needs.container_memory {
                self.add_victims_container_memory(
                    &mut pods,
                    ranking.as_deref().unwrap_or_default(),
                );
            }
            (pods, ranking.unwrap_or_default())
        });
        self.show_pod_memory(&pods);
        let stats = node_stats(node, &self.kubelet, &pods, now);
        let mut observations = make_signal_observations(&stats, fs_layout);
        self.observe_stall(&mut observations, node, now);
        let input = SyncInput {
            observations,
            pods,
            fs_layout,
        };
        let outcome = match self.manager.decide(&input, now) {
            Step::Done(outcome) => outcome,
            Step::Reclaim(pending) => {
                let signal = pending.signal();
                let freed = self.reclaim(pending.resource(), signal).await;
                self.state.record_decision(record::reclaim(
                    pending.resource(),
                    signal,
                    freed,
                    self.shadow.is_some(),
                    &input.observations,
                ));
                let outcome = self.manager.after_reclaim(pending, &input, freed);
                if freed.released_later && !outcome.evictions.is_empty() {
                    self.settle(signal, now);
                }
                outcome
            }
        };
        self.ports
            .conditions
            .conditions_changed(&outcome.conditions);
        self.publish(&input.observations, &outcome);
        if let (Some(conditions), Some(thresholds)) =
            (&mut self.contention, self.kubelet.contention())
        {
            super::contention::track(conditions, thresholds, &node.pressure, &self.state);
        }
        self.judge_effects(&finished, &input.observations, &outcome, now);
        // A kill the hot path made while this pass read and decided came after the pass's
        // observations, which still show the pressure it answers (the victim's memory is
        // freed over the next milliseconds): booked now, it counts as the eviction under
        // way, and no second pod is evicted for that pressure.
        let late_kills = self.book_fired_hot_kills(wakes, now);
        hot_kills.extend(late_kills);
        // One at a time: each eviction started here counts as under way for the next.
        let mut started = Vec::new();
        let mut deferred = Vec::new();
        let seen = record::Seen {
            observations: &input.observations,
            outcome: &outcome,
            pods: &input.pods,
            taken_at_ns: node.taken_at_ns,
        };
        for decision in outcome.evictions.iter().cloned() {
            if self.shadow.is_some() {
                if self.would_evict(&decision, node, now) {
                    self.state
                        .record_decision(seen.decision("evict", true, &decision));
                }
                continue;
            }
            if let Some(wait) = self.may_start(&decision, now) {
                deferred.push(Deferred { decision, wait });
                continue;
            }
            self.note_effect(&decision, &input);
            if let Some(at) = decision.signal.and_then(|s| self.paced.get_mut(&s)) {
                *at = now + self.kubelet.housekeeping_interval;
            }
            self.state
                .record_decision(seen.decision("evict", false, &decision));
            let notice = self.hook.is_some().then(|| seen.notice(&decision));
            self.start(decision.clone(), notice);
            started.push(decision);
        }
        if started.iter().any(|d| d.signal.is_some()) {
            self.state
                .record_stats_age(node.taken_at_ns, &outcome.thresholds_met);
        }
        for deferred in &deferred {
            tracing::debug!(
                pod = %deferred.decision.pod_key,
                "eviction deferred: {}",
                deferred.wait.as_str()
            );
        }
        let hot_victim = self.arm_hot_path(&input, &memory_ranking);
        let observations = input.observations.clone();
        self.publish_ranking(input, hot_victim);
        EvictionPass {
            observations,
            outcome,
            started,
            deferred,
            finished,
            hot_kills,
        }
    }

    /// Adds the memory stall signal's observation, when configured: the higher of the
    /// pods cgroup's and the node's PSI `full` avg10, counted only while memory is short.
    fn observe_stall(&self, observations: &mut Observations, node: &NodeObservation, now: Time) {
        let Some(stall) = &self.stall else {
            return;
        };
        let pressure = &node.pressure;
        let full = [pressure.memory, pressure.pods_memory]
            .into_iter()
            .flatten()
            .filter_map(|psi| psi.full.map(|line| line.avg10))
            .fold(0.0f64, f64::max);
        let observed = crate::policy::stall::observation(
            stall,
            &self.manager.config().thresholds,
            observations,
            full / 100.0,
            now,
        );
        observations.insert(Signal::MemoryStall, observed);
    }

    /// Whether the policy asks for pods' disk usage this pass, on the node's filesystem
    /// stats alone (see [`reads::disk_threshold_near`]).
    fn disk_threshold_near(&self, node: &NodeObservation, fs_layout: FsLayout, now: Time) -> bool {
        let node_only = self.node_observations(node, fs_layout, now);
        reads::disk_threshold_near(&self.kubelet.eviction.thresholds, &node_only)
    }

    /// The signals as the node's own stats give them, before any pod's stats are read.
    fn node_observations(
        &self,
        node: &NodeObservation,
        fs_layout: FsLayout,
        now: Time,
    ) -> Observations {
        make_signal_observations(&node_stats(node, &self.kubelet, &[], now), fs_layout)
    }

    /// Says once when a part of the observation starts failing (its signals are off) and
    /// once when it reads again, as a Warning and a Normal event (events are logged too).
    fn report_unavailable(&mut self, node: &NodeObservation) {
        let now: std::collections::BTreeSet<String> = node
            .failed
            .iter()
            .map(|f| f.split(':').next().unwrap_or(f).to_string())
            .collect();
        for failure in &node.failed {
            let part = failure.split(':').next().unwrap_or(failure);
            if !self.unavailable.contains(part) {
                self.state.event(
                    crate::events::EventReason::SignalUnavailable,
                    "node",
                    format!(
                        "{failure}: its signals are off until it reads again; the other signals keep acting"
                    ),
                );
            }
        }
        for part in self.unavailable.difference(&now) {
            self.state.event(
                crate::events::EventReason::SignalRestored,
                "node",
                format!("{part} reads again; its signals are back"),
            );
        }
        self.unavailable = now;
    }

    /// Hands each pod's working set, as this pass read it, to the API's view of the pods.
    fn show_pod_memory(&self, pods: &[PodWithStats]) {
        let read: std::collections::HashMap<&str, Option<u64>> = pods
            .iter()
            .map(|p| {
                (
                    p.pod.metadata.uid.as_str(),
                    p.stats.memory_working_set_bytes,
                )
            })
            .collect();
        let mut state = self.state.lock();
        for view in &mut state.pods {
            if let Some(memory) = read.get(view.uid.as_str()) {
                view.memory_working_set_bytes = *memory;
            }
        }
    }

    /// Books one kill of the hot path, all in one place: its event, its crossing→kill
    /// metric, and its eviction (record, the judging of its effect, the cleanup awaited),
    /// which from now on runs as any eviction does. A pod already being evicted keeps
    /// that eviction.
    fn book_hot_kill(&mut self, kill: &HotKill, wakes: &[Wake], now: Time) {
        self.state.record_decision(record::hot_kill(kill));
        if kill.shadow {
            self.book_would_kill(kill, now);
            return;
        }
        self.state.event(
            crate::events::EventReason::HotKill,
            &kill.decision.pod_key,
            hot_kill_message(kill),
        );
        self.state.lock().metrics.observe_hot_kill(
            kill.source,
            kill.detected_ns,
            kill.killed_ns,
            wakes,
        );
        if self
            .in_flight
            .iter()
            .any(|e| e.pod_key == kill.decision.pod_key)
        {
            return;
        }
        if let (Some(signal), Some(available)) = (kill.decision.signal, kill.signal_available) {
            self.effects.push(Effect {
                pod_key: kill.decision.pod_key.clone(),
                signal,
                available_before: available,
                victim_bytes: kill.victim_working_set_bytes,
            });
        }
        // The kill is written: the hook has nothing to come before.
        self.start(kill.decision.clone(), None);
    }

    /// Takes the kills the hot path made since it was last asked and books each as an
    /// eviction under way (see [`EvictionSync::book_hot_kill`]).
    fn book_fired_hot_kills(&mut self, wakes: &[Wake], now: Time) -> Vec<HotKill> {
        let kills = self
            .hot
            .as_ref()
            .map(|hot| hot.take_fired())
            .unwrap_or_default();
        for kill in &kills {
            self.book_hot_kill(kill, wakes, now);
        }
        kills
    }

    /// Whether the pass ranks pods by memory: a memory threshold is configured (the
    /// ranking names whose containers to read) or the hot path is on (its candidates).
    fn ranks_memory(&self) -> bool {
        self.hot.is_some()
            || self
                .kubelet
                .eviction
                .thresholds
                .iter()
                .any(|t| t.signal.is_memory())
    }

    /// Reads the containers' memory of the pod the policy names (see
    /// [`reads::container_memory_read`]) on the pass's memory `ranking`: reading them for
    /// one pod instead of every pod keeps a pass's cost from growing with containers.
    fn add_victims_container_memory(&self, pods: &mut [PodWithStats], ranking: &[usize]) {
        let victim = reads::container_memory_read(&self.kubelet.eviction.thresholds, ranking);
        if let Some(pod) = victim.and_then(|index| pods.get_mut(index))
            && pod
                .stats
                .containers
                .iter()
                .all(|c| c.memory_working_set_bytes.is_none())
        {
            self.ports.pods.add_container_memory(pod);
        }
    }

    /// Arms the hot path with the pods a hard memory threshold would pick from now, on
    /// the stats just read (it picks among them afresh at the crossing); disarms it while
    /// an immediate eviction runs (that one answers the pressure), while a memory signal
    /// is paced (its evictions wait for the housekeeping interval, which the hot path
    /// cannot keep), or when no hard memory threshold kills at once.
    /// `ranking` is the pass's memory ranking of `input.pods`.
    /// Returns the key of the pod the ranking puts first now.
    fn arm_hot_path(&self, input: &SyncInput, ranking: &[usize]) -> Option<String> {
        let Some(hot) = &self.hot else { return None };
        let immediate_under_way = self.in_flight.iter().any(|e| e.immediate);
        let paced = self.paced.keys().any(|s| s.is_memory());
        let victim = if immediate_under_way {
            Err(Unarmed::EvictionUnderWay)
        } else if paced {
            Err(Unarmed::Paced)
        } else {
            self.manager
                .prospective_hot_eviction(input, ranking)
                .filter(|d| d.grace_period_seconds == 0)
                .ok_or(Unarmed::NoVictim)
        };
        let victim_key = victim.as_ref().ok().map(|d| d.pod_key.clone());
        let candidates = victim.map(|_| Candidates {
            pods: ranking
                .iter()
                .filter_map(|&i| input.pods.get(i))
                .cloned()
                .collect(),
            fs_layout: input.fs_layout,
            config: self.config.clone(),
        });
        let killer = self.ports.killer.clone();
        hot.arm(candidates, |pod| killer.kill_switch(pod));
        victim_key
    }

    /// Keeps this pass's inputs for `monitor explain`, which ranks on them with the
    /// policy's own functions: the API reads no stats of its own.
    fn publish_ranking(&self, input: SyncInput, hot_victim: Option<String>) {
        let snapshot = Arc::new(crate::state::RankingSnapshot {
            input,
            thresholds: self.manager.config().thresholds.clone(),
            hot_path: self.hot.is_some(),
            hot_victim,
        });
        let previous = self.state.lock().ranking.replace(snapshot);
        // Freed here, after the lock is released: a thousand pods' specs take a while.
        drop(previous);
    }

    /// Node-level reclaim on a blocking thread: it deletes files, and nothing of the
    /// runtime stays locked meanwhile. In shadow mode only reported.
    async fn reclaim(
        &self,
        resource: crate::policy::types::Resource,
        signal: Signal,
    ) -> ReclaimResult {
        if self.shadow.is_some() {
            self.state.event(
                crate::events::EventReason::WouldReclaim,
                "node",
                format!(
                    "shadow: would reclaim {} at node level for {} (dead containers, unused images)",
                    resource.as_str(),
                    signal.as_str()
                ),
            );
            self.state
                .lock()
                .metrics
                .count_shadow_action("reclaim", signal.as_str());
            return ReclaimResult::default();
        }
        let port = self.ports.reclaim.clone();
        match tokio::task::spawn_blocking(move || port.reclaim(resource, signal)).await {
            Ok(freed) => freed,
            Err(err) => {
                tracing::error!("node-level reclaim for {}: {err}", signal.as_str());
                ReclaimResult::default()
            }
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
                        value: format_value(t.value),
                        quantity: t.quantity(observed.capacity),
                        kind: if t.is_hard() { "hard" } else { "soft" }.to_string(),
                        grace_period: (!t.is_hard()).then(|| format_go_duration(t.grace_period)),
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

/// The process runtime keeps no images: with an imagefs path configured, it is a
/// dedicated image filesystem in the kubelet's sense.
fn fs_layout(node: &NodeObservation) -> FsLayout {
    if node.dedicated_imagefs {
        FsLayout::DedicatedImageFs
    } else {
        FsLayout::Shared
    }
}

/// Runs `read`, which reads kernel files and may block, without stalling the runtime's
/// other tasks: on a multi-threaded runtime the worker first hands them to another worker.
/// (The loop's tests run on a single thread, where there is no other worker to hand to.)
pub(crate) fn blocking<T>(read: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(read),
        _ => read(),
    }
}

/// Bytes as a signed Kubernetes quantity for messages ("-3Mi" when the signal fell).
fn format_value_bytes(bytes: i64) -> String {
    let quantity = crate::policy::quantity::Quantity::from_units(bytes.saturating_abs());
    if bytes < 0 {
        format!("-{quantity}")
    } else {
        quantity.to_string()
    }
}

/// The pod stats the policy reads under `kubelet`'s thresholds: process counts only for a
/// pid.available threshold, disk usage for disk thresholds (every pod's, while one is met
/// or near) and local storage limits (the limited pods'), containers' memory for memory
/// thresholds (the eviction message names containers).
pub(crate) fn stats_needs(kubelet: &KubeletConfig) -> StatsNeeds {
    let eviction = &kubelet.eviction;
    let any = |wanted: fn(Signal) -> bool| eviction.thresholds.iter().any(|t| wanted(t.signal));
    StatsNeeds {
        processes: any(|s| s == Signal::PidAvailable),
        disk: any(reads::is_disk),
        local_storage_limits: eviction.local_storage_capacity_isolation,
        container_memory: any(Signal::is_memory),
    }
}

/// One line for logs and the API's last synchronize.
pub(crate) fn summarize(pass: &EvictionPass) -> String {
    let observations = &pass.observations;
    let mib = |b: i64| b / (1 << 20);
    let mut parts = Vec::new();
    for signal in [Signal::MemoryAvailable, Signal::AllocatableMemoryAvailable] {
        if let Some(o) = observations.get(&signal) {
            parts.push(format!("{}={}Mi", signal.as_str(), mib(o.available)));
        }
    }
    let outcome = &pass.outcome;
    for met in &outcome.thresholds_met {
        parts.push(format!(
            "threshold met: {}{}",
            threshold_text(&met.threshold),
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
    for eviction in &pass.started {
        parts.push(format!(
            "evict {} (grace {} s): {}",
            eviction.pod_key, eviction.grace_period_seconds, eviction.message
        ));
    }
    for deferred in &pass.deferred {
        parts.push(format!(
            "deferred eviction of {}: {}",
            deferred.decision.pod_key,
            deferred.wait.as_str()
        ));
    }
    for kill in &pass.hot_kills {
        parts.push(format!(
            "hot path {} {} ({} µs after the notifier)",
            if kill.shadow {
                "would have killed (shadow)"
            } else {
                "killed"
            },
            kill.decision.pod_key,
            kill.killed_ns.saturating_sub(kill.detected_ns) / 1000
        ));
    }
    for done in &pass.finished {
        parts.push(format!(
            "eviction of {} ended: {}",
            done.decision.pod_key, done.outcome
        ));
    }
    if parts.is_empty() {
        "nothing observed".to_string()
    } else {
        parts.join("; ")
    }
}

/// A threshold as the log, the decision record and the pre-kill hook write it:
/// `memory.available<500Mi`.
pub(super) fn threshold_text(threshold: &crate::policy::signal::Threshold) -> String {
    format!(
        "{}<{}",
        threshold.signal.as_str(),
        format_value(threshold.value)
    )
}

/// A hot kill in words (its event): the crossing, the kill (or in shadow mode the kill
/// it would have been) and its time, the victim as read then, the kubelet's message.
pub(super) fn hot_kill_message(kill: &HotKill) -> String {
    let us = kill.killed_ns.saturating_sub(kill.detected_ns) / 1000;
    let act = if kill.shadow {
        format!(
            "would have killed through {}, decided {us} µs after the crossing was told",
            kill.path.display()
        )
    } else {
        format!("killed through {} in {us} µs", kill.path.display())
    };
    format!(
        "{}hard memory threshold crossed ({}): working set {} at a level of {}; {act}, the pod's working set read then {}. {}",
        if kill.shadow { "shadow: " } else { "" },
        kill.source,
        kill.working_set_bytes,
        kill.level_bytes,
        kill.victim_working_set_bytes,
        kill.decision.message.trim_end()
    )
}

mod carry;
pub(crate) mod hook;
mod pacing;
mod record;
pub(crate) mod relief;
mod shadow;

#[cfg(test)]
pub(crate) use carry::MAX_KILL_ATTEMPTS;
pub(crate) use pacing::Deferred;
use pacing::Effect;
#[cfg(test)]
pub(crate) use pacing::{RECLAIM_SETTLE, Wait};

#[cfg(test)]
mod tests;
