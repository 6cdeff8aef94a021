//! Why a pod would be chosen (`monitor explain POD`): for every signal with a threshold,
//! whether it is met, the pod's usage against its request, its rank among the eviction
//! candidates and the rule that orders it against its neighbours. Computed with the
//! ranking's own comparators on the inputs of one eviction pass, so the answer is the
//! order an eviction at that pass would have followed.
use std::cmp::Ordering;

use serde::Serialize;

use super::eviction::SyncInput;
use super::rank::{self, Comparator, RankFunc};
use super::signal::{Signal, Threshold, format_value};
use super::stats::PodWithStats;
use super::threshold;
use super::types::Resource;

/// One pod, explained against every configured signal.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// "namespace/name".
    pub pod: String,
    pub qos_class: &'static str,
    pub priority: i32,
    /// Static, mirror or priority ≥ 2 000 000 000: never evicted, so never ranked.
    pub critical: bool,
    /// Whether the hot kill path runs at all.
    pub hot_path: bool,
    /// The pod the hot path holds ready for a hard memory threshold's crossing, if any.
    pub hot_path_victim: Option<String>,
    pub signals: Vec<SignalExplanation>,
}

impl Explanation {
    /// Whether this pod is the hot path's pre-ranked victim.
    pub fn is_hot_path_victim(&self) -> bool {
        self.hot_path_victim.as_deref() == Some(self.pod.as_str())
    }
}

/// One signal: its thresholds and where the pod stands in its ranking.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalExplanation {
    pub signal: Signal,
    /// Available and capacity as observed; `None` when the signal was not observed.
    pub available: Option<i64>,
    pub capacity: Option<i64>,
    pub thresholds: Vec<ThresholdCheck>,
    /// Any of its thresholds met (grace periods aside).
    pub met: bool,
    /// What the ranking compares: "memory" (working set bytes), "pids" (processes),
    /// "ephemeral-storage" (bytes) or "inodes".
    pub resource: Resource,
    /// The pod's usage of that resource; `None` when no stats were found for it or the
    /// pass did not read it (disk usage is read only while a disk threshold is near).
    pub usage: Option<u64>,
    /// Whether the pass read this usage: false for disk usage away from disk pressure.
    pub usage_read: bool,
    /// The request usage is compared with; `None` where there is none (processes,
    /// inodes: the ranking compares inodes with zero).
    pub request: Option<i64>,
    /// Usage above the request (above zero for inodes); `None` for processes or without
    /// stats.
    pub exceeds_request: Option<bool>,
    /// 1 = evicted first; `None` for a critical pod.
    pub rank: Option<usize>,
    /// Pods that can be evicted for this signal (critical pods excluded).
    pub candidates: usize,
    /// The pod ranked just before this one and the rule that put it there.
    pub before: Option<Neighbour>,
    /// The pod ranked just after this one and the rule that put it there.
    pub after: Option<Neighbour>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThresholdCheck {
    /// "hard" or "soft".
    pub kind: &'static str,
    /// As configured: "500Mi" or "10%".
    pub value: String,
    /// Resolved against the observed capacity; `None` without an observation.
    pub quantity: Option<i64>,
    pub met: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Neighbour {
    pub pod: String,
    /// The first ranking rule that tells the two pods apart.
    pub rule: String,
}

/// Explains `pod_key` on the inputs of one pass: `thresholds` as configured, `hot_victim`
/// the hot path's armed victim (`hot_path` whether it runs). `None` when the pod is not
/// among `input.pods`.
pub fn explain(
    input: &SyncInput,
    thresholds: &[Threshold],
    pod_key: &str,
    hot_path: bool,
    hot_victim: Option<&str>,
) -> Option<Explanation> {
    let me = input.pods.iter().find(|p| p.pod.key() == pod_key)?;
    let configured = threshold::update_container_fs_thresholds(thresholds, input.fs_layout);
    let mut signals: Vec<Signal> = Vec::new();
    for t in &configured {
        if !signals.contains(&t.signal) {
            signals.push(t.signal);
        }
    }
    let signals = signals
        .into_iter()
        .map(|signal| {
            let of_signal: Vec<&Threshold> =
                configured.iter().filter(|t| t.signal == signal).collect();
            explain_signal(input, signal, &of_signal, me)
        })
        .collect();
    Some(Explanation {
        pod: pod_key.to_string(),
        qos_class: me.pod.qos_class().as_str(),
        priority: me.pod.priority(),
        critical: me.pod.is_critical(),
        hot_path,
        hot_path_victim: hot_victim.map(str::to_string),
        signals,
    })
}

fn explain_signal(
    input: &SyncInput,
    signal: Signal,
    thresholds: &[&Threshold],
    me: &PodWithStats,
) -> SignalExplanation {
    let observed = input.observations.get(&signal);
    let checks: Vec<ThresholdCheck> = thresholds
        .iter()
        .map(|t| ThresholdCheck {
            kind: if t.is_hard() { "hard" } else { "soft" },
            value: format_value(t.value),
            quantity: observed.map(|o| t.quantity(o.capacity)),
            met: threshold::threshold_met(t, &input.observations, false),
        })
        .collect();
    let func = rank::rank_func(signal, input.fs_layout);
    let (resource, usage, request) = usage_and_request(func, me);
    let usage_read = !me.stats.is_missing() && usage.is_some();
    let exceeds_request = match (usage, func) {
        (None, _) | (_, RankFunc::Pids) => None,
        (Some(usage), _) => Some(i128::from(usage) > i128::from(request.unwrap_or(0))),
    };
    let ranked = rank::rank_pods(signal, input.fs_layout, &input.pods);
    let candidates: Vec<&PodWithStats> = ranked
        .into_iter()
        .filter(|p| !p.pod.is_critical())
        .collect();
    let position = candidates.iter().position(|p| std::ptr::eq(*p, me));
    let rules = named_comparators(func);
    let neighbour = |a: &PodWithStats, b: &PodWithStats, other: &PodWithStats| Neighbour {
        pod: other.pod.key(),
        rule: deciding_rule(&rules, a, b),
    };
    SignalExplanation {
        signal,
        available: observed.map(|o| o.available),
        capacity: observed.map(|o| o.capacity),
        met: checks.iter().any(|c| c.met),
        thresholds: checks,
        resource,
        usage,
        usage_read,
        request,
        exceeds_request,
        rank: position.map(|i| i + 1),
        candidates: candidates.len(),
        before: position
            .and_then(|i| i.checked_sub(1))
            .map(|i| neighbour(candidates[i], me, candidates[i])),
        after: position
            .and_then(|i| candidates.get(i + 1))
            .map(|next| neighbour(me, next, next)),
    }
}

/// The resource a ranking compares, the pod's usage of it and its request.
fn usage_and_request(func: RankFunc, p: &PodWithStats) -> (Resource, Option<u64>, Option<i64>) {
    let known = !p.stats.is_missing();
    match func {
        RankFunc::Memory => (
            Resource::Memory,
            known.then(|| p.stats.memory_working_set_bytes.unwrap_or(0)),
            Some(p.pod.ranking_request("memory").value()),
        ),
        RankFunc::Pids => (
            Resource::Pids,
            known.then(|| p.stats.process_count.unwrap_or(0)),
            None,
        ),
        RankFunc::Disk { fs_stats, resource } => (
            resource,
            (known && disk_read(p)).then(|| {
                u64::try_from(rank::pod_disk_usage(p, fs_stats, resource)).unwrap_or(u64::MAX)
            }),
            (resource != Resource::Inodes)
                .then(|| p.pod.ranking_request(resource.as_str()).value()),
        ),
    }
}

/// Whether any disk figure of the pod was read (the ranking counts unread ones as zero).
fn disk_read(p: &PodWithStats) -> bool {
    p.stats.containers.iter().any(|c| {
        c.rootfs_used_bytes.is_some()
            || c.rootfs_inodes_used.is_some()
            || c.logs_used_bytes.is_some()
            || c.logs_inodes_used.is_some()
    }) || p
        .stats
        .volumes
        .iter()
        .any(|v| v.used_bytes.is_some() || v.inodes_used.is_some())
}

/// A ranking's comparators, each with its name and whether it reads stats (a comparator
/// that reads stats puts pods without any first).
fn named_comparators(func: RankFunc) -> Vec<(String, bool, Comparator<'static>)> {
    let (names, comparators): (Vec<(String, bool)>, _) = match func {
        RankFunc::Memory => (
            vec![
                ("usage above its memory request".to_string(), true),
                ("priority".to_string(), false),
                ("memory usage above request".to_string(), true),
            ],
            rank::memory_pressure_comparators(),
        ),
        RankFunc::Pids => (
            vec![
                ("priority".to_string(), false),
                ("process count".to_string(), true),
            ],
            rank::pid_pressure_comparators(),
        ),
        RankFunc::Disk { fs_stats, resource } => (
            vec![
                (
                    format!("usage above its {} request", resource.as_str()),
                    true,
                ),
                ("priority".to_string(), false),
                (format!("{} usage above request", resource.as_str()), true),
            ],
            rank::disk_pressure_comparators(fs_stats, resource),
        ),
    };
    names
        .into_iter()
        .zip(comparators)
        .map(|((name, reads_stats), cmp)| (name, reads_stats, cmp))
        .collect()
}

/// The first rule that orders `a` before `b` (kubelet: orderedBy), named.
fn deciding_rule(
    rules: &[(String, bool, Comparator<'static>)],
    a: &PodWithStats,
    b: &PodWithStats,
) -> String {
    for (name, reads_stats, cmp) in rules {
        if cmp(a, b) != Ordering::Equal {
            if *reads_stats && (a.stats.is_missing() || b.stats.is_missing()) {
                return "no stats found (such pods rank first)".to_string();
            }
            return name.clone();
        }
    }
    "a tie on every rule (the order of the pod list)".to_string()
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::eviction::fixtures::{MI, pod};
    use crate::quantity::QuantityOrPercent;
    use crate::signal::{Observations, SignalObservation};
    use crate::types::FsLayout;

    fn observations(memory_available: i64) -> Observations {
        let mut o = Observations::new();
        o.insert(
            Signal::MemoryAvailable,
            SignalObservation {
                available: memory_available,
                capacity: 1024 * MI as i64,
                time: std::time::Duration::ZERO,
            },
        );
        o.insert(
            Signal::PidAvailable,
            SignalObservation {
                available: 1000,
                capacity: 4096,
                time: std::time::Duration::ZERO,
            },
        );
        o
    }

    fn thresholds() -> Vec<Threshold> {
        vec![
            Threshold::hard(
                Signal::MemoryAvailable,
                QuantityOrPercent::Quantity(crate::eviction::fixtures::qty("200Mi")),
            ),
            Threshold::hard(Signal::PidAvailable, QuantityOrPercent::Percent(0.1)),
        ]
    }

    /// best: BestEffort, 300Mi; hog: Burstable over its 100Mi request by 400Mi;
    /// under: Burstable under its request; low: priority -10, under its request;
    /// crit: a static pod; idle: no stats at all.
    fn input() -> SyncInput {
        let pods = vec![
            pod("best").working_set(300 * MI).processes(3).build(),
            pod("hog")
                .request("memory", "100Mi")
                .working_set(500 * MI)
                .processes(50)
                .build(),
            pod("under")
                .request("memory", "400Mi")
                .working_set(100 * MI)
                .processes(2)
                .build(),
            pod("low")
                .priority(-10)
                .request("memory", "400Mi")
                .working_set(10 * MI)
                .processes(1)
                .build(),
            pod("crit").static_pod().working_set(900 * MI).build(),
        ];
        SyncInput {
            observations: observations(150 * MI as i64),
            pods,
            fs_layout: FsLayout::Shared,
        }
    }

    // The memory order: hog and best exceed their requests (hog by more), then low by
    // priority, then under; crit is never ranked.
    #[rstest]
    #[case::hog("default/hog", Some(1), None, Some(("default/best", "memory usage above request")), Some(true))]
    #[case::best("default/best", Some(2), Some(("default/hog", "memory usage above request")), Some(("default/low", "usage above its memory request")), Some(true))]
    #[case::low("default/low", Some(3), Some(("default/best", "usage above its memory request")), Some(("default/under", "priority")), Some(false))]
    #[case::under("default/under", Some(4), Some(("default/low", "priority")), None, Some(false))]
    #[case::critical("default/crit", None, None, None, Some(true))]
    fn memory_rank_and_rules(
        #[case] key: &str,
        #[case] rank: Option<usize>,
        #[case] before: Option<(&str, &str)>,
        #[case] after: Option<(&str, &str)>,
        #[case] exceeds: Option<bool>,
    ) {
        let e = explain(&input(), &thresholds(), key, true, Some("default/hog"))
            .unwrap_or_else(|| panic!("{key} not found"));
        let memory = &e.signals[0];
        assert_eq!(memory.signal, Signal::MemoryAvailable);
        assert!(memory.met, "150Mi available is under 200Mi");
        assert_eq!(memory.candidates, 4);
        assert_eq!(memory.rank, rank, "{memory:?}");
        let pair = |n: &Option<Neighbour>| n.as_ref().map(|n| (n.pod.clone(), n.rule.clone()));
        let want = |n: Option<(&str, &str)>| n.map(|(p, r)| (p.to_string(), r.to_string()));
        assert_eq!(pair(&memory.before), want(before), "{memory:?}");
        assert_eq!(pair(&memory.after), want(after), "{memory:?}");
        assert_eq!(memory.exceeds_request, exceeds);
        assert_eq!(e.critical, key == "default/crit");
        assert_eq!(e.is_hot_path_victim(), key == "default/hog");
    }

    #[test]
    fn numbers_and_thresholds_are_the_pods_and_the_nodes() {
        let e = explain(&input(), &thresholds(), "default/hog", false, None).expect("hog");
        assert_eq!(e.qos_class, "Burstable");
        assert_eq!(e.priority, 0);
        assert!(!e.hot_path && !e.is_hot_path_victim());
        let memory = &e.signals[0];
        assert_eq!(memory.usage, Some(500 * MI));
        assert_eq!(memory.request, Some(100 * MI as i64));
        assert_eq!(memory.available, Some(150 * MI as i64));
        assert_eq!(memory.thresholds.len(), 1);
        assert_eq!(memory.thresholds[0].kind, "hard");
        assert_eq!(memory.thresholds[0].value, "200Mi");
        assert_eq!(memory.thresholds[0].quantity, Some(200 * MI as i64));
        // pid.available: 1000 of 4096 available is above 10 %, so not met; the ranking is
        // priority, then processes.
        let pids = &e.signals[1];
        assert_eq!(pids.signal, Signal::PidAvailable);
        assert!(!pids.met);
        assert_eq!(
            (pids.usage, pids.request, pids.exceeds_request),
            (Some(50), None, None)
        );
        assert_eq!(pids.rank, Some(2), "low goes first by priority: {pids:?}");
        assert_eq!(
            pids.before,
            Some(Neighbour {
                pod: "default/low".into(),
                rule: "priority".into()
            })
        );
        assert_eq!(
            pids.after.as_ref().map(|n| n.rule.as_str()),
            Some("process count")
        );
    }

    #[test]
    fn a_pod_without_stats_ranks_first_and_says_why() {
        let mut input = input();
        input.pods.push(pod("idle").no_stats().build());
        let e = explain(&input, &thresholds(), "default/idle", true, None).expect("idle");
        let memory = &e.signals[0];
        assert_eq!(memory.rank, Some(1));
        assert_eq!(memory.usage, None);
        assert_eq!(memory.exceeds_request, None);
        assert_eq!(
            memory.after.as_ref().map(|n| n.rule.as_str()),
            Some("no stats found (such pods rank first)")
        );
    }

    #[test]
    fn an_unknown_pod_is_none() {
        assert_eq!(
            explain(&input(), &thresholds(), "default/nope", true, None),
            None
        );
    }
}
