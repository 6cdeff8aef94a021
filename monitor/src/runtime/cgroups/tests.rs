//! The tree on fake cgroupfs directories (tempdirs): detection, paths, values, naming,
//! adoption and removal. The privileged tests (tests/tests/cgroups.rs) use the kernel's.
use std::fs;

use rstest::rstest;

use super::*;
use crate::policy::qos::QosTierConfigs;

const GI: i64 = 1 << 30;

fn v1_layout(base: &Path, unified: bool) -> CgroupLayout {
    CgroupLayout {
        version: CgroupVersion::V1,
        memory_root: base.join("memory"),
        unified_root: unified.then(|| base.join("unified")),
    }
}

/// mountinfo of a hybrid host like the build machines: cpu and cpuacct apart, no pids.
fn hybrid_mountinfo(base: &Path) -> String {
    let b = base.display();
    format!(
        "31 23 0:28 / {b} rw - tmpfs tmpfs rw\n\
         32 31 0:29 / {b}/cpu rw,relatime - cgroup cgroup rw,cpu\n\
         33 31 0:30 / {b}/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n\
         35 31 0:32 / {b}/memory rw,relatime - cgroup cgroup rw,memory\n\
         40 31 0:37 / {b}/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
         41 31 0:38 / {b}/unified rw,relatime - cgroup2 cgroup2 rw\n"
    )
}

fn v1_tree(base: &Path, root: &str) -> CgroupTree {
    CgroupTree::from_mountinfo(
        &v1_layout(base, true),
        root,
        &hybrid_mountinfo(base),
        |_| String::new(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// A fake cgroupfs: the memory, cpu and unified mounts of [`hybrid_mountinfo`].
fn tempdir() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    for mount in ["memory", "cpu", "unified"] {
        fs::create_dir(t.path().join(mount)).unwrap_or_else(|e| panic!("{mount}: {e}"));
    }
    t
}

fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{}: {e}", parent.display()));
    }
    fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn w(controller: Controller, file: &'static str, value: &str) -> ValueWrite {
    ValueWrite {
        controller,
        file,
        value: value.to_string(),
    }
}

const GUARANTEED: ResourceConfig = ResourceConfig {
    cpu_shares: Some(512),
    cpu_quota: Some(50_000),
    cpu_period: Some(100_000),
    memory_limit: Some(GI),
    pids_limit: Some(100),
    memory_high: None,
    memory_min: None,
    memory_low: None,
    memory_oom_group: false,
};

const UNLIMITED: ResourceConfig = ResourceConfig {
    cpu_shares: Some(2),
    cpu_quota: Some(-1),
    cpu_period: Some(100_000),
    memory_limit: Some(-1),
    pids_limit: Some(-1),
    memory_high: None,
    memory_min: None,
    memory_low: None,
    memory_oom_group: false,
};

#[rstest]
#[case::v1_all(CgroupVersion::V1, GUARANTEED, vec![
    w(Controller::Memory, "memory.limit_in_bytes", "1073741824"),
    w(Controller::Cpu, "cpu.shares", "512"),
    w(Controller::Cpu, "cpu.cfs_period_us", "100000"),
    w(Controller::Cpu, "cpu.cfs_quota_us", "50000"),
    w(Controller::Pids, "pids.max", "100"),
])]
#[case::v2_all(CgroupVersion::V2, GUARANTEED, vec![
    w(Controller::Memory, "memory.max", "1073741824"),
    w(Controller::Cpu, "cpu.weight", "20"),
    w(Controller::Cpu, "cpu.max", "50000 100000"),
    w(Controller::Pids, "pids.max", "100"),
])]
#[case::v1_unlimited(CgroupVersion::V1, UNLIMITED, vec![
    w(Controller::Memory, "memory.limit_in_bytes", "-1"),
    w(Controller::Cpu, "cpu.shares", "2"),
    w(Controller::Cpu, "cpu.cfs_period_us", "100000"),
    w(Controller::Cpu, "cpu.cfs_quota_us", "-1"),
    w(Controller::Pids, "pids.max", "max"),
])]
#[case::v2_unlimited(CgroupVersion::V2, UNLIMITED, vec![
    w(Controller::Memory, "memory.max", "max"),
    w(Controller::Cpu, "cpu.weight", "1"),
    w(Controller::Cpu, "cpu.max", "max 100000"),
    w(Controller::Pids, "pids.max", "max"),
])]
#[case::v2_quota_without_period(CgroupVersion::V2,
    ResourceConfig { cpu_quota: Some(20_000), ..ResourceConfig::default() },
    vec![w(Controller::Cpu, "cpu.max", "20000")])]
#[case::none_writes_nothing(CgroupVersion::V2, ResourceConfig::default(), vec![])]
#[case::zeros_are_unset_like_runc(CgroupVersion::V1,
    ResourceConfig { cpu_shares: Some(0), cpu_quota: Some(0), cpu_period: Some(0), memory_limit: Some(0), pids_limit: Some(0), ..ResourceConfig::default() },
    vec![])]
// Memory QoS goes to the v2 files the kubelet puts in the CRI unified map; 0 protection
// is written (a reset), a negative memory.high is "max".
#[case::v2_memory_qos(CgroupVersion::V2,
    ResourceConfig { memory_limit: Some(GI), memory_high: Some(900 << 20), memory_min: Some(0), memory_low: Some(256 << 20), ..ResourceConfig::default() },
    vec![
        w(Controller::Memory, "memory.max", "1073741824"),
        w(Controller::Memory, "memory.min", "0"),
        w(Controller::Memory, "memory.low", "268435456"),
        w(Controller::Memory, "memory.high", "943718400"),
    ])]
#[case::v2_memory_high_unbounded(CgroupVersion::V2,
    ResourceConfig { memory_high: Some(-1), ..ResourceConfig::default() },
    vec![w(Controller::Memory, "memory.high", "max")])]
// cgroup v1 has no such files: Memory QoS is never written there.
#[case::v1_ignores_memory_qos(CgroupVersion::V1,
    ResourceConfig { memory_high: Some(900 << 20), memory_min: Some(GI), memory_low: Some(GI), ..ResourceConfig::default() },
    vec![])]
// The OOM killer ends the whole container on v2; v1 has no group kill.
#[case::v2_oom_group(CgroupVersion::V2,
    ResourceConfig { memory_oom_group: true, ..ResourceConfig::default() },
    vec![w(Controller::Memory, "memory.oom.group", "1")])]
#[case::v1_no_oom_group(CgroupVersion::V1,
    ResourceConfig { memory_oom_group: true, ..ResourceConfig::default() },
    vec![])]
fn values_per_version(
    #[case] version: CgroupVersion,
    #[case] config: ResourceConfig,
    #[case] expected: Vec<ValueWrite>,
) {
    assert_eq!(resource_writes(version, &config), expected);
}

#[test]
fn detects_v1_hierarchies_by_controller() {
    let base = Path::new("/sys/fs/cgroup");
    let tree = v1_tree(base, "monitor");
    let mounts: Vec<(&Path, CgroupVersion, &[Controller])> = tree
        .hierarchies()
        .iter()
        .map(|h| (h.mount.as_path(), h.version, h.controllers.as_slice()))
        .collect();
    assert_eq!(
        mounts,
        vec![
            (
                Path::new("/sys/fs/cgroup/memory"),
                CgroupVersion::V1,
                &[Controller::Memory][..]
            ),
            (
                Path::new("/sys/fs/cgroup/cpu"),
                CgroupVersion::V1,
                &[Controller::Cpu][..]
            ),
            (
                Path::new("/sys/fs/cgroup/unified"),
                CgroupVersion::V2,
                &[][..]
            ),
        ],
        "cpuacct and name=systemd are not cpu; no pids mount here"
    );
    assert_eq!(tree.dir(Controller::Pids, "x"), None);
}

#[test]
fn detects_co_mounted_and_escaped_v1_mounts() {
    let text = "1 0 0:1 / /cg/cpu,cpuacct rw - cgroup cgroup rw,cpuacct,cpu\n\
                2 0 0:2 / /cg/memory rw - cgroup cgroup rw,memory\n\
                3 0 0:3 / /cg/my\\040pids rw - cgroup cgroup rw,pids\n";
    let layout = CgroupLayout {
        version: CgroupVersion::V1,
        memory_root: PathBuf::from("/cg/memory"),
        unified_root: None,
    };
    let tree = CgroupTree::from_mountinfo(&layout, "", text, |_| String::new())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        tree.dir(Controller::Cpu, "a"),
        Some(PathBuf::from("/cg/cpu,cpuacct/a"))
    );
    assert_eq!(
        tree.dir(Controller::Pids, "a"),
        Some(PathBuf::from("/cg/my pids/a"))
    );
    assert_eq!(tree.hierarchies().len(), 3);
}

#[rstest]
#[case::all("cpuset cpu io memory hugetlb pids", &[Controller::Memory, Controller::Cpu, Controller::Pids])]
#[case::no_pids("cpu io memory", &[Controller::Memory, Controller::Cpu])]
fn v2_controllers_come_from_the_root(#[case] available: &str, #[case] expected: &[Controller]) {
    let layout = CgroupLayout {
        version: CgroupVersion::V2,
        memory_root: PathBuf::from("/sys/fs/cgroup"),
        unified_root: Some(PathBuf::from("/sys/fs/cgroup")),
    };
    let tree = CgroupTree::from_mountinfo(&layout, "monitor", "", |_| available.to_string())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tree.hierarchies().len(), 1, "one tree on v2");
    assert_eq!(tree.hierarchies()[0].controllers, expected);
}

#[rstest]
#[case::plain("monitor", "monitor/kubepods")]
#[case::nested_and_slashes("/monitor-test-1/tree/", "monitor-test-1/tree/kubepods")]
#[case::mount_itself("", "kubepods")]
fn pods_root_and_tiers(#[case] root: &str, #[case] pods: &str) {
    let tree = v1_tree(Path::new("/cg"), root);
    assert_eq!(tree.pods_root_relative(), pods);
    assert_eq!(tree.tier_relative(QosClass::Guaranteed), pods);
    assert_eq!(
        tree.tier_relative(QosClass::Burstable),
        format!("{pods}/burstable")
    );
    assert_eq!(
        tree.tier_relative(QosClass::BestEffort),
        format!("{pods}/besteffort")
    );
}

#[rstest]
#[case::dot_dot("a/../b")]
#[case::dot("./a")]
#[case::nul("a\0b")]
fn bad_roots_are_refused(#[case] root: &str) {
    let err = CgroupTree::from_mountinfo(&v1_layout(Path::new("/cg"), false), root, "", |_| {
        String::new()
    })
    .expect_err("refused");
    assert!(
        matches!(err, CgroupError::InvalidName { field: "root", .. }),
        "{err}"
    );
}

#[rstest]
#[case::uuid("pod uid", "0b7c1f7e-3c4d-4e5f-8a9b-0c1d2e3f4a5b", true)]
#[case::static_hash("pod uid", "6f1d2b0c9e8a7f3e", true)]
#[case::uid_slash("pod uid", "a/b", false)]
#[case::uid_dot_dot("pod uid", "..", false)]
#[case::uid_empty("pod uid", "", false)]
#[case::uid_space("pod uid", "a b", false)]
#[case::container("container name", "app-1", true)]
#[case::container_dot("container name", "memory.max", false)]
#[case::container_upper("container name", "App", false)]
#[case::container_edge_dash("container name", "app-", false)]
#[case::container_long("container name", &"a".repeat(64), false)]
fn names(#[case] field: &str, #[case] value: &str, #[case] ok: bool) {
    let result = if field == "pod uid" {
        validate_uid(value)
    } else {
        validate_container_name(value)
    };
    assert_eq!(result.is_ok(), ok, "{field} {value:?}: {result:?}");
    if let Err(e) = result {
        assert!(e.to_string().contains(field), "{e}");
    }
}

/// Control files the fake kernel offers in a cgroup (cgroupfs makes them on mkdir).
fn offer(dir: &Path, files: &[&str]) {
    for file in files {
        write(&dir.join(file), "");
    }
}

#[test]
fn pod_values_land_in_their_hierarchies_and_absent_ones_are_warnings() {
    let t = tempdir();
    let tree = v1_tree(t.path(), "monitor");
    let relative = "monitor/kubepods/burstable/podabc";
    offer(
        &t.path().join("memory").join(relative),
        &["memory.limit_in_bytes"],
    );
    // No cpu.cfs_* files: a kernel without CFS bandwidth control.
    offer(&t.path().join("cpu").join(relative), &["cpu.shares"]);
    let pod = tree
        .create_pod("abc", QosClass::Burstable, &GUARANTEED)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pod.relative, relative);
    assert_eq!(
        read(
            &t.path()
                .join("memory")
                .join(relative)
                .join("memory.limit_in_bytes")
        ),
        GI.to_string()
    );
    assert_eq!(
        read(&t.path().join("cpu").join(relative).join("cpu.shares")),
        "512"
    );
    assert!(
        t.path().join("unified").join(relative).is_dir(),
        "the unified mirror exists"
    );
    let mut warned: Vec<(String, u64)> = tree
        .warnings()
        .iter()
        .map(|w| {
            let file = w.path.file_name().map(|f| f.to_string_lossy().into_owned());
            (file.unwrap_or_default(), w.count)
        })
        .collect();
    warned.sort();
    assert_eq!(
        warned,
        vec![
            ("cpu.cfs_period_us".to_string(), 1),
            ("cpu.cfs_quota_us".to_string(), 1),
            ("pids.max".to_string(), 1),
        ]
    );
    // The same misses again only count up.
    tree.create_pod("abc", QosClass::Burstable, &GUARANTEED)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        tree.warnings().iter().all(|w| w.count == 2),
        "{:?}",
        tree.warnings()
    );
    let join = tree.join_files(&ContainerCgroup {
        pod_uid: "abc".into(),
        name: "app".into(),
        relative: format!("{relative}/app"),
    });
    assert_eq!(
        join.len(),
        3,
        "memory, cpu and the unified mirror: {join:?}"
    );
}

#[test]
fn qos_hierarchy_values_and_refused_limits() {
    let t = tempdir();
    let tree = v1_tree(t.path(), "m").with_node_cpu_milli(1500);
    for tier in [
        "m/kubepods",
        "m/kubepods/burstable",
        "m/kubepods/besteffort",
    ] {
        offer(
            &t.path().join("memory").join(tier),
            &["memory.limit_in_bytes"],
        );
        offer(&t.path().join("cpu").join(tier), &["cpu.shares"]);
    }
    tree.ensure_qos_hierarchy(None)
        .unwrap_or_else(|e| panic!("{e}"));
    let memory = |tier: &str| {
        read(
            &t.path()
                .join("memory")
                .join(tier)
                .join("memory.limit_in_bytes"),
        )
    };
    let shares = |tier: &str| read(&t.path().join("cpu").join(tier).join("cpu.shares"));
    assert_eq!(memory("m/kubepods"), "-1", "unbounded node: unlimited");
    assert_eq!(shares("m/kubepods"), "1536", "1.5 CPUs of shares");
    assert_eq!(shares("m/kubepods/besteffort"), "2");
    assert_eq!(
        shares("m/kubepods/burstable"),
        "",
        "set by update_qos_tiers"
    );
    tree.ensure_qos_hierarchy(Some(2 * GI))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(memory("m/kubepods"), (2 * GI).to_string());
    let err = tree
        .ensure_qos_hierarchy(Some(0))
        .expect_err("zero allocatable");
    assert!(err.to_string().contains("m/kubepods"), "{err}");

    let tiers = QosTierConfigs {
        burstable: ResourceConfig {
            cpu_shares: Some(768),
            memory_limit: Some(GI),
            ..ResourceConfig::default()
        },
        best_effort: ResourceConfig {
            cpu_shares: Some(2),
            memory_limit: Some(-5),
            ..ResourceConfig::default()
        },
    };
    let err = tree.update_qos_tiers(&tiers).expect_err("over-committed");
    assert!(
        matches!(&err, CgroupError::InvalidLimit { value: -5, path } if path.ends_with("besteffort")),
        "{err}"
    );
    assert_eq!(
        shares("m/kubepods/burstable"),
        "768",
        "written despite the error"
    );
    assert_eq!(memory("m/kubepods/burstable"), GI.to_string());
    assert_eq!(memory("m/kubepods/besteffort"), "", "refused, not written");
}

#[test]
fn existing_pods_are_found_in_any_hierarchy() {
    let t = tempdir();
    let tree = v1_tree(t.path(), "m");
    for dir in [
        "memory/m/kubepods/podg1",
        "memory/m/kubepods/burstable/podb1/app",
        "cpu/m/kubepods/burstable/podb1",
        // Only in the cpu hierarchy: half-made before a crash, still adopted.
        "cpu/m/kubepods/besteffort/pode1",
        "memory/m/kubepods/burstable/notapod",
        "memory/m/kubepods/burstable/pod",
        "memory/m/kubepods/burstable/podbad.name",
    ] {
        fs::create_dir_all(t.path().join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}"));
    }
    write(&t.path().join("memory/m/kubepods/podfile"), "");
    let pods: Vec<(String, QosClass, String)> = tree
        .existing_pods()
        .into_iter()
        .map(|p| (p.uid, p.qos, p.relative))
        .collect();
    assert_eq!(
        pods,
        vec![
            (
                "e1".into(),
                QosClass::BestEffort,
                "m/kubepods/besteffort/pode1".into()
            ),
            (
                "b1".into(),
                QosClass::Burstable,
                "m/kubepods/burstable/podb1".into()
            ),
            ("g1".into(), QosClass::Guaranteed, "m/kubepods/podg1".into()),
        ]
    );
}

#[test]
fn pids_are_gathered_deduplicated_and_block_removal() {
    let t = tempdir();
    let tree = v1_tree(t.path(), "m");
    let pod = PodCgroup {
        uid: "p".into(),
        qos: QosClass::BestEffort,
        relative: "m/kubepods/besteffort/podp".into(),
    };
    write(
        &t.path()
            .join("memory")
            .join(&pod.relative)
            .join("app/cgroup.procs"),
        "12\n0\njunk\n34\n",
    );
    write(
        &t.path()
            .join("unified")
            .join(&pod.relative)
            .join("app/cgroup.procs"),
        "34\n12\n",
    );
    assert_eq!(
        tree.pids(&pod),
        vec![12, 34],
        "pid 0 is never ours to signal"
    );
    assert!(!tree.is_empty(&pod));
    let err = tree.remove_pod(&pod).expect_err("has processes");
    assert!(
        matches!(&err, CgroupError::NotEmpty { pids, .. } if *pids == vec![12, 34]),
        "{err}"
    );
}

#[test]
fn remove_pod_and_remove_all_leave_nothing_of_ours() {
    let t = tempdir();
    let tree = v1_tree(t.path(), "test-1/tree");
    tree.ensure_qos_hierarchy(None)
        .unwrap_or_else(|e| panic!("{e}"));
    let pod = tree
        .create_pod("u1", QosClass::Burstable, &ResourceConfig::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let container = tree
        .create_container(&pod, "app", &ResourceConfig::default())
        .unwrap_or_else(|e| panic!("{e}"));
    for h in ["memory", "cpu", "unified"] {
        assert!(t.path().join(h).join(&container.relative).is_dir(), "{h}");
    }
    // A sibling of our root that is not ours.
    fs::create_dir_all(t.path().join("memory/test-1/other")).unwrap_or_else(|e| panic!("{e}"));
    tree.remove_container(&container)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!t.path().join("cpu").join(&container.relative).exists());
    tree.create_pod("u2", QosClass::Guaranteed, &ResourceConfig::default())
        .unwrap_or_else(|e| panic!("{e}"));
    tree.remove_pod(&pod).unwrap_or_else(|e| panic!("{e}"));
    assert!(!t.path().join("memory").join(&pod.relative).exists());
    tree.remove_all().unwrap_or_else(|e| panic!("{e}"));
    assert!(!t.path().join("memory/test-1/tree").exists());
    assert!(t.path().join("memory/test-1/other").is_dir(), "not ours");
    assert!(!t.path().join("cpu/test-1").exists(), "empty: removed");
    assert!(!t.path().join("unified/test-1").exists());
}

#[test]
fn a_container_working_set_reads_only_its_own_memory_cgroup() {
    let t = tempdir();
    let tree = v1_tree(t.path(), "monitor");
    let pod = PodCgroup {
        uid: "abc".to_string(),
        qos: QosClass::Burstable,
        relative: "monitor/kubepods/burstable/podabc".to_string(),
    };
    let memory = t.path().join("memory").join(&pod.relative);
    // The pod's own figures differ, so reading them instead would show.
    write(&memory.join("memory.usage_in_bytes"), "9000\n");
    write(&memory.join("memory.stat"), "total_inactive_file 1000\n");
    write(&memory.join("app/memory.usage_in_bytes"), "5000\n");
    write(
        &memory.join("app/memory.stat"),
        "total_inactive_file 1200\n",
    );
    assert_eq!(tree.container_working_set(&pod, "app"), Some(3800));
    // Not running (no cgroup), or a name that could climb out of the pod (the tier above
    // has readable files): no stats.
    let tier = t.path().join("memory/monitor/kubepods/burstable");
    write(&tier.join("memory.usage_in_bytes"), "7000\n");
    write(&tier.join("memory.stat"), "total_inactive_file 0\n");
    assert_eq!(tree.container_working_set(&pod, "gone"), None);
    assert_eq!(tree.container_working_set(&pod, ".."), None);
}
