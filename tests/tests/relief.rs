//! Memory relief on a bounded node: a pod holding cold page cache and a pod growing its
//! anonymous memory, raced to the pods' hard threshold. With relief the agent reclaims
//! the page cache (`memory.reclaim`) and evicts nobody; without it, the kubelet's
//! behaviour: a pod is evicted. cgroup v2 only (the VM suite); run as root.
use std::path::PathBuf;
use std::time::Duration;

use monitor::runtime::store::Phase;
use monitor_tests::node::{LoopDisk, MIB, Node, cold_file, pod, poll};
use monitor_tests::{Feature, helper_binary, require};

/// The pods' threshold: 100 Mi of the bounded node's 512 Mi, so pressure at a working set
/// of 412 Mi; relief's margin puts its level at 312 Mi.
const EVICTION: &str = "evictionHard: {allocatableMemory.available: 100Mi}";
/// The cold page cache the `cache` pod holds, and what the `grower` pod allocates: 150 +
/// 280 Mi is past the threshold, 280 Mi alone is not past relief's level.
const CACHE_MIB: u64 = 150;
const GROWER_MIB: &str = "280";

struct Race {
    node: Node,
    _disk: LoopDisk,
}

/// The node with the two pods started, the `cache` pod's page cache in place; the grower
/// waits for `start` before it allocates.
fn race(test: &str, relief: &str) -> Option<Race> {
    if !require(
        test,
        &[Feature::Root, Feature::CgroupV2Memory, Feature::Ebpf],
    ) {
        return None;
    }
    let mut node = Node::with_agent_keys(EVICTION, relief);
    let disk = LoopDisk::new(&node.path("disk"), CACHE_MIB + 40)
        .unwrap_or_else(|e| panic!("{test}: a loop disk for page cache: {e}"));
    let file = disk.dir.join("data");
    cold_file(&file, CACHE_MIB);
    let hog = helper_binary("hog").display().to_string();
    let file = file.display().to_string();
    node.manifest(
        "cache.yaml",
        &pod("cache", "", &[&hog, "cache", &file, "600"], ""),
    );
    let start = node.path("start");
    node.manifest(
        "grower.yaml",
        &pod(
            "grower",
            "",
            &[
                &hog,
                "after",
                &start.display().to_string(),
                "anon",
                GROWER_MIB,
                "4",
                "100",
                "600",
            ],
            "",
        ),
    );
    node.start();
    node.wait_running("cache");
    node.wait_running("grower");
    let cache_dir = pod_memory_dir(&node, "cache");
    assert!(
        poll(Duration::from_secs(60), || file_mib(&cache_dir)
            >= CACHE_MIB * 9 / 10),
        "{test}: the cache pod holds {} MiB of page cache, not {CACHE_MIB}",
        file_mib(&cache_dir)
    );
    std::fs::write(&start, "").unwrap();
    Some(Race { node, _disk: disk })
}

/// The memory cgroup directory of the pod named `name` (its record names it).
fn pod_memory_dir(node: &Node, name: &str) -> PathBuf {
    let record = node.record(name).expect("a record");
    let pid = record.containers[0].pid.expect("a running container");
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let path = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup v2 path");
    // The container's cgroup: its pod is the parent.
    let dir = PathBuf::from("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    dir.parent().map(PathBuf::from).unwrap_or(dir)
}

fn stat(dir: &std::path::Path, key: &str) -> u64 {
    std::fs::read_to_string(dir.join("memory.stat"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key} "))?.trim().parse().ok())
        .unwrap_or(0)
}

fn file_mib(dir: &std::path::Path) -> u64 {
    stat(dir, "file") / MIB
}

/// usage − inactive_file: what the memory signals count of the pod.
fn working_set_mib(dir: &std::path::Path) -> u64 {
    let usage: u64 = std::fs::read_to_string(dir.join("memory.current"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    usage.saturating_sub(stat(dir, "inactive_file")) / MIB
}

/// The value of the metric sample `series` (`name{labels}`), 0 when absent.
fn metric(node: &Node, series: &str) -> f64 {
    monitor_tests::agent_metrics(&node.path("monitor.sock"))
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn relief_reclaims_cold_page_cache_and_nobody_is_evicted() {
    let Some(race) = race(
        "relief_reclaims_cold_page_cache_and_nobody_is_evicted",
        "  memoryRelief: {margin: 100Mi, step: 16Mi}\n",
    ) else {
        return;
    };
    let node = &race.node;
    let grower_dir = pod_memory_dir(node, "grower");
    let grown = poll(Duration::from_secs(60), || {
        stat(&grower_dir, "anon") / MIB >= 270
    });
    // Held a while: a late eviction would show here.
    std::thread::sleep(Duration::from_secs(5));
    let log = node.log(1);
    assert!(grown, "the grower never got its memory\n{log}");
    for name in ["cache", "grower"] {
        let record = node.record(name).unwrap();
        assert_eq!(
            record.phase,
            Phase::Running,
            "{name} was not left running: {record:?}\n{log}"
        );
    }
    assert!(!log.contains("Evicted"), "an eviction\n{log}");
    assert_eq!(node.pods_oom_kills(), 0, "a kernel OOM kill\n{log}");
    // What the signal counts of the cache pod fell by half at least: its pages were
    // reclaimed (the classic LRU) or aged to inactive first (MGLRU), which the working
    // set no longer counts and the kernel frees first under pressure.
    let cache_dir = pod_memory_dir(node, "cache");
    assert!(
        working_set_mib(&cache_dir) < CACHE_MIB / 2,
        "the cache pod's working set is still {} MiB ({} MiB of page cache)\n{log}",
        working_set_mib(&cache_dir),
        file_mib(&cache_dir)
    );
    assert!(
        log.contains("memory relief for allocatableMemory.available")
            && log.contains("demo/cache (BestEffort"),
        "no relief pass named the cache pod\n{log}"
    );
    assert!(
        metric(
            node,
            "monitor_memory_reclaimed_bytes_total{qos=\"BestEffort\"}"
        ) >= (CACHE_MIB / 2 * MIB) as f64,
        "{}",
        monitor_tests::agent_metrics(&node.path("monitor.sock"))
    );
    assert!(
        metric(
            node,
            "monitor_memory_relief_passes_total{result=\"relieved\"}"
        ) >= 1.0
    );
    // Said at start.
    assert!(log.contains("memory relief active: margin 100Mi"), "{log}");
    // The figures, for the record (`-- --nocapture`).
    for line in log.lines().filter(|l| l.contains("memory relief for")) {
        println!("relief pass: {line}");
    }
    println!(
        "relief: {} MiB reclaimed from BestEffort pods, cache pod left with a {} MiB working set and {} MiB of page cache, 0 evictions, 0 OOM kills",
        metric(
            node,
            "monitor_memory_reclaimed_bytes_total{qos=\"BestEffort\"}"
        ) as u64
            / MIB,
        working_set_mib(&cache_dir),
        file_mib(&cache_dir)
    );
}

#[test]
fn without_relief_the_same_race_evicts_a_pod() {
    let Some(race) = race(
        "without_relief_the_same_race_evicts_a_pod",
        "  memoryRelief: {enabled: false}\n",
    ) else {
        return;
    };
    let node = &race.node;
    let evicted = poll(Duration::from_secs(60), || {
        node.records()
            .iter()
            .any(|r| r.phase == Phase::Failed && r.reason.as_deref() == Some("Evicted"))
    });
    let log = node.log(1);
    assert!(evicted, "nobody was evicted\n{log}");
    assert!(log.contains("memory relief off"), "{log}");
    for record in node.records().iter().filter(|r| r.phase == Phase::Failed) {
        println!(
            "no relief: {} evicted: {:?}",
            record.pod.metadata.name, record.message
        );
    }
    assert_eq!(
        metric(
            node,
            "monitor_memory_relief_passes_total{result=\"relieved\"}"
        ),
        0.0
    );
}

/// The full-stall share (avg10, percent) of a `memory.pressure` file.
fn full_avg10(path: &std::path::Path) -> f64 {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("full "))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|f| f.strip_prefix("avg10="))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0.0)
}

/// The `thrash` pod's manifest on `node`: 120 MiB re-read from a loop disk in a 48 MiB
/// limit, so every pass refaults from the disk. The disk goes when the result is dropped.
fn thrashing_pod(node: &Node, test: &str) -> LoopDisk {
    let disk = LoopDisk::new(&node.path("disk"), 160)
        .unwrap_or_else(|e| panic!("{test}: a loop disk for page cache: {e}"));
    let file = disk.dir.join("data");
    cold_file(&file, 120);
    let file = file.display().to_string();
    let hog = helper_binary("hog").display().to_string();
    let limits = "    resources:\n      requests: {memory: 32Mi}\n      limits: {memory: 48Mi}\n";
    node.manifest(
        "thrash.yaml",
        &pod("thrash", limits, &[&hog, "file", &file, "600"], ""),
    );
    disk
}

/// A pod thrashing on its page cache inside its own small memory limit, with the node's
/// memory plentiful: its memory stalls (PSI `full`) are real, but they are an I/O stall,
/// not a shortage, and the stall signal's quantity guard keeps it from evicting anyone.
#[test]
fn an_io_stall_with_memory_plentiful_evicts_nobody() {
    let test = "an_io_stall_with_memory_plentiful_evicts_nobody";
    if !require(
        test,
        &[Feature::Root, Feature::CgroupV2Memory, Feature::Psi],
    ) {
        return;
    }
    let mut node = Node::with_agent_keys(
        EVICTION,
        "  memoryStall: {full: 5%, margin: 100Mi, gracePeriod: 2s}\n",
    );
    let disk = thrashing_pod(&node, test);
    node.start();
    node.wait_running("thrash");
    let pods_pressure = node.memory_root().join("kubepods/memory.pressure");
    let mut peak = 0.0f64;
    let stalled = poll(Duration::from_secs(60), || {
        peak = peak.max(full_avg10(&pods_pressure));
        peak >= 5.0
    });
    let log = node.log(1);
    assert!(
        stalled,
        "no memory stall among the pods (full avg10 peaked at {peak:.1} %)\n{log}"
    );
    // Past the grace period several times over, while the stall lasts.
    std::thread::sleep(Duration::from_secs(10));
    peak = peak.max(full_avg10(&pods_pressure));
    let log = node.log(1);
    let record = node.record("thrash").unwrap();
    assert_eq!(record.phase, Phase::Running, "{record:?}\n{log}");
    assert!(!log.contains("Evicted"), "an eviction\n{log}");
    assert!(
        !log.contains("MemoryPressure"),
        "MemoryPressure reported for an I/O stall\n{log}"
    );
    println!("io stall: pods full avg10 peaked at {peak:.1} % (threshold 5 %), 0 evictions");
    drop(node);
    drop(disk);
}

/// The same thrashing pod with memory short: a BestEffort pod holds enough that the
/// pods' working set is within the stall signal's margin of the hard threshold (never past
/// it). Now the stall counts: past its grace period the node reports MemoryPressure and
/// one pod is evicted, picked by the memory ranking (the BestEffort pod furthest above
/// its request, not the pod that stalls); with its memory gone the stall no longer
/// counts, and the thrashing pod runs on.
#[test]
fn a_memory_stall_while_memory_is_short_evicts_by_the_memory_ranking() {
    let test = "a_memory_stall_while_memory_is_short_evicts_by_the_memory_ranking";
    if !require(
        test,
        &[Feature::Root, Feature::CgroupV2Memory, Feature::Psi],
    ) {
        return;
    }
    // Hard at a working set of 412 Mi; the stall counts above 262 Mi; relief off, so
    // that the page cache stays and the stall signal alone decides.
    let mut node = Node::with_agent_keys(
        EVICTION,
        "  memoryRelief: {enabled: false}\n  memoryStall: {full: 5%, margin: 150Mi, gracePeriod: 2s}\n",
    );
    let disk = thrashing_pod(&node, test);
    let hog = helper_binary("hog").display().to_string();
    node.manifest(
        "big.yaml",
        &pod("big", "", &[&hog, "anon", "300", "16", "0", "600"], ""),
    );
    node.start();
    node.wait_running("big");
    node.wait_running("thrash");
    let evicted = poll(Duration::from_secs(90), || {
        node.record("big")
            .is_some_and(|r| r.phase == Phase::Failed && r.reason.as_deref() == Some("Evicted"))
    });
    let log = node.log(1);
    assert!(evicted, "the big pod was not evicted\n{log}");
    assert!(
        log.contains("MemoryPressure"),
        "no MemoryPressure for a stall while memory is short\n{log}"
    );
    let big = node.record("big").unwrap();
    assert!(
        big.message.as_deref().is_some_and(|m| m.contains("memory")),
        "{big:?}"
    );
    assert!(
        log.contains("threshold met: memory.stall"),
        "the stall signal's threshold is not named\n{log}"
    );
    // Memory no longer short: the stall does not count, nobody else goes.
    std::thread::sleep(Duration::from_secs(8));
    let log = node.log(1);
    let thrash = node.record("thrash").unwrap();
    assert_eq!(thrash.phase, Phase::Running, "{thrash:?}\n{log}");
    assert_eq!(node.pods_oom_kills(), 0, "a kernel OOM kill\n{log}");
    println!("stall with memory short: big evicted: {:?}", big.message);
    drop(node);
    drop(disk);
}
