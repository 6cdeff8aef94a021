//! Memory relief: node-level reclaim for memory, which the kubelet does not have (its
//! node-level reclaim frees disk only). Before a memory signal reaches its threshold, at a
//! relief level a margin above it, the agent asks the kernel to reclaim the pods' page
//! cache (`memory.reclaim`, cgroup v2) instead of waiting for the threshold and evicting a
//! pod. This module decides how much to ask of whom; the agent does the writes, in bounded
//! steps, and stops early when the pods' memory stalls show the reclaim hurts.
//!
//! The rules:
//! - a signal qualifies when its available amount is below its relief level: the highest of
//!   its thresholds plus [`ReliefSettings::margin`];
//! - a hard threshold met is answered by eviction as before: relief never delays it (the
//!   hot path has usually killed already), so such a signal gets no relief;
//! - the amount asked is what brings the signal back to its relief level, plus a quarter
//!   of the margin so that relief does not start again at the next charge;
//! - BestEffort pods give first, then Burstable pods; Guaranteed pods never: a pod that
//!   asked for its memory keeps its page cache. Within a tier, each pod gives in proportion
//!   to its file pages, never more than it holds.
use super::quantity::QuantityOrPercent;
use super::signal::{Observations, Signal, Threshold};
use super::threshold::threshold_met;
use super::types::QosClass;

/// How memory relief behaves (`monitor.memoryRelief`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReliefSettings {
    /// How far above a memory signal's highest threshold relief starts.
    pub margin: QuantityOrPercent,
    /// The most one write to a pod's `memory.reclaim` asks for.
    pub step_bytes: u64,
    /// The most memory stall (PSI `full` share of the time a step took, of the pod's
    /// `memory.pressure`) a step may cause; past it, relief stops for this pass.
    pub max_stall: f64,
}

/// The default margin: 5 % of the signal's capacity above its highest threshold.
pub const DEFAULT_MARGIN: f64 = 0.05;
/// The default step: 32 MiB per write.
pub const DEFAULT_STEP_BYTES: u64 = 32 << 20;
/// The default stall bound: 10 % of a step's time with every task of the pod stalled.
pub const DEFAULT_MAX_STALL: f64 = 0.10;

impl Default for ReliefSettings {
    fn default() -> Self {
        ReliefSettings {
            margin: QuantityOrPercent::Percent(DEFAULT_MARGIN),
            step_bytes: DEFAULT_STEP_BYTES,
            max_stall: DEFAULT_MAX_STALL,
        }
    }
}

/// A pod relief may ask to give back page cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReliefCandidate {
    pub pod_key: String,
    pub qos: QosClass,
    /// The pod's file pages (`memory.stat` `file`): what reclaim can take without swap.
    pub file_bytes: u64,
}

/// What to ask of one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReliefRequest {
    pub pod_key: String,
    pub qos: QosClass,
    pub bytes: u64,
}

/// A memory signal below its relief level, and what would bring it back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReliefNeed {
    pub signal: Signal,
    /// The signal's available amount when the pass was planned.
    pub available: i64,
    /// The highest threshold of the signal, as an amount.
    pub threshold: i64,
    /// The level below which relief starts: `threshold + margin`.
    pub relief_level: i64,
    /// What the pass wants freed in all.
    pub wanted_bytes: u64,
}

/// What one relief pass asks for, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct ReliefPlan {
    pub need: ReliefNeed,
    /// The pods to ask, in the order to ask them (BestEffort first).
    pub requests: Vec<ReliefRequest>,
}

impl ReliefPlan {
    /// What the requests add up to (less than wanted when the pods hold too little).
    pub fn requested_bytes(&self) -> u64 {
        self.requests.iter().map(|r| r.bytes).sum()
    }
}

/// The relief level of `signal` (its highest threshold and that plus the margin, as
/// amounts), or `None` when it has no threshold.
pub fn relief_level(
    thresholds: &[Threshold],
    signal: Signal,
    capacity: i64,
    margin: QuantityOrPercent,
) -> Option<(i64, i64)> {
    let highest = thresholds
        .iter()
        .filter(|t| t.signal == signal)
        .map(|t| t.quantity(capacity))
        .max()?;
    Some((
        highest,
        highest.saturating_add(margin.resolve(capacity).max(0)),
    ))
}

/// The memory signal to relieve in `observations`, or `None` when none is below its
/// relief level (or the one that is has a hard threshold met: eviction answers that). Of
/// two signals below their levels, the one furthest below is relieved.
pub fn need(
    settings: &ReliefSettings,
    thresholds: &[Threshold],
    observations: &Observations,
) -> Option<ReliefNeed> {
    let mut best: Option<ReliefNeed> = None;
    for signal in [Signal::MemoryAvailable, Signal::AllocatableMemoryAvailable] {
        let Some(observed) = observations.get(&signal) else {
            continue;
        };
        let Some((threshold, level)) =
            relief_level(thresholds, signal, observed.capacity, settings.margin)
        else {
            continue;
        };
        let hard_met = thresholds
            .iter()
            .any(|t| t.signal == signal && t.is_hard() && threshold_met(t, observations, false));
        if hard_met || observed.available >= level {
            continue;
        }
        let slack = (level - threshold) / 4;
        let wanted_bytes = u64::try_from(level - observed.available + slack).unwrap_or(0);
        if best.is_none_or(|b| wanted_bytes > b.wanted_bytes) {
            best = Some(ReliefNeed {
                signal,
                available: observed.available,
                threshold,
                relief_level: level,
                wanted_bytes,
            });
        }
    }
    best
}

/// Who gives what for `need`, or `None` when no pod has page cache to give.
pub fn plan(need: ReliefNeed, candidates: &[ReliefCandidate]) -> Option<ReliefPlan> {
    let requests = share_out(need.wanted_bytes, candidates);
    (!requests.is_empty()).then_some(ReliefPlan { need, requests })
}

/// `wanted` bytes shared out over the candidates: BestEffort first, then Burstable, each
/// tier in proportion to file pages (largest holders first), never Guaranteed.
fn share_out(wanted: u64, candidates: &[ReliefCandidate]) -> Vec<ReliefRequest> {
    let mut requests = Vec::new();
    let mut left = wanted;
    for tier in [QosClass::BestEffort, QosClass::Burstable] {
        if left == 0 {
            break;
        }
        let mut pods: Vec<&ReliefCandidate> = candidates
            .iter()
            .filter(|c| c.qos == tier && c.file_bytes > 0)
            .collect();
        pods.sort_by(|a, b| {
            b.file_bytes
                .cmp(&a.file_bytes)
                .then(a.pod_key.cmp(&b.pod_key))
        });
        let held: u64 = pods.iter().map(|c| c.file_bytes).sum();
        let take = left.min(held);
        let mut given = 0;
        for pod in pods {
            if given >= take {
                break;
            }
            // Rounded up, so the tier's shares add up to `take` at least.
            let share = (u128::from(take) * u128::from(pod.file_bytes)).div_ceil(u128::from(held));
            let bytes = u64::try_from(share)
                .unwrap_or(u64::MAX)
                .min(pod.file_bytes)
                .min(take - given);
            given += bytes;
            requests.push(ReliefRequest {
                pod_key: pod.pod_key.clone(),
                qos: tier,
                bytes,
            });
        }
        left -= given;
    }
    requests
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::quantity::Quantity;
    use crate::signal::SignalObservation;

    const MI: i64 = 1 << 20;

    fn observed(pairs: &[(Signal, i64)]) -> Observations {
        pairs
            .iter()
            .map(|&(signal, available)| {
                (
                    signal,
                    SignalObservation {
                        available,
                        capacity: 1000 * MI,
                        time: Duration::ZERO,
                    },
                )
            })
            .collect()
    }

    fn plan(
        settings: &ReliefSettings,
        thresholds: &[Threshold],
        observations: &Observations,
        candidates: &[ReliefCandidate],
    ) -> Option<ReliefPlan> {
        super::plan(need(settings, thresholds, observations)?, candidates)
    }

    fn pod(key: &str, qos: QosClass, file_mi: u64) -> ReliefCandidate {
        ReliefCandidate {
            pod_key: key.to_string(),
            qos,
            file_bytes: file_mi << 20,
        }
    }

    fn settings(margin_mi: i64) -> ReliefSettings {
        ReliefSettings {
            margin: QuantityOrPercent::Quantity(Quantity::from_units(margin_mi * MI)),
            ..ReliefSettings::default()
        }
    }

    fn hard(signal: Signal, mi: i64) -> Threshold {
        Threshold::hard(
            signal,
            QuantityOrPercent::Quantity(Quantity::from_units(mi * MI)),
        )
    }

    #[test]
    fn above_the_relief_level_nothing_is_asked() {
        let plan = plan(
            &settings(100),
            &[hard(Signal::MemoryAvailable, 100)],
            &observed(&[(Signal::MemoryAvailable, 200 * MI)]),
            &[pod("a", QosClass::BestEffort, 500)],
        );
        assert_eq!(plan, None);
    }

    #[test]
    fn below_it_besteffort_gives_first_and_guaranteed_never() {
        // Level 200 Mi, available 150 Mi: 50 Mi back to the level plus 25 Mi of slack.
        let plan = plan(
            &settings(100),
            &[hard(Signal::MemoryAvailable, 100)],
            &observed(&[(Signal::MemoryAvailable, 150 * MI)]),
            &[
                pod("g", QosClass::Guaranteed, 900),
                pod("bu", QosClass::Burstable, 900),
                pod("be1", QosClass::BestEffort, 30),
                pod("be2", QosClass::BestEffort, 10),
            ],
        )
        .expect("a plan");
        assert_eq!(plan.need.relief_level, 200 * MI);
        assert_eq!(plan.need.wanted_bytes, 75 << 20);
        let asked: Vec<(&str, u64)> = plan
            .requests
            .iter()
            .map(|r| (r.pod_key.as_str(), r.bytes >> 20))
            .collect();
        // BestEffort holds 40 Mi: all of it, then 35 Mi from the Burstable pod.
        assert_eq!(asked, [("be1", 30), ("be2", 10), ("bu", 35)]);
        assert_eq!(plan.requested_bytes(), 75 << 20);
    }

    #[test]
    fn a_tier_gives_in_proportion_to_its_file_pages() {
        let plan = plan(
            &settings(100),
            &[hard(Signal::MemoryAvailable, 100)],
            &observed(&[(Signal::MemoryAvailable, 140 * MI)]),
            &[
                pod("small", QosClass::BestEffort, 100),
                pod("big", QosClass::BestEffort, 300),
            ],
        )
        .expect("a plan");
        // 60 + 25 = 85 Mi wanted: 3/4 from the big one, 1/4 from the small one.
        let big = plan.requests.iter().find(|r| r.pod_key == "big").unwrap();
        let small = plan.requests.iter().find(|r| r.pod_key == "small").unwrap();
        assert_eq!(plan.requests[0].pod_key, "big");
        assert!((big.bytes as i64 - 64 * MI).abs() < MI, "{big:?}");
        assert!((small.bytes as i64 - 21 * MI).abs() < MI, "{small:?}");
        assert_eq!(plan.requested_bytes(), 85 << 20);
    }

    #[test]
    fn a_hard_threshold_met_is_left_to_eviction() {
        let plan = plan(
            &settings(100),
            &[hard(Signal::MemoryAvailable, 100)],
            &observed(&[(Signal::MemoryAvailable, 90 * MI)]),
            &[pod("a", QosClass::BestEffort, 500)],
        );
        assert_eq!(plan, None);
    }

    #[test]
    fn a_soft_threshold_met_is_relieved_before_its_grace_period_ends() {
        let soft = Threshold::soft(
            Signal::MemoryAvailable,
            QuantityOrPercent::Quantity(Quantity::from_units(300 * MI)),
            Duration::from_secs(30),
        );
        let plan = plan(
            &settings(100),
            &[hard(Signal::MemoryAvailable, 100), soft],
            &observed(&[(Signal::MemoryAvailable, 250 * MI)]),
            &[pod("a", QosClass::BestEffort, 500)],
        )
        .expect("a plan");
        // The highest threshold (300 Mi) sets the level: 400 Mi.
        assert_eq!(
            (plan.need.threshold, plan.need.relief_level),
            (300 * MI, 400 * MI)
        );
        assert_eq!(plan.need.wanted_bytes, 175 << 20);
    }

    #[test]
    fn the_signal_furthest_below_its_level_is_relieved() {
        let plan = plan(
            &settings(100),
            &[
                hard(Signal::MemoryAvailable, 100),
                hard(Signal::AllocatableMemoryAvailable, 100),
            ],
            &observed(&[
                (Signal::MemoryAvailable, 180 * MI),
                (Signal::AllocatableMemoryAvailable, 120 * MI),
            ]),
            &[pod("a", QosClass::BestEffort, 500)],
        )
        .expect("a plan");
        assert_eq!(plan.need.signal, Signal::AllocatableMemoryAvailable);
    }

    #[test]
    fn without_page_cache_to_give_there_is_no_pass() {
        let plan = plan(
            &settings(100),
            &[hard(Signal::MemoryAvailable, 100)],
            &observed(&[(Signal::MemoryAvailable, 150 * MI)]),
            &[
                pod("g", QosClass::Guaranteed, 900),
                pod("anon", QosClass::BestEffort, 0),
            ],
        );
        assert_eq!(plan, None);
    }

    #[test]
    fn a_percent_margin_resolves_on_the_signal_capacity() {
        let level = relief_level(
            &[hard(Signal::MemoryAvailable, 100)],
            Signal::MemoryAvailable,
            1000 * MI,
            QuantityOrPercent::Percent(0.05),
        );
        assert_eq!(level, Some((100 * MI, 150 * MI)));
        assert_eq!(
            relief_level(
                &[],
                Signal::MemoryAvailable,
                1000 * MI,
                QuantityOrPercent::Percent(0.05)
            ),
            None
        );
    }
}
