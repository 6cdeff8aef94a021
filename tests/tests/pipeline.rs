//! The kernel-to-userspace wake pipeline, end to end on this kernel: real cgroups, a real
//! memory hog, real kernel events. Run as root, one test at a time (`cargo xtask test`).
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use monitor::agent::Agent;
use monitor::config::agent::{AgentConfig, AgentSettings, SourcesSettings};
use monitor::notify::arming::{MemoryThreshold, MemoryThresholds};
use monitor::notify::{SourceState, WakeDetail, WakeSource};
use monitor::policy::quantity::{Quantity, QuantityOrPercent};
use monitor::runtime::port::Ports;
use monitor::state::SharedState;
use monitor::sync::SyncReport;
use monitor_common::EventKind;
use monitor_tests::memory_only_kubelet_config;
use monitor_tests::{Feature, TestCgroup, hog, init_tracing, node_available_v2, require};
use tokio::sync::broadcast;

const MIB: u64 = 1 << 20;

fn only(sources: &[WakeSource]) -> SourcesSettings {
    SourcesSettings {
        ebpf: sources.contains(&WakeSource::Ebpf),
        memcg_thresholds: sources.contains(&WakeSource::MemcgThreshold),
        memory_events: sources.contains(&WakeSource::MemoryEvents),
        psi: sources.contains(&WakeSource::Psi),
        ..SourcesSettings::default()
    }
}

fn config(
    sources: SourcesSettings,
    pods_cgroup: Option<&str>,
    pods_thresholds: Vec<MemoryThreshold>,
) -> AgentConfig {
    AgentConfig {
        settings: AgentSettings {
            sources,
            pods_cgroup: pods_cgroup.map(str::to_string),
            ..AgentSettings::default()
        },
        // Long: these tests must see kernel wakes, not the fallback.
        housekeeping: Duration::from_secs(3600),
        memory_thresholds: MemoryThresholds {
            node: vec![],
            pods: pods_thresholds,
            relief_margin: None,
        },
        layout: None,
        ebpf_object_override: None,
    }
}

fn start(config: AgentConfig) -> (Agent, broadcast::Receiver<SyncReport>) {
    let agent = Agent::start(
        config,
        memory_only_kubelet_config(),
        Ports::none(),
        SharedState::default(),
    )
    .expect("agent starts");
    let reports = agent.subscribe();
    (agent, reports)
}

/// Collects reports until `done` says so or the timeout passes.
async fn collect(
    reports: &mut broadcast::Receiver<SyncReport>,
    timeout: Duration,
    mut done: impl FnMut(&SyncReport) -> bool,
) -> Vec<SyncReport> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(timeout, async {
        loop {
            match reports.recv().await {
                Ok(report) => {
                    let stop = done(&report);
                    out.push(report);
                    if stop {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    panic!("test fell {n} reports behind")
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    })
    .await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ebpf_records_reach_the_manager_attributed_to_the_hog() {
    if !require(
        "ebpf_records_reach_the_manager",
        &[Feature::Root, Feature::Ebpf],
    ) {
        return;
    }
    init_tracing();
    let cgroup = TestCgroup::new("ebpf", 32 * MIB);
    let (agent, mut reports) = start(config(only(&[WakeSource::Ebpf]), None, vec![]));
    let status = agent.status_of(WakeSource::Ebpf).unwrap();
    assert_eq!(
        status.state,
        SourceState::Running,
        "eBPF source: {}",
        status.detail
    );

    // 64 MiB of anonymous memory in a 32 MiB cgroup without swap: the kernel reclaims in
    // the cgroup, fails, and OOM-kills the hog (only the hog: the limit confines it).
    let mut child = cgroup.spawn({
        let mut c = hog(&["anon", "64", "1", "1"]);
        c.stdout(Stdio::null());
        c
    });
    let hog_pid = child.id();
    let got = collect(&mut reports, Duration::from_secs(20), |r| {
        r.wakes
            .iter()
            .any(|w| w.detail.kernel_kind() == Some(EventKind::OomVictim))
    })
    .await;
    let status = child.wait().expect("hog exits");
    let kernel: Vec<_> = got
        .iter()
        .flat_map(|r| &r.wakes)
        .filter_map(|w| match &w.detail {
            WakeDetail::Kernel { event, memcg } => Some((*event, memcg.clone())),
            _ => None,
        })
        .filter(|(event, _)| event.pid == hog_pid)
        .collect();
    let reclaim = kernel
        .iter()
        .find(|(e, _)| EventKind::from_u32(e.kind) == Some(EventKind::MemcgReclaim))
        .unwrap_or_else(|| panic!("no memcg reclaim record for the hog (pid {hog_pid}); hog: {status:?}; got {kernel:?}"));
    // Attribution: the pid is the hog's, and so is the memory cgroup resolved from it.
    assert_eq!(
        reclaim.1.as_deref(),
        Some(format!("/{}", cgroup.relative).as_str()),
        "memcg of {reclaim:?}"
    );
    // The record's own cgroup id is the hog's cgroup in the unified hierarchy (on hybrid
    // hosts the hog joined a mirror there; on v2 it is the memory cgroup itself).
    if let Some(id) = cgroup.unified_id() {
        assert_eq!(reclaim.0.cgroup_id, id, "cgroup id of {reclaim:?}");
    }
    let victim = kernel
        .iter()
        .find(|(e, _)| EventKind::from_u32(e.kind) == Some(EventKind::OomVictim))
        .unwrap_or_else(|| {
            panic!("no oom_victim record naming the hog (pid {hog_pid}); got {kernel:?}")
        });
    assert_eq!(victim.0.pid, hog_pid);
    assert!(
        cgroup.oom_kills() >= 1,
        "the kernel's own counter agrees the hog was OOM-killed"
    );
    // Kernel timestamps are CLOCK_MONOTONIC and precede the synchronize they woke.
    for report in &got {
        for wake in &report.wakes {
            if let WakeDetail::Kernel { event, .. } = &wake.detail {
                assert!(
                    event.timestamp_ns <= wake.received_ns && wake.received_ns <= report.started_ns
                );
            }
        }
    }
    let counters = agent.kernel_counters().expect("counters");
    assert!(
        counters.emitted[EventKind::MemcgReclaim as usize] >= 1,
        "{counters:?}"
    );
    agent.shutdown().await;
}

/// Reads the hog's "allocated <MiB> <ns>" lines in the background.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcg_reclaim_outside_the_pods_is_dropped_in_the_kernel() {
    if !require(
        "memcg_reclaim_outside_the_pods_is_dropped_in_the_kernel",
        &[Feature::Root, Feature::Ebpf],
    ) {
        return;
    }
    init_tracing();
    let pods = TestCgroup::new("pods", 32 * MIB);
    let outside = TestCgroup::new("service", 32 * MIB);
    if pods.unified_id().is_none() {
        println!(
            "SKIP: memcg_reclaim_outside_the_pods_is_dropped_in_the_kernel: no cgroup2 hierarchy to filter in"
        );
        return;
    }
    let (agent, mut reports) = start(config(
        only(&[WakeSource::Ebpf]),
        Some(&pods.relative),
        vec![],
    ));
    let spawn_hog = |cgroup: &TestCgroup| {
        // 64 MiB of anonymous memory in a 32 MiB cgroup without swap: it reclaims at its
        // limit, fails, and is OOM-killed (only it: the limit confines it).
        cgroup.spawn({
            let mut c = hog(&["anon", "64", "1", "1"]);
            c.stdout(Stdio::null());
            c
        })
    };
    let reclaim = |agent: &Agent| {
        let counters = agent.kernel_counters().expect("counters");
        (
            counters.emitted[EventKind::MemcgReclaim as usize],
            counters.suppressed[EventKind::MemcgReclaim as usize],
        )
    };
    // A service outside the pods reclaiming at its own limit: counted, never sent. The
    // node's own reclaim (kswapd, in the root cgroup above the pods) is sent and may come
    // at any time on a small node, so the check is on the records that reach the agent,
    // by the cgroup they name, not on the kernel's total.
    let outside_id = outside.unified_id().expect("the service has a cgroup2 id");
    let mut child = spawn_hog(&outside);
    let mut got = Vec::new();
    while child.try_wait().expect("hog status").is_none() {
        got.extend(collect(&mut reports, Duration::from_millis(200), |_| false).await);
    }
    got.extend(collect(&mut reports, Duration::from_millis(500), |_| false).await);
    let (_, suppressed) = reclaim(&agent);
    assert!(
        outside.oom_kills() >= 1,
        "the service's hog reached its limit"
    );
    let from_outside: Vec<_> = got
        .iter()
        .flat_map(|r| &r.wakes)
        .filter_map(|w| match &w.detail {
            WakeDetail::Kernel { event, memcg }
                if EventKind::from_u32(event.kind) == Some(EventKind::MemcgReclaim)
                    && event.cgroup_id == outside_id =>
            {
                Some((*event, memcg.clone()))
            }
            _ => None,
        })
        .collect();
    assert!(
        from_outside.is_empty(),
        "no memcg reclaim record from outside the pods: {from_outside:?}"
    );
    assert!(suppressed >= 1, "its records were dropped in the kernel");
    // The same inside the pods cgroup: recorded.
    spawn_hog(&pods).wait().expect("hog exits");
    let (emitted, _) = reclaim(&agent);
    assert!(emitted >= 1, "the pods' reclaim is recorded");
    agent.shutdown().await;
}

fn progress(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<(u64, u64)> {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let mut words = line.split_whitespace();
            if words.next() == Some("allocated") {
                let mib = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
                let ns = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
                let _ = tx.send((mib, ns));
            }
        }
    });
    rx
}

/// The sources that report a memory threshold crossing on this cgroup version: eventfd
/// thresholds on v1; memory.high on the pods cgroup, reported through memory.events, on v2.
fn threshold_sources(version: monitor::observe::CgroupVersion) -> (SourcesSettings, WakeSource) {
    match version {
        monitor::observe::CgroupVersion::V1 => (
            only(&[WakeSource::MemcgThreshold]),
            WakeSource::MemcgThreshold,
        ),
        monitor::observe::CgroupVersion::V2 => (
            only(&[WakeSource::MemcgThreshold, WakeSource::MemoryEvents]),
            WakeSource::MemoryEvents,
        ),
    }
}

fn hard(bytes: u64) -> MemoryThreshold {
    MemoryThreshold {
        value: QuantityOrPercent::Quantity(Quantity::from_units(bytes as i64)),
        hard: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_threshold_wakes_at_the_crossing_and_not_before() {
    if !require("memory_threshold_wakes_at_the_crossing", &[Feature::Root]) {
        return;
    }
    init_tracing();
    // A 256 MiB "pods" cgroup with allocatableMemory.available<100Mi: the kernel must
    // wake us when usage reaches 256 − 100 (+ inactive file ≈ 0) = 156 MiB.
    let cgroup = TestCgroup::new("pods", 256 * MIB);
    let (sources, expected_source) = threshold_sources(cgroup.version);
    let (agent, mut reports) = start(config(
        sources,
        Some(&cgroup.relative),
        vec![hard(100 * MIB)],
    ));
    assert_eq!(
        agent.status_of(WakeSource::MemcgThreshold).unwrap().state,
        SourceState::Running
    );
    // The first synchronize arms the thresholds.
    collect(&mut reports, Duration::from_secs(5), |r| r.sequence >= 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let threshold_usage = match cgroup.version {
        monitor::observe::CgroupVersion::V1 => None,
        monitor::observe::CgroupVersion::V2 => {
            let high: u64 = cgroup
                .read("memory.high")
                .trim()
                .parse()
                .expect("memory.high is armed");
            Some(high)
        }
    };

    // 4 MiB steps, 30 ms apart, up to 200 MiB: the crossing happens mid-way.
    let mut child = cgroup.spawn({
        let mut c = hog(&["anon", "200", "4", "30", "30"]);
        c.stdout(Stdio::piped());
        c
    });
    let steps = progress(&mut child);
    let got = collect(&mut reports, Duration::from_secs(30), |r| {
        r.sources().contains(&expected_source)
    })
    .await;
    // Let the hog report the step that crossed (it prints after touching it).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = child.kill();
    let _ = child.wait();
    let woke = got
        .iter()
        .find(|r| r.sources().contains(&expected_source))
        .unwrap_or_else(|| {
            panic!(
                "no {expected_source} wake; reports: {:?}",
                got.iter().map(|r| r.sources()).collect::<Vec<_>>()
            )
        });
    let observation = woke.observation.as_ref().expect("fresh observation");
    let pods = observation.allocatable.expect("pods cgroup observed");
    let threshold_usage = threshold_usage.unwrap_or_else(|| {
        woke.wakes
            .iter()
            .find_map(|w| match &w.detail {
                WakeDetail::Threshold {
                    threshold_bytes, ..
                } => Some(*threshold_bytes),
                _ => None,
            })
            .expect("threshold detail")
    });
    assert!(
        (150 * MIB..=165 * MIB).contains(&threshold_usage),
        "threshold usage {threshold_usage}"
    );
    // Not before: usage at the wake had reached the armed value …
    assert!(
        pods.stats.usage_bytes + MIB >= threshold_usage,
        "woke at usage {} below the threshold {threshold_usage}",
        pods.stats.usage_bytes
    );
    // … and promptly: within two allocation steps of it (the observation is taken after
    // the wake, while the hog keeps allocating).
    assert!(
        pods.stats.usage_bytes <= threshold_usage + 8 * MIB + MIB,
        "woke late: usage {} vs threshold {threshold_usage}",
        pods.stats.usage_bytes
    );
    // The hog's own timeline agrees: it was not far past the threshold before the wake.
    let steps: Vec<(u64, u64)> = steps.try_iter().collect();
    let wake_ns = woke
        .wakes
        .iter()
        .find(|w| w.source == expected_source)
        .unwrap()
        .received_ns;
    let before: Vec<_> = steps.iter().filter(|(_, ns)| *ns < wake_ns).collect();
    assert!(
        before
            .iter()
            .all(|(mib, _)| mib * MIB <= threshold_usage + 4 * MIB),
        "hog was already far past the threshold before the wake: {before:?}"
    );
    assert_eq!(cgroup.oom_kills(), 0);
    agent.shutdown().await;
    if cgroup.version == monitor::observe::CgroupVersion::V2 {
        assert_eq!(
            cgroup.read("memory.high").trim(),
            "max",
            "the agent lifts memory.high when it stops"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_memory_threshold_wakes_through_the_pods_cgroup_on_v2() {
    if !require(
        "node_memory_threshold_wakes_through_the_pods_cgroup",
        &[Feature::Root, Feature::CgroupV2Memory],
    ) {
        return;
    }
    init_tracing();
    // The root cgroup has no memory.high, so the agent puts the node's hard threshold on
    // the pods cgroup: the node crosses memory.available<T once the pods grow by
    // (available − T). Here T is 96 MiB below what the node has available now.
    let cgroup = TestCgroup::new("pods", 512 * MIB);
    let threshold = node_available_v2() - 96 * MIB;
    let mut config = config(
        only(&[WakeSource::MemcgThreshold, WakeSource::MemoryEvents]),
        Some(&cgroup.relative),
        vec![],
    );
    config.memory_thresholds.node = vec![hard(threshold)];
    let (agent, mut reports) = start(config);
    let first = collect(&mut reports, Duration::from_secs(5), |r| r.sequence >= 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let high: u64 = cgroup
        .read("memory.high")
        .trim()
        .parse()
        .expect("memory.high armed on the pods cgroup for the node's threshold");
    let usage: u64 = cgroup.read("memory.current").trim().parse().unwrap();
    assert!(
        (80 * MIB..=112 * MIB).contains(&high.saturating_sub(usage)),
        "memory.high {high} should be ~96 MiB above the pods' usage {usage}"
    );

    // 4 MiB steps, 30 ms apart, up to 200 MiB: the node crosses about half-way.
    let mut child = cgroup.spawn({
        let mut c = hog(&["anon", "200", "4", "30", "30"]);
        c.stdout(Stdio::null());
        c
    });
    // When the rest of the node shrank since the last synchronize (memory freed outside
    // the pods), the pods cgroup reaches memory.high before the node crosses: an early
    // wake, after which the synchronize re-arms with the new offset. So: the wake whose
    // fresh observation shows the threshold met must come from memory.events, promptly.
    let met = |r: &SyncReport| {
        r.observation
            .as_ref()
            .is_ok_and(|o| o.memory.available_bytes <= threshold + 4 * MIB)
    };
    let got = collect(&mut reports, Duration::from_secs(30), |r| met(r)).await;
    let _ = child.kill();
    let _ = child.wait();
    let woke = got.iter().find(|r| met(r)).unwrap_or_else(|| {
        panic!(
            "no synchronize saw the node threshold met; reports: {:?}",
            got.iter().map(|r| r.sources()).collect::<Vec<_>>()
        )
    });
    assert!(
        got.iter()
            .all(|r| r.sources() == [WakeSource::MemoryEvents]),
        "every wake should come through memory.events: {:?}",
        got.iter().map(|r| r.sources()).collect::<Vec<_>>()
    );
    let woke_observation = woke.observation.as_ref().unwrap();
    let node = woke_observation.memory;
    // The memory.high that woke us was armed by the synchronize just before, at the pods'
    // usage then plus (available then − threshold). Whatever the rest of the node took
    // since (memory outside the pods) brought the node's crossing that much earlier than
    // the pods' memory.high: the agent cannot see it without a wake, so it is added to
    // the allowance, measured from the two observations.
    let armed = first
        .iter()
        .chain(got.iter())
        .filter(|r| r.sequence < woke.sequence)
        .filter_map(|r| r.observation.as_ref().ok())
        .next_back()
        .expect("a synchronize armed memory.high before the wake");
    let pods_usage =
        |o: &monitor::observe::NodeObservation| o.allocatable.map_or(0, |a| a.stats.usage_bytes);
    let rest_grew = (armed.memory.available_bytes + pods_usage(woke_observation))
        .saturating_sub(node.available_bytes + pods_usage(armed));
    // Not long after the crossing: four allocation steps (the observation is taken after
    // the wake, while the hog keeps allocating), plus what the rest of the node took.
    assert!(
        node.available_bytes + 16 * MIB + rest_grew >= threshold,
        "woke late: available {} vs threshold {threshold}, the rest of the node took {} \
         since memory.high was armed",
        node.available_bytes,
        rest_grew
    );
    eprintln!(
        "woke at available {} MiB vs threshold {} MiB; rest of the node grew {} MiB since arming",
        node.available_bytes / MIB,
        threshold / MIB,
        rest_grew / MIB
    );
    assert_eq!(cgroup.oom_kills(), 0);
    agent.shutdown().await;
    assert_eq!(
        cgroup.read("memory.high").trim(),
        "max",
        "the agent lifts memory.high when it stops"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_threshold_stays_quiet_below_the_threshold() {
    if !require("memory_threshold_stays_quiet", &[Feature::Root]) {
        return;
    }
    init_tracing();
    let cgroup = TestCgroup::new("quiet", 256 * MIB);
    let (sources, expected_source) = threshold_sources(cgroup.version);
    let (agent, mut reports) = start(config(
        sources,
        Some(&cgroup.relative),
        vec![hard(100 * MIB)],
    ));
    collect(&mut reports, Duration::from_secs(5), |r| r.sequence >= 1).await;
    // 120 MiB stays below the 156 MiB crossing.
    let mut child = cgroup.spawn({
        let mut c = hog(&["anon", "120", "4", "10", "2"]);
        c.stdout(Stdio::null());
        c
    });
    let got = collect(&mut reports, Duration::from_secs(2), |_| false).await;
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        got.iter().all(|r| !r.sources().contains(&expected_source)),
        "a threshold fired below its value: {:?}",
        got.iter()
            .map(|r| (
                r.sources(),
                r.observation.as_ref().ok().and_then(|o| o.allocatable)
            ))
            .collect::<Vec<_>>()
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psi_trigger_fires_on_a_real_memory_stall() {
    if !require("psi_trigger_fires", &[Feature::Root, Feature::Psi]) {
        return;
    }
    init_tracing();
    let cgroup = TestCgroup::new("psi", 64 * MIB);
    let pressure_file = cgroup
        .unified_dir
        .as_ref()
        .map(|d| d.join("memory.pressure"))
        .filter(|f| f.exists());
    let pressure_file = pressure_file.expect("per-cgroup memory.pressure in the cgroup2 hierarchy");
    let mut sources = only(&[WakeSource::Psi]);
    sources.psi_stall = Duration::from_millis(10);
    sources.psi_window = Duration::from_secs(2);
    let (agent, mut reports) = start(config(sources, Some(&cgroup.relative), vec![]));
    let status = agent.status_of(WakeSource::Psi).unwrap();
    assert_eq!(status.state, SourceState::Running, "{}", status.detail);
    assert!(
        status.detail.contains(&*pressure_file.to_string_lossy()),
        "per-cgroup trigger armed: {}",
        status.detail
    );

    // A real stall, without killing anything:
    // - v1 memory controller: re-read a 192 MiB file in a 64 MiB cgroup: clean page-cache
    //   churn, the cgroup reclaims at every read.
    // - v2: allocate past memory.high, which throttles the task in reclaim (memory.max
    //   stays above, so nothing is OOM-killed). The VM has no disk for page-cache churn.
    let scratch = std::env::temp_dir().join(format!("monitor-test-{}-psi.dat", std::process::id()));
    let mut child = match cgroup.version {
        monitor::observe::CgroupVersion::V1 => {
            monitor_tests::node::cold_file(&scratch, 192);
            let mut c = hog(&["file", &scratch.to_string_lossy(), "15"]);
            c.stdout(Stdio::null());
            cgroup.spawn(c)
        }
        monitor::observe::CgroupVersion::V2 => {
            cgroup.write("memory.high", &(16 * MIB).to_string());
            let mut c = hog(&["anon", "40", "1", "0", "15"]);
            c.stdout(Stdio::null());
            cgroup.spawn(c)
        }
    };
    let got = collect(&mut reports, Duration::from_secs(20), |r| {
        r.wakes
            .iter()
            .any(|w| matches!(&w.detail, WakeDetail::Psi { file } if *file == pressure_file))
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&scratch);
    assert!(
        got.iter()
            .flat_map(|r| &r.wakes)
            .any(|w| matches!(&w.detail, WakeDetail::Psi { file } if *file == pressure_file)),
        "no PSI wake from {}; pressure now: {}",
        pressure_file.display(),
        std::fs::read_to_string(&pressure_file).unwrap_or_default()
    );
    assert_eq!(
        cgroup.oom_kills(),
        0,
        "the stall must come without an OOM kill"
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_events_wake_on_cgroup_v2() {
    if !require(
        "memory_events_wake_on_cgroup_v2",
        &[Feature::Root, Feature::CgroupV2Memory],
    ) {
        return;
    }
    init_tracing();
    let cgroup = TestCgroup::new("events", 128 * MIB);
    cgroup.write("memory.high", &(32 * MIB).to_string());
    let (agent, mut reports) = start(config(
        only(&[WakeSource::MemoryEvents]),
        Some(&cgroup.relative),
        vec![],
    ));
    assert_eq!(
        agent.status_of(WakeSource::MemoryEvents).unwrap().state,
        SourceState::Running
    );
    collect(&mut reports, Duration::from_secs(5), |r| r.sequence >= 1).await;
    // 48 MiB against memory.high = 32 MiB: the "high" counter rises, memory.events changes.
    let mut child = cgroup.spawn({
        let mut c = hog(&["anon", "48", "1", "5", "3"]);
        c.stdout(Stdio::null());
        c
    });
    let events_file = cgroup.memory_dir.join("memory.events");
    let got = collect(&mut reports, Duration::from_secs(30), |r| {
        r.sources().contains(&WakeSource::MemoryEvents)
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let wake = got
        .iter()
        .flat_map(|r| &r.wakes)
        .find(|w| w.source == WakeSource::MemoryEvents)
        .unwrap_or_else(|| {
            panic!(
                "no memory.events wake; sources seen: {:?}",
                got.iter().map(|r| r.sources()).collect::<Vec<_>>()
            )
        });
    assert_eq!(wake.detail, WakeDetail::MemoryEvents { file: events_file });
    assert!(
        got.iter()
            .all(|r| !r.sources().contains(&WakeSource::Timer)),
        "the timer must not be what woke us"
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_runs_on_the_other_sources_without_ebpf() {
    if !require("agent_runs_without_ebpf", &[Feature::Root]) {
        return;
    }
    init_tracing();
    for (label, ebpf_on, object) in [
        ("switched off", false, None),
        ("failing to load", true, Some(b"not an ELF object".to_vec())),
    ] {
        let mut config = config(
            SourcesSettings {
                ebpf: ebpf_on,
                ..SourcesSettings::default()
            },
            None,
            vec![],
        );
        config.ebpf_object_override = object;
        config.housekeeping = Duration::from_millis(300);
        let (agent, mut reports) = start(config);
        let ebpf = agent.status_of(WakeSource::Ebpf).unwrap();
        let expected = if ebpf_on {
            SourceState::Failed
        } else {
            SourceState::Disabled
        };
        assert_eq!(ebpf.state, expected, "{label}: {}", ebpf.detail);
        assert_eq!(
            agent.status_of(WakeSource::Timer).unwrap().state,
            SourceState::Running
        );
        let got = collect(&mut reports, Duration::from_secs(5), |r| {
            r.sources().contains(&WakeSource::Timer)
        })
        .await;
        let timer = got
            .iter()
            .find(|r| r.sources().contains(&WakeSource::Timer))
            .expect("timer still drives synchronize");
        assert!(
            timer.observation.is_ok(),
            "{label}: {:?}",
            timer.observation
        );
        agent.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_agent_wakes_only_for_the_timer() {
    if !require("idle_agent_wakes_only_for_the_timer", &[Feature::Root]) {
        return;
    }
    init_tracing();
    let mut config = config(SourcesSettings::default(), None, vec![]);
    config.housekeeping = Duration::from_millis(500);
    let (agent, mut reports) = start(config);
    collect(&mut reports, Duration::from_secs(5), |r| r.sequence >= 1).await;
    let cpu_before = process_cpu();
    let got = collect(&mut reports, Duration::from_millis(3_100), |_| false).await;
    let cpu = process_cpu() - cpu_before;
    let timer_wakes = got
        .iter()
        // A kernel event may share a synchronize with a tick: count every tick.
        .filter(|r| r.sources().contains(&WakeSource::Timer))
        .count();
    assert!(
        (5..=7).contains(&timer_wakes),
        "expected ~6 timer synchronizes in 3.1 s, got {timer_wakes}"
    );
    // Other wakes may only come from the kernel (a real event somewhere on the node),
    // never from a source polling on its own.
    for report in &got {
        for wake in &report.wakes {
            assert!(
                matches!(
                    wake.source,
                    WakeSource::Timer
                        | WakeSource::Ebpf
                        | WakeSource::Psi
                        | WakeSource::MemcgThreshold
                ),
                "unexpected wake {wake:?}"
            );
        }
    }
    // No busy polling: ~6 synchronizes cost milliseconds, a spinning source would cost
    // seconds of CPU.
    assert!(
        cpu < Duration::from_millis(300),
        "idle agent used {cpu:?} of CPU in 3.1 s"
    );
    agent.shutdown().await;
}

fn process_cpu() -> Duration {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .expect("getrusage");
    let tv =
        |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    tv(usage.user_time()) + tv(usage.system_time())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_reads_the_real_cgroup_files() {
    if !require("observer_reads_the_real_cgroup_files", &[Feature::Root]) {
        return;
    }
    let cgroup = TestCgroup::new("observe", 96 * MIB);
    let mut child = cgroup.spawn({
        let mut c = hog(&["anon", "40", "8", "0", "30"]);
        c.stdout(Stdio::piped());
        c
    });
    let steps = progress(&mut child);
    // Wait until the hog holds all 40 MiB.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while steps.try_iter().all(|(mib, _)| mib < 40) {
        assert!(std::time::Instant::now() < deadline, "hog did not allocate");
        std::thread::sleep(Duration::from_millis(20));
    }
    let layout = monitor::observe::CgroupLayout::detect().expect("layout");
    let reader = monitor::observe::CgroupReader::new(layout.version, layout.memory_root.clone());
    let observer = monitor::observe::Observer::new(
        reader.clone(),
        monitor::observe::ObserverConfig {
            pods_cgroup: Some(cgroup.relative.clone()),
            ..Default::default()
        },
    );
    let observation = observer
        .observe()
        .expect("a full observation of this machine");
    let pods = observation
        .allocatable
        .expect("the pods cgroup is observed");
    assert_eq!(
        pods.stats.limit_bytes,
        Some(96 * MIB),
        "limit read from the cgroup"
    );
    assert_eq!(pods.capacity_bytes, 96 * MIB);
    assert!(
        pods.stats.usage_bytes >= 40 * MIB,
        "usage {} includes the hog's 40 MiB",
        pods.stats.usage_bytes
    );
    assert!(
        pods.available_bytes <= 56 * MIB,
        "available {}",
        pods.available_bytes
    );
    assert!(
        observation.memory.capacity_bytes > 0
            && observation.memory.available_bytes <= observation.memory.capacity_bytes
    );
    assert!(
        observation.nodefs.is_some_and(|fs| fs.capacity_bytes > 0)
            && observation.pids.is_some_and(|pids| pids.current > 0)
            && observation.failed.is_empty(),
        "{observation:?}"
    );
    let events = reader
        .memory_events(&cgroup.relative)
        .expect("memory events readable");
    assert_eq!(events.oom_kill, Some(0), "{events:?}");
    let _ = child.kill();
    let _ = child.wait();
}
