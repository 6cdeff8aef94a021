//! The eBPF crossing detector on this kernel: real cgroups, a real memory hog, the real
//! charge path. Run as root, one test at a time (`cargo xtask test`).
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use monitor::agent::Agent;
use monitor::config::agent::{AgentConfig, AgentSettings, SourcesSettings};
use monitor::notify::arming::{MemoryThreshold, MemoryThresholds};
use monitor::notify::detector::{AttachPoint, cgroup_id};
use monitor::notify::ebpf::{EbpfSettings, EbpfSource};
use monitor::notify::memcg::{HIGH_XATTR, ThresholdSpec};
use monitor::notify::{CrossingHook, SourceState, Wake, WakeDetail, WakeSource, wake_channel};
use monitor::observe::CgroupVersion;
use monitor::policy::quantity::{Quantity, QuantityOrPercent};
use monitor::runtime::port::Ports;
use monitor::state::SharedState;
use monitor::sync::SyncReport;
use monitor_common::{EventKind, LEVEL_EARLY, LEVEL_HARD, PressureEvent};
use monitor_tests::memory_only_kubelet_config;
use monitor_tests::{Feature, TestCgroup, hog, init_tracing, join_before_exec, require};
use tokio::sync::{broadcast, mpsc};

const MIB: u64 = 1 << 20;
/// How far past a level the usage in a record may be: the charge that crossed it (up to
/// a 2 MiB huge page, with transparent huge pages) and the sampling (16 pages, or 64 page
/// counts of the tracepoint), plus one charge batch of 64 pages.
const SLACK: u64 = 2 * MIB + 2 * 64 * 4096;

/// Starts the eBPF source alone, with the detector on `attach` (every point when empty).
fn start_source(attach: &[AttachPoint]) -> (EbpfSource, mpsc::Receiver<Wake>) {
    let (wakes, rx) = wake_channel();
    let settings = EbpfSettings {
        detector: if attach.is_empty() {
            AttachPoint::ALL.to_vec()
        } else {
            attach.to_vec()
        },
        ..EbpfSettings::default()
    };
    let source = monitor::notify::ebpf::start(&settings, wakes, None).expect("eBPF source starts");
    (source, rx)
}

fn crossings(rx: &mut mpsc::Receiver<Wake>) -> Vec<PressureEvent> {
    let mut out = Vec::new();
    while let Ok(wake) = rx.try_recv() {
        if let WakeDetail::Kernel { event, .. } = wake.detail
            && event.kind == EventKind::Crossing as u32
        {
            out.push(event);
        }
    }
    out
}

fn usage(dir: &Path, version: CgroupVersion) -> u64 {
    let file = match version {
        CgroupVersion::V1 => "memory.usage_in_bytes",
        CgroupVersion::V2 => "memory.current",
    };
    std::fs::read_to_string(dir.join(file))
        .expect("usage file")
        .trim()
        .parse()
        .expect("usage")
}

fn spec(cgroup: &Path, usage_bytes: u64, hard: bool) -> ThresholdSpec {
    ThresholdSpec {
        cgroup: cgroup.to_path_buf(),
        usage_bytes,
        hard,
        passed_when_armed: false,
        threshold: None,
    }
}

/// A child cgroup of `parent` (a pod below the pods cgroup), removed with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detector_fires_once_per_arming_at_the_level_on_the_cgroup_and_its_ancestors() {
    if !require(
        "detector_fires_once_per_arming",
        &[Feature::Root, Feature::Ebpf],
    ) {
        return;
    }
    init_tracing();
    // Every attach point this kernel takes, one after the other (the fallback test
    // covers the refused ones).
    let mut attached = Vec::new();
    for point in AttachPoint::ALL {
        if fires_once_per_arming_on(point).await {
            attached.push(point.name());
        }
    }
    assert!(!attached.is_empty(), "no attach point taken on this kernel");
    println!("checked on {attached:?}");
}

/// The test above on `point`; false when the kernel refuses it.
async fn fires_once_per_arming_on(point: AttachPoint) -> bool {
    let (source, mut rx) = start_source(&[point]);
    let detector = match source.detector.as_ref() {
        Ok(detector) => detector,
        Err(why) => {
            println!("{} refused here: {why}", point.name());
            return false;
        }
    };
    println!("detector on {}", detector.attach.name());
    let pods = TestCgroup::new("pods", 512 * MIB);
    // The hog runs a level below the pod, as a container does: the detector passes a
    // cgroup with no levels before the first it looks at.
    let container = pods.descendant(&["pod", "container"]);
    let pod = container.parent().expect("the pod's cgroup").to_path_buf();

    let base = usage(&pods.memory_dir, pods.version);
    // The pods cgroup (an ancestor of the charged one) at +40 MiB, hard; the pod itself
    // at +80 MiB, soft; a level the hog never reaches at +300 MiB.
    let pods_level = base + 40 * MIB;
    let pod_level = 80 * MIB;
    let never = base + 300 * MIB;
    detector.arm(&[
        spec(&pods.memory_dir, pods_level, true),
        spec(&pods.memory_dir, never, true),
        spec(&pod, pod_level, false),
    ]);
    // Levels on two cgroups, one below the other: the detector looks at those two
    // depths alone (on kernels whose BTF gives `cgroup.ancestors`, all of this suite's).
    let depths = detector.armed_depths().expect("the armed depths' map");
    let told = depths.told();
    assert!(
        told.len() == 2 && told[1] == told[0] + 1,
        "two adjacent depths armed: {depths:?}"
    );

    // Below every level first: nothing.
    let mut command = hog(&["anon", "20", "1", "2", "1"]);
    command.stdout(Stdio::null());
    join_before_exec(&mut command, &[container.join("cgroup.procs")]);
    let _ = command.spawn().expect("hog").wait();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(crossings(&mut rx), vec![], "no record below the levels");

    // Then up to 120 MiB in 1 MiB steps: across both levels, held for a second.
    let mut command = hog(&["anon", "120", "1", "2", "1"]);
    command.stdout(Stdio::null());
    join_before_exec(&mut command, &[container.join("cgroup.procs")]);
    let _ = command.spawn().expect("hog").wait();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let records = crossings(&mut rx);
    println!("records: {records:?}");

    let pods_id = cgroup_id(&pods.memory_dir).unwrap();
    let pod_id = cgroup_id(&pod).unwrap();
    let of = |id: u64, level: u64| -> Vec<&PressureEvent> {
        records
            .iter()
            .filter(|r| r.cgroup_id == id && r.level_bytes == level)
            .collect()
    };
    let on_pods = of(pods_id, pods_level);
    assert_eq!(on_pods.len(), 1, "one record per arming: {records:?}");
    assert!(
        (pods_level..pods_level + SLACK).contains(&on_pods[0].usage_bytes),
        "usage {} within a charge batch of the level {pods_level}",
        on_pods[0].usage_bytes
    );
    assert_eq!(on_pods[0].level_flags & LEVEL_HARD, LEVEL_HARD);
    let on_pod = of(pod_id, pod_level);
    assert_eq!(on_pod.len(), 1, "one record per arming: {records:?}");
    assert!((pod_level..pod_level + SLACK).contains(&on_pod[0].usage_bytes));
    assert_eq!(on_pod[0].level_flags & LEVEL_HARD, 0);
    assert!(
        records.iter().all(|r| r.level_bytes != never),
        "a level never reached fired: {records:?}"
    );
    assert_eq!(records.len(), 2, "nothing else: {records:?}");
    // The kernel stamps the record on CLOCK_MONOTONIC, before userspace saw it.
    assert!(
        records
            .iter()
            .all(|r| r.timestamp_ns > 0 && r.timestamp_ns <= monitor::clock::monotonic_ns())
    );

    // Armed again while usage is below: fires again on the next crossing.
    detector.arm(&[spec(&pods.memory_dir, pods_level, true)]);
    let pods_depth = told[0];
    let depths = detector.armed_depths().expect("the armed depths' map");
    assert_eq!(
        depths.told(),
        &[pods_depth],
        "the pod's depth no longer armed"
    );
    let mut command = hog(&["anon", "60", "1", "2", "0"]);
    command.stdout(Stdio::null());
    join_before_exec(&mut command, &[container.join("cgroup.procs")]);
    let _ = command.spawn().expect("hog").wait();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = crossings(&mut rx);
    assert_eq!(again.len(), 1, "re-armed level fires once more: {again:?}");
    drop(source);
    true
}

/// What the ring reader told the hot path, in order: `early` (with its margin) or `hard`.
#[derive(Default)]
struct ToldHook(std::sync::Mutex<Vec<(&'static str, u64)>>);

impl ToldHook {
    fn take(&self) -> Vec<(&'static str, u64)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl CrossingHook for ToldHook {
    fn hard_crossing(&self, _source: WakeSource) {
        self.0.lock().unwrap().push(("hard", 0));
    }

    fn early_crossing(&self, _source: WakeSource, margin: u64, _level: u64) -> bool {
        self.0.lock().unwrap().push(("early", margin));
        false
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_level_fires_below_its_hard_level_and_again_on_every_rise() {
    if !require(
        "an_early_level_fires_below_its_hard_level",
        &[Feature::Root, Feature::Ebpf],
    ) {
        return;
    }
    init_tracing();
    let pods = TestCgroup::new("pods", 512 * MIB);
    let pod = pods.descendant(&["pod"]);
    let (wakes, mut rx) = wake_channel();
    let told = Arc::new(ToldHook::default());
    let settings = EbpfSettings {
        detector: AttachPoint::ALL.to_vec(),
        ..EbpfSettings::default()
    };
    let source = monitor::notify::ebpf::start(&settings, wakes, Some(told.clone()))
        .expect("eBPF source starts");
    let detector = source
        .detector
        .as_ref()
        .expect("a detector attaches on this kernel");
    let margin = 8 * MIB;
    detector.set_early_margin(margin);
    let base = usage(&pods.memory_dir, pods.version);
    let level = base + 40 * MIB;
    let early = level - margin;
    detector.arm(&[spec(&pods.memory_dir, level, true)]);
    let armed = detector.armed(&pods.memory_dir).expect("armed");
    assert!(
        armed
            .levels
            .iter()
            .any(|l| l.level_bytes == early && l.flags == LEVEL_EARLY),
        "an early level {margin} below the hard one: {armed:?}"
    );

    let run_hog = |mib: &str| {
        let mut command = hog(&["anon", mib, "1", "2", "0"]);
        command.stdout(Stdio::null());
        join_before_exec(&mut command, &[pod.join("cgroup.procs")]);
        let _ = command.spawn().expect("hog").wait();
    };
    // Up to 60 MiB: the early level tells the hot path, then the hard one does; only the
    // hard one wakes the loop.
    run_hog("60");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(told.take(), vec![("early", margin), ("hard", 0)]);
    let records = crossings(&mut rx);
    assert_eq!(
        records
            .iter()
            .map(|r| (r.level_bytes, r.level_flags))
            .collect::<Vec<_>>(),
        vec![(level, LEVEL_HARD)],
        "{records:?}"
    );

    // The hog is gone and usage fell: without any re-arming, the early level tells the
    // next rise too; the hard level, fired, waits for the agent to arm it again.
    run_hog("60");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(told.take(), vec![("early", margin)]);
    assert_eq!(crossings(&mut rx), vec![]);
    // Below the early level: nothing.
    run_hog("20");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(told.take(), vec![]);
    drop(source);
}

fn hard(bytes: u64) -> MemoryThreshold {
    MemoryThreshold {
        value: QuantityOrPercent::Quantity(Quantity::from_units(bytes as i64)),
        hard: true,
    }
}

fn agent_config(pods: &TestCgroup, detector: Vec<String>) -> AgentConfig {
    AgentConfig {
        settings: AgentSettings {
            sources: SourcesSettings {
                ebpf: true,
                memcg_thresholds: true,
                memory_events: false,
                psi: false,
                crossing_detector: detector,
                ..SourcesSettings::default()
            },
            pods_cgroup: Some(pods.relative.clone()),
            ..AgentSettings::default()
        },
        housekeeping: Duration::from_secs(3600),
        memory_thresholds: MemoryThresholds {
            node: vec![],
            pods: vec![hard(100 * MIB)],
            relief_margin: None,
        },
        layout: None,
        ebpf_object_override: None,
    }
}

fn start_agent(config: AgentConfig, what: &str) -> Agent {
    Agent::start(
        config,
        memory_only_kubelet_config(),
        Ports::none(),
        SharedState::default(),
    )
    .expect(what)
}

async fn next_report(
    reports: &mut broadcast::Receiver<SyncReport>,
    within: Duration,
) -> Option<SyncReport> {
    tokio::time::timeout(within, reports.recv())
        .await
        .ok()?
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_wakes_through_the_detector_alone_and_never_writes_memory_high() {
    if !require(
        "agent_wakes_through_the_detector_alone",
        &[Feature::Root, Feature::Ebpf],
    ) {
        return;
    }
    init_tracing();
    // allocatableMemory.available<100Mi on a 256 MiB pods cgroup: level 156 MiB.
    let pods = TestCgroup::new("pods", 256 * MIB);
    let mut config = agent_config(
        &pods,
        AttachPoint::ALL.iter().map(|a| a.name().into()).collect(),
    );
    // The detector alone: no eventfd thresholds, memory.events or PSI. Memory relief off:
    // its level (a margin above the threshold) would be the first crossing, and this test
    // is about the threshold's own level.
    config.settings.sources.memcg_thresholds = false;
    config.settings.memory_relief.enabled = false;
    let agent = start_agent(config, "agent starts");
    let mut reports = agent.subscribe();
    let ebpf = agent.status_of(WakeSource::Ebpf).unwrap();
    assert_eq!(ebpf.state, SourceState::Running);
    assert!(
        ebpf.detail.starts_with("crossing detector on "),
        "{}",
        ebpf.detail
    );
    next_report(&mut reports, Duration::from_secs(5))
        .await
        .expect("first synchronize");
    let high_before = (pods.version == CgroupVersion::V2).then(|| pods.read("memory.high"));

    let mut child = pods.spawn({
        let mut c = hog(&["anon", "200", "4", "30", "2"]);
        c.stdout(Stdio::null());
        c
    });
    let mut woke = None;
    let mut crossed_levels = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while let Some(report) = next_report(&mut reports, deadline - tokio::time::Instant::now()).await
    {
        for wake in &report.wakes {
            if let WakeDetail::Kernel { event, .. } = &wake.detail
                && event.kind == EventKind::Crossing as u32
            {
                crossed_levels.push(event.level_bytes);
                if woke.is_none() {
                    woke = Some((*event, report.clone()));
                }
            }
        }
        if pods.version == CgroupVersion::V2 {
            assert_eq!(
                Some(pods.read("memory.high")),
                high_before,
                "memory.high untouched"
            );
        }
        if child.try_wait().ok().flatten().is_some() {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let (event, report) = woke.expect("a wake from the crossing detector");
    let level = event.level_bytes;
    assert!((150 * MIB..=165 * MIB).contains(&level), "level {level}");
    assert!(event.usage_bytes >= level && event.usage_bytes < level + SLACK);
    let observed = report
        .observation
        .as_ref()
        .expect("fresh observation")
        .allocatable
        .expect("pods cgroup")
        .stats
        .usage_bytes;
    assert!(
        observed + MIB >= level && observed <= level + 8 * MIB,
        "observation after the wake at {observed}, level {level}"
    );
    // Edge-triggered: each synchronize re-arms a passed level to wait below it, so a
    // level fires once. (The level itself may move up with the cgroup's inactive file
    // pages, e.g. the hog's own executable paged in, and a new level fires anew.)
    let distinct: std::collections::BTreeSet<u64> = crossed_levels.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        crossed_levels.len(),
        "a level fired twice (one record for one crossing): {crossed_levels:?}"
    );
    assert_eq!(pods.oom_kills(), 0);
    agent.shutdown().await;
    if let Some(before) = high_before {
        assert_eq!(pods.read("memory.high"), before);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_attach_point_falls_back_and_says_so() {
    if !require(
        "a_refused_attach_point_falls_back",
        &[Feature::Root, Feature::Ebpf],
    ) {
        return;
    }
    init_tracing();
    // Which point this kernel takes; then offer only the other one.
    let chosen = {
        let (source, _rx) = start_source(&[]);
        source
            .detector
            .as_ref()
            .expect("a detector attaches")
            .attach
    };
    // An attach point this kernel refuses, offered alone.
    let refused = AttachPoint::ALL
        .into_iter()
        .filter(|a| *a != chosen)
        .find(|a| {
            let (source, _rx) = start_source(&[*a]);
            source.detector.is_err()
        });
    let Some(other) = refused else {
        println!(
            "SKIP: a_refused_attach_point_falls_back: this kernel takes every attach point ({} first)",
            chosen.name()
        );
        return;
    };

    let pods = TestCgroup::new("pods", 256 * MIB);
    let mut config = agent_config(&pods, vec![other.name().to_string()]);
    config.settings.sources.memory_events = pods.version == CgroupVersion::V2;
    let agent = start_agent(config, "agent starts without the detector");
    let ebpf = agent.status_of(WakeSource::Ebpf).unwrap();
    assert!(
        ebpf.detail
            .starts_with("no crossing detector: every attach point refused: ")
            && ebpf.detail.contains(other.name()),
        "{}",
        ebpf.detail
    );
    // The memcg notifiers carry the thresholds instead; on v2 the stand-in says it throttles.
    let memcg = agent.status_of(WakeSource::MemcgThreshold).unwrap();
    assert_eq!(memcg.state, SourceState::Running);
    if pods.version == CgroupVersion::V2 {
        assert!(memcg.detail.contains("THROTTLES"), "{}", memcg.detail);
    }
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_high_left_by_a_killed_agent_is_put_back_at_start() {
    if !require(
        "a_memory_high_left_by_a_killed_agent",
        &[Feature::Root, Feature::CgroupV2Memory],
    ) {
        return;
    }
    init_tracing();
    let pods = TestCgroup::new("pods", 256 * MIB);
    // What a run killed with -9 leaves: its memory.high and the mark with the old value.
    pods.write("memory.high", &(200 * MIB).to_string());
    xattr::set(&pods.memory_dir, HIGH_XATTR, b"max").expect("xattr");
    let config = agent_config(&pods, vec![]);
    let agent = start_agent(config, "agent starts");
    assert_eq!(pods.read("memory.high").trim(), "max");
    assert!(matches!(xattr::get(&pods.memory_dir, HIGH_XATTR), Ok(None)));
    agent.shutdown().await;
    // A memory.high set by someone else is not the agent's to lift.
    pods.write("memory.high", &(200 * MIB).to_string());
    let config = agent_config(
        &pods,
        AttachPoint::ALL.iter().map(|a| a.name().into()).collect(),
    );
    let agent = start_agent(config, "agent starts");
    assert_eq!(pods.read("memory.high").trim(), (200 * MIB).to_string());
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detector_fires_at_full_speed_with_large_steps() {
    if !require(
        "detector_fires_at_full_speed",
        &[Feature::Root, Feature::Ebpf],
    ) {
        return;
    }
    init_tracing();
    // As the benchmark's race: 8 MiB steps at full speed (transparent huge pages where
    // the kernel uses them: charges of 512 pages at once), a level 200 MiB under the limit.
    for round in 0..3 {
        let pods = TestCgroup::new("pods", 1024 * MIB);
        let pod = pods.descendant(&["pod"]);
        let (source, mut rx) = start_source(&[]);
        let detector = source.detector.as_ref().expect("a detector attaches");
        let level = usage(&pods.memory_dir, pods.version) + 600 * MIB;
        detector.arm(&[spec(&pods.memory_dir, level, true)]);
        let mut command = hog(&["anon", "700", "8", "0", "0"]);
        command.stdout(Stdio::null());
        join_before_exec(&mut command, &[pod.join("cgroup.procs")]);
        let _ = command.spawn().expect("hog").wait();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let records = crossings(&mut rx);
        let counters = source.counters();
        println!(
            "round {round}: level {level} records {records:?} counters {counters:?} armed {:?}",
            detector.armed(&pods.memory_dir)
        );
        assert_eq!(records.len(), 1, "round {round}: {records:?}");
        assert!(
            (level..level + SLACK).contains(&records[0].usage_bytes),
            "round {round}: usage {} for level {level}",
            records[0].usage_bytes
        );
        drop(source);
    }
}
