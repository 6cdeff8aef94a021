//! The simulation loop (docs/simulate.md, "Semantics"): each step is one eviction
//! synchronize at `at`, then admission of that step's pods, then periodic image GC.
use std::collections::BTreeMap;
use std::time::Duration;

use super::admit::{AdmissionDecision, admit_pods};
use super::config::SimulationConfig;
use super::images::ImageModel;
use super::node::Node;
use super::observe::{
    PodsCgroupLimit, fs_layout, make_signal_observations, summary_memory_capacity,
};
use super::output::{
    AdmissionOutput, EvictedOutput, NodeReclaimOutput, ReliefOutput, ReliefPodOutput, StepOutput,
    ThresholdMetOutput,
};
use super::reclaim::StepReclaimer;
use super::scenario::{Scenario, Step};
use super::stats::pods_with_stats;
use super::summary::Summary;
use crate::config::kubelet::{HUGEPAGE_AWARE_EVICTION, KubeletConfig, format_go_duration};
use crate::policy::condition::eviction_condition;
use crate::policy::contention::ContentionConditions;
use crate::policy::eviction::{EvictionDecision, EvictionManager, SyncInput, SyncOutcome};
use crate::policy::pod::Pod;
use crate::policy::quantity::Quantity;
use crate::policy::relief::{self, ReliefCandidate, ReliefSettings};
use crate::policy::signal::{Observations, Signal, format_value};

/// The state carried from step to step.
pub struct Simulation {
    config: KubeletConfig,
    manager: EvictionManager,
    dedicated_image_fs: Option<bool>,
    node: Option<Node>,
    pods: Vec<Pod>,
    summary: Summary,
    images: Option<ImageModel>,
    /// The PSI contention conditions, with the PSINodeCondition gate on.
    contention: Option<ContentionConditions>,
    /// Memory relief, when on.
    relief: Option<ReliefSettings>,
    /// Page cache each pod can still give relief ("namespace/name" to bytes).
    reclaimable: BTreeMap<String, u64>,
}

impl Simulation {
    pub(crate) fn new(
        config: KubeletConfig,
        relief: Option<ReliefSettings>,
        dedicated_image_fs: Option<bool>,
    ) -> Self {
        let manager = EvictionManager::new(config.eviction.clone());
        let contention = config.contention().map(|_| ContentionConditions::default());
        Simulation {
            contention,
            config,
            manager,
            dedicated_image_fs,
            node: None,
            pods: Vec::new(),
            summary: Summary::default(),
            images: None,
            relief,
            reclaimable: BTreeMap::new(),
        }
    }

    /// Runs every step of a scenario, returning one output per step.
    pub fn run(config: SimulationConfig, scenario: &Scenario) -> Vec<StepOutput> {
        let mut simulation =
            Simulation::new(config.kubelet, config.relief, scenario.dedicated_image_fs);
        scenario
            .steps
            .iter()
            .map(|step| simulation.step(step))
            .collect()
    }

    /// One step: carry-over, synchronize, evictions, admission, image GC.
    pub(crate) fn step(&mut self, step: &Step) -> StepOutput {
        let now = step.at;
        if let Some(node) = &step.node {
            self.node = Some(node.clone());
        }
        if let Some(pods) = &step.pods {
            self.pods = pods.clone();
        }
        if let Some(summary) = &step.summary {
            self.summary = summary.clone();
        }
        if let Some(images) = &step.images {
            let model = self
                .images
                .get_or_insert_with(|| ImageModel::new(&self.config.image_gc));
            model.set_images(images.clone());
        }
        let layout = fs_layout(
            &self.summary,
            step.dedicated_image_fs.or(self.dedicated_image_fs),
        );
        if let Some(reclaimable) = &step.reclaimable {
            self.reclaimable = reclaimable.clone();
        }
        let mut observations =
            make_signal_observations(&self.summary, self.pods_cgroup_limit(), layout, now);
        // 0. Memory relief, before the eviction pass decides.
        let relief = self.relieve(&mut observations);
        if let Some(images) = self.images.as_mut() {
            images.detect(&self.pods, now);
        }

        // 1. The eviction pass.
        let input = SyncInput {
            observations: observations.clone(),
            pods: pods_with_stats(&self.pods, &self.summary),
            fs_layout: layout,
        };
        let mut reclaimer = StepReclaimer::new(self.images.as_mut(), &step.reclaim, layout, now);
        let outcome = self
            .manager
            .synchronize_with(&input, now, |resource, signal| {
                reclaimer.reclaim(resource, signal)
            });
        let mut images_removed = std::mem::take(&mut reclaimer.removed);
        let freed_on_image_fs = if images_removed.is_empty() {
            0
        } else {
            outcome.node_reclaim.freed_bytes
        };
        self.pods
            .retain(|pod| !outcome.evictions.iter().any(|e| e.pod_key == pod.key()));

        // 2. Admission against the conditions that pass produced.
        let allocatable = self.node_allocatable();
        let conditions = self.manager.conditions();
        let admission = admit_pods(
            &step.admit,
            &mut self.pods,
            &conditions,
            &allocatable,
            self.node.as_ref(),
        );

        // 3. Periodic image GC, on the image filesystem as node-level reclaim left it.
        if let Some(images) = self.images.as_mut() {
            let image_fs = if layout.has_imagefs() {
                Signal::ImageFsAvailable
            } else {
                Signal::NodeFsAvailable
            };
            if let Some(obs) = observations.get(&image_fs) {
                let available = obs
                    .available
                    .saturating_add(i64::try_from(freed_on_image_fs).unwrap_or(i64::MAX));
                let (ids, _) =
                    images.garbage_collect(obs.capacity, available.min(obs.capacity), now);
                images_removed.extend(ids);
            }
        }
        images_removed.sort();
        images_removed.dedup();

        // 4. The PSI contention conditions, from the summary's stall averages.
        let mut out = output(now, &outcome, &admission, images_removed);
        out.memory_relief = relief;
        if let (Some(conditions), Some(thresholds)) =
            (&mut self.contention, self.config.contention())
        {
            let node = &self.summary.node;
            conditions.update(thresholds, |c| node.stall_averages(c));
            out.contention_conditions = conditions.reported();
        }
        out
    }

    /// Memory relief as the agent runs it (see [`crate::policy::relief`]): the pods with
    /// `reclaimable` page cache give what the plan asks, at most what they have; what
    /// they gave is credited to both memory signals (the pods' working set is part of
    /// each) and is gone for later steps.
    fn relieve(&mut self, observations: &mut Observations) -> Option<ReliefOutput> {
        let settings = self.relief.as_ref()?;
        let need = relief::need(settings, &self.config.eviction.thresholds, observations)?;
        let candidates: Vec<ReliefCandidate> = self
            .pods
            .iter()
            .filter_map(|pod| {
                let key = pod.key();
                let file_bytes = *self.reclaimable.get(&key)?;
                Some(ReliefCandidate {
                    pod_key: key,
                    qos: pod.qos_class(),
                    file_bytes,
                })
            })
            .collect();
        let plan = relief::plan(need, &candidates)?;
        let mut pods = Vec::new();
        let mut freed = 0u64;
        for request in &plan.requests {
            let left = self.reclaimable.entry(request.pod_key.clone()).or_default();
            let given = request.bytes.min(*left);
            *left -= given;
            freed += given;
            pods.push(ReliefPodOutput {
                pod: request.pod_key.clone(),
                qos: request.qos.as_str().to_string(),
                bytes: given,
            });
        }
        let credit = i64::try_from(freed).unwrap_or(i64::MAX);
        for signal in [Signal::MemoryAvailable, Signal::AllocatableMemoryAvailable] {
            if let Some(observed) = observations.get_mut(&signal) {
                observed.available = observed
                    .available
                    .saturating_add(credit)
                    .min(observed.capacity);
            }
        }
        Some(ReliefOutput {
            signal: need.signal.as_str().to_string(),
            observed: need.available,
            relief_level: need.relief_level,
            wanted_bytes: need.wanted_bytes,
            freed_bytes: freed,
            pods,
        })
    }

    /// The pods cgroup's memory limit: node capacity, less system- and kube-reserved when
    /// node allocatable is enforced on pods (kubelet: enforceNodeAllocatableCgroups; the
    /// eviction reservation is NOT part of the cgroup limit). Capacity comes from the Node
    /// object, else from the summary (available + working set).
    fn pods_cgroup_limit(&self) -> PodsCgroupLimit {
        let capacity = self
            .node
            .as_ref()
            .and_then(|n| n.capacity("memory"))
            .map(Quantity::value)
            .or_else(|| summary_memory_capacity(&self.summary));
        let Some(capacity) = capacity else {
            return PodsCgroupLimit::default();
        };
        let mut limit = capacity;
        if self
            .config
            .enforce_node_allocatable
            .iter()
            .any(|e| e == "pods")
        {
            for reserved in [&self.config.system_reserved, &self.config.kube_reserved] {
                if let Some(q) = reserved.get("memory") {
                    limit = limit.saturating_sub(q.value());
                }
            }
        }
        PodsCgroupLimit {
            memory_bytes: Some(limit.max(0)),
        }
    }

    /// Node allocatable for admission: the Node object's `status.allocatable` when given,
    /// else computed from its capacity (or the summary's memory capacity) like the kubelet:
    /// capacity − system-reserved − kube-reserved − hard eviction threshold, and for
    /// memory less every `hugepages-<size>` capacity (nodestatus MachineInfo). A memory
    /// capacity taken from a summary is available + working set: with
    /// HugepageAwareEviction the kubelet's summary already left the hugepages out of it,
    /// so they are not taken off twice.
    fn node_allocatable(&self) -> BTreeMap<String, Quantity> {
        if let Some(node) = &self.node
            && !node.status.allocatable.is_empty()
        {
            return node.status.allocatable.clone();
        }
        let mut capacity = self
            .node
            .as_ref()
            .map(|n| n.status.capacity.clone())
            .unwrap_or_default();
        let mut hugepages = capacity
            .iter()
            .filter(|(resource, _)| resource.starts_with("hugepages-"))
            .fold(0i64, |sum, (_, q)| sum.saturating_add(q.value()));
        if !capacity.contains_key("memory")
            && let Some(bytes) = summary_memory_capacity(&self.summary)
        {
            capacity.insert("memory".into(), Quantity::from_units(bytes));
            if self.config.feature_gate(HUGEPAGE_AWARE_EVICTION) {
                hugepages = 0;
            }
        }
        if !capacity.contains_key("pods") {
            capacity.insert("pods".into(), Quantity::from_units(self.config.max_pods));
        }
        capacity
            .iter()
            .map(|(resource, cap)| {
                let value = if resource == "cpu" {
                    // CPU is reserved in millicores ("500m"); nothing else is evicted on.
                    // Reservations past i64 (two of "9E") leave nothing, not an overflow.
                    let reserved = [&self.config.system_reserved, &self.config.kube_reserved]
                        .iter()
                        .filter_map(|m| m.get("cpu"))
                        .fold(0i64, |sum, q| sum.saturating_add(q.milli_value()));
                    Quantity::from_milli(cap.milli_value().saturating_sub(reserved).max(0))
                } else if resource == "memory" {
                    Quantity::from_units(self.config.allocatable_memory(cap.value(), hugepages))
                } else {
                    Quantity::from_units(self.config.allocatable(resource, cap.value()))
                };
                (resource.clone(), value)
            })
            .collect()
    }
}

fn output(
    at: Duration,
    outcome: &SyncOutcome,
    admission: &AdmissionDecision,
    images_removed: Vec<String>,
) -> StepOutput {
    let mut thresholds_met: Vec<ThresholdMetOutput> = outcome
        .thresholds_met
        .iter()
        .map(|met| ThresholdMetOutput {
            signal: met.threshold.signal.as_str().to_string(),
            operator: "LessThan".to_string(),
            value: format_value(met.threshold.value),
            grace_period: format_go_duration(met.threshold.grace_period),
            observed: met.observed.available,
            min_reclaim: met.threshold.min_reclaim.map(format_value),
            grace_period_met: met.grace_period_met,
        })
        .collect();
    // Deterministic order: by signal, hard before soft.
    thresholds_met.sort_by(|a, b| {
        (
            signal_rank(&a.signal),
            a.grace_period != "0s",
            &a.grace_period,
        )
            .cmp(&(
                signal_rank(&b.signal),
                b.grace_period != "0s",
                &b.grace_period,
            ))
    });
    let mut conditions = outcome.conditions.clone();
    conditions.sort();
    let evicted_all: Vec<EvictedOutput> = outcome.evictions.iter().map(evicted).collect();
    StepOutput {
        at: format_go_duration(at),
        thresholds_met,
        conditions: conditions.iter().map(|c| c.as_str().to_string()).collect(),
        starved_resources: outcome
            .starved_resources
            .iter()
            .map(|r| r.as_str().to_string())
            .collect(),
        node_reclaim: NodeReclaimOutput {
            attempted: outcome.node_reclaim.attempted,
            freed_bytes: outcome.node_reclaim.freed_bytes,
            sufficient: outcome.node_reclaim.sufficient,
        },
        ranking: outcome.ranking.clone(),
        evicted: evicted_all.first().cloned(),
        evicted_all,
        admission: admission
            .results
            .iter()
            .map(|r| AdmissionOutput {
                pod: r.pod.clone(),
                admitted: r.admitted,
                reason: r.reason.clone(),
                message: r.message.clone(),
            })
            .collect(),
        preempted: admission.preempted.clone(),
        images_removed,
        contention_conditions: Vec::new(),
        memory_relief: None,
    }
}

/// Signals in the kubelet's documentation order, so output is stable and readable.
fn signal_rank(name: &str) -> usize {
    Signal::ALL
        .iter()
        .position(|s| s.as_str() == name)
        .unwrap_or(usize::MAX)
}

fn evicted(decision: &EvictionDecision) -> EvictedOutput {
    EvictedOutput {
        pod: decision.pod_key.clone(),
        signal: decision.signal.map(|s| s.as_str().to_string()),
        grace_period_seconds: decision.grace_period_seconds,
        message: decision.message.clone(),
        // No wall clock in a simulation: the transition time stays unset (null).
        conditions: eviction_condition(decision, None).into_iter().collect(),
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
