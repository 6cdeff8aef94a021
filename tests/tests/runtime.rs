//! The agent running and evicting real pods: the `monitor run` binary on a bounded node
//! (its pods cgroup has a memory limit), pods from manifest files, memory hogs as pods.
//! Run as root, one test at a time (`cargo xtask test`).
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::Duration;

use monitor::observe::CgroupVersion;
use monitor::runtime::store::{Phase, PodRecord};
use monitor_tests::node::{BURSTABLE, GUARANTEED, MIB, Node, alive, pod, poll, sleeper, walk_dirs};
use monitor_tests::{Feature, helper_binary, require, wait_until};

/// The memory hierarchy path of a process ("/monitor-test-1/node/kubepods/pod…/main").
fn memcg_of(pid: u32) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    monitor::observe::parse::memory_cgroup_of(&text).unwrap_or_default()
}

/// Mount point of a controller's hierarchy (v1), or the cgroup2 mount (v2).
fn controller_root(controller: &str) -> PathBuf {
    let layout = monitor::observe::CgroupLayout::detect().unwrap();
    if layout.version == CgroupVersion::V2 {
        return layout.memory_root;
    }
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    text.lines()
        .find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut r = right.split_whitespace();
            let (fstype, options) = (r.next()?, r.nth(1)?);
            let mount_point = left.split_whitespace().nth(4)?;
            (fstype == "cgroup" && options.split(',').any(|o| o == controller))
                .then(|| PathBuf::from(mount_point))
        })
        .unwrap_or_else(|| panic!("no {controller} hierarchy"))
}

fn read_trim(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_string()
}

#[test]
fn pods_start_in_their_qos_cgroups_with_the_right_values() {
    if !require("pods_start_in_their_qos_cgroups", &[Feature::Root]) {
        return;
    }
    let mut node = Node::new("evictionHard: {allocatableMemory.available: 50Mi}");
    node.manifest("guaranteed.yaml", &sleeper("guaranteed", GUARANTEED));
    node.manifest("burstable.yaml", &sleeper("burstable", BURSTABLE));
    node.manifest("besteffort.yaml", &sleeper("besteffort", ""));
    node.start();
    let g = node.wait_running("guaranteed");
    let b = node.wait_running("burstable");
    let e = node.wait_running("besteffort");
    let root = format!("/{}/kubepods", node.cgroup_root);
    let pid = |r: &PodRecord| r.containers[0].pid.unwrap();
    assert_eq!(memcg_of(pid(&g)), format!("{root}/pod{}/main", g.uid));
    assert_eq!(
        memcg_of(pid(&b)),
        format!("{root}/burstable/pod{}/main", b.uid)
    );
    assert_eq!(
        memcg_of(pid(&e)),
        format!("{root}/besteffort/pod{}/main", e.uid)
    );

    let layout = monitor::observe::CgroupLayout::detect().unwrap();
    let memory = controller_root("memory").join(root.trim_start_matches('/'));
    let cpu = controller_root("cpu").join(root.trim_start_matches('/'));
    match layout.version {
        CgroupVersion::V1 => {
            assert_eq!(
                read_trim(&memory.join("memory.limit_in_bytes")),
                (512 * MIB).to_string(),
                "bounded node"
            );
            assert_eq!(
                read_trim(&memory.join(format!("pod{}/memory.limit_in_bytes", g.uid))),
                (64 * MIB).to_string()
            );
            assert_eq!(
                read_trim(&memory.join(format!("burstable/pod{}/memory.limit_in_bytes", b.uid))),
                (128 * MIB).to_string()
            );
            // 200m → 204 shares, 100m → 102, BestEffort → 2 (kubelet MilliCPUToShares).
            assert_eq!(
                read_trim(&cpu.join(format!("pod{}/cpu.shares", g.uid))),
                "204"
            );
            assert_eq!(
                read_trim(&cpu.join(format!("burstable/pod{}/cpu.shares", b.uid))),
                "102"
            );
            assert_eq!(
                read_trim(&cpu.join(format!("besteffort/pod{}/cpu.shares", e.uid))),
                "2"
            );
            assert_eq!(
                read_trim(&cpu.join(format!("pod{}/cpu.cfs_quota_us", g.uid))),
                "20000"
            );
            assert_eq!(
                read_trim(&cpu.join(format!("burstable/pod{}/cpu.cfs_quota_us", b.uid))),
                "-1",
                "no cpu limit"
            );
        }
        CgroupVersion::V2 => {
            assert_eq!(
                read_trim(&memory.join("memory.max")),
                (512 * MIB).to_string(),
                "bounded node"
            );
            assert_eq!(
                read_trim(&memory.join(format!("pod{}/memory.max", g.uid))),
                (64 * MIB).to_string()
            );
            assert_eq!(
                read_trim(&memory.join(format!("burstable/pod{}/memory.max", b.uid))),
                (128 * MIB).to_string()
            );
            // cpu.weight = 1 + (shares − 2) × 9999 / 262142.
            assert_eq!(
                read_trim(&cpu.join(format!("pod{}/cpu.weight", g.uid))),
                "8"
            );
            assert_eq!(
                read_trim(&cpu.join(format!("besteffort/pod{}/cpu.weight", e.uid))),
                "1"
            );
            assert_eq!(
                read_trim(&cpu.join(format!("pod{}/cpu.max", g.uid))),
                "20000 100000"
            );
            // The kubelet's group OOM kill (singleProcessOOMKill unset): on each
            // container's cgroup, not the pod's.
            assert_eq!(
                read_trim(&memory.join(format!("pod{}/main/memory.oom.group", g.uid))),
                "1"
            );
            assert_eq!(
                read_trim(&memory.join(format!("pod{}/memory.oom.group", g.uid))),
                "0"
            );
        }
    }
    let oom = |r: &PodRecord| read_trim(Path::new(&format!("/proc/{}/oom_score_adj", pid(r))));
    // Lowering oom_score_adj needs CAP_SYS_RESOURCE; without it (some sandboxes) the
    // runtime gives 0 and says so in an event.
    let privileged = monitor::runtime::has_cap_sys_resource();
    if privileged {
        assert_eq!(oom(&g), "-998");
    } else {
        use std::io::Write;
        let _ = writeln!(
            std::io::stdout(),
            "SKIP: oom_score_adj -998/-999: this process lacks CAP_SYS_RESOURCE"
        );
        assert_eq!(oom(&g), "0");
        assert!(node.log(1).contains("OomScoreAdj"), "the clamp is reported");
    }
    assert_eq!(oom(&e), "1000");
    // Burstable: 1000 − 1000 × 32Mi / capacity, within [2, 999].
    let capacity = monitor::observe::parse::flat_keyed(
        &std::fs::read_to_string("/proc/meminfo").unwrap(),
    )["MemTotal"];
    let expected = (1000 - (1000 * 32 * MIB / capacity) as i64).clamp(2, 999);
    assert_eq!(oom(&b), expected.to_string());
    if privileged {
        let agent_pid = node.agent_pid().unwrap();
        wait_until(
            "the agent's own oom_score_adj",
            Duration::from_secs(5),
            || read_trim(Path::new(&format!("/proc/{agent_pid}/oom_score_adj"))) == "-999",
        );
    }
}

/// `memory.high` per KEP-2570, computed here from the pod's numbers: request plus
/// `factor` of the room up to the limit (or node allocatable without one), rounded down to
/// a 4 KiB page (the kubelet's page size on x86_64).
fn kep_memory_high(request: u64, ceiling: u64, factor: f64) -> String {
    let high = request as f64 + (ceiling - request) as f64 * factor;
    ((high / 4096.0).floor() as u64 * 4096).to_string()
}

#[test]
fn memory_qos_sets_memory_high_min_and_low_on_cgroup_v2() {
    // cgroup v1 has no memory.high / memory.min / memory.low: the kubelet applies Memory
    // QoS on cgroup v2 only, and so does the agent.
    if !require(
        "memory_qos_sets_memory_high_min_and_low",
        &[Feature::Root, Feature::CgroupV2Memory],
    ) {
        return;
    }
    // A 512 MiB bounded node: node allocatable memory is the pods root's 512 MiB.
    let allocatable = 512 * MIB;
    let factor = 0.8;
    let mut node = Node::new(
        "evictionHard: {allocatableMemory.available: 50Mi}\n\
         featureGates: {MemoryQoS: true}\n\
         memoryThrottlingFactor: 0.8\n\
         memoryReservationPolicy: TieredReservation",
    );
    // GUARANTEED: 64Mi request = limit; BURSTABLE: 32Mi request, 128Mi limit.
    let (guaranteed_request, burstable_request, burstable_limit) = (64 * MIB, 32 * MIB, 128 * MIB);
    node.manifest("guaranteed.yaml", &sleeper("guaranteed", GUARANTEED));
    node.manifest("burstable.yaml", &sleeper("burstable", BURSTABLE));
    node.manifest("besteffort.yaml", &sleeper("besteffort", ""));
    node.start();
    let g = node.wait_running("guaranteed");
    let b = node.wait_running("burstable");
    let e = node.wait_running("besteffort");
    let kubepods = node.memory_root().join("kubepods");
    assert_eq!(
        read_trim(&kubepods.join("memory.max")),
        allocatable.to_string(),
        "the bounded node's allocatable"
    );
    let read = |dir: &Path| {
        (
            read_trim(&dir.join("memory.high")),
            read_trim(&dir.join("memory.min")),
            read_trim(&dir.join("memory.low")),
        )
    };
    let max = || "max".to_string();
    let bytes = |n: u64| n.to_string();

    // Guaranteed: memory.min = request at pod and container level, never throttled.
    let g_pod = kubepods.join(format!("pod{}", g.uid));
    assert_eq!(
        read(&g_pod.join("main")),
        (max(), bytes(guaranteed_request), bytes(0)),
        "guaranteed container"
    );
    assert_eq!(
        read(&g_pod),
        (max(), bytes(guaranteed_request), bytes(0)),
        "guaranteed pod"
    );
    // Burstable: memory.low = request; the container is throttled between request and
    // limit, the pod is not.
    let b_pod = kubepods.join(format!("burstable/pod{}", b.uid));
    assert_eq!(
        read(&b_pod.join("main")),
        (
            kep_memory_high(burstable_request, burstable_limit, factor),
            bytes(0),
            bytes(burstable_request)
        ),
        "burstable container"
    );
    assert_eq!(
        read(&b_pod),
        (max(), bytes(0), bytes(burstable_request)),
        "burstable pod"
    );
    // BestEffort: no protection; memory.high from node allocatable (no request, no limit).
    let e_pod = kubepods.join(format!("besteffort/pod{}", e.uid));
    assert_eq!(
        read(&e_pod.join("main")),
        (kep_memory_high(0, allocatable, factor), bytes(0), bytes(0)),
        "best-effort container"
    );
    assert_eq!(read(&e_pod), (max(), bytes(0), bytes(0)), "best-effort pod");
    // The QoS level covers its children: the pods root protects Guaranteed and Burstable
    // requests, the Burstable tier its own (updated as each pod starts).
    let tiers = || {
        (
            read_trim(&kubepods.join("memory.min")),
            read_trim(&kubepods.join("burstable/memory.low")),
        )
    };
    let expected = (
        bytes(guaranteed_request + burstable_request),
        bytes(burstable_request),
    );
    wait_until(
        "the QoS tiers' memory.min / memory.low",
        Duration::from_secs(10),
        || tiers() == expected,
    );
}

#[test]
fn a_fast_best_effort_hog_is_evicted_before_the_oom_killer() {
    if !require("a_fast_best_effort_hog_is_evicted", &[Feature::Root]) {
        return;
    }
    let mut node = Node::new("evictionHard: {allocatableMemory.available: 150Mi}");
    node.manifest("guaranteed.yaml", &sleeper("guaranteed", GUARANTEED));
    let hog = helper_binary("hog").display().to_string();
    // 700 MiB at full speed in 4 MiB steps: past the 512 MiB bounded node in ~0.3 s.
    node.manifest(
        "batch.yaml",
        &pod("batch", "", &[&hog, "anon", "700", "4", "0", "60"], ""),
    );
    node.start();
    let guaranteed = node.wait_running("guaranteed");
    let evicted = node.wait_phase("batch", Phase::Failed, Duration::from_secs(30));
    assert_eq!(evicted.reason.as_deref(), Some("Evicted"), "{evicted:?}");
    assert!(
        evicted.message.as_deref().unwrap_or("").contains("memory"),
        "{:?}",
        evicted.message
    );
    assert_eq!(
        node.pods_oom_kills(),
        0,
        "the kernel OOM killer fired first\n{}",
        node.log(1)
    );
    let still = node.record("guaranteed").unwrap();
    assert_eq!(
        still.phase,
        Phase::Running,
        "the guaranteed pod was evicted or killed: {still:?}\n{}",
        node.log(1)
    );
    assert_eq!(
        still.containers[0].pid, guaranteed.containers[0].pid,
        "the guaranteed pod was not touched"
    );
    assert!(alive(still.containers[0].pid.unwrap()));
    // The evicted pod is not restarted (restartPolicy Always notwithstanding).
    std::thread::sleep(Duration::from_secs(2));
    let after = node.record("batch").unwrap();
    assert_eq!(after.phase, Phase::Failed);
    assert!(
        after.containers.iter().all(|c| c.pid.is_none()),
        "{after:?}"
    );
    assert!(
        node.log(1).contains("Evicted"),
        "an event names the eviction"
    );
    // The hard threshold's notifier (memcg eventfd on v1, memory.events on v2) reached the
    // hot path, which killed the pre-ranked victim through its cgroup.kill before any
    // synchronize (every kernel these tests run on has cgroup.kill: 5.14+).
    let log = node.log(1);
    assert!(
        log.lines()
            .any(|l| l.contains("hot path: cgroup.kill written") && l.contains("pod=demo/batch")),
        "the hot path killed the batch pod\n{log}"
    );
}

#[test]
fn the_detector_alone_gives_the_hot_path_a_head_start_and_the_kill_comes_at_the_level() {
    if !require(
        "the_detector_alone_gives_the_hot_path_a_head_start",
        &[Feature::Root, Feature::Ebpf],
    ) {
        return;
    }
    // The crossing detector is the only notifier (as on a cgroup v2 node, where no memcg
    // eventfd exists): its early level, a little below the hard one, starts the hot
    // path's watch, and the watch kills once the level itself is reached.
    let mut node = Node::with_agent_keys(
        "evictionHard: {allocatableMemory.available: 150Mi}\nhousekeepingInterval: 1s",
        "  sources:\n    memcgThresholds: false\n    memoryEvents: false\n    psi: false\n",
    );
    let hog = helper_binary("hog").display().to_string();
    let go = node.path("go");
    node.manifest(
        "batch.yaml",
        &pod(
            "batch",
            "",
            &[
                &hog,
                "after",
                &go.display().to_string(),
                "anon",
                "700",
                "1",
                "2",
                "60",
            ],
            "",
        ),
    );
    node.log_filter = Some("info,monitor::sync::hot=debug".into());
    node.start();
    // Grown only once a synchronize has seen it running and armed the hot path with it.
    node.wait_running("batch");
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(&go, "").expect("start file");
    let evicted = node.wait_phase("batch", Phase::Failed, Duration::from_secs(30));
    assert_eq!(evicted.reason.as_deref(), Some("Evicted"), "{evicted:?}");
    let log = node.log(1);
    assert_eq!(
        node.pods_oom_kills(),
        0,
        "the OOM killer fired first\n{log}"
    );
    assert!(
        log.contains("crossing detector: early levels"),
        "the early levels are armed\n{log}"
    );
    // The early record started a watch (the agent logs it at debug level)...
    let early = log
        .lines()
        .position(|l| l.contains("hot path: an early notifier fired") && l.contains("source=ebpf"))
        .unwrap_or_else(|| panic!("no watch from an early record\n{log}"));
    let (at, kill) = log
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains("hot path: cgroup.kill written") && l.contains("pod=demo/batch"))
        .unwrap_or_else(|| panic!("the hot path killed the batch pod\n{log}"));
    assert!(early < at, "the watch started before the kill\n{log}");
    let number = |key: &str| -> u64 {
        monitor_bench::util::field(kill, key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} in {kill}"))
    };
    // ...and the kill came at the level itself, not at the early one.
    assert_eq!(
        monitor_bench::util::field(kill, "source"),
        Some("ebpf"),
        "{kill}"
    );
    assert!(
        number("working_set_bytes") >= number("level_bytes"),
        "killed at the level, not before: {kill}"
    );
}

/// The meminfo lines that move memory.available, in MiB, for a failure's message.
fn meminfo_brief() -> String {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let map = monitor::observe::parse::flat_keyed(&meminfo);
    [
        "MemFree",
        "Active(file)",
        "Inactive(file)",
        "AnonPages",
        "Shmem",
        "Unevictable",
        "Mlocked",
        "KernelStack",
        "PageTables",
        "Slab",
    ]
    .iter()
    .map(|k| format!("{k} {}", map.get(*k).copied().unwrap_or(0) / MIB))
    .collect::<Vec<_>>()
    .join(", ")
}

#[test]
fn a_node_threshold_armed_on_the_pods_cgroup_kills_only_once_the_node_is_past_it() {
    if !require(
        "a_node_threshold_armed_on_the_pods_cgroup_kills_only_once_the_node_is_past_it",
        &[Feature::Root, Feature::Ebpf, Feature::CgroupV2Memory],
    ) {
        return;
    }
    // The crossing detector arms the node's memory.available threshold on the pods
    // cgroup, offset by what the rest of the node holds at the synchronize. Something
    // outside the pods holds 128 MiB then, and exits: the pods reach the level armed for
    // them 128 MiB before the node reaches its threshold. No pod may die there; once the
    // node itself is past the threshold, the hot path kills.
    let rest = monitor_tests::TestCgroup::new("rest", 192 * MIB);
    let mut rest_hog = monitor_tests::KillOnDrop(rest.spawn({
        let mut c = monitor_tests::hog(&["anon", "128", "8", "0", "600"]);
        c.stdout(std::process::Stdio::null());
        c
    }));
    // The rest's usage; `None` while its memory.current does not read.
    let rest_usage = || rest.read("memory.current").trim().parse::<u64>().ok();
    wait_until(
        "the rest of the node holds 128 MiB",
        Duration::from_secs(20),
        || rest_usage().is_some_and(|usage| usage >= 128 * MIB),
    );
    // A first run, whose threshold nobody reaches, starts the pods and the agent: what
    // they take of the node is then known. Node allocatable is not enforced on the pods,
    // so memory.available gets no allocatableMemory.available copy (whose capacity would
    // be the pods' 512 MiB): the node's own threshold is the only one.
    let mut node = Node::with_agent_keys(
        "evictionHard: {memory.available: 1Mi}\nenforceNodeAllocatable: [none]\nhousekeepingInterval: 60s",
        // Relief off: its level, a margin above the threshold, would wake a synchronize
        // that arms the pods' level afresh before the hard level is reached.
        "  sources:\n    memcgThresholds: false\n    memoryEvents: false\n    psi: false\n  memoryRelief: {enabled: false}\n",
    );
    let hog = helper_binary("hog").display().to_string();
    let grow = |name: &str, go: &Path, mib: &str| {
        pod(
            name,
            "",
            &[
                &hog,
                "after",
                &go.display().to_string(),
                "anon",
                mib,
                "4",
                "2",
                "600",
            ],
            "",
        )
    };
    let (go, go2) = (node.path("go"), node.path("go2"));
    node.manifest("batch.yaml", &grow("batch", &go, "208"));
    node.manifest("batch2.yaml", &grow("batch2", &go2, "128"));
    node.log_filter = Some("info,monitor::sync::hot=debug".into());
    node.start();
    let batch = node.wait_running("batch");
    node.wait_running("batch2");
    // Once its event sources run (loading the eBPF programs takes seconds under
    // emulation), the first synchronize starts, and arms the levels as it ends.
    let synchronized = |node: &Node| {
        wait_until("the first synchronize", Duration::from_secs(60), || {
            node.log(node.runs).contains("wake sequence=1 ")
        });
        std::thread::sleep(Duration::from_millis(1000));
    };
    synchronized(&node);
    let settled = monitor_tests::node_available_v2();
    node.stop();
    // The second run (which adopts the pods) arms memory.available 160 MiB below that:
    // the node crosses once the pods grow by 160 MiB while the rest holds its 128 MiB.
    let threshold_mib = settled / MIB - 160;
    let config = node.path("config.yaml");
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        text.replace(
            "memory.available: 1Mi",
            &format!("memory.available: {threshold_mib}Mi"),
        ),
    )
    .expect("config");
    node.start();
    wait_until("the pods adopted", Duration::from_secs(20), || {
        node.log(2).contains("Adopted")
    });
    assert_eq!(node.record("batch").unwrap().phase, Phase::Running);
    // A synchronize arms the detector with the rest's 128 MiB in the offset.
    synchronized(&node);
    let _ = rest_hog.0.kill();
    let _ = rest_hog.0.wait();
    wait_until(
        "the rest of the node freed its memory",
        Duration::from_secs(10),
        || rest_usage().is_some_and(|usage| usage < 8 * MIB),
    );
    // 208 MiB: past the pods' level (160 MiB), 80 MiB short of the node's threshold.
    std::fs::write(&go, "").expect("start file");
    let log = node
        .path("logs")
        .join(format!("demo_batch_{}/main/0.log", batch.uid));
    let held = monitor_tests::node::poll(Duration::from_secs(20), || reached(&log, 208).is_some());
    assert!(
        held,
        "batch did not come to hold 208 MiB: {:?}; node available {} MiB, threshold {threshold_mib} MiB; its log:\n{}\nagent log:\n{}",
        node.record("batch").map(|r| (r.phase, r.message)),
        monitor_tests::node_available_v2() / MIB,
        std::fs::read_to_string(&log).unwrap_or_default(),
        node.log(2)
    );
    std::thread::sleep(Duration::from_millis(1500));
    let agent_log = node.log(2);
    assert!(
        !agent_log.contains("hot path: cgroup.kill written"),
        "a kill while the node was above its threshold (available {} MiB, threshold {threshold_mib} MiB)\n{agent_log}",
        monitor_tests::node_available_v2() / MIB
    );
    let record = node.record("batch").unwrap();
    assert_eq!(
        record.phase,
        Phase::Running,
        "evicted while the node was above its threshold: {:?} (settled at {} MiB available, threshold {threshold_mib} MiB, {} MiB available now; {})\n{agent_log}",
        record.message,
        settled / MIB,
        monitor_tests::node_available_v2() / MIB,
        meminfo_brief()
    );
    // 128 MiB more in batch2 takes the node past its threshold: batch, the larger,
    // is killed by the hot path, and its eviction quotes the node's own numbers.
    std::fs::write(&go2, "").expect("start file");
    let evicted = node.wait_phase("batch", Phase::Failed, Duration::from_secs(30));
    assert_eq!(evicted.reason.as_deref(), Some("Evicted"), "{evicted:?}");
    let message = evicted.message.unwrap_or_default();
    assert!(
        message.contains(&format!("Threshold quantity: {threshold_mib}Mi")),
        "{message}"
    );
    let agent_log = node.log(2);
    let kill = agent_log
        .lines()
        .find(|l| l.contains("hot path: cgroup.kill written"))
        .unwrap_or_else(|| panic!("the hot path killed\n{agent_log}"));
    assert!(kill.contains("pod=demo/batch "), "{kill}");
    let number = |key: &str| -> u64 {
        monitor_bench::util::field(kill, key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} in {kill}"))
    };
    // The level is the node's working set at its threshold (MemTotal less the
    // threshold, one byte past), not the pods' level, and the node was past it.
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let total = monitor::observe::parse::flat_keyed(&meminfo)["MemTotal"];
    assert_eq!(
        number("level_bytes"),
        total - threshold_mib * MIB + 1,
        "killed at the node's level: {kill}"
    );
    assert!(
        number("working_set_bytes") >= number("level_bytes"),
        "{kill}"
    );
    assert_eq!(
        node.pods_oom_kills(),
        0,
        "the OOM killer fired\n{agent_log}"
    );
    assert_eq!(node.record("batch2").unwrap().phase, Phase::Running);
}

/// The hog's log: "allocated <MiB> <ns>" lines; returns when it first held `mib`.
fn reached(log: &Path, mib: u64) -> Option<u64> {
    let file = std::fs::File::open(log).ok()?;
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| {
            let mut w = line.split_whitespace();
            (w.next() == Some("allocated")).then_some(())?;
            let m: u64 = w.next()?.parse().ok()?;
            let ns: u64 = w.next()?.parse().ok()?;
            (m >= mib).then_some(ns)
        })
}

#[test]
fn soft_threshold_evicts_after_its_grace_period_with_sigterm() {
    if !require(
        "soft_threshold_evicts_after_its_grace_period",
        &[Feature::Root],
    ) {
        return;
    }
    // Soft allocatableMemory.available<300Mi for 3 s; the pod asks for 10 s of grace,
    // evictionMaxPodGracePeriod caps it at 2 s.
    // On cgroup v2 only hard thresholds have a kernel notifier (memory.high): a soft
    // crossing is seen at the next synchronize, so the timer runs every second there.
    let v2 = monitor::observe::CgroupLayout::detect().unwrap().version == CgroupVersion::V2;
    let mut node = Node::new(&format!(
        "evictionHard: {{allocatableMemory.available: 20Mi}}\nevictionSoft: {{allocatableMemory.available: 300Mi}}\n\
         evictionSoftGracePeriod: {{allocatableMemory.available: 3s}}\nevictionMaxPodGracePeriod: 2{}",
        if v2 { "\nhousekeepingInterval: 1s" } else { "" }
    ));
    // JSON lines: the spans of the decision path are read back below.
    node.json_logs = true;
    let hog = helper_binary("hog").display().to_string();
    let term = node.path("term");
    let extra = "  terminationGracePeriodSeconds: 10\n";
    let env = format!(
        "    env:\n    - {{name: HOG_TERM_FILE, value: \"{}\"}}\n    - {{name: HOG_TERM_LINGER_MS, value: \"1000\"}}\n",
        term.display()
    );
    // 256 MiB held: allocatable available falls to ~256 MiB, under 300 MiB.
    node.manifest(
        "grower.yaml",
        &pod(
            "grower",
            &env,
            &[&hog, "anon", "256", "8", "0", "120"],
            extra,
        ),
    );
    node.start();
    let running = node.wait_running("grower");
    let log = node
        .path("logs")
        .join(format!("demo_grower_{}/main/0.log", running.uid));
    wait_until("the hog holds 256 MiB", Duration::from_secs(10), || {
        reached(&log, 256).is_some()
    });
    // pods usage crosses 512 − 300 = 212 MiB on the way up.
    let crossed = reached(&log, 213).expect("crossing step logged");
    std::thread::sleep(Duration::from_millis(2000));
    assert_eq!(
        node.record("grower").unwrap().phase,
        Phase::Running,
        "evicted before the grace period"
    );
    assert!(!term.exists(), "SIGTERM before the grace period");
    let evicted = node.wait_phase("grower", Phase::Failed, Duration::from_secs(10));
    assert_eq!(evicted.reason.as_deref(), Some("Evicted"));
    // The hog writes "term <ns>" to a temporary and renames it, so the file is whole.
    wait_until(
        "the pod records its SIGTERM",
        Duration::from_secs(5),
        || term.exists(),
    );
    // The manifest goes while the pod is still being killed (it lingers 1 s after
    // SIGTERM): once the eviction ends, the pod goes too, record and all.
    node.remove_manifest("grower.yaml");
    let text = std::fs::read_to_string(&term).unwrap();
    let term_ns: u64 = text
        .strip_prefix("term ")
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}: want \"term <ns>\", got {text:?}", term.display()));
    let waited = Duration::from_nanos(term_ns.saturating_sub(crossed));
    assert!(
        waited >= Duration::from_millis(2900),
        "SIGTERM {waited:?} after the crossing: before the 3 s grace"
    );
    // v1: the threshold notifier sees the crossing at once; v2: the 1 s timer does.
    let late = Duration::from_millis(if v2 { 5500 } else { 4000 });
    assert!(
        waited <= late,
        "SIGTERM {waited:?} after the crossing: the deadline wake failed"
    );
    // The pod lingered 1 s after SIGTERM and exited by itself, within its 2 s grace;
    // then its removed manifest took it away.
    wait_until(
        "the evicted pod whose manifest went is removed",
        Duration::from_secs(10),
        || node.record("grower").is_none(),
    );
    let agent_log = node.log(1);
    assert!(
        agent_log.contains("grace period of 2 s"),
        "min(pod 10 s, max 2 s) owed:\n{agent_log}"
    );
    // The kill's line carries the decision path: the pass that decided (its sequence
    // and wake) and the eviction's own span (pod, signal, grace).
    let stopping: serde_json::Value = agent_log
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| {
            line["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("grace period of 2 s"))
        })
        .unwrap_or_else(|| panic!("no JSON line of the kill:\n{agent_log}"));
    let spans = stopping["spans"].as_array().cloned().unwrap_or_default();
    let [pass, .., eviction] = &spans[..] else {
        panic!("the kill's line has no synchronize and evict spans: {stopping}");
    };
    assert_eq!(pass["name"], "synchronize", "{stopping}");
    assert!(pass["sequence"].as_u64().is_some(), "{stopping}");
    assert!(
        pass["wake"].as_str().is_some_and(|w| !w.is_empty()),
        "{stopping}"
    );
    assert_eq!(eviction["name"], "evict", "{stopping}");
    assert_eq!(eviction["pod"], "demo/grower", "{stopping}");
    assert_eq!(
        eviction["signal"], "allocatableMemory.available",
        "{stopping}"
    );
    assert_eq!(eviction["grace_seconds"], 2, "{stopping}");
}

/// The log directory of one container of a pod on a node with a disk.
fn container_logs(node: &Node, record: &PodRecord) -> PathBuf {
    let disk = node.disk.as_ref().expect("a node with a disk");
    disk.join("logs").join(format!(
        "demo_{}_{}/main",
        record.pod.metadata.name, record.uid
    ))
}

/// A node whose filesystem is a 64 MiB tmpfs with a hard nodefs.available<24Mi. Disk
/// signals have no kernel notifier: a 1 s timer paces them.
fn disk_node() -> Node {
    Node::with_disk(
        "evictionHard: {nodefs.available: 24Mi}\nhousekeepingInterval: 1s",
        64,
    )
}

#[test]
fn disk_pressure_collects_dead_containers_logs_before_evicting() {
    if !require(
        "disk_pressure_collects_dead_containers_logs",
        &[Feature::Root],
    ) {
        return;
    }
    // The node filesystem is a 64 MiB tmpfs; hard nodefs.available<24Mi. A chatty pod logs
    // 16 MiB per run and exits; restartPolicy Always runs it again (1 s, then 2 s later).
    // Its third run leaves 48 MiB of logs, 16 MiB available: under the threshold. Deleting
    // the two dead runs' logs (node-level reclaim) frees 32 MiB, which is enough, so
    // nothing is evicted.
    let mut node = disk_node();
    let hog = helper_binary("hog").display().to_string();
    node.manifest(
        "chatty.yaml",
        &pod(
            "chatty",
            "",
            &[&hog, "log", "16"],
            "  restartPolicy: Always\n",
        ),
    );
    node.start();
    assert!(
        poll(Duration::from_secs(20), || node.record("chatty").is_some()),
        "the pod never started:\n{}",
        node.log(1)
    );
    let logs = container_logs(&node, &node.record("chatty").unwrap());
    wait_until("a node-level reclaim", Duration::from_secs(30), || {
        node.log(1)
            .contains("node-level reclaim for ephemeral-storage")
    });
    let agent_log = node.log(1);
    let line = agent_log
        .lines()
        .find(|l| l.contains("node-level reclaim for ephemeral-storage"))
        .unwrap();
    assert!(line.contains("(nodefs.available)"), "{line}");
    let freed: u64 = line
        .split("freed ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no freed bytes in {line:?}"));
    assert!(
        freed >= 32 << 20,
        "two dead runs of 16 MiB each should go, freed {freed}: {line}"
    );
    assert!(
        !logs.join("0.log").exists(),
        "the first run's log is still there"
    );
    assert!(
        !logs.join("1.log").exists(),
        "the second run's log is still there"
    );
    // Enough was freed: the pod keeps running (restarting) and is never evicted.
    std::thread::sleep(Duration::from_secs(3));
    let record = node.record("chatty").unwrap();
    assert_ne!(record.phase, Phase::Failed, "{record:?}");
    assert!(record.containers[0].restart_count >= 2, "{record:?}");
    assert!(
        !node.log(1).contains("Evicted"),
        "node-level reclaim was enough, yet a pod was evicted:\n{}",
        node.log(1)
    );
}

#[test]
fn disk_pressure_evicts_the_pod_using_the_most_disk_when_gc_is_not_enough() {
    if !require(
        "disk_pressure_evicts_the_biggest_disk_user",
        &[Feature::Root],
    ) {
        return;
    }
    // The same node. Two pods that log and stay:
    // "quiet" 2 MiB, "filler" 44 MiB (18 MiB available). No container has died, so
    // node-level reclaim frees nothing; the filler uses the most disk and is evicted.
    // Its logs belong to a dead container then, and a later reclaim deletes them.
    let mut node = disk_node();
    let hog = helper_binary("hog").display().to_string();
    node.manifest(
        "quiet.yaml",
        &pod(
            "quiet",
            "",
            &[&hog, "log", "2", "600"],
            "  restartPolicy: Never\n",
        ),
    );
    node.start();
    let quiet = node.wait_running("quiet");
    node.manifest(
        "filler.yaml",
        &pod(
            "filler",
            "",
            &[&hog, "log", "44", "600"],
            "  restartPolicy: Never\n",
        ),
    );
    let filler_running = node.wait_running("filler");
    let filler_logs = container_logs(&node, &filler_running);
    let evicted = node.wait_phase("filler", Phase::Failed, Duration::from_secs(20));
    assert_eq!(evicted.reason.as_deref(), Some("Evicted"));
    let message = evicted.message.unwrap_or_default();
    assert!(
        message.contains("low on resource: ephemeral-storage"),
        "{message}"
    );
    let still = node.record("quiet").unwrap();
    assert_eq!(still.phase, Phase::Running);
    assert!(alive(quiet.containers[0].pid.unwrap()));
    wait_until(
        "the evicted pod's logs are collected",
        Duration::from_secs(15),
        || !filler_logs.exists(),
    );
    wait_until(
        "nodefs.available back above the threshold",
        Duration::from_secs(5),
        || node.disk_available() >= 24 << 20,
    );
    assert!(
        container_logs(&node, &quiet).join("0.log").exists(),
        "the running pod's log was deleted"
    );
    // One eviction: the quiet pod is not touched after the filler freed the disk.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(node.record("quiet").unwrap().phase, Phase::Running);
}

#[test]
fn pods_survive_an_agent_restart_and_pressure_still_evicts() {
    if !require("pods_survive_an_agent_restart", &[Feature::Root]) {
        return;
    }
    let mut node = Node::new("evictionHard: {allocatableMemory.available: 150Mi}");
    let hog = helper_binary("hog").display().to_string();
    let go = node.path("go");
    let env = format!(
        "    env:\n    - {{name: HOG_START_FILE, value: \"{}\"}}\n",
        go.display()
    );
    node.manifest("guaranteed.yaml", &sleeper("guaranteed", GUARANTEED));
    node.manifest(
        "batch.yaml",
        &pod("batch", &env, &[&hog, "anon", "700", "4", "0", "60"], ""),
    );
    node.start();
    let g = node.wait_running("guaranteed");
    let b = node.wait_running("batch");
    node.stop();
    let (gp, bp) = (g.containers[0].pid.unwrap(), b.containers[0].pid.unwrap());
    assert!(
        alive(gp) && alive(bp),
        "pods keep running while the agent is down"
    );

    node.start();
    // Adopted at once; the pressure below waits for the agent's sources too.
    wait_until(
        &format!("adoption and the agent running\n{}", node.log(2)),
        Duration::from_secs(10),
        || node.log(2).contains("Adopted") && node.log(2).contains("agent running"),
    );
    std::thread::sleep(Duration::from_millis(500));
    let g2 = node.record("guaranteed").unwrap();
    let b2 = node.record("batch").unwrap();
    assert_eq!(
        (g2.containers[0].pid, g2.containers[0].restart_count),
        (Some(gp), 0),
        "adopted, not restarted"
    );
    assert_eq!(
        (b2.containers[0].pid, b2.containers[0].restart_count),
        (Some(bp), 0),
        "adopted, not restarted"
    );

    // Pressure after the restart: the adopted hog starts allocating and is evicted.
    std::fs::write(&go, "").unwrap();
    let evicted = node.wait_phase("batch", Phase::Failed, Duration::from_secs(30));
    assert_eq!(evicted.reason.as_deref(), Some("Evicted"));
    assert_eq!(
        node.pods_oom_kills(),
        0,
        "OOM killer fired\n{}",
        node.log(2)
    );
    assert!(alive(gp), "guaranteed pod untouched");

    // A third run: the evicted pod stays evicted (not restarted, not evicted again), and
    // no cgroup of it is left behind.
    node.stop();
    node.start();
    wait_until("third run synchronizes", Duration::from_secs(10), || {
        node.log(3).contains("wake")
    });
    std::thread::sleep(Duration::from_millis(1000));
    let b3 = node.record("batch").unwrap();
    assert_eq!(b3.phase, Phase::Failed);
    assert!(b3.containers[0].pid.is_none());
    assert!(
        !node.log(3).contains("Killing"),
        "nothing is evicted twice:\n{}",
        node.log(3)
    );
    let memory_root = monitor::observe::CgroupLayout::detect()
        .unwrap()
        .memory_root;
    let pod_dirs: Vec<String> = walk_dirs(&memory_root.join(&node.cgroup_root))
        .into_iter()
        .filter(|d| d.contains(&format!("pod{}", b.uid)))
        .collect();
    assert!(
        pod_dirs.is_empty(),
        "orphan cgroups of the evicted pod: {pod_dirs:?}"
    );
    assert!(alive(gp));
}

#[test]
fn a_malformed_manifest_is_reported_and_skipped() {
    if !require("a_malformed_manifest_is_reported", &[Feature::Root]) {
        return;
    }
    let mut node = Node::new("evictionHard: {allocatableMemory.available: 50Mi}");
    node.manifest("good.yaml", &sleeper("good", ""));
    node.manifest("noname.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {}\nspec: {containers: [{name: c, image: x, command: [/bin/true]}]}\n");
    node.start();
    let good = node.wait_running("good");
    wait_until("BadManifest event", Duration::from_secs(10), || {
        node.log(1).contains("BadManifest")
    });
    let log = node.log(1);
    let line = log.lines().find(|l| l.contains("BadManifest")).unwrap();
    assert!(
        line.contains("noname.yaml") && line.contains("metadata.name"),
        "{line}"
    );

    // Live: a bad quantity in a new file is reported with its field path; a good file
    // starts; the running pod is untouched throughout.
    node.manifest(
        "badqty.yaml",
        &sleeper("badqty", "    resources:\n      limits: {memory: 12Qi}\n"),
    );
    node.manifest("late.yaml", &sleeper("late", ""));
    node.wait_running("late");
    wait_until("second BadManifest", Duration::from_secs(10), || {
        node.log(1).contains("badqty.yaml")
    });
    let log = node.log(1);
    let line = log.lines().find(|l| l.contains("badqty.yaml")).unwrap();
    assert!(line.contains("resources.limits.memory"), "{line}");
    assert_eq!(
        node.record("good").unwrap().containers[0].pid,
        good.containers[0].pid
    );
    assert!(
        node.record("badqty").is_none(),
        "a bad manifest never becomes a pod"
    );
    // Removing a file stops its pod.
    let late_pid = node.record("late").unwrap().containers[0].pid.unwrap();
    std::fs::remove_file(node.path("pods").join("late.yaml")).unwrap();
    wait_until("late stopped", Duration::from_secs(40), || {
        node.record("late").is_none() && !alive(late_pid)
    });
}

#[test]
fn restart_policies_are_honoured() {
    if !require("restart_policies_are_honoured", &[Feature::Root]) {
        return;
    }
    let mut node = Node::new("evictionHard: {allocatableMemory.available: 50Mi}");
    let policy = |p: &str| format!("  restartPolicy: {p}\n");
    // Exits 3 at once: Always and OnFailure restart it (1 s back-off, doubling), Never not.
    node.manifest(
        "always.yaml",
        &pod(
            "always",
            "",
            &["/bin/sh", "-c", "exit 3"],
            &policy("Always"),
        ),
    );
    node.manifest(
        "onfailure.yaml",
        &pod(
            "onfailure",
            "",
            &["/bin/sh", "-c", "exit 3"],
            &policy("OnFailure"),
        ),
    );
    node.manifest(
        "never.yaml",
        &pod("never", "", &["/bin/sh", "-c", "exit 3"], &policy("Never")),
    );
    node.manifest(
        "done.yaml",
        &pod("done", "", &["/bin/true"], &policy("OnFailure")),
    );
    node.start();
    let restarted = |name: &str| {
        node.record(name)
            .is_some_and(|r| r.containers[0].restart_count >= 2)
    };
    assert!(
        poll(Duration::from_secs(20), || restarted("always")
            && restarted("onfailure")),
        "{}",
        node.log(1)
    );
    // Between its runs a restarting container waits out its back-off, and `monitor pods`
    // says so as kubectl does (the back-off doubles: seconds to catch it now).
    let mut table = String::new();
    let crash_looping = poll(Duration::from_secs(20), || {
        table = node.pods_table();
        table
            .lines()
            .any(|l| l.starts_with("demo/always ") && l.contains(" CrashLoopBackOff "))
    });
    assert!(crash_looping, "`monitor pods`:\n{table}");
    let never = node.wait_phase("never", Phase::Failed, Duration::from_secs(10));
    assert_eq!(
        (
            never.containers[0].restart_count,
            never.containers[0].last_exit
        ),
        (0, Some(3))
    );
    let done = node.wait_phase("done", Phase::Succeeded, Duration::from_secs(10));
    assert_eq!(
        done.containers[0].restart_count, 0,
        "OnFailure does not restart a success"
    );
    // Each run has its own log file.
    let always = node.record("always").unwrap();
    let dir = node
        .path("logs")
        .join(format!("demo_always_{}/main", always.uid));
    assert!(
        dir.join("0.log").exists() && dir.join("1.log").exists(),
        "{}",
        dir.display()
    );
}

#[test]
fn admission_rejects_best_effort_under_memory_pressure_and_critical_pods_preempt() {
    if !require("admission_under_memory_pressure", &[Feature::Root]) {
        return;
    }
    // A soft threshold with a long grace period: MemoryPressure holds, nothing is evicted.
    let mut node = Node::new(
        "evictionHard: {allocatableMemory.available: 20Mi}\nevictionSoft: {allocatableMemory.available: 400Mi}\n\
         evictionSoftGracePeriod: {allocatableMemory.available: 10m}",
    );
    let hog = helper_binary("hog").display().to_string();
    // Holds 200 MiB of the 512 MiB node: available ~300 MiB < 400 MiB. Burstable, with a
    // 200 MiB request, so the node's memory is mostly requested.
    node.manifest(
        "holder.yaml",
        &pod(
            "holder",
            "    resources:\n      requests: {memory: 400Mi}\n      limits: {memory: 480Mi}\n",
            &[&hog, "anon", "200", "8", "0", "600"],
            "",
        ),
    );
    node.start();
    node.wait_running("holder");
    wait_until("MemoryPressure", Duration::from_secs(20), || {
        node.log(1).contains("conditions: MemoryPressure")
    });
    node.manifest("batch.yaml", &sleeper("batch", ""));
    let rejected = node.wait_phase("batch", Phase::Failed, Duration::from_secs(10));
    assert_eq!(
        rejected.reason.as_deref(),
        Some("Evicted"),
        "kubelet's reason for pressure rejections: {rejected:?}"
    );
    assert!(node.log(1).contains("FailedAdmission"));
    assert!(node.has_metric("monitor_admission_rejections_total{reason=\"Evicted\"} 1"));
    // A critical pod that does not fit (400Mi + 200Mi > 512Mi allocatable) preempts the
    // holder instead of being rejected.
    node.manifest(
        "critical.yaml",
        &pod(
            "critical",
            "    resources:\n      requests: {memory: 200Mi}\n      limits: {memory: 200Mi}\n",
            &["/bin/sleep", "1000"],
            "  priority: 2000000000\n",
        ),
    );
    node.wait_running("critical");
    let holder = node.record("holder").unwrap();
    assert_eq!(
        (holder.phase, holder.reason.as_deref()),
        (Phase::Failed, Some("Preempted")),
        "{holder:?}"
    );
    assert!(node.log(1).contains("Preempting"));
    // Counted by the resource the critical pod lacked, as the kubelet's preemption_signal.
    assert!(node.has_metric("monitor_preemptions_total{preemption_signal=\"memory\"} 1"));
}

/// An agent that dies while a critical pod waits for its victims leaves that pod Pending
/// (its record written, perhaps its cgroup made, nothing started). The next run decides its
/// admission again from the manifest: here it still does not fit, so it preempts again and
/// runs, instead of staying Pending for ever.
#[test]
fn a_critical_pod_left_pending_by_a_crash_is_admitted_again() {
    if !require("a_critical_pod_left_pending", &[Feature::Root]) {
        return;
    }
    let mut node = Node::new("evictionHard: {allocatableMemory.available: 20Mi}");
    node.manifest(
        "holder.yaml",
        &pod(
            "holder",
            "    resources:\n      requests: {memory: 400Mi}\n      limits: {memory: 480Mi}\n",
            &["/bin/sleep", "1000"],
            "",
        ),
    );
    node.start();
    let holder = node.wait_running("holder");
    // What the crash leaves: SIGKILL (no clean stop), then the critical pod's manifest, its
    // Pending record as admission writes it before the victims go, and its pod cgroup
    // made but empty (the agent died inside the start).
    node.crash();
    let uid = "3f1c8d2e-5b7a-4c9e-8d1f-2a3b4c5d6e7f";
    let critical = pod(
        "critical",
        "    resources:\n      requests: {memory: 200Mi}\n      limits: {memory: 200Mi}\n",
        &["/bin/sleep", "1000"],
        "  priority: 2000000000\n",
    )
    .replace(
        "  namespace: demo\n",
        &format!("  namespace: demo\n  uid: {uid}\n"),
    );
    node.manifest("critical.yaml", &critical);
    let parsed = monitor::policy::pod::parse_pod(&critical, "critical.yaml").expect("pod");
    let store = monitor::runtime::store::StateStore::open(&node.path("state")).expect("store");
    store
        .save(&PodRecord {
            uid: uid.into(),
            manifest: node.path("pods").join("critical.yaml"),
            pod: parsed.clone().into(),
            phase: Phase::Pending,
            reason: None,
            message: None,
            containers: vec![monitor::runtime::store::ContainerRecord {
                name: "main".into(),
                pid: None,
                restart_count: 0,
                last_exit: None,
                exit_code_unknown: false,
                done: false,
                container_id: None,
            }],
            sandbox_id: None,
            conditions: Vec::new(),
        })
        .expect("save the Pending record");
    let layout = monitor::observe::CgroupLayout::detect().unwrap();
    let tree = monitor::runtime::cgroups::CgroupTree::new(&layout, &node.cgroup_root).unwrap();
    let cgroup = tree
        .create_pod(
            uid,
            parsed.qos_class(),
            &monitor::policy::qos::pod_resource_config(
                &parsed,
                &monitor::policy::qos::CgroupOptions::default(),
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(tree.is_empty(&cgroup));

    node.start();
    let running = node.wait_running("critical");
    assert_eq!(running.uid, uid);
    let holder_after = node.wait_phase("holder", Phase::Failed, Duration::from_secs(10));
    assert_eq!(
        holder_after.reason.as_deref(),
        Some("Preempted"),
        "{holder_after:?}"
    );
    assert!(!alive(holder.containers[0].pid.unwrap()));
    let log = node.log(2);
    assert!(
        log.contains("PendingReadmitted") && log.contains("Preempting"),
        "{log}"
    );
}

/// What the agent cannot prove is its own it leaves alone: a pod whose record is corrupt
/// (set aside as `.corrupt`) keeps running, unmanaged, and its manifest does not start a
/// second copy while that cgroup has processes; once it is empty the pod starts. A pod
/// whose record is gone altogether is an orphan: killed and removed at start, and its
/// manifest then starts it afresh, once.
#[test]
fn pods_without_a_readable_record_are_left_running_and_never_run_twice() {
    if !require("pods_without_a_readable_record", &[Feature::Root]) {
        return;
    }
    let mut node = Node::new("evictionHard: {memory.available: 1Mi}");
    node.manifest("corrupt.yaml", &sleeper("corrupt", BURSTABLE));
    node.manifest("forgotten.yaml", &sleeper("forgotten", BURSTABLE));
    node.start();
    let corrupt = node.wait_running("corrupt");
    let forgotten = node.wait_running("forgotten");
    node.stop();
    let records = node.path("state").join("pods");
    std::fs::write(
        records.join(format!("{}.json", corrupt.uid)),
        "{\"uid\": 12",
    )
    .unwrap();
    std::fs::remove_file(records.join(format!("{}.json", forgotten.uid))).unwrap();
    let (cp, fp) = (
        corrupt.containers[0].pid.unwrap(),
        forgotten.containers[0].pid.unwrap(),
    );

    node.start();
    wait_until(
        &format!("both reported\n{}", node.log(2)),
        Duration::from_secs(10),
        || {
            let log = node.log(2);
            log.contains("UnmanagedPod")
                && log.contains("OrphanPodKilled")
                && log.contains("agent running")
        },
    );
    let log = node.log(2);
    assert!(log.contains("StateQuarantined"), "{log}");
    assert!(
        records
            .join(format!("{}.json.corrupt", corrupt.uid))
            .exists(),
        "the corrupt record is set aside"
    );
    // The orphan is gone and its manifest starts it again, in a cgroup of its own.
    let restarted = node.wait_running("forgotten");
    assert!(!alive(fp), "the orphan was not killed\n{log}");
    assert_ne!(restarted.containers[0].pid, Some(fp));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(alive(cp), "nothing unproven is killed\n{}", node.log(2));
    assert!(
        node.record("corrupt").is_none(),
        "no second copy starts beside the unmanaged processes: {:?}",
        node.records()
    );
    assert_eq!(
        node.record("forgotten").unwrap().containers[0].pid,
        restarted.containers[0].pid,
        "the orphan's manifest runs once"
    );

    // The operator ends the unmanaged process: the next look at the manifests starts the
    // pod afresh (any manifest change triggers it; the periodic look would too).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(cp as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(poll(Duration::from_secs(5), || !alive(cp)));
    std::thread::sleep(Duration::from_millis(200));
    node.manifest("nudge.yaml", &sleeper("nudge", BURSTABLE));
    let again = node.wait_running("corrupt");
    assert_ne!(again.containers[0].pid, Some(cp));
}

/// The manifest directory deleted and made again is watched again: a manifest written
/// into the new directory starts its pod.
#[test]
fn a_recreated_manifest_directory_is_watched_again() {
    if !require("a_recreated_manifest_directory", &[Feature::Root]) {
        return;
    }
    let mut node = Node::new("evictionHard: {memory.available: 1Mi}");
    node.start();
    // A pod started from an event: the directory is watched.
    std::thread::sleep(Duration::from_millis(300));
    node.manifest("first.yaml", &sleeper("first", BURSTABLE));
    node.wait_running("first");
    let dir = node.path("pods");
    std::fs::remove_dir_all(&dir).unwrap();
    wait_until(
        &format!("the loss noticed\n{}", node.log(1)),
        Duration::from_secs(5),
        || node.log(1).contains("the directory went away"),
    );
    std::fs::create_dir(&dir).unwrap();
    // Written while nothing watches: the look that sets the watch up again finds it.
    node.manifest("early.yaml", &sleeper("early", BURSTABLE));
    wait_until(
        &format!("watched again\n{}", node.log(1)),
        Duration::from_secs(15),
        || node.log(1).contains("watched again reason=\"ManifestDir\""),
    );
    // Written after the new watch: it arrives as an event.
    node.manifest("late.yaml", &sleeper("late", BURSTABLE));
    let late = node.wait_running("late");
    let early = node.wait_running("early");
    assert!(alive(late.containers[0].pid.unwrap()) && alive(early.containers[0].pid.unwrap()));
}

/// After a reboot the state directory is kept but the cgroups and processes are gone: a
/// pod that was running starts afresh from its manifest instead of showing Running with
/// nothing behind it.
#[test]
fn pods_whose_cgroups_are_gone_start_afresh() {
    if !require("pods_whose_cgroups_are_gone", &[Feature::Root]) {
        return;
    }
    let mut node = Node::new("evictionHard: {memory.available: 1Mi}");
    node.manifest("survivor.yaml", &sleeper("survivor", BURSTABLE));
    node.start();
    let before = node.wait_running("survivor");
    node.stop();
    // What a reboot leaves: no process, no cgroup, the record still on disk.
    let pid = before.containers[0].pid.unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(poll(Duration::from_secs(5), || !alive(pid)));
    let layout = monitor::observe::CgroupLayout::detect().unwrap();
    let tree = monitor::runtime::cgroups::CgroupTree::new(&layout, &node.cgroup_root).unwrap();
    let pod = tree
        .existing_pods()
        .into_iter()
        .find(|p| p.uid == before.uid)
        .expect("the pod's cgroup");
    tree.remove_pod(&pod).unwrap_or_else(|e| panic!("{e}"));
    assert!(node.record("survivor").is_some(), "the record is kept");

    node.start();
    let started_again = poll(Duration::from_secs(20), || {
        node.record("survivor").is_some_and(|r| {
            r.phase == Phase::Running && r.containers[0].pid.is_some_and(|p| p != pid)
        })
    });
    assert!(
        started_again,
        "{:?}\n{}",
        node.record("survivor"),
        node.log(2)
    );
    let after = node.record("survivor").unwrap();
    assert!(alive(after.containers[0].pid.unwrap()));
    assert!(node.log(2).contains("PodCgroupGone"), "{}", node.log(2));
}

/// A container is its main process: when that exits, what it started in the background
/// goes too, instead of piling up across restarts.
#[test]
fn a_containers_leftover_processes_die_with_its_main_process() {
    if !require("a_containers_leftover_processes", &[Feature::Root]) {
        return;
    }
    let mut node = Node::new("evictionHard: {memory.available: 1Mi}");
    let pid_file = node.path("background.pid");
    // Restarted after each exit (restartPolicy Always): the pod stays, only the
    // container's run ends.
    let script = format!(
        "/bin/sleep 1000 & echo $! >> {}; /bin/sleep 1; exit 0",
        pid_file.display()
    );
    node.manifest("job.yaml", &pod("job", "", &["/bin/sh", "-c", &script], ""));
    node.start();
    let restarted = poll(Duration::from_secs(20), || {
        node.record("job")
            .is_some_and(|r| r.containers[0].restart_count >= 1)
    });
    assert!(
        restarted,
        "the container ran and restarted\n{}",
        node.log(1)
    );
    let first: u32 = std::fs::read_to_string(&pid_file)
        .expect("the script wrote its background pid")
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(node.record("job").unwrap().phase, Phase::Running);
    assert!(
        poll(Duration::from_secs(5), || !alive(first)),
        "the first run's background sleep ({first}) outlived it\n{}",
        node.log(1)
    );
}

/// A pod gets what the agent was started with, not what the agent gave itself: the agent
/// raises its soft open-file limit to the hard one, the container keeps the original, and
/// it runs on SCHED_OTHER whatever the agent's threads run on.
#[test]
fn containers_start_with_the_agents_original_limits_and_no_real_time_policy() {
    if !require(
        "containers_start_with_the_agents_original_limits",
        &[Feature::Root],
    ) {
        return;
    }
    use monitor_tests::proc_limit;
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let stat_field = |pid: u32, field| {
        monitor_tests::stat_field(std::path::Path::new(&format!("/proc/{pid}/stat")), field)
            .expect("the container runs")
    };
    let mut node = Node::new("evictionHard: {memory.available: 1Mi}");
    node.manifest("plain.yaml", &sleeper("plain", ""));
    // The agent starts with a soft limit under its hard one (as under systemd: 1024 of
    // 512Ki), which it raises for itself.
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let started_with = 1024.min(hard / 2);
    setrlimit(Resource::RLIMIT_NOFILE, started_with, hard).unwrap();
    node.start();
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    let record = node.wait_running("plain");
    let agent = node.agent_pid().unwrap();
    assert_eq!(
        proc_limit(agent, "Max open files"),
        (hard.to_string(), hard.to_string()),
        "the agent raised its own limit"
    );
    let pid = record.containers[0].pid.unwrap();
    assert_eq!(
        proc_limit(pid, "Max open files"),
        (started_with.to_string(), hard.to_string()),
        "the container has the agent's original limit\n{}",
        node.log(1)
    );
    assert_eq!(stat_field(pid, 41), "0", "policy: SCHED_OTHER");
    assert_eq!(stat_field(pid, 40), "0", "rt_priority");
}
