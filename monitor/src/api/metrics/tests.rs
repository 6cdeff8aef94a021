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
    s.metrics.images_collected.insert("space".into(), 3);
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
    s.metrics.observe_wake_to_sync(WakeSource::Psi, 3e-5);
    s.metrics.observe_wake_to_sync(WakeSource::Psi, 0.002);
    s.metrics.observe_stats_age("memory.available", 0.004);
    s.metrics.preemptions.insert("memory".into(), 2);
    s.metrics
        .admission_rejections
        .insert("OutOfmemory".into(), 4);
    s.metrics.kernel_oom_kills.insert("default/batch".into(), 1);
    let mut kill = Histogram::new(CROSSING_TO_KILL_BUCKETS);
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

/// `monitor_build_info` names the build the test runs in: its package version and, where
/// git answers, the commit checked out.
#[test]
fn build_info_names_this_build() {
    let samples = parse(&render_metrics(&AgentState::default()));
    let info: Vec<&Parsed> = samples
        .iter()
        .filter(|s| s.name == "monitor_build_info")
        .collect();
    let [info] = &info[..] else {
        panic!("one monitor_build_info sample: {info:?}");
    };
    assert_eq!(info.value, 1.0);
    let label = |name: &str| {
        info.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no {name} label: {info:?}"))
    };
    assert_eq!(label("version"), env!("CARGO_PKG_VERSION"));
    let revision = label("revision");
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--verify", "--quiet", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string());
    match head {
        // The commit built, marked when built from changes not committed (a clean
        // checkout, as CI's, builds an unmarked one).
        Some(head) => assert!(
            revision == head || revision == format!("{head}-dirty"),
            "revision {revision:?}, HEAD {head}"
        ),
        // Built elsewhere, or no git here: a commit or "unknown", nothing else.
        None => assert!(
            revision == "unknown" || {
                let commit = revision.strip_suffix("-dirty").unwrap_or(revision);
                commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit())
            },
            "revision {revision:?}"
        ),
    }
}

/// The value of the one sample of an unlabelled family, if there is one.
fn unlabelled(samples: &[Parsed], name: &str) -> Option<f64> {
    let found: Vec<&Parsed> = samples.iter().filter(|s| s.name == name).collect();
    match &found[..] {
        [] => None,
        [one] if one.labels.is_empty() => Some(one.value),
        more => panic!("{name}: {more:?}"),
    }
}

/// The process metrics of this very test process, scraped as Prometheus would.
#[test]
fn process_metrics_describe_this_process() {
    let text = render_metrics(&AgentState::default());
    if let Err(e) = check_exposition(&text) {
        panic!("{e}\n{text}");
    }
    let samples = parse(&text);
    let get =
        |name: &str| unlabelled(&samples, name).unwrap_or_else(|| panic!("no {name} in\n{text}"));
    let cpu = get("process_cpu_seconds_total");
    assert!(cpu >= 0.0 && cpu.is_finite(), "cpu {cpu}");
    let resident = get("process_resident_memory_bytes");
    let virtual_bytes = get("process_virtual_memory_bytes");
    assert!(resident > 0.0, "rss {resident}");
    assert!(
        virtual_bytes >= resident,
        "vsize {virtual_bytes} < rss {resident}"
    );
    // stdin, stdout and stderr at least.
    let open = get("process_open_fds");
    assert!(open >= 3.0, "open fds {open}");
    assert!(get("process_max_fds") >= open, "{text}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    let start = get("process_start_time_seconds");
    // btime is whole seconds, so the start may read up to a second late.
    assert!(
        start > now - 3600.0 && start <= now + 1.0,
        "started at {start}, now {now}"
    );
}

/// What /proc did not give is left out, family and all: no sample says 0 for it.
#[test]
fn process_metrics_not_read_are_left_out() {
    let none = render(&state(), &ProcessMetrics::default(), Exposition::Text);
    assert!(!none.contains("process_"), "{none}");
    let some = ProcessMetrics {
        open_fds: Some(12),
        max_fds: Some(u64::MAX),
        ..ProcessMetrics::default()
    };
    let text = render(&state(), &some, Exposition::Text);
    if let Err(e) = check_exposition(&text) {
        panic!("{e}\n{text}");
    }
    let samples = parse(&text);
    assert_eq!(unlabelled(&samples, "process_open_fds"), Some(12.0));
    assert_eq!(
        unlabelled(&samples, "process_max_fds"),
        Some(u64::MAX as f64),
        "an unlimited soft limit is RLIM_INFINITY"
    );
    for absent in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_start_time_seconds",
    ] {
        assert!(!text.contains(absent), "{absent} in\n{text}");
    }
}

/// A source that fails keeps its series, names and labels alike: only values change, so
/// that alerts and graphs follow one series through the failure.
#[test]
fn a_failing_source_keeps_its_series() {
    let series = |state: &AgentState| -> BTreeMap<String, f64> {
        parse(&render_metrics(state))
            .into_iter()
            .filter(|s| s.name.starts_with("monitor_source_"))
            .map(|s| {
                let labels: Vec<String> =
                    s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                (format!("{}{{{}}}", s.name, labels.join(",")), s.value)
            })
            .collect()
    };
    let running = state();
    let mut failed = state();
    failed.sources[0] = SourceStatus::failed(WakeSource::Psi, "the watch ended");
    let (before, after) = (series(&running), series(&failed));
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "the same series"
    );
    let values = |series: &BTreeMap<String, f64>| {
        [
            "monitor_source_up{source=psi}",
            "monitor_source_state{source=psi,state=running}",
            "monitor_source_state{source=psi,state=failed}",
        ]
        .map(|key| series.get(key).copied())
    };
    assert_eq!(
        values(&before),
        [Some(1.0), Some(1.0), Some(0.0)],
        "{before:?}"
    );
    assert_eq!(
        values(&after),
        [Some(0.0), Some(0.0), Some(1.0)],
        "{after:?}"
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

/// `/metrics` renders exactly the families of [`FAMILIES`], in its order, each with the
/// HELP and TYPE of its entry.
#[test]
fn metrics_renders_the_families_of_the_table() {
    let text = render_metrics(&state());
    let mut rendered: Vec<(String, String, String)> = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(help) = line.strip_prefix("# HELP ") else {
            continue;
        };
        let (name, help) = help.split_once(' ').unwrap_or((help, ""));
        let kind = lines
            .next()
            .and_then(|l| l.strip_prefix(&format!("# TYPE {name} ")))
            .unwrap_or_else(|| panic!("{name}: no TYPE after its HELP"));
        rendered.push((name.into(), kind.into(), help.into()));
    }
    let table: Vec<(String, String, String)> = FAMILIES
        .iter()
        // Rendered only where /proc/vmstat has oom_kill (Linux 4.13+).
        .filter(|f| f.name != NODE_OOM_KILLS_TOTAL.name || node_oom_kills().is_some())
        .map(|f| {
            let help = f.help.replace('\\', "\\\\").replace('\n', "\\n");
            (f.name.into(), f.kind.as_str().into(), help)
        })
        .collect();
    assert_eq!(rendered, table);
}

/// docs/operation.md's metrics table has a row for every family of [`FAMILIES`] and for
/// nothing else, with the family's type and label names.
#[test]
fn the_operation_page_names_every_metric() {
    let page = crate::doc_tables::page("operation.md");
    let mut documented = BTreeSet::new();
    for row in crate::doc_tables::rows(&page, "metric") {
        let [names, kind, labels, ..] = &row[..] else {
            panic!("docs/operation.md: a metrics row without type and labels: {row:?}");
        };
        let labels = crate::doc_tables::names(labels);
        for name in crate::doc_tables::names(names) {
            documented.insert((name, kind.clone(), labels.clone()));
        }
    }
    let table: BTreeSet<(String, String, Vec<String>)> = FAMILIES
        .iter()
        .map(|f| {
            let labels = f.labels.iter().map(|l| l.to_string()).collect();
            (f.name.to_string(), f.kind.as_str().to_string(), labels)
        })
        .collect();
    assert!(table.len() > 20, "{table:?}");
    let undocumented: Vec<_> = table.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&table).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/operation.md: families without their row {undocumented:?}, rows that are no family {unknown:?}"
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
#[case::runtime_unresponsive("monitor_runtime_unresponsive_calls_total{call=\"StopPodSandbox\"} 3")]
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
#[case::kernel_oom("monitor_kernel_oom_kills_total{namespace=\"default\",pod=\"batch\"} 1")]
#[case::kernel_oom_idle("monitor_kernel_oom_kills_total{namespace=\"default\",pod=\"web\"} 0")]
#[case::kernel_oom_unattributed("monitor_kernel_oom_kills_total{namespace=\"\",pod=\"\"} 0")]
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
#[case::available_pids("monitor_signal_available_pids{eviction_signal=\"pid.available\"} 4190000")]
#[case::capacity_pids("monitor_signal_capacity_pids{eviction_signal=\"pid.available\"} 4194304")]
#[case::hard_met(
    "monitor_threshold_met{eviction_signal=\"memory.available\",threshold=\"500Mi\",kind=\"hard\"} 1"
)]
#[case::condition_on("monitor_node_condition{condition=\"MemoryPressure\"} 1")]
#[case::condition_off("monitor_node_condition{condition=\"DiskPressure\"} 0")]
#[case::source_up("monitor_source_up{source=\"psi\"} 1")]
#[case::source_down("monitor_source_up{source=\"memcg_threshold\"} 0")]
#[case::source_state("monitor_source_state{source=\"memcg_threshold\",state=\"unsupported\"} 1")]
#[case::source_state_not("monitor_source_state{source=\"memcg_threshold\",state=\"running\"} 0")]
#[case::source_state_running("monitor_source_state{source=\"psi\",state=\"running\"} 1")]
#[case::source_state_not_failed("monitor_source_state{source=\"psi\",state=\"failed\"} 0")]
#[case::pods_running("monitor_pods{phase=\"Running\"} 2")]
#[case::pods_pending_zero("monitor_pods{phase=\"Pending\"} 0")]
#[case::wake_bucket("monitor_wake_to_sync_seconds_bucket{source=\"psi\",le=\"5e-05\"} 1")]
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
#[case::images_for_space("kubelet_image_garbage_collected_total{reason=\"space\"} 3")]
#[case::images_by_age_idle("kubelet_image_garbage_collected_total{reason=\"age\"} 0")]
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
// Replaced: pods were labelled pod="namespace/name"; a source's state was a label of
// monitor_source_up, so a failing source made a new series.
#[case::pod_key("pod=\"default/")]
#[case::source_up_state("monitor_source_up{source=\"psi\",state=")]
// Containers' and sandboxes' space is not measured: no series that would stay 0.
#[case::unmeasured_bytes("monitor_gc_freed_bytes_total{trigger=\"periodic\",kind=\"container\"}")]
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

/// The `le` bounds of every series of the histogram `family` in `samples`, by series.
fn bounds_by_series(samples: &[Parsed], family: &str) -> BTreeMap<String, Vec<(f64, f64)>> {
    let bucket = format!("{family}_bucket");
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.name == bucket) {
        let mut key = String::new();
        let mut le = None;
        for (k, v) in &s.labels {
            if k == "le" {
                le = Some(v.parse::<f64>().unwrap_or_else(|_| panic!("le={v}")));
            } else {
                key += &format!("{k}={v},");
            }
        }
        let le = le.unwrap_or_else(|| panic!("{bucket} without le"));
        series.entry(key).or_default().push((le, s.value));
    }
    series
}

/// Two kills of the hot path 60 µs apart, at 120 µs and 180 µs, land in different
/// buckets: the ladder tells a path that got slower by that much.
#[test]
fn the_hot_path_histogram_tells_120_from_180_microseconds() {
    let mut s = AgentState::default();
    // Memcg eventfds carry no stamp: the crossing is when the hot path was called.
    s.metrics
        .observe_hot_kill(WakeSource::MemcgThreshold, 1_000_000, 1_120_000, &[]);
    s.metrics
        .observe_hot_kill(WakeSource::MemcgThreshold, 2_000_000, 2_180_000, &[]);
    let samples = parse(&render_metrics(&s));
    let series = bounds_by_series(&samples, "monitor_crossing_to_kill_seconds");
    let buckets = series
        .get("source=memcg_threshold,stamp=notifier,")
        .unwrap_or_else(|| panic!("{series:?}"));
    assert!(
        buckets.iter().any(|(_, count)| *count == 1.0),
        "no bound between 120 µs and 180 µs: {buckets:?}"
    );
}

/// Every histogram series renders the buckets of its family's entry: the state makes each
/// histogram with its family's ladder, observed or idle.
#[test]
fn each_histogram_renders_the_buckets_of_its_family() {
    let mut s = state();
    s.metrics
        .observe_hot_kill(WakeSource::Psi, 1_000, 5_000, &[]);
    s.metrics.observe_stats_age("pid.available", 1.5);
    let samples = parse(&render_metrics(&s));
    let mut histograms = 0;
    for family in FAMILIES {
        let FamilyType::Histogram(ladder) = family.kind else {
            continue;
        };
        histograms += 1;
        let series = bounds_by_series(&samples, family.name);
        assert!(!series.is_empty(), "{}: no series", family.name);
        for (labels, buckets) in series {
            let bounds: Vec<f64> = buckets.iter().map(|(le, _)| *le).collect();
            let expected: Vec<f64> = ladder.iter().copied().chain([f64::INFINITY]).collect();
            assert_eq!(bounds, expected, "{}{{{labels}}}", family.name);
        }
    }
    assert_eq!(histograms, 5);
}

/// A ladder is bounds in seconds, increasing, and none is `+Inf` (rendered on its own).
#[test]
fn histogram_ladders_are_increasing_finite_bounds() {
    for family in FAMILIES {
        if let FamilyType::Histogram(ladder) = family.kind {
            assert!(ladder.len() >= 10, "{}: {ladder:?}", family.name);
            assert!(
                ladder.iter().all(|b| b.is_finite() && *b > 0.0),
                "{}: {ladder:?}",
                family.name
            );
            assert!(
                ladder.windows(2).all(|pair| pair[0] < pair[1]),
                "{}: {ladder:?}",
                family.name
            );
        }
    }
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

/// The shipped alert rules name only metrics `/metrics` serves.
#[test]
fn the_alert_rules_name_only_served_metrics() {
    let rules = include_str!("../../../../packaging/prometheus/monitor.rules.yaml");
    let served: Vec<&str> = super::families::FAMILIES.iter().map(|f| f.name).collect();
    let mut named = 0;
    for word in rules.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("monitor_") {
            named += 1;
            assert!(served.contains(&word), "{word} is not served by /metrics");
        }
    }
    assert!(named >= 6, "the rules name {named} metrics");
}

/// The shipped Grafana dashboard: every query names only metrics `/metrics` serves (a
/// histogram by its `_bucket`, `_sum` or `_count` series), follows the dashboard's node
/// picker, and no two panels cover the same place on the grid.
#[test]
fn the_dashboard_queries_only_served_metrics_on_the_chosen_nodes() {
    let text = include_str!("../../../../packaging/grafana/monitor.dashboard.json");
    let dashboard: serde_json::Value = serde_json::from_str(text).expect("the dashboard is JSON");
    let families = super::families::FAMILIES;
    let served = |name: &str| {
        families.iter().any(|f| {
            let base = match f.kind {
                FamilyType::Histogram(_) => ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix)),
                _ => Some(name),
            };
            base == Some(f.name)
        })
    };
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(variables, ["datasource", "job", "instance"]);

    let panels = dashboard["panels"].as_array().expect("panels");
    let mut queries = 0;
    let mut cells = std::collections::BTreeMap::new();
    for panel in panels {
        let title = panel["title"].as_str().expect("every panel has a title");
        let grid = &panel["gridPos"];
        let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| grid[k].as_u64().expect("gridPos"));
        assert!(x + w <= 24, "{title}: wider than the grid");
        for cell in (x..x + w).flat_map(|cx| (y..y + h).map(move |cy| (cx, cy))) {
            if let Some(other) = cells.insert(cell, title) {
                panic!("{title} and {other} overlap at {cell:?}");
            }
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("every target has an expr");
            queries += 1;
            assert!(
                expr.contains(r#"instance=~"$instance""#),
                "{title}: {expr} does not follow the node picker"
            );
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if ["monitor_", "process_", "kubelet_"]
                    .iter()
                    .any(|p| word.starts_with(p))
                {
                    assert!(served(word), "{title}: {word} is not served by /metrics");
                }
                if word.starts_with("process_") {
                    // Every Prometheus client exports these: only the agent's job's.
                    assert!(expr.contains(r#"job=~"$job""#), "{title}: {expr}");
                }
            }
        }
    }
    assert!(queries >= 20, "the dashboard has {queries} queries");
}

/// The OpenMetrics rendering: the whole text parses as OpenMetrics (ending in `# EOF`),
/// each family is typed under OpenMetrics' family name (a counter's without `_total`, the
/// info's without `_info`) and holds only the samples that name allows, and it carries
/// exactly the samples of the text format (bucket bounds compared as numbers).
#[test]
fn openmetrics_carries_the_text_formats_samples_under_its_family_names() {
    for state in [state(), AgentState::default()] {
        let process = ProcessMetrics::read();
        let open = render(&state, &process, Exposition::OpenMetrics);
        let (rest, families) = nom_openmetrics::parser::openmetrics(&open)
            .unwrap_or_else(|e| panic!("not OpenMetrics: {e:?}\n{open}"));
        assert!(rest.is_empty(), "unparsed: {rest:?}");
        assert_eq!(open.matches("# EOF").count(), 1, "{open}");
        let number = |name: &str, value: &str| -> String {
            if name == "le" {
                let bound = value.parse::<f64>().expect("a bound");
                if bound.is_infinite() {
                    "+Inf".into()
                } else {
                    format!("{bound}")
                }
            } else {
                value.to_string()
            }
        };
        let mut samples = BTreeSet::new();
        for family in &families {
            let (mut name, mut kind, mut help) = (None, None, None);
            for descriptor in &family.descriptors {
                match descriptor {
                    MetricDescriptor::Type { metric, r#type } => {
                        name = Some(*metric);
                        kind = Some(match r#type {
                            MetricType::Counter => "counter",
                            MetricType::Gauge => "gauge",
                            // nom-openmetrics reads `histogram` as an unknown type.
                            MetricType::Histogram | MetricType::Unknown("histogram") => "histogram",
                            MetricType::Info => "info",
                            other => panic!("{metric}: unexpected type {other:?}"),
                        });
                    }
                    MetricDescriptor::Help { metric, .. } => help = Some(*metric),
                    other => panic!("unexpected descriptor {other:?}"),
                }
            }
            let (name, kind) = (name.expect("a TYPE"), kind.expect("a TYPE"));
            assert_eq!(help, Some(name), "HELP names the family TYPE names");
            let allowed: &[&str] = match kind {
                "counter" => &["_total"],
                "info" => &["_info"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            for sample in &family.samples {
                let suffix = sample.name().strip_prefix(name).unwrap_or("?");
                assert!(
                    allowed.contains(&suffix),
                    "{} in {kind} family {name}",
                    sample.name()
                );
                // The label order is the encoder's (OpenMetrics writes `le` first).
                let mut labels: Vec<String> = sample
                    .labels()
                    .iter()
                    .map(|l| format!("{}={}", l.name, number(l.name, &l.value)))
                    .collect();
                labels.sort();
                samples.insert(format!("{}{labels:?} {}", sample.name(), sample.number()));
            }
        }
        let text = render(&state, &process, Exposition::Text);
        let text_samples: BTreeSet<String> = parse(&text)
            .into_iter()
            .map(|s| {
                let mut labels: Vec<String> = s
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}={}", number(k, v)))
                    .collect();
                labels.sort();
                format!("{}{labels:?} {}", s.name, s.value)
            })
            .collect();
        assert_eq!(samples, text_samples);
    }
}

#[rstest]
#[case::no_header(None, Exposition::Text)]
#[case::anything(Some("*/*"), Exposition::Text)]
#[case::text_only(Some("text/plain;version=0.0.4"), Exposition::Text)]
#[case::prometheus(
    Some(
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    ),
    Exposition::OpenMetrics
)]
#[case::openmetrics_without_version(Some("application/openmetrics-text"), Exposition::OpenMetrics)]
#[case::openmetrics_weighed_below_text(
    Some("application/openmetrics-text;q=0.3, text/plain;q=0.9"),
    Exposition::Text
)]
#[case::only_the_draft(Some("application/openmetrics-text; version=0.0.1"), Exposition::Text)]
#[case::refused(Some("application/openmetrics-text;q=0"), Exposition::Text)]
#[case::bad_weight(Some("application/openmetrics-text;q=high"), Exposition::Text)]
#[case::spaces_and_case(
    Some(" Application/OpenMetrics-Text ; Version=\"1.0.0\" ; q=0.8 , text/plain ; q=0.8"),
    Exposition::OpenMetrics
)]
fn the_accept_header_chooses_the_format(#[case] accept: Option<&str>, #[case] chosen: Exposition) {
    assert_eq!(Exposition::negotiate(accept), chosen);
}

/// OpenMetrics spells a bucket bound canonically: always with a fraction or an exponent
/// (`1.0`, `2.5e-05`), as the reference parsers expect; every bound of every histogram the
/// state holds reads back as the number it is.
#[test]
fn openmetrics_bounds_are_spelled_canonically() {
    let open = render_metrics_as(&state(), Exposition::OpenMetrics);
    let bounds: Vec<&str> = open
        .split("le=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(bounds.len() > 20, "{open}");
    for bound in bounds {
        assert!(
            bound == "+Inf" || bound.contains('.') || bound.contains('e'),
            "{bound} in\n{open}"
        );
        assert!(bound.parse::<f64>().is_ok(), "{bound}");
    }
    assert!(open.contains("le=\"1.0\""), "{open}");
}

/// prometheus-client writes an OpenMetrics HELP as given, unescaped: a HELP text holds
/// none of the characters that would need it.
#[test]
fn help_texts_need_no_escaping() {
    for family in FAMILIES {
        assert!(
            !family.help.contains(['\\', '"', '\n']),
            "{}: {:?}",
            family.name,
            family.help
        );
    }
}
