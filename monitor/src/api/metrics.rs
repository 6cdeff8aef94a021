//! `/metrics`: the agent's state in the Prometheus text exposition format 0.0.4
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>).
//!
//! Naming: every family is `monitor_` and a name. Where the kubelet exports the same
//! measure (pkg/kubelet/metrics/metrics.go), the name is the kubelet's without its
//! `kubelet_` prefix, with `_total` added to a counter that lacks it, and the labels are
//! the kubelet's, names and values: `kubelet_evictions{eviction_signal}` is
//! `monitor_evictions_total{eviction_signal}`, `kubelet_preemptions{preemption_signal}` is
//! `monitor_preemptions_total{preemption_signal}`,
//! `kubelet_eviction_stats_age_seconds{eviction_signal}` and
//! `kubelet_admission_rejections_total{reason}` keep their names after the prefix. The
//! rest follow Prometheus' conventions: counters end in `_total`, values are in base units
//! named by the suffix (`_seconds`, `_bytes`), and a gauge holds one unit (the signals'
//! amounts are split into `_bytes`, `_inodes` and `_pids` families). An eviction signal is
//! always labelled `eviction_signal`.
//!
//! Label values that are known ahead (wake sources, node conditions, pod phases, configured
//! signals, admission reasons, preemption resources) are always exported, at 0 when idle,
//! so that alerts and `rate()` see a series from the start instead of an absent one. A
//! family with no series at all (a histogram nothing has been observed for, a unit no
//! configured signal has) is left out.
use std::collections::BTreeMap;

use crate::notify::{SourceState, WakeSource};
use crate::policy::signal::Signal;
use crate::policy::types::{NodeConditionType, Resource};
use crate::state::{
    ADMISSION_REJECTION_REASONS, AgentState, Histogram, PREEMPTION_SIGNALS, SignalStatus,
};

/// The `Content-Type` Prometheus expects for this format.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Pod phases (Kubernetes' `v1.PodPhase`, less the deprecated Unknown).
const POD_PHASES: [&str; 4] = ["Pending", "Running", "Succeeded", "Failed"];

const CONDITIONS: [NodeConditionType; 3] = [
    NodeConditionType::MemoryPressure,
    NodeConditionType::DiskPressure,
    NodeConditionType::PIDPressure,
];

/// What starts a garbage collection, and what it removes.
const GC_TRIGGERS: [&str; 2] = ["periodic", "eviction"];
const GC_KINDS: [&str; 4] = ["container", "sandbox", "image", "log"];
/// The kinds whose freed bytes are measured (images by size, logs by disk usage).
const GC_MEASURED_KINDS: [&str; 2] = ["image", "log"];

/// The units of the eviction signals, each a family of its own, with what its signals are.
const SIGNAL_UNITS: [(&str, &str); 3] = [
    (
        "bytes",
        "memory.available, allocatableMemory.available, nodefs.available, imagefs.available, containerfs.available",
    ),
    (
        "inodes",
        "nodefs.inodesFree, imagefs.inodesFree, containerfs.inodesFree",
    ),
    ("pids", "pid.available"),
];

/// The unit of an eviction signal's amounts; `None` for a name that is no signal.
fn signal_unit(signal: &str) -> Option<&'static str> {
    let signal: Signal = signal.parse().ok()?;
    Some(match signal.resource() {
        Resource::Memory | Resource::EphemeralStorage => "bytes",
        Resource::Inodes => "inodes",
        Resource::Pids => "pids",
    })
}

/// `oom_kill` of /proc/vmstat (kernels since 4.13).
fn node_oom_kills() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/vmstat").ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("oom_kill ")?.trim().parse().ok())
}

/// The counts by label value, with every value in `known` present (0 when not counted).
fn with_known<'a>(
    known: impl IntoIterator<Item = &'a str>,
    counted: &'a BTreeMap<String, u64>,
) -> BTreeMap<&'a str, u64> {
    let mut all: BTreeMap<&str, u64> = known.into_iter().map(|k| (k, 0)).collect();
    for (key, count) in counted {
        all.insert(key, *count);
    }
    all
}

/// Renders every metric family, each as HELP, TYPE and its samples in one group.
pub fn render_metrics(state: &AgentState) -> String {
    let mut out = Metrics::default();
    let m = &state.metrics;
    let configured = || state.signals.iter().map(|s| s.signal.as_str());

    out.family(
        "monitor_evictions_total",
        "counter",
        "Pods evicted by the agent, by eviction_signal: the signal whose threshold drove the eviction, or the local storage limit the pod exceeded (ephemeralpodfs.limit, ephemeralcontainerfs.limit, emptydirfs.limit). The kubelet's kubelet_evictions.",
    );
    for (signal, count) in with_known(configured(), &m.evictions) {
        out.sample(
            "monitor_evictions_total",
            &[("eviction_signal", signal)],
            count,
        );
    }

    out.family(
        "monitor_eviction_outcomes_total",
        "counter",
        "Evictions ended, by outcome: evicted, already_gone, timed_out or kill_failed (after retries).",
    );
    for outcome in ["evicted", "already_gone", "timed_out", "kill_failed"] {
        let count = m.eviction_outcomes.get(outcome).copied().unwrap_or(0);
        out.sample(
            "monitor_eviction_outcomes_total",
            &[("outcome", outcome)],
            count,
        );
    }

    out.family(
        "monitor_runtime_unresponsive_calls_total",
        "counter",
        "Calls to the container runtime made to stop a pod (evicted, preempted, removed or finished) that it left unanswered by the stop's deadline (an eviction's kill timeout), by CRI call. The pod was killed through its cgroups regardless; each silence is also a RuntimeUnresponsive event naming the pod.",
    );
    for (call, count) in with_known(
        ["StopContainer", "StopPodSandbox", "RemovePodSandbox"],
        &m.runtime_unresponsive_calls,
    ) {
        out.sample(
            "monitor_runtime_unresponsive_calls_total",
            &[("call", call)],
            count,
        );
    }

    out.family(
        "monitor_ineffective_evictions_total",
        "counter",
        "Evictions after which the signal came back by far less than the victim held (its memory stayed charged: page cache, tmpfs, shared pages), by eviction_signal. Each paces that signal to one eviction per housekeeping interval until the signal moves.",
    );
    for (signal, count) in with_known(configured(), &m.ineffective_evictions) {
        out.sample(
            "monitor_ineffective_evictions_total",
            &[("eviction_signal", signal)],
            count,
        );
    }

    out.family(
        "monitor_hot_watch_cpu_seconds_total",
        "counter",
        "CPU time the hot path's watches used on the notifier threads, within their budget (10 ms at once, 2 % of one CPU over time).",
    );
    out.sample(
        "monitor_hot_watch_cpu_seconds_total",
        &[],
        m.hot_watch_cpu_seconds,
    );

    out.family(
        "monitor_eviction_stats_age_seconds",
        "histogram",
        "Age of the observation a threshold eviction was decided on, from its read to the decision, by the eviction_signal of each threshold met. The kubelet's kubelet_eviction_stats_age_seconds. Kills of the hot path are not in it: they are confirmed on the kernel's counters at the crossing (see monitor_crossing_to_kill_seconds).",
    );
    let idle = Histogram::default();
    let mut ages: BTreeMap<&str, &Histogram> = configured().map(|s| (s, &idle)).collect();
    for (signal, histogram) in &m.eviction_stats_age {
        ages.insert(signal, histogram);
    }
    for (signal, histogram) in ages {
        out.histogram(
            "monitor_eviction_stats_age_seconds",
            &[("eviction_signal", signal)],
            histogram,
        );
    }

    out.family(
        "monitor_preemptions_total",
        "counter",
        "Pods preempted (stopped) to admit a critical pod, by preemption_signal: the first resource the critical pod lacked. The kubelet's kubelet_preemptions.",
    );
    for (signal, count) in with_known(PREEMPTION_SIGNALS, &m.preemptions) {
        out.sample(
            "monitor_preemptions_total",
            &[("preemption_signal", signal)],
            count,
        );
    }

    out.family(
        "monitor_admission_rejections_total",
        "counter",
        "Pods admission turned away, by reason: the pod status reason (Evicted for node pressure, OutOf<resource>, PodOSSelectorNodeLabelDoesNotMatch, PodOSNotSupported, NodeName, NodePorts, TaintToleration, UnexpectedAdmissionError when preemption found no pods to free enough); other OutOf reasons count as OutOfExtendedResources and anything else as Other. The kubelet's kubelet_admission_rejections_total.",
    );
    let reasons = ADMISSION_REJECTION_REASONS
        .into_iter()
        .chain(["OutOfExtendedResources", "Other"]);
    for (reason, count) in with_known(reasons, &m.admission_rejections) {
        out.sample(
            "monitor_admission_rejections_total",
            &[("reason", reason)],
            count,
        );
    }

    out.family(
        "monitor_kernel_oom_kills_total",
        "counter",
        "Victims of the kernel OOM killer (eBPF oom:mark_victim), by pod; pod=\"\" is outside any pod, gone before its pod was known, or held back by the in-kernel rate limit. Every one is a kill the agent did not prevent.",
    );
    let pods = state.pods.iter().map(|p| p.key.as_str()).chain([""]);
    for (pod, count) in with_known(pods, &m.kernel_oom_kills) {
        out.sample("monitor_kernel_oom_kills_total", &[("pod", pod)], count);
    }
    if let Some(node) = node_oom_kills() {
        out.family(
            "monitor_node_oom_kills_total",
            "counter",
            "OOM kills on the whole node since boot (/proc/vmstat oom_kill), whoever the victim.",
        );
        out.sample("monitor_node_oom_kills_total", &[], node);
    }

    out.family(
        "monitor_gc_removed_total",
        "counter",
        "Dead containers, sandboxes, unused images and old container logs removed by garbage collection, by trigger (periodic, or eviction: node-level reclaim under pressure) and kind.",
    );
    let mut removed: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for trigger in GC_TRIGGERS {
        for kind in GC_KINDS {
            removed.insert((trigger, kind), 0);
        }
    }
    for (trigger, kinds) in &m.gc_removed {
        for (kind, count) in kinds {
            removed.insert((trigger, kind), *count);
        }
    }
    for ((trigger, kind), count) in removed {
        out.sample(
            "monitor_gc_removed_total",
            &[("trigger", trigger), ("kind", kind)],
            count,
        );
    }
    out.family(
        "monitor_gc_freed_bytes_total",
        "counter",
        "Bytes garbage collection freed, by trigger and kind: images by their size, logs by their disk usage (the space of removed containers is not measured).",
    );
    let mut freed: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for trigger in GC_TRIGGERS {
        for kind in GC_MEASURED_KINDS {
            freed.insert((trigger, kind), 0);
        }
    }
    for (trigger, kinds) in &m.gc_freed_bytes {
        for (kind, bytes) in kinds {
            if *bytes > 0 || GC_MEASURED_KINDS.contains(&kind.as_str()) {
                freed.insert((trigger, kind), *bytes);
            }
        }
    }
    for ((trigger, kind), bytes) in freed {
        out.sample(
            "monitor_gc_freed_bytes_total",
            &[("trigger", trigger), ("kind", kind)],
            bytes,
        );
    }

    out.family(
        "monitor_synchronizes_total",
        "counter",
        "Synchronize passes (observe, decide, act) run by the synchronize loop.",
    );
    out.sample("monitor_synchronizes_total", &[], m.synchronizes);

    out.family(
        "monitor_synchronize_panics_total",
        "counter",
        "Synchronize passes that panicked; the loop went on with the next wake. Each one is a bug.",
    );
    out.sample(
        "monitor_synchronize_panics_total",
        &[],
        m.synchronize_panics,
    );

    out.family(
        "monitor_sync_duration_seconds",
        "histogram",
        "Time one synchronize pass took.",
    );
    out.histogram("monitor_sync_duration_seconds", &[], &m.sync_duration);

    out.family(
        "monitor_wake_to_sync_seconds",
        "histogram",
        "Time from a wake-up reaching userspace to the start of the synchronize it caused, by wake source (every wake a synchronize coalesced counts).",
    );
    for source in WakeSource::ALL {
        let histogram = m.wake_latency.get(&source).unwrap_or(&idle);
        out.histogram(
            "monitor_wake_to_sync_seconds",
            &[("source", source.name())],
            histogram,
        );
    }

    out.family(
        "monitor_crossing_to_kill_seconds",
        "histogram",
        "Hot kill path: time from a hard memory threshold's crossing to the cgroup.kill write, by the source whose notifier fired the kill and by stamp: kernel when the crossing detector's record stamped the crossing in the kernel, notifier when the crossing is the moment the notifier reached the agent (memcg eventfds and memory.events carry no stamp).",
    );
    for (source, stamps) in &m.crossing_to_kill {
        for (stamp, histogram) in stamps {
            out.histogram(
                "monitor_crossing_to_kill_seconds",
                &[("source", source.name()), ("stamp", stamp)],
                histogram,
            );
        }
    }

    for (unit, signals) in SIGNAL_UNITS {
        let of_unit: Vec<&SignalStatus> = state
            .signals
            .iter()
            .filter(|s| signal_unit(&s.signal) == Some(unit))
            .collect();
        let available = format!("monitor_signal_available_{unit}");
        out.family(
            &available,
            "gauge",
            &format!("Eviction signal: the amount available now, in {unit} ({signals}), by eviction_signal."),
        );
        for s in &of_unit {
            out.sample(&available, &[("eviction_signal", &s.signal)], s.available);
        }
        let capacity = format!("monitor_signal_capacity_{unit}");
        out.family(
            &capacity,
            "gauge",
            &format!("Eviction signal: the capacity its available amount and percentage thresholds are measured against, in {unit}, by eviction_signal."),
        );
        for s in &of_unit {
            out.sample(&capacity, &[("eviction_signal", &s.signal)], s.capacity);
        }
    }

    out.family(
        "monitor_threshold_met",
        "gauge",
        "1 when the signal is below this eviction threshold (hard or soft), else 0.",
    );
    for s in &state.signals {
        for t in &s.thresholds {
            out.sample(
                "monitor_threshold_met",
                &[
                    ("eviction_signal", &s.signal),
                    ("threshold", &t.value),
                    ("kind", &t.kind),
                ],
                u8::from(t.met),
            );
        }
    }

    out.family(
        "monitor_node_condition",
        "gauge",
        "1 while the node reports this condition (MemoryPressure, DiskPressure, PIDPressure; the PSI contention conditions when the PSINodeCondition gate is on).",
    );
    let mut conditions: BTreeMap<&str, u8> = CONDITIONS.iter().map(|c| (c.as_str(), 0)).collect();
    for c in &state.conditions {
        conditions.insert(c, 1);
    }
    for c in &state.contention {
        conditions.insert(c.condition.as_str(), u8::from(c.status));
    }
    for (condition, on) in conditions {
        out.sample("monitor_node_condition", &[("condition", condition)], on);
    }

    out.family(
        "monitor_source_up",
        "gauge",
        "1 when the event source started and runs, else 0; the state label says why not (running, disabled, failed, unsupported). A source that ends or panics later turns failed.",
    );
    for s in &state.sources {
        out.sample(
            "monitor_source_up",
            &[
                ("source", s.source.name()),
                ("state", source_state(s.state)),
            ],
            u8::from(s.state == SourceState::Running),
        );
    }

    out.family("monitor_pods", "gauge", "Pods the agent runs, by phase.");
    let mut phases: BTreeMap<&str, u64> = POD_PHASES.iter().map(|p| (*p, 0)).collect();
    for pod in &state.pods {
        let n = phases.entry(pod.phase.as_str()).or_insert(0);
        *n = n.saturating_add(1);
    }
    for (phase, n) in phases {
        out.sample("monitor_pods", &[("phase", phase)], n);
    }

    out.text
}

pub(crate) fn source_state(state: SourceState) -> &'static str {
    match state {
        SourceState::Running => "running",
        SourceState::Disabled => "disabled",
        SourceState::Failed => "failed",
        SourceState::Unsupported => "unsupported",
    }
}

/// The text being built. Writing to a `String` cannot fail, so nothing here returns errors.
#[derive(Default)]
struct Metrics {
    text: String,
    /// The HELP and TYPE lines of the family begun last, until its first sample: a family
    /// without samples is left out.
    header: Option<String>,
}

impl Metrics {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        self.header = Some(format!(
            "# HELP {name} {}\n# TYPE {name} {kind}\n",
            escape_help(help)
        ));
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        if let Some(header) = self.header.take() {
            self.text += &header;
        }
        self.text += &format!("{name}{} {value}\n", label_set(labels));
    }

    /// `_bucket{le}` lines (cumulative, ending with `+Inf`), `_sum` and `_count`.
    ///
    /// The state's histograms come from [`Histogram::observe`] and are already cumulative;
    /// this still sorts the bounds and keeps counts monotone so that any value in the state
    /// renders as a valid histogram (a scrape that fails to parse loses every metric).
    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &Histogram) {
        let mut bounds: Vec<(f64, u64)> = h
            .buckets
            .iter()
            .copied()
            .filter(|(bound, _)| bound.is_finite())
            .collect();
        bounds.sort_by(|a, b| a.0.total_cmp(&b.0));
        bounds.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                earlier.1 = earlier.1.max(later.1);
            }
            same
        });
        let mut running = 0u64;
        for (bound, count) in bounds {
            running = running.max(count);
            let le = format_float(bound);
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&format!("{name}_bucket"), &with_le, running);
        }
        let total = h.count.max(running);
        let mut with_le = labels.to_vec();
        with_le.push(("le", "+Inf"));
        self.sample(&format!("{name}_bucket"), &with_le, total);
        self.sample(&format!("{name}_sum"), labels, format_float(h.sum));
        self.sample(&format!("{name}_count"), labels, total);
    }
}

/// `{a="x",b="y"}`, or nothing without labels.
fn label_set(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let pairs: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label_value(v)))
        .collect();
    format!("{{{}}}", pairs.join(","))
}

/// Label values escape backslash, double quote and line feed (and nothing else).
fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// HELP text escapes backslash and line feed.
fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Floats as the format spells them: `+Inf`, `-Inf`, `NaN`, else the shortest decimal that
/// reads back the same.
pub(crate) fn format_float(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value == f64::INFINITY {
        "+Inf".into()
    } else if value == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use nom_openmetrics::{MetricDescriptor, MetricType};
    use rstest::rstest;

    use super::*;
    use crate::api::exposition::check_exposition;
    use crate::notify::SourceStatus;
    use crate::state::{PodView, SignalStatus, ThresholdStatus};

    fn pod(key: &str, phase: &str) -> PodView {
        PodView {
            key: key.into(),
            uid: "u1".into(),
            qos_class: "Burstable".into(),
            priority: 0,
            phase: phase.into(),
            reason: None,
            message: None,
            conditions: vec![],
            cgroup: None,
            memory_working_set_bytes: None,
            containers: vec![],
        }
    }

    fn signal(name: &str, available: i64, capacity: i64) -> SignalStatus {
        SignalStatus {
            signal: name.into(),
            available,
            capacity,
            thresholds: vec![ThresholdStatus {
                value: "5%".into(),
                quantity: capacity / 20,
                kind: "hard".into(),
                grace_period: None,
                met: false,
                grace_period_met: false,
            }],
        }
    }

    fn state() -> AgentState {
        let mut s = AgentState {
            conditions: vec!["MemoryPressure".into()],
            ..AgentState::default()
        };
        s.sources = vec![
            SourceStatus::running(WakeSource::Psi, "memory.pressure some 150ms/1s"),
            SourceStatus::unsupported(WakeSource::MemcgThreshold, "cgroup v2"),
        ];
        s.metrics
            .gc_removed
            .entry("eviction".into())
            .or_default()
            .insert("image".into(), 3);
        s.metrics
            .gc_freed_bytes
            .entry("eviction".into())
            .or_default()
            .insert("image".into(), 79_126_188);
        s.signals = vec![
            SignalStatus {
                signal: "memory.available".into(),
                available: 400 << 20,
                capacity: 8 << 30,
                thresholds: vec![
                    ThresholdStatus {
                        value: "500Mi".into(),
                        quantity: 500 << 20,
                        kind: "hard".into(),
                        grace_period: None,
                        met: true,
                        grace_period_met: true,
                    },
                    ThresholdStatus {
                        value: "1Gi".into(),
                        quantity: 1 << 30,
                        kind: "soft".into(),
                        grace_period: Some("1m30s".into()),
                        met: true,
                        grace_period_met: false,
                    },
                ],
            },
            signal("nodefs.inodesFree", 1_200_000, 6_553_600),
            signal("pid.available", 4_190_000, 4_194_304),
        ];
        s.pods = vec![
            pod("default/web", "Running"),
            pod("default/api", "Running"),
            pod("default/batch", "Failed"),
        ];
        s.metrics.evictions.insert("memory.available".into(), 3);
        s.metrics.evictions.insert("ephemeralpodfs.limit".into(), 1);
        s.metrics.synchronizes = 42;
        s.metrics.eviction_outcomes.insert("timed_out".into(), 2);
        s.metrics
            .runtime_unresponsive_calls
            .insert("StopPodSandbox".into(), 3);
        s.metrics.sync_duration.observe(0.0002);
        s.metrics.sync_duration.observe(20.0);
        let mut psi = Histogram::default();
        psi.observe(3e-5);
        psi.observe(0.002);
        s.metrics.wake_latency.insert(WakeSource::Psi, psi);
        let mut age = Histogram::default();
        age.observe(0.004);
        s.metrics
            .eviction_stats_age
            .insert("memory.available".into(), age);
        s.metrics.preemptions.insert("memory".into(), 2);
        s.metrics
            .admission_rejections
            .insert("OutOfmemory".into(), 4);
        s.metrics.kernel_oom_kills.insert("default/batch".into(), 1);
        let mut kill = Histogram::default();
        kill.observe(2.3e-4);
        s.metrics
            .crossing_to_kill
            .entry(WakeSource::Ebpf)
            .or_default()
            .insert("kernel".into(), kill);
        s
    }

    /// One sample as a parser read it.
    #[derive(Debug)]
    struct Parsed {
        name: String,
        labels: Vec<(String, String)>,
        value: f64,
    }

    fn type_name<'a>(kind: &'a MetricType<'a>) -> &'a str {
        match kind {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::Summary => "summary",
            MetricType::Unknown(other) => other,
            _ => "not a type of the 0.0.4 format",
        }
    }

    /// Reads `text` with nom-openmetrics' parser of the Prometheus text format (the whole
    /// text must parse: one bad line fails it) and checks what a scrape relies on: each
    /// family has one HELP and one TYPE of its own name, holds only its own samples and
    /// comes once; counters end in `_total` and histograms in `_seconds`; each histogram
    /// series has `_sum`, `_count`, and buckets with increasing bounds and cumulative
    /// counts ending with `+Inf` at `_count`.
    fn parse(text: &str) -> Vec<Parsed> {
        let (rest, families) = nom_openmetrics::parser::prometheus(text)
            .unwrap_or_else(|e| panic!("the exposition does not parse: {e:?}\n{text}"));
        assert!(rest.is_empty(), "unparsed: {rest:?}");
        let mut seen = BTreeSet::new();
        let mut samples = Vec::new();
        for family in &families {
            let helps: Vec<&str> = family
                .descriptors
                .iter()
                .filter_map(|d| match d {
                    MetricDescriptor::Help { metric, .. } => Some(*metric),
                    _ => None,
                })
                .collect();
            let types: Vec<(&str, &str)> = family
                .descriptors
                .iter()
                .filter_map(|d| match d {
                    MetricDescriptor::Type { metric, r#type } => Some((*metric, type_name(r#type))),
                    _ => None,
                })
                .collect();
            assert_eq!(
                family.descriptors.len(),
                2,
                "one HELP and one TYPE per family: {:?}",
                family.descriptors
            );
            let ([name], [(typed, kind)]) = (&helps[..], &types[..]) else {
                panic!("one HELP and one TYPE per family: {:?}", family.descriptors);
            };
            assert_eq!(name, typed, "HELP and TYPE name one family");
            assert!(seen.insert(name.to_string()), "{name} comes twice");
            match *kind {
                "counter" => assert!(name.ends_with("_total"), "counter {name}"),
                "histogram" => assert!(name.ends_with("_seconds"), "histogram {name}"),
                "gauge" => assert!(!name.ends_with("_total"), "gauge {name}"),
                other => panic!("{name}: unexpected type {other}"),
            }
            type Series = (Vec<(f64, f64)>, Option<f64>, Option<f64>);
            let mut histograms: BTreeMap<Vec<(String, String)>, Series> = BTreeMap::new();
            for sample in &family.samples {
                let labels: Vec<(String, String)> = sample
                    .labels()
                    .iter()
                    .map(|l| (l.name.to_string(), l.value.clone()))
                    .collect();
                let value = sample.number();
                if *kind == "histogram" {
                    let series: Vec<(String, String)> =
                        labels.iter().filter(|(k, _)| k != "le").cloned().collect();
                    let entry = histograms.entry(series).or_default();
                    let suffix = sample.name().strip_prefix(name).unwrap_or("");
                    match suffix {
                        "_bucket" => {
                            let (_, le) = labels
                                .iter()
                                .find(|(k, _)| k == "le")
                                .unwrap_or_else(|| panic!("{name}: a bucket without le"));
                            let bound: f64 = le.parse().unwrap_or_else(|_| panic!("le={le}"));
                            entry.0.push((bound, value));
                        }
                        "_sum" => entry.1 = Some(value),
                        "_count" => entry.2 = Some(value),
                        _ => panic!("{} in histogram {name}", sample.name()),
                    }
                } else {
                    assert_eq!(sample.name(), *name, "a sample of another family");
                }
                samples.push(Parsed {
                    name: sample.name().to_string(),
                    labels,
                    value,
                });
            }
            for (series, (buckets, sum, count)) in histograms {
                let count = count.unwrap_or_else(|| panic!("{name}{series:?}: no _count"));
                assert!(sum.is_some(), "{name}{series:?}: no _sum");
                for pair in buckets.windows(2) {
                    assert!(
                        pair[0].0 < pair[1].0 && pair[0].1 <= pair[1].1,
                        "{name}{series:?}: buckets {pair:?} not increasing and cumulative"
                    );
                }
                assert_eq!(
                    buckets.last(),
                    Some(&(f64::INFINITY, count)),
                    "{name}{series:?}: the last bucket is +Inf and holds _count"
                );
            }
        }
        samples
    }

    #[test]
    fn a_prometheus_parser_reads_every_line() {
        for state in [state(), AgentState::default()] {
            let text = render_metrics(&state);
            let samples = parse(&text);
            assert_eq!(
                samples.len(),
                text.lines().filter(|l| !l.starts_with('#')).count(),
                "every sample line is a sample\n{text}"
            );
        }
        let samples = parse(&render_metrics(&state()));
        let value = |name: &str, labels: &[(&str, &str)]| {
            samples
                .iter()
                .find(|s| {
                    s.name == name
                        && s.labels.len() == labels.len()
                        && labels
                            .iter()
                            .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
                })
                .map(|s| s.value)
        };
        assert_eq!(value("monitor_synchronizes_total", &[]), Some(42.0));
        assert_eq!(
            value(
                "monitor_preemptions_total",
                &[("preemption_signal", "memory")]
            ),
            Some(2.0)
        );
        assert_eq!(
            value(
                "monitor_signal_available_bytes",
                &[("eviction_signal", "memory.available")]
            ),
            Some(419_430_400.0)
        );
    }

    #[test]
    fn contention_conditions_join_the_node_conditions() {
        use crate::policy::contention::{ContentionCondition, ContentionStatus, StallAverages};
        let mut s = state();
        s.contention = vec![
            ContentionStatus {
                condition: ContentionCondition::SystemMemory,
                status: true,
                averages: StallAverages {
                    avg10: 95.0,
                    avg60: 91.0,
                },
                threshold: 0.9,
            },
            ContentionStatus {
                condition: ContentionCondition::KubepodsDisk,
                status: false,
                averages: StallAverages::default(),
                threshold: 0.9,
            },
        ];
        let text = render_metrics(&s);
        for line in [
            "monitor_node_condition{condition=\"SystemMemoryContentionPressure\"} 1",
            "monitor_node_condition{condition=\"KubepodsDiskContentionPressure\"} 0",
            "monitor_node_condition{condition=\"MemoryPressure\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        assert!(
            !text.contains("SystemDiskContentionPressure"),
            "not reported, not exposed"
        );
        if let Err(e) = check_exposition(&text) {
            panic!("{e}\n{text}");
        }
        let status = crate::api::render::render_status(&s, 0);
        assert!(
            status.contains("SystemMemoryContentionPressure True: full stall avg10 95.00 %, avg60 91.00 % (threshold 90 %)"),
            "{status}"
        );
    }

    #[test]
    fn rendered_state_passes_the_format_checker() {
        let text = render_metrics(&state());
        if let Err(e) = check_exposition(&text) {
            panic!("{e}\n{text}");
        }
    }

    #[test]
    fn empty_state_passes_the_format_checker() {
        let text = render_metrics(&AgentState::default());
        if let Err(e) = check_exposition(&text) {
            panic!("{e}\n{text}");
        }
    }

    /// docs/operation.md's metrics table names every family `/metrics` renders, and
    /// nothing else.
    #[test]
    fn the_operation_page_names_every_metric() {
        let text = render_metrics(&state());
        let mut rendered: BTreeSet<String> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|line| line.split(' ').next())
            .map(String::from)
            .collect();
        // Rendered only where /proc/vmstat has oom_kill (Linux 4.13+).
        if node_oom_kills().is_none() {
            rendered.insert("monitor_node_oom_kills_total".into());
        }
        let page = crate::doc_tables::page("operation.md");
        let documented = crate::doc_tables::first_column(&page, "metric");
        assert!(rendered.len() > 20, "{rendered:?}");
        let undocumented: Vec<_> = rendered.difference(&documented).collect();
        let unknown: Vec<_> = documented.difference(&rendered).collect();
        assert!(
            undocumented.is_empty() && unknown.is_empty(),
            "docs/operation.md: metrics without a row {undocumented:?}, rows /metrics does not render {unknown:?}"
        );
    }

    #[test]
    fn a_family_without_samples_is_left_out() {
        let text = render_metrics(&AgentState::default());
        // No signal is configured yet (before the first synchronize).
        for absent in [
            "monitor_evictions_total",
            "monitor_signal_available_bytes",
            "monitor_threshold_met",
            "monitor_crossing_to_kill_seconds",
            "monitor_eviction_stats_age_seconds",
        ] {
            assert!(!text.contains(absent), "{absent} in\n{text}");
        }
        // Families whose label values are known ahead are there, at 0.
        assert!(text.contains("\nmonitor_eviction_outcomes_total{outcome=\"evicted\"} 0\n"));
    }

    #[rstest]
    #[case::eviction_counter("monitor_evictions_total{eviction_signal=\"memory.available\"} 3")]
    #[case::eviction_idle_signal("monitor_evictions_total{eviction_signal=\"pid.available\"} 0")]
    #[case::eviction_local_storage(
        "monitor_evictions_total{eviction_signal=\"ephemeralpodfs.limit\"} 1"
    )]
    #[case::synchronizes("monitor_synchronizes_total 42")]
    #[case::eviction_outcome("monitor_eviction_outcomes_total{outcome=\"timed_out\"} 2")]
    #[case::eviction_outcome_zero("monitor_eviction_outcomes_total{outcome=\"kill_failed\"} 0")]
    #[case::runtime_unresponsive(
        "monitor_runtime_unresponsive_calls_total{call=\"StopPodSandbox\"} 3"
    )]
    #[case::runtime_unresponsive_idle(
        "monitor_runtime_unresponsive_calls_total{call=\"RemovePodSandbox\"} 0"
    )]
    #[case::stats_age(
        "monitor_eviction_stats_age_seconds_bucket{eviction_signal=\"memory.available\",le=\"0.005\"} 1"
    )]
    #[case::stats_age_idle(
        "monitor_eviction_stats_age_seconds_count{eviction_signal=\"nodefs.inodesFree\"} 0"
    )]
    #[case::preemptions("monitor_preemptions_total{preemption_signal=\"memory\"} 2")]
    #[case::preemptions_idle("monitor_preemptions_total{preemption_signal=\"pods\"} 0")]
    #[case::rejections("monitor_admission_rejections_total{reason=\"OutOfmemory\"} 4")]
    #[case::rejections_idle("monitor_admission_rejections_total{reason=\"Evicted\"} 0")]
    #[case::rejections_other("monitor_admission_rejections_total{reason=\"Other\"} 0")]
    #[case::kernel_oom("monitor_kernel_oom_kills_total{pod=\"default/batch\"} 1")]
    #[case::kernel_oom_idle("monitor_kernel_oom_kills_total{pod=\"default/web\"} 0")]
    #[case::kernel_oom_unattributed("monitor_kernel_oom_kills_total{pod=\"\"} 0")]
    #[case::available_bytes(
        "monitor_signal_available_bytes{eviction_signal=\"memory.available\"} 419430400"
    )]
    #[case::capacity_bytes(
        "monitor_signal_capacity_bytes{eviction_signal=\"memory.available\"} 8589934592"
    )]
    #[case::available_inodes(
        "monitor_signal_available_inodes{eviction_signal=\"nodefs.inodesFree\"} 1200000"
    )]
    #[case::capacity_inodes(
        "monitor_signal_capacity_inodes{eviction_signal=\"nodefs.inodesFree\"} 6553600"
    )]
    #[case::available_pids(
        "monitor_signal_available_pids{eviction_signal=\"pid.available\"} 4190000"
    )]
    #[case::capacity_pids(
        "monitor_signal_capacity_pids{eviction_signal=\"pid.available\"} 4194304"
    )]
    #[case::hard_met(
        "monitor_threshold_met{eviction_signal=\"memory.available\",threshold=\"500Mi\",kind=\"hard\"} 1"
    )]
    #[case::condition_on("monitor_node_condition{condition=\"MemoryPressure\"} 1")]
    #[case::condition_off("monitor_node_condition{condition=\"DiskPressure\"} 0")]
    #[case::source_up("monitor_source_up{source=\"psi\",state=\"running\"} 1")]
    #[case::source_down("monitor_source_up{source=\"memcg_threshold\",state=\"unsupported\"} 0")]
    #[case::pods_running("monitor_pods{phase=\"Running\"} 2")]
    #[case::pods_pending_zero("monitor_pods{phase=\"Pending\"} 0")]
    #[case::wake_bucket("monitor_wake_to_sync_seconds_bucket{source=\"psi\",le=\"0.00005\"} 1")]
    #[case::wake_inf("monitor_wake_to_sync_seconds_bucket{source=\"psi\",le=\"+Inf\"} 2")]
    #[case::idle_source("monitor_wake_to_sync_seconds_count{source=\"ebpf\"} 0")]
    #[case::crossing_to_kill(
        "monitor_crossing_to_kill_seconds_bucket{source=\"ebpf\",stamp=\"kernel\",le=\"0.0005\"} 1"
    )]
    // A 20 s sync is above every bound: only +Inf and _count hold it.
    #[case::above_all_bounds("monitor_sync_duration_seconds_bucket{le=\"10\"} 1")]
    #[case::inf_counts_all("monitor_sync_duration_seconds_bucket{le=\"+Inf\"} 2")]
    #[case::sum("monitor_sync_duration_seconds_sum 20.0002")]
    #[case::type_line("# TYPE monitor_wake_to_sync_seconds histogram")]
    #[case::gc_images("monitor_gc_removed_total{trigger=\"eviction\",kind=\"image\"} 3")]
    #[case::gc_image_bytes(
        "monitor_gc_freed_bytes_total{trigger=\"eviction\",kind=\"image\"} 79126188"
    )]
    #[case::gc_idle("monitor_gc_removed_total{trigger=\"periodic\",kind=\"sandbox\"} 0")]
    #[case::gc_log_bytes_idle("monitor_gc_freed_bytes_total{trigger=\"periodic\",kind=\"log\"} 0")]
    fn exports_sample(#[case] line: &str) {
        let text = render_metrics(&state());
        assert!(
            text.lines().any(|l| l == line),
            "missing line {line:?} in\n{text}"
        );
    }

    #[rstest]
    // Replaced: one gauge mixed bytes, inodes and pids; evictions were labelled `signal`.
    #[case::mixed_units("monitor_signal_available{")]
    #[case::mixed_capacity("monitor_signal_capacity{")]
    #[case::old_label("{signal=")]
    // Containers' and sandboxes' space is not measured: no series that would stay 0.
    #[case::unmeasured_bytes(
        "monitor_gc_freed_bytes_total{trigger=\"periodic\",kind=\"container\"}"
    )]
    fn does_not_export(#[case] text: &str) {
        let rendered = render_metrics(&state());
        assert!(!rendered.contains(text), "{text:?} in\n{rendered}");
    }

    #[rstest]
    #[case::quote("a\"b", "a\\\"b")]
    #[case::backslash("a\\b", "a\\\\b")]
    #[case::newline("a\nb", "a\\nb")]
    #[case::all("x\\\"\ny", "x\\\\\\\"\\ny")]
    #[case::plain("memory.available", "memory.available")]
    fn escapes_label_values(#[case] raw: &str, #[case] escaped: &str) {
        assert_eq!(escape_label_value(raw), escaped);
        let mut s = state();
        s.signals[0].signal = raw.into();
        s.pods[0].key = raw.into();
        let text = render_metrics(&s);
        assert!(
            text.contains(&format!(
                "monitor_threshold_met{{eviction_signal=\"{escaped}\""
            )),
            "{text}"
        );
        if let Err(e) = check_exposition(&text) {
            panic!("{e}\n{text}");
        }
        // The parser reads back the raw values.
        let samples = parse(&text);
        let read_back = |family: &str, label: &str| {
            samples
                .iter()
                .any(|s| s.name == family && s.labels.iter().any(|(k, v)| k == label && v == raw))
        };
        assert!(
            read_back("monitor_threshold_met", "eviction_signal"),
            "{text}"
        );
        assert!(read_back("monitor_kernel_oom_kills_total", "pod"), "{text}");
    }

    #[test]
    fn a_malformed_histogram_still_renders_valid() {
        let mut s = AgentState::default();
        s.metrics.sync_duration = Histogram {
            // Unsorted, non-cumulative, a duplicate bound, an explicit +Inf and a NaN.
            buckets: vec![
                (1.0, 5),
                (0.1, 7),
                (0.1, 2),
                (f64::INFINITY, 1),
                (f64::NAN, 9),
            ],
            sum: f64::NAN,
            count: 3,
        };
        let text = render_metrics(&s);
        if let Err(e) = check_exposition(&text) {
            panic!("{e}\n{text}");
        }
        parse(&text);
        assert!(
            text.contains("monitor_sync_duration_seconds_bucket{le=\"0.1\"} 7\n"),
            "{text}"
        );
        assert!(
            text.contains("monitor_sync_duration_seconds_bucket{le=\"1\"} 7\n"),
            "{text}"
        );
        assert!(
            text.contains("monitor_sync_duration_seconds_count 7\n"),
            "{text}"
        );
        assert!(
            text.contains("monitor_sync_duration_seconds_sum NaN\n"),
            "{text}"
        );
    }

    #[rstest]
    #[case(f64::INFINITY, "+Inf")]
    #[case(f64::NEG_INFINITY, "-Inf")]
    #[case(f64::NAN, "NaN")]
    #[case(1e-5, "0.00001")]
    #[case(10.0, "10")]
    fn formats_floats(#[case] value: f64, #[case] text: &str) {
        assert_eq!(format_float(value), text);
    }

    #[rstest]
    #[case("memory.available", Some("bytes"))]
    #[case("allocatableMemory.available", Some("bytes"))]
    #[case("imagefs.available", Some("bytes"))]
    #[case("containerfs.inodesFree", Some("inodes"))]
    #[case("pid.available", Some("pids"))]
    #[case("no.such", None)]
    fn signals_have_one_unit(#[case] signal: &str, #[case] unit: Option<&str>) {
        assert_eq!(signal_unit(signal), unit);
    }
}
