//! `/metrics`: the agent's state in the Prometheus text exposition format 0.0.4
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>).
//!
//! The kubelet exports evictions as `kubelet_evictions{eviction_signal}` (pkg/kubelet/
//! metrics/metrics.go); ours is `monitor_evictions_total{signal}`, a counter named the way
//! current Prometheus conventions ask. Label values that are known ahead (wake sources,
//! node conditions, pod phases, configured signals) are always exported, at 0 when idle,
//! so that alerts and `rate()` see a series from the start instead of an absent one.
use std::collections::BTreeMap;

use crate::notify::{SourceState, WakeSource};
use crate::policy::types::NodeConditionType;
use crate::state::{AgentState, Histogram};

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

/// `oom_kill` of /proc/vmstat (kernels since 4.13).
fn node_oom_kills() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/vmstat").ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("oom_kill ")?.trim().parse().ok())
}

/// Renders every metric family, each as HELP, TYPE and its samples in one group.
pub fn render_metrics(state: &AgentState) -> String {
    let mut out = Metrics::default();
    let m = &state.metrics;

    out.family(
        "monitor_evictions_total",
        "counter",
        "Pods evicted by the agent, by the eviction signal that triggered the eviction.",
    );
    let mut evictions: BTreeMap<&str, u64> = state
        .signals
        .iter()
        .map(|s| (s.signal.as_str(), 0))
        .collect();
    for (signal, count) in &m.evictions {
        evictions.insert(signal, *count);
    }
    for (signal, count) in evictions {
        out.sample("monitor_evictions_total", &[("signal", signal)], count);
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
        "monitor_kernel_oom_kills_total",
        "counter",
        "Victims of the kernel OOM killer (eBPF oom:mark_victim), by pod; pod=\"\" is outside any pod or unattributed. Every one is a kill the agent did not prevent.",
    );
    let mut oom: BTreeMap<&str, u64> = state.pods.iter().map(|p| (p.key.as_str(), 0)).collect();
    oom.insert("", 0);
    for (pod, count) in &m.kernel_oom_kills {
        oom.insert(pod, *count);
    }
    for (pod, count) in oom {
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
    let mut removed: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
    for trigger in GC_TRIGGERS {
        for kind in GC_KINDS {
            removed.insert((trigger, kind), (0, 0));
        }
    }
    for (trigger, kinds) in &m.gc_removed {
        for (kind, count) in kinds {
            removed.entry((trigger, kind)).or_default().0 = *count;
        }
    }
    for (trigger, kinds) in &m.gc_freed_bytes {
        for (kind, bytes) in kinds {
            removed.entry((trigger, kind)).or_default().1 = *bytes;
        }
    }
    for ((trigger, kind), (count, _)) in &removed {
        out.sample(
            "monitor_gc_removed_total",
            &[("trigger", trigger), ("kind", kind)],
            *count,
        );
    }
    out.family(
        "monitor_gc_freed_bytes_total",
        "counter",
        "Bytes garbage collection freed, by trigger and kind (images by their size, logs by their disk usage).",
    );
    for ((trigger, kind), (_, bytes)) in &removed {
        out.sample(
            "monitor_gc_freed_bytes_total",
            &[("trigger", trigger), ("kind", kind)],
            *bytes,
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
        "Time from a wake-up reaching userspace to the synchronize it caused, by wake source.",
    );
    let idle = Histogram::default();
    for source in WakeSource::ALL {
        let histogram = m.wake_latency.get(&source).unwrap_or(&idle);
        out.histogram(
            "monitor_wake_to_sync_seconds",
            &[("source", source.name())],
            histogram,
        );
    }

    out.family(
        "monitor_signal_available",
        "gauge",
        "Eviction signal: amount available now (bytes, inodes or pids, by signal).",
    );
    for s in &state.signals {
        out.sample(
            "monitor_signal_available",
            &[("signal", &s.signal)],
            s.available,
        );
    }
    out.family(
        "monitor_signal_capacity",
        "gauge",
        "Eviction signal: capacity the available amount is measured against.",
    );
    for s in &state.signals {
        out.sample(
            "monitor_signal_capacity",
            &[("signal", &s.signal)],
            s.capacity,
        );
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
                    ("signal", &s.signal),
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
        "1 while the node reports this condition (MemoryPressure, DiskPressure, PIDPressure).",
    );
    let mut conditions: BTreeMap<&str, u8> = CONDITIONS.iter().map(|c| (c.as_str(), 0)).collect();
    for c in &state.conditions {
        conditions.insert(c, 1);
    }
    for (condition, on) in conditions {
        out.sample("monitor_node_condition", &[("condition", condition)], on);
    }

    out.family(
        "monitor_source_up",
        "gauge",
        "1 when the event source runs, else 0; the state label says why not.",
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
}

impl Metrics {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        self.text += &format!("# HELP {name} {}\n", escape_help(help));
        self.text += &format!("# TYPE {name} {kind}\n");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
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
    use rstest::rstest;

    use super::*;
    use crate::api::exposition::check_exposition;
    use crate::notify::SourceStatus;
    use crate::state::{PodView, SignalStatus, ThresholdStatus};

    fn pod(phase: &str) -> PodView {
        PodView {
            key: "default/web".into(),
            uid: "u1".into(),
            qos_class: "Burstable".into(),
            priority: 0,
            phase: phase.into(),
            reason: None,
            message: None,
            cgroup: None,
            memory_working_set_bytes: None,
            containers: vec![],
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
        s.signals = vec![SignalStatus {
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
        }];
        s.pods = vec![pod("Running"), pod("Running"), pod("Failed")];
        s.metrics.evictions.insert("memory.available".into(), 3);
        s.metrics.synchronizes = 42;
        s.metrics.eviction_outcomes.insert("timed_out".into(), 2);
        s.metrics.sync_duration.observe(0.0002);
        s.metrics.sync_duration.observe(20.0);
        let mut psi = Histogram::default();
        psi.observe(3e-5);
        psi.observe(0.002);
        s.metrics.wake_latency.insert(WakeSource::Psi, psi);
        s
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

    #[rstest]
    #[case::eviction_counter("monitor_evictions_total{signal=\"memory.available\"} 3")]
    #[case::synchronizes("monitor_synchronizes_total 42")]
    #[case::eviction_outcome("monitor_eviction_outcomes_total{outcome=\"timed_out\"} 2")]
    #[case::eviction_outcome_zero("monitor_eviction_outcomes_total{outcome=\"kill_failed\"} 0")]
    #[case::available("monitor_signal_available{signal=\"memory.available\"} 419430400")]
    #[case::capacity("monitor_signal_capacity{signal=\"memory.available\"} 8589934592")]
    #[case::hard_met(
        "monitor_threshold_met{signal=\"memory.available\",threshold=\"500Mi\",kind=\"hard\"} 1"
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
    fn exports_sample(#[case] line: &str) {
        let text = render_metrics(&state());
        assert!(
            text.lines().any(|l| l == line),
            "missing line {line:?} in\n{text}"
        );
    }

    #[rstest]
    #[case::quote("a\"b", "a\\\"b")]
    #[case::backslash("a\\b", "a\\\\b")]
    #[case::newline("a\nb", "a\\nb")]
    #[case::plain("memory.available", "memory.available")]
    fn escapes_label_values(#[case] raw: &str, #[case] escaped: &str) {
        assert_eq!(escape_label_value(raw), escaped);
        let mut s = state();
        s.signals[0].signal = raw.into();
        let text = render_metrics(&s);
        assert!(
            text.contains(&format!("monitor_signal_available{{signal=\"{escaped}\"}}")),
            "{text}"
        );
        if let Err(e) = check_exposition(&text) {
            panic!("{e}\n{text}");
        }
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
}
