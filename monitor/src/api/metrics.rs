//! `/metrics`: the agent's state in the Prometheus text exposition format 0.0.4
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>), or in OpenMetrics
//! 1.0 (<https://prometheus.io/docs/specs/om/open_metrics_spec/>) to a scraper whose
//! `Accept` header asks for it, as Prometheus' does ([`Exposition::negotiate`]). Each
//! scrape gathers the families of the table (`families.rs`) with their series into a
//! [`Scrape`], and prometheus-client writes it in the format asked for: the formats'
//! naming (OpenMetrics names a counter family without its `_total` and an info family
//! without its `_info`), escapes, float spellings and OpenMetrics' `# EOF` are the crate's.
//!
//! Naming: every family is `monitor_` and a name, but for the `process_` families that
//! every Prometheus client library exports, under their standard names ([`process`]).
//! Where the kubelet exports the same measure (pkg/kubelet/metrics/metrics.go), the name
//! is the kubelet's without its `kubelet_` prefix, with `_total` added to a counter that
//! lacks it, and the labels are the kubelet's, names and values:
//! `kubelet_evictions{eviction_signal}` is
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
//! configured signal has) is left out, and so is a process metric /proc did not give.
use std::collections::BTreeMap;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{self, DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::notify::{SourceState, WakeSource};
use crate::policy::signal::Signal;
use crate::policy::types::{NodeConditionType, Resource};
use crate::state::{
    ADMISSION_REJECTION_REASONS, AgentState, Histogram, PREEMPTION_SIGNALS, SignalStatus,
};

mod families;
mod process;

#[cfg(test)]
use crate::state::buckets::CROSSING_TO_KILL_BUCKETS;
use crate::state::buckets::{STATS_AGE_BUCKETS, WAKE_TO_SYNC_BUCKETS};
use families::*;
use process::ProcessMetrics;

/// The `Content-Type` of the text format 0.0.4.
pub const METRICS_CONTENT_TYPE: &str = encoding::prometheus_text::CONTENT_TYPE;
/// The `Content-Type` of OpenMetrics 1.0.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The two formats `/metrics` speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposition {
    /// The Prometheus text format 0.0.4: what every scraper reads, the default.
    Text,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Exposition {
    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::Text => METRICS_CONTENT_TYPE,
            Exposition::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        }
    }

    /// The format for a request's `Accept` header (RFC 9110 media ranges with `q`):
    /// OpenMetrics when `application/openmetrics-text` (version 1.0.0, or none given) is
    /// asked for by name and weighted at least as much as any range the text format
    /// matches (`text/plain` at version 0.0.4 or none, `text/*`, `*/*`); the text format
    /// otherwise, without a header, and for a header that does not parse. A range of
    /// OpenMetrics at another version (0.0.1, the draft) is not this one.
    pub fn negotiate(accept: Option<&str>) -> Exposition {
        let Some(accept) = accept else {
            return Exposition::Text;
        };
        let (mut openmetrics, mut text) = (0.0f64, 0.0f64);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let (mut q, mut version) = (1.0f64, None);
            for param in parts {
                let Some((key, value)) = param.split_once('=') else {
                    continue;
                };
                let value = value.trim().trim_matches('"');
                match key.trim().to_ascii_lowercase().as_str() {
                    "q" => q = value.parse().unwrap_or(0.0),
                    "version" => version = Some(value.to_string()),
                    _ => {}
                }
            }
            if !(0.0..=1.0).contains(&q) {
                continue;
            }
            match (media.as_str(), version.as_deref()) {
                ("application/openmetrics-text", None | Some("1.0.0")) => {
                    openmetrics = openmetrics.max(q)
                }
                ("text/plain", None | Some("0.0.4")) | ("text/*" | "*/*", _) => text = text.max(q),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Exposition::OpenMetrics
        } else {
            Exposition::Text
        }
    }
}

/// The running build, for `monitor_build_info`: the package's version and the git commit
/// monitor/build.rs found ("unknown" without one).
const VERSION: &str = env!("CARGO_PKG_VERSION");
const REVISION: &str = env!("MONITOR_REVISION");

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

/// The units of the eviction signals, each with a family of its own for the amounts
/// available and for the capacities.
const SIGNAL_UNITS: [(&str, &Family, &Family); 3] = [
    ("bytes", &SIGNAL_AVAILABLE_BYTES, &SIGNAL_CAPACITY_BYTES),
    ("inodes", &SIGNAL_AVAILABLE_INODES, &SIGNAL_CAPACITY_INODES),
    ("pids", &SIGNAL_AVAILABLE_PIDS, &SIGNAL_CAPACITY_PIDS),
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

/// Renders every metric family in the text format 0.0.4, each as HELP, TYPE and its
/// samples in one group.
pub fn render_metrics(state: &AgentState) -> String {
    render_metrics_as(state, Exposition::Text)
}

/// [`render_metrics`] in the format given.
pub fn render_metrics_as(state: &AgentState, exposition: Exposition) -> String {
    render(state, &ProcessMetrics::read(), exposition)
}

/// [`render_metrics_as`] with the process metrics given.
fn render(state: &AgentState, process: &ProcessMetrics, exposition: Exposition) -> String {
    let mut out = Scrape::default();
    let m = &state.metrics;
    let configured = || state.signals.iter().map(|s| s.signal.as_str());

    out.family(&BUILD_INFO);
    out.sample(&[VERSION, REVISION], 1u64);

    out.family(&EVICTIONS_TOTAL);
    for (signal, count) in with_known(configured(), &m.evictions) {
        out.sample(&[signal], count);
    }

    out.family(&EVICTION_OUTCOMES_TOTAL);
    for outcome in ["evicted", "already_gone", "timed_out", "kill_failed"] {
        let count = m.eviction_outcomes.get(outcome).copied().unwrap_or(0);
        out.sample(&[outcome], count);
    }

    out.family(&SHADOW_ACTIONS_TOTAL);
    // Every action for every configured signal, 0 until counted.
    let mut shadow: BTreeMap<(&str, &str), u64> = ["evict", "kill", "reclaim"]
        .into_iter()
        .flat_map(|action| configured().map(move |signal| ((action, signal), 0)))
        .collect();
    for ((action, signal), count) in &m.shadow_actions {
        shadow.insert((action.as_str(), signal.as_str()), *count);
    }
    for ((action, signal), count) in shadow {
        out.sample(&[action, signal], count);
    }

    out.family(&PRE_KILL_HOOKS_TOTAL);
    for result in ["ok", "failed", "timed_out", "error"] {
        let count = m.pre_kill_hooks.get(result).copied().unwrap_or(0);
        out.sample(&[result], count);
    }

    out.family(&RUNTIME_UNRESPONSIVE_CALLS_TOTAL);
    for (call, count) in with_known(
        ["StopContainer", "StopPodSandbox", "RemovePodSandbox"],
        &m.runtime_unresponsive_calls,
    ) {
        out.sample(&[call], count);
    }

    out.family(&INEFFECTIVE_EVICTIONS_TOTAL);
    for (signal, count) in with_known(configured(), &m.ineffective_evictions) {
        out.sample(&[signal], count);
    }

    out.family(&MEMORY_RECLAIMED_BYTES_TOTAL);
    for (qos, bytes) in with_known(["BestEffort", "Burstable"], &m.memory_reclaimed_bytes) {
        out.sample(&[qos], bytes);
    }

    out.family(&MEMORY_RELIEF_PASSES_TOTAL);
    for (result, count) in with_known(
        ["relieved", "stalled", "exhausted", "failed"],
        &m.memory_relief_passes,
    ) {
        out.sample(&[result], count);
    }

    out.family(&MEMORY_RELIEF_DURATION_SECONDS);
    out.histogram(&[], &m.memory_relief_duration);

    out.family(&HOT_WATCH_CPU_SECONDS_TOTAL);
    out.sample(&[], m.hot_watch_cpu_seconds);

    out.family(&HOT_WATCH_REHEARSALS_TOTAL);
    out.sample(&[], m.hot_watch_rehearsals);

    out.family(&EVICTION_STATS_AGE_SECONDS);
    let idle_age = Histogram::new(STATS_AGE_BUCKETS);
    let mut ages: BTreeMap<&str, &Histogram> = configured().map(|s| (s, &idle_age)).collect();
    for (signal, histogram) in &m.eviction_stats_age {
        ages.insert(signal, histogram);
    }
    for (signal, histogram) in ages {
        out.histogram(&[signal], histogram);
    }

    out.family(&PREEMPTIONS_TOTAL);
    for (signal, count) in with_known(PREEMPTION_SIGNALS, &m.preemptions) {
        out.sample(&[signal], count);
    }

    out.family(&ADMISSION_REJECTIONS_TOTAL);
    let reasons = ADMISSION_REJECTION_REASONS
        .into_iter()
        .chain(["OutOfExtendedResources", "Other"]);
    for (reason, count) in with_known(reasons, &m.admission_rejections) {
        out.sample(&[reason], count);
    }

    out.family(&KERNEL_OOM_KILLS_TOTAL);
    let pods = state.pods.iter().map(|p| p.key.as_str()).chain([""]);
    for (pod, count) in with_known(pods, &m.kernel_oom_kills) {
        let (namespace, name) = namespace_and_name(pod);
        out.sample(&[namespace, name], count);
    }
    if let Some(node) = node_oom_kills() {
        out.family(&NODE_OOM_KILLS_TOTAL);
        out.sample(&[], node);
    }

    out.family(&GC_REMOVED_TOTAL);
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
        out.sample(&[trigger, kind], count);
    }
    out.family(&GC_FREED_BYTES_TOTAL);
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
        out.sample(&[trigger, kind], bytes);
    }

    // Both reasons always, so that the series set is stable from the start.
    out.family(&IMAGE_GARBAGE_COLLECTED_TOTAL);
    for reason in ["age", "space"] {
        out.sample(
            &[reason],
            m.images_collected.get(reason).copied().unwrap_or(0),
        );
    }

    out.family(&SYNCHRONIZES_TOTAL);
    out.sample(&[], m.synchronizes);

    out.family(&SYNCHRONIZE_PANICS_TOTAL);
    out.sample(&[], m.synchronize_panics);

    out.family(&LAST_SYNCHRONIZE_TIMESTAMP_SECONDS);
    out.sample(
        &[],
        state
            .last_sync
            .as_ref()
            .map_or(0.0, |s| s.finished_unix_seconds),
    );

    out.family(&SYNC_DURATION_SECONDS);
    out.histogram(&[], &m.sync_duration);

    out.family(&WAKE_TO_SYNC_SECONDS);
    let idle_wake = Histogram::new(WAKE_TO_SYNC_BUCKETS);
    for source in WakeSource::ALL {
        let histogram = m.wake_latency.get(&source).unwrap_or(&idle_wake);
        out.histogram(&[source.name()], histogram);
    }

    out.family(&CROSSING_TO_KILL_SECONDS);
    for (source, stamps) in &m.crossing_to_kill {
        for (stamp, histogram) in stamps {
            out.histogram(&[source.name(), stamp], histogram);
        }
    }

    for (unit, available, capacity) in SIGNAL_UNITS {
        let of_unit: Vec<&SignalStatus> = state
            .signals
            .iter()
            .filter(|s| signal_unit(&s.signal) == Some(unit))
            .collect();
        out.family(available);
        for s in &of_unit {
            out.sample(&[&s.signal], s.available);
        }
        out.family(capacity);
        for s in &of_unit {
            out.sample(&[&s.signal], s.capacity);
        }
    }

    out.family(&THRESHOLD_MET);
    for s in &state.signals {
        for t in &s.thresholds {
            out.sample(&[&s.signal, &t.value, &t.kind], u8::from(t.met));
        }
    }

    out.family(&NODE_CONDITION);
    let mut conditions: BTreeMap<&str, u8> = CONDITIONS.iter().map(|c| (c.as_str(), 0)).collect();
    for c in &state.conditions {
        conditions.insert(c, 1);
    }
    for c in &state.contention {
        conditions.insert(c.condition.as_str(), u8::from(c.status));
    }
    for (condition, on) in conditions {
        out.sample(&[condition], on);
    }

    out.family(&SOURCE_UP);
    for s in &state.sources {
        out.sample(
            &[s.source.name()],
            u8::from(s.state == SourceState::Running),
        );
    }
    out.family(&SOURCE_STATE);
    for s in &state.sources {
        for each in SOURCE_STATES {
            out.sample(
                &[s.source.name(), source_state(each)],
                u8::from(s.state == each),
            );
        }
    }

    out.family(&PODS);
    let mut phases: BTreeMap<&str, u64> = POD_PHASES.iter().map(|p| (*p, 0)).collect();
    for pod in &state.pods {
        let n = phases.entry(pod.phase.as_str()).or_insert(0);
        *n = n.saturating_add(1);
    }
    for (phase, n) in phases {
        out.sample(&[phase], n);
    }

    // What could not be read is left out (its family too), not rendered as 0.
    let process_samples: [(&'static Family, Option<Value>); 6] = [
        (
            &PROCESS_CPU_SECONDS_TOTAL,
            process.cpu_seconds.map(Value::Float),
        ),
        (
            &PROCESS_RESIDENT_MEMORY_BYTES,
            process.resident_bytes.map(Value::Count),
        ),
        (
            &PROCESS_VIRTUAL_MEMORY_BYTES,
            process.virtual_bytes.map(Value::Count),
        ),
        (
            &PROCESS_START_TIME_SECONDS,
            process.start_time_seconds.map(Value::Float),
        ),
        (&PROCESS_OPEN_FDS, process.open_fds.map(Value::Count)),
        (&PROCESS_MAX_FDS, process.max_fds.map(Value::Count)),
    ];
    for (family, value) in process_samples {
        out.family(family);
        if let Some(value) = value {
            out.sample(&[], value);
        }
    }

    out.encode(exposition)
}

/// Every state of a source: `monitor_source_state` has a series for each.
const SOURCE_STATES: [SourceState; 4] = [
    SourceState::Running,
    SourceState::Disabled,
    SourceState::Failed,
    SourceState::Unsupported,
];

/// A pod's `namespace` and `pod` labels from its "namespace/name" key; a key without a
/// namespace (the "" of the unattributed OOM kills) has an empty one.
fn namespace_and_name(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

pub(crate) fn source_state(state: SourceState) -> &'static str {
    match state {
        SourceState::Running => "running",
        SourceState::Disabled => "disabled",
        SourceState::Failed => "failed",
        SourceState::Unsupported => "unsupported",
    }
}

/// A sample's value, as its family's type encodes it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Value {
    Count(u64),
    Int(i64),
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Count(v)
    }
}

impl From<u8> for Value {
    fn from(v: u8) -> Value {
        Value::Count(u64::from(v))
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}

/// Label names and values of one series, in its family's order.
type Labels = Vec<(&'static str, String)>;

/// One series of a family.
#[derive(Debug)]
enum Series {
    Sample {
        labels: Labels,
        value: Value,
    },
    /// Buckets as (upper bound, count in that bucket alone), ending with `+Inf`.
    Histogram {
        labels: Labels,
        buckets: Vec<(f64, u64)>,
        sum: f64,
        count: u64,
    },
}

/// One scrape's families and their series, in the order of [`FAMILIES`]. `render` fills
/// it; prometheus-client writes it in the format asked for, as a collector of a registry
/// made for the scrape. Adding cannot fail, so nothing here returns errors.
#[derive(Debug, Default)]
struct Scrape {
    families: Vec<(&'static Family, Vec<Series>)>,
    /// Where in [`FAMILIES`] the next family may be: they are begun in the table's order.
    next: usize,
}

impl Scrape {
    fn family(&mut self, family: &'static Family) {
        let at = FAMILIES
            .get(self.next..)
            .and_then(|rest| rest.iter().position(|f| f == family));
        debug_assert!(
            at.is_some(),
            "{} is begun out of the order of FAMILIES",
            family.name
        );
        self.next += at.map_or(0, |at| at + 1);
        self.families.push((family, Vec::new()));
    }

    /// The family begun last and its series; adding a series before any family is a
    /// bug of this file.
    fn current(&mut self) -> (&'static Family, &mut Vec<Series>) {
        let (family, series) = self
            .families
            .last_mut()
            .expect("a sample belongs to the family begun before it");
        (family, series)
    }

    /// A sample of the current family, with the values of its labels (in its entry's
    /// order).
    fn sample(&mut self, values: &[&str], value: impl Into<Value>) {
        let (family, series) = self.current();
        debug_assert!(
            !matches!(family.kind, FamilyType::Histogram(_)),
            "{}",
            family.name
        );
        series.push(Series::Sample {
            labels: named(family, values),
            value: value.into(),
        });
    }

    /// One series of the current histogram family.
    ///
    /// The state's histograms come from [`Histogram::observe`] and are already cumulative;
    /// this still sorts the bounds and keeps counts monotone so that any value in the state
    /// renders as a valid histogram (a scrape that fails to parse loses every metric).
    fn histogram(&mut self, values: &[&str], h: &Histogram) {
        let (family, series) = self.current();
        debug_assert!(
            matches!(family.kind, FamilyType::Histogram(_)),
            "{}",
            family.name
        );
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
        // Cumulative counts made monotone, then each bucket's own share, which is what
        // the encoder adds up again.
        let (mut running, mut buckets) = (0u64, Vec::with_capacity(bounds.len()));
        for (bound, cumulative) in bounds {
            let before = running;
            running = running.max(cumulative);
            buckets.push((bound, running - before));
        }
        let count = h.count.max(running);
        // `+Inf` last, holding the rest: the OpenMetrics encoder writes only the buckets
        // it is given, and the text format's adds none once it sees one.
        buckets.push((f64::INFINITY, count - running));
        series.push(Series::Histogram {
            labels: named(family, values),
            buckets,
            sum: h.sum,
            count,
        });
    }

    /// The scrape in `exposition`'s format, written by prometheus-client.
    fn encode(self, exposition: Exposition) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut text = String::new();
        let written = match exposition {
            Exposition::Text => encoding::prometheus_text::encode(&mut text, &registry),
            Exposition::OpenMetrics => encoding::text::encode(&mut text, &registry),
        };
        // Writing into a String does not fail, and the collector itself returns only
        // the writer's errors.
        debug_assert!(written.is_ok(), "{written:?}");
        text
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (family, series) in &self.families {
            // A family with no series is left out, its HELP and TYPE too.
            if series.is_empty() {
                continue;
            }
            // The encoder names the samples: a counter's with `_total` and an info's
            // with `_info`, in both formats (OpenMetrics names the family without them).
            let (name, kind) = match family.kind {
                FamilyType::Counter => (
                    family.name.strip_suffix("_total").unwrap_or(family.name),
                    MetricType::Counter,
                ),
                FamilyType::Info => (
                    family.name.strip_suffix("_info").unwrap_or(family.name),
                    MetricType::Info,
                ),
                FamilyType::Gauge => (family.name, MetricType::Gauge),
                FamilyType::Histogram(_) => (family.name, MetricType::Histogram),
            };
            let mut metric = encoder.encode_descriptor(name, family.help, None, kind)?;
            for one in series {
                match one {
                    Series::Sample { labels, .. } if family.kind == FamilyType::Info => {
                        metric.encode_info(labels)?;
                    }
                    Series::Sample { labels, value } => {
                        let mut sample = metric.encode_family(labels)?;
                        match (family.kind, *value) {
                            (FamilyType::Counter, Value::Count(v)) => {
                                sample.encode_counter::<NoLabelSet, u64, u64>(&v, None)?;
                            }
                            (FamilyType::Counter, Value::Int(v)) => {
                                let v = u64::try_from(v).unwrap_or(0);
                                sample.encode_counter::<NoLabelSet, u64, u64>(&v, None)?;
                            }
                            (FamilyType::Counter, Value::Float(v)) => {
                                sample.encode_counter::<NoLabelSet, f64, f64>(&v, None)?;
                            }
                            (_, Value::Count(v)) => sample.encode_gauge(&v)?,
                            (_, Value::Int(v)) => sample.encode_gauge(&v)?,
                            (_, Value::Float(v)) => sample.encode_gauge(&v)?,
                        }
                    }
                    Series::Histogram {
                        labels,
                        buckets,
                        sum,
                        count,
                    } => {
                        metric
                            .encode_family(labels)?
                            .encode_histogram::<NoLabelSet>(*sum, *count, buckets, None)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The label values of a sample paired with the label names of its family.
fn named(family: &Family, values: &[&str]) -> Labels {
    debug_assert_eq!(
        family.labels.len(),
        values.len(),
        "{}: labels {:?}, values {values:?}",
        family.name,
        family.labels
    );
    family
        .labels
        .iter()
        .copied()
        .zip(values.iter().map(|v| (*v).to_string()))
        .collect()
}

#[cfg(test)]
mod tests;
