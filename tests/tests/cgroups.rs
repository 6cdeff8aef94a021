//! The QoS cgroup tree on this kernel's cgroupfs: real directories, real values read back,
//! real processes. Version-aware: the host runs them on cgroup v1 (plus the unified
//! mirror), `cargo xtask vm -- cgroups` on cgroup v2. Run as root, one at a time:
//! `cargo test -p monitor-tests --test cgroups -- --test-threads=1`.
//!
//! Every tree lives under `monitor-test-<pid>/<test>` in each hierarchy and is removed on
//! drop, also when a test fails; only processes spawned here are ever killed.
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use monitor::observe::{CgroupLayout, CgroupVersion};
use monitor::policy::pod::{Pod, ResourceList, parse_pod, parse_pod_list};
use monitor::policy::qos::{
    CgroupOptions, ResourceConfig, container_resource_config, cpu_shares_to_weight,
    pod_resource_config, qos_tier_configs,
};
use monitor::policy::quantity::parse_quantity;
use monitor::policy::types::QosClass;
use monitor::runtime::cgroups::{CgroupTree, ContainerCgroup, Controller, PodCgroup};
use monitor_tests::{Feature, cleanup_stale, hog, parent_name, require, wait_until};
use nix::sys::signal::Signal;
use rstest::rstest;

const MIB: i64 = 1 << 20;
/// What v1 memory.limit_in_bytes reads when unlimited (PAGE_COUNTER_MAX pages).
const V1_UNLIMITED: &str = "9223372036854771712";
/// The kernel's default CFS period, 100 ms.
const DEFAULT_PERIOD: u64 = 100_000;

/// A tree of our own, removed on drop after the processes we spawned into it are killed.
struct Fixture {
    tree: CgroupTree,
    children: Vec<Child>,
}

impl Fixture {
    fn new(test: &str) -> Fixture {
        let layout = CgroupLayout::detect().unwrap_or_else(|e| panic!("cgroup layout: {e}"));
        Fixture::with_layout(test, &layout)
    }

    fn with_layout(test: &str, layout: &CgroupLayout) -> Fixture {
        cleanup_stale();
        let root = format!("{}/{test}", parent_name());
        let tree = CgroupTree::new(layout, &root).unwrap_or_else(|e| panic!("tree {root}: {e}"));
        cleanup_stale_everywhere(&tree);
        Fixture {
            tree,
            children: Vec::new(),
        }
    }

    /// Spawns `command` inside `container`: the child joins it in every hierarchy
    /// before exec, so nothing it does is charged elsewhere.
    fn spawn(&mut self, container: &ContainerCgroup, mut command: Command) -> u32 {
        monitor_tests::join_before_exec(&mut command, &self.tree.join_files(container));
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {command:?} in {}: {e}", container.relative));
        let pid = child.id();
        self.children.push(child);
        pid
    }

    fn child(&mut self, pid: u32) -> &mut Child {
        self.children
            .iter_mut()
            .find(|c| c.id() == pid)
            .unwrap_or_else(|| panic!("no child {pid}"))
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for pod in self.tree.existing_pods() {
            if let Err(e) = self.tree.remove_pod(&pod) {
                eprintln!("warning: {e}");
            }
        }
        if let Err(e) = self.tree.remove_all() {
            eprintln!("warning: removing the test tree: {e}");
        }
    }
}

/// `cleanup_stale` covers the memory and unified hierarchies; the tree also lives in the
/// v1 cpu and pids ones. Processes there were in the memory hierarchy too (and are gone),
/// so only empty directories of dead test processes remain to remove.
fn cleanup_stale_everywhere(tree: &CgroupTree) {
    for h in tree.hierarchies() {
        let Ok(entries) = std::fs::read_dir(&h.mount) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix("monitor-test-")
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                remove_empty_dirs(&entry.path());
            }
        }
    }
}

fn remove_empty_dirs(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_empty_dirs(&entry.path());
            }
        }
    }
    if let Err(e) = std::fs::remove_dir(dir) {
        eprintln!("warning: stale {}: {e}", dir.display());
    }
}

fn read(tree: &CgroupTree, controller: Controller, relative: &str, file: &str) -> Option<String> {
    let path = tree.dir(controller, relative)?.join(file);
    Some(
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
            .trim()
            .to_string(),
    )
}

/// What the kernel's files must read for `config` ("None" reads as the kernel default:
/// unlimited, the default period), one entry per file, with the controller it needs.
fn expected_files(
    version: CgroupVersion,
    config: &ResourceConfig,
) -> Vec<(Controller, &'static str, String)> {
    let limit = |v: Option<i64>, unlimited: &str| match v {
        Some(v) if v > 0 => v.to_string(),
        _ => unlimited.to_string(),
    };
    let period = config.cpu_period.unwrap_or(DEFAULT_PERIOD);
    let mut files = Vec::new();
    match version {
        CgroupVersion::V1 => {
            files.push((
                Controller::Memory,
                "memory.limit_in_bytes",
                limit(config.memory_limit, V1_UNLIMITED),
            ));
            if let Some(shares) = config.cpu_shares {
                files.push((Controller::Cpu, "cpu.shares", shares.to_string()));
            }
            files.push((
                Controller::Cpu,
                "cpu.cfs_quota_us",
                limit(config.cpu_quota, "-1"),
            ));
            files.push((Controller::Cpu, "cpu.cfs_period_us", period.to_string()));
        }
        CgroupVersion::V2 => {
            files.push((
                Controller::Memory,
                "memory.max",
                limit(config.memory_limit, "max"),
            ));
            if let Some(shares) = config.cpu_shares {
                files.push((
                    Controller::Cpu,
                    "cpu.weight",
                    cpu_shares_to_weight(shares).to_string(),
                ));
            }
            files.push((
                Controller::Cpu,
                "cpu.max",
                format!("{} {period}", limit(config.cpu_quota, "max")),
            ));
        }
    }
    files.push((
        Controller::Pids,
        "pids.max",
        limit(config.pids_limit, "max"),
    ));
    files
}

/// Reads every file of `config` back from `relative` and compares. A controller this
/// kernel lacks must show up in the tree's warnings instead.
fn assert_values(tree: &CgroupTree, relative: &str, config: &ResourceConfig) {
    for (controller, file, expected) in expected_files(tree.version(), config) {
        match read(tree, controller, relative, file) {
            Some(got) => assert_eq!(got, expected, "{relative}/{file} for {config:?}"),
            None => assert!(
                tree.warnings()
                    .iter()
                    .any(|w| w.path.ends_with(file) || w.reason.contains(controller.name())),
                "no {} hierarchy and no warning: {:?}",
                controller.name(),
                tree.warnings()
            ),
        }
    }
}

/// Where `relative` exists: one directory per hierarchy.
fn dirs(tree: &CgroupTree, relative: &str) -> Vec<PathBuf> {
    tree.hierarchies()
        .iter()
        .map(|h| h.mount.join(relative))
        .collect()
}

const GUARANTEED: &str = "
apiVersion: v1
kind: Pod
metadata: {name: guaranteed, namespace: test, uid: 6a0e7e4c-2b1d-4e7a-9c51-0a1b2c3d4e01}
spec:
  containers:
  - name: app
    image: app:1
    resources: {limits: {cpu: 500m, memory: 128Mi}}
  - name: sidecar
    image: sidecar:1
    resources: {limits: {cpu: 250m, memory: 64Mi}}
";

const BURSTABLE: &str = "
apiVersion: v1
kind: Pod
metadata: {name: burstable, namespace: test, uid: 6a0e7e4c-2b1d-4e7a-9c51-0a1b2c3d4e02}
spec:
  containers:
  - name: app
    image: app:1
    resources:
      requests: {cpu: 100m, memory: 64Mi}
      limits: {cpu: '1', memory: 256Mi}
";

const BEST_EFFORT: &str = "
apiVersion: v1
kind: Pod
metadata: {name: besteffort, namespace: test, uid: 6a0e7e4c-2b1d-4e7a-9c51-0a1b2c3d4e03}
spec:
  containers:
  - name: app
    image: app:1
";

fn pod(manifest: &str) -> Pod {
    parse_pod(manifest, "test manifest").unwrap_or_else(|e| panic!("{e}"))
}

fn options() -> CgroupOptions {
    CgroupOptions {
        pod_pids_limit: Some(256),
        ..CgroupOptions::default()
    }
}

/// Creates the pod and its containers from the manifest, as the runtime will.
fn create(tree: &CgroupTree, pod: &Pod) -> (PodCgroup, Vec<ContainerCgroup>) {
    let cgroup = tree
        .create_pod(
            &pod.metadata.uid,
            pod.qos_class(),
            &pod_resource_config(pod, &options()),
        )
        .unwrap_or_else(|e| panic!("pod {}: {e}", pod.metadata.name));
    let containers = pod
        .spec
        .containers
        .iter()
        .map(|c| {
            tree.create_container(&cgroup, &c.name, &container_resource_config(c, &options()))
                .unwrap_or_else(|e| panic!("container {}: {e}", c.name))
        })
        .collect();
    (cgroup, containers)
}

#[rstest]
#[case::guaranteed(GUARANTEED, QosClass::Guaranteed, "kubepods")]
#[case::burstable(BURSTABLE, QosClass::Burstable, "kubepods/burstable")]
#[case::besteffort(BEST_EFFORT, QosClass::BestEffort, "kubepods/besteffort")]
fn cgroups_pods_land_in_their_tier_with_the_policy_values(
    #[case] manifest: &str,
    #[case] qos: QosClass,
    #[case] tier: &str,
) {
    if !require("cgroups_pods_land_in_their_tier", &[Feature::Root]) {
        return;
    }
    let fixture = Fixture::new("tiers");
    let tree = &fixture.tree;
    tree.ensure_qos_hierarchy(None)
        .unwrap_or_else(|e| panic!("{e}"));
    let pod = pod(manifest);
    assert_eq!(pod.qos_class(), qos, "the manifest's class");
    let (cgroup, containers) = create(tree, &pod);
    let expected = format!("{}/{tier}/pod{}", fixture_root(tree), pod.metadata.uid);
    assert_eq!(cgroup.relative, expected);
    for dir in dirs(tree, &expected) {
        assert!(dir.is_dir(), "{} exists", dir.display());
    }
    let pod_config = pod_resource_config(&pod, &options());
    assert_eq!(
        pod_config.pids_limit,
        Some(256),
        "podPidsLimit reaches the pod"
    );
    assert_values(tree, &cgroup.relative, &pod_config);
    for (container, spec) in containers.iter().zip(&pod.spec.containers) {
        assert_eq!(container.relative, format!("{expected}/{}", spec.name));
        for dir in dirs(tree, &container.relative) {
            assert!(dir.is_dir(), "{} exists", dir.display());
        }
        assert_values(
            tree,
            &container.relative,
            &container_resource_config(spec, &options()),
        );
    }
}

/// `monitor-test-<pid>/<test>`: the root every fixture uses.
fn fixture_root(tree: &CgroupTree) -> String {
    tree.pods_root_relative()
        .strip_suffix("/kubepods")
        .unwrap_or_else(|| panic!("pods root {}", tree.pods_root_relative()))
        .to_string()
}

#[test]
fn cgroups_tier_values_with_qos_reserved_memory() {
    if !require(
        "cgroups_tier_values_with_qos_reserved_memory",
        &[Feature::Root],
    ) {
        return;
    }
    let fixture = Fixture::new("reserved");
    let tree = &fixture.tree;
    tree.ensure_qos_hierarchy(None)
        .unwrap_or_else(|e| panic!("{e}"));
    let pods = parse_pod_list(&[GUARANTEED, BURSTABLE, BEST_EFFORT].join("---\n"), "pods")
        .unwrap_or_else(|e| panic!("{e}"));
    let allocatable: ResourceList = [("memory", "4Gi"), ("cpu", "2")]
        .into_iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                parse_quantity(v).unwrap_or_else(|e| panic!("{e}")),
            )
        })
        .collect();
    let tiers = qos_tier_configs(&pods, &allocatable, Some(50)).unwrap_or_else(|e| panic!("{e}"));
    // 50% of the Guaranteed pod's 192Mi, then 50% of the Burstable pod's 64Mi.
    assert_eq!(tiers.burstable.memory_limit, Some(4096 * MIB - 96 * MIB));
    assert_eq!(
        tiers.best_effort.memory_limit,
        Some(4096 * MIB - 96 * MIB - 32 * MIB)
    );
    assert_eq!(
        tiers.burstable.cpu_shares,
        Some(102),
        "100m of Burstable requests"
    );
    tree.update_qos_tiers(&tiers)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_values(
        tree,
        &tree.tier_relative(QosClass::Burstable),
        &tiers.burstable,
    );
    assert_values(
        tree,
        &tree.tier_relative(QosClass::BestEffort),
        &tiers.best_effort,
    );

    // Without the reserve the tiers are unbounded again only if written so: the
    // kubelet leaves memory alone (None), and so does the tree.
    let unreserved = qos_tier_configs(&pods, &allocatable, None).unwrap_or_else(|e| panic!("{e}"));
    tree.update_qos_tiers(&unreserved)
        .unwrap_or_else(|e| panic!("{e}"));
    let still = ResourceConfig {
        memory_limit: tiers.burstable.memory_limit,
        ..unreserved.burstable
    };
    assert_values(tree, &tree.tier_relative(QosClass::Burstable), &still);
}

#[test]
fn cgroups_pods_root_memory_limit_is_written() {
    if !require(
        "cgroups_pods_root_memory_limit_is_written",
        &[Feature::Root],
    ) {
        return;
    }
    let mut fixture = Fixture::new("allocatable");
    fixture.tree = {
        let layout = CgroupLayout::detect().unwrap_or_else(|e| panic!("{e}"));
        CgroupTree::new(&layout, &format!("{}/allocatable", parent_name()))
            .unwrap_or_else(|e| panic!("{e}"))
            .with_node_cpu_milli(1500)
    };
    let tree = &fixture.tree;
    let pods = tree.pods_root_relative();
    tree.ensure_qos_hierarchy(Some(512 * MIB))
        .unwrap_or_else(|e| panic!("{e}"));
    let bounded = ResourceConfig {
        cpu_shares: Some(1536),
        memory_limit: Some(512 * MIB),
        ..ResourceConfig::default()
    };
    assert_values(tree, &pods, &bounded);
    assert_values(
        tree,
        &tree.tier_relative(QosClass::BestEffort),
        &ResourceConfig {
            cpu_shares: Some(2),
            ..ResourceConfig::default()
        },
    );
    // The observer reads the pods root through this path.
    let memory = tree
        .dir(Controller::Memory, &pods)
        .unwrap_or_else(|| panic!("memory hierarchy"));
    let layout = CgroupLayout::detect().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(memory, layout.memory_root.join(&pods));
    // The node stops enforcing allocatable: the bound goes.
    tree.ensure_qos_hierarchy(None)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_values(
        tree,
        &pods,
        &ResourceConfig {
            memory_limit: None,
            ..bounded
        },
    );
}

/// Reads the hog's stdout until it reports `mib` allocated.
fn wait_allocated(child: &mut Child, mib: u64) {
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("hog exited before allocating {mib} MiB"))
            .unwrap_or_else(|e| panic!("hog stdout: {e}"));
        let mut words = line.split_whitespace();
        if words.next() == Some("allocated")
            && words.next().and_then(|w| w.parse::<u64>().ok()) >= Some(mib)
        {
            return;
        }
    }
}

/// The cgroup `pid` is in, per /proc/PID/cgroup, for one hierarchy of the tree.
fn proc_cgroup(pid: u32, version: CgroupVersion, controller: Option<Controller>) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/cgroup: {e}"));
    text.lines()
        .find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (id, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            let matches = match (version, controller) {
                (CgroupVersion::V2, _) => id == "0" && controllers.is_empty(),
                (CgroupVersion::V1, Some(c)) => controllers.split(',').any(|n| n == c.name()),
                (CgroupVersion::V1, None) => false,
            };
            matches.then(|| path.to_string())
        })
        .unwrap_or_else(|| panic!("pid {pid} has no {version:?} {controller:?} line in {text}"))
}

#[test]
fn cgroups_hog_joins_every_hierarchy_and_is_charged_to_its_pod() {
    if !require("cgroups_hog_joins_every_hierarchy", &[Feature::Root]) {
        return;
    }
    let mut fixture = Fixture::new("hog");
    fixture
        .tree
        .ensure_qos_hierarchy(None)
        .unwrap_or_else(|e| panic!("{e}"));
    let (cgroup, containers) = create(&fixture.tree, &pod(BURSTABLE));
    let container = containers[0].clone();
    // 48 MiB held for at most 60 s, under the container's 256Mi limit.
    let pid = fixture.spawn(&container, {
        let mut c = hog(&["anon", "48", "8", "0", "60"]);
        c.stdout(Stdio::piped());
        c
    });
    wait_allocated(fixture.child(pid), 48);
    let tree = &fixture.tree;
    for h in tree.hierarchies() {
        assert_eq!(
            proc_cgroup(pid, h.version, h.controllers.first().copied()),
            format!("/{}", container.relative),
            "hog in {}",
            h.mount.display()
        );
    }
    assert_eq!(tree.pids(&cgroup), vec![pid as i32]);
    let memory = tree.pod_memory(&cgroup).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        memory.usage_bytes >= 48 << 20,
        "the hog's 48 MiB are charged to the pod: {memory:?}"
    );
    assert_eq!(
        memory.limit_bytes,
        Some(256 << 20),
        "the pod's limit: {memory:?}"
    );

    assert_eq!(
        tree.signal(&cgroup, Signal::SIGKILL)
            .unwrap_or_else(|e| panic!("{e}")),
        1
    );
    let status = fixture
        .child(pid)
        .wait()
        .unwrap_or_else(|e| panic!("wait: {e}"));
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
}

/// A synchronize keeps every pod's memory files open and reads them with pread: the values
/// must follow the kernel's, an open file must not keep a pod's cgroup from going, and a
/// pod recreated under the same name must be read anew, not through the dead descriptor.
#[test]
fn cgroups_kept_memory_files_read_fresh_values_and_survive_a_recreated_pod() {
    if !require("cgroups_kept_memory_files", &[Feature::Root]) {
        return;
    }
    let mut fixture = Fixture::new("kept");
    fixture
        .tree
        .ensure_qos_hierarchy(None)
        .unwrap_or_else(|e| panic!("{e}"));
    let manifest = pod(BURSTABLE);
    let (cgroup, containers) = create(&fixture.tree, &manifest);
    let before = fixture
        .tree
        .pod_working_set(&cgroup)
        .unwrap_or_else(|e| panic!("{e}"));
    let pid = fixture.spawn(&containers[0], {
        let mut c = hog(&["anon", "48", "8", "0", "60"]);
        c.stdout(Stdio::piped());
        c
    });
    wait_allocated(fixture.child(pid), 48);
    let tree = &fixture.tree;
    let during = tree
        .pod_working_set(&cgroup)
        .unwrap_or_else(|e| panic!("{e}"));
    // A memory cgroup charges its counter 64 pages at a time from a per-CPU stock, so the
    // reading before the hog may already hold a batch that the hog's pages then use up:
    // the rise can fall short of 48 MiB by up to one batch per CPU (seen on 6.1: 64 pages
    // before, 4 pages short during).
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .unwrap_or(4096) as u64;
    let cpus = nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_CONF)
        .ok()
        .flatten()
        .unwrap_or(1) as u64;
    let batch_slack = 64 * page * cpus;
    assert!(
        during + batch_slack >= before + (48 << 20),
        "the kept files see the hog's 48 MiB (less at most {batch_slack} bytes of per-CPU \
         charge stock): {before} then {during}"
    );
    tree.signal(&cgroup, Signal::SIGKILL)
        .unwrap_or_else(|e| panic!("{e}"));
    fixture
        .child(pid)
        .wait()
        .unwrap_or_else(|e| panic!("wait: {e}"));
    let tree = &fixture.tree;
    wait_until("the pod to empty", Duration::from_secs(5), || {
        tree.is_empty(&cgroup)
    });
    let after = tree
        .pod_working_set(&cgroup)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(after < during - (40 << 20), "freed: {during} then {after}");
    // The descriptors are still open: removing the pod must work all the same.
    tree.remove_pod(&cgroup).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        tree.pod_working_set(&cgroup).is_err(),
        "a gone pod reads as an error"
    );
    let (again, _) = create(tree, &manifest);
    assert_eq!(again.relative, cgroup.relative);
    let fresh = tree
        .pod_working_set(&again)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        fresh < 1 << 20,
        "the recreated, empty pod is read through new descriptors: {fresh}"
    );
    tree.remove_pod(&again).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn cgroups_sigkill_empties_the_pod_and_remove_leaves_nothing() {
    if !require("cgroups_sigkill_empties_the_pod", &[Feature::Root]) {
        return;
    }
    let mut fixture = Fixture::new("kill");
    fixture
        .tree
        .ensure_qos_hierarchy(None)
        .unwrap_or_else(|e| panic!("{e}"));
    let (cgroup, containers) = create(&fixture.tree, &pod(GUARANTEED));
    let pids: BTreeSet<i32> = containers
        .iter()
        .map(|container| {
            let mut c = hog(&["anon", "8", "8", "0", "60"]);
            c.stdout(Stdio::null());
            fixture.spawn(container, c) as i32
        })
        .collect();
    let tree = &fixture.tree;
    assert_eq!(
        tree.pids(&cgroup).into_iter().collect::<BTreeSet<_>>(),
        pids,
        "one hog per container, listed once across hierarchies"
    );
    // Two single-threaded hogs: two tasks, read from pids.current where the tree has the
    // pids controller (one read instead of walking every hierarchy).
    assert_eq!(tree.task_count(&cgroup), 2);
    assert!(!tree.is_empty(&cgroup));
    let err = tree
        .remove_pod(&cgroup)
        .expect_err("a pod with processes stays");
    assert!(err.to_string().contains(&cgroup.relative), "{err}");

    assert_eq!(
        tree.signal(&cgroup, Signal::SIGKILL)
            .unwrap_or_else(|e| panic!("{e}")),
        2
    );
    for pid in &pids {
        let status = fixture
            .child(*pid as u32)
            .wait()
            .unwrap_or_else(|e| panic!("wait: {e}"));
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{pid}: {status:?}");
    }
    let tree = &fixture.tree;
    wait_until("the pod to empty", Duration::from_secs(5), || {
        tree.is_empty(&cgroup)
    });
    tree.remove_pod(&cgroup).unwrap_or_else(|e| panic!("{e}"));
    for dir in dirs(tree, &cgroup.relative) {
        assert!(!dir.exists(), "{} is gone", dir.display());
    }
    assert!(
        tree.existing_pods().is_empty(),
        "{:?}",
        tree.existing_pods()
    );
    for dir in dirs(tree, &tree.tier_relative(QosClass::Burstable)) {
        assert!(dir.is_dir(), "the tiers stay: {}", dir.display());
    }
}

/// A pure cgroup v1 node (no cgroup2 mount, so no `cgroup.kill`): SIGKILL goes to each
/// process through a pidfd while the pod still lists it, and a forking container is
/// emptied all the same; a process of ours outside the pod is left alone.
#[test]
fn cgroups_sigkill_on_a_pure_v1_node_empties_a_forking_pod_and_nothing_else() {
    const TEST: &str = "cgroups_sigkill_on_a_pure_v1_node";
    if !require(TEST, &[Feature::Root, Feature::CgroupV1Memory]) {
        return;
    }
    // This host's v1 hierarchies without the cgroup2 mirror beside them.
    let mut layout = CgroupLayout::detect().unwrap_or_else(|e| panic!("cgroup layout: {e}"));
    layout.unified_root = None;
    let mut fixture = Fixture::with_layout("kill-v1", &layout);
    fixture
        .tree
        .ensure_qos_hierarchy(None)
        .unwrap_or_else(|e| panic!("{e}"));
    let (cgroup, containers) = create(&fixture.tree, &pod(GUARANTEED));
    assert!(
        fixture.tree.kill_file(&cgroup).is_none(),
        "a pure v1 tree has no cgroup.kill"
    );
    // A shell that keeps forking sleepers while it is killed.
    let mut forker = Command::new("sh");
    forker
        .args([
            "-c",
            "sleep 600 & sleep 600 & while :; do sleep 600 & sleep 0.02; done",
        ])
        .stdin(Stdio::null());
    let shell = fixture.spawn(&containers[0], forker);
    let tree = &fixture.tree;
    wait_until("the forker's sleepers", Duration::from_secs(5), || {
        tree.pids(&cgroup).len() >= 6
    });
    let mut outside = Command::new("sleep")
        .arg("600")
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));

    let before = tree.pids(&cgroup).len();
    let killed = tree
        .signal(&cgroup, Signal::SIGKILL)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(killed >= before, "{killed} killed of {before} listed");
    wait_until("the pod to empty", Duration::from_secs(5), || {
        tree.is_empty(&cgroup)
    });
    let status = fixture
        .child(shell)
        .wait()
        .unwrap_or_else(|e| panic!("wait: {e}"));
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    assert!(
        outside.try_wait().expect("try_wait").is_none(),
        "a process outside the pod was signalled"
    );
    outside.kill().expect("kill");
    outside.wait().expect("wait");
    println!("pure v1 kill: {killed} processes of a forking pod ({before} listed before)");
    fixture
        .tree
        .remove_pod(&cgroup)
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn cgroups_existing_pods_are_adopted_by_another_tree() {
    if !require("cgroups_existing_pods_are_adopted", &[Feature::Root]) {
        return;
    }
    let fixture = Fixture::new("adopt");
    let tree = &fixture.tree;
    tree.ensure_qos_hierarchy(None)
        .unwrap_or_else(|e| panic!("{e}"));
    let created: BTreeSet<(String, QosClass, String)> = [GUARANTEED, BURSTABLE, BEST_EFFORT]
        .into_iter()
        .map(|m| {
            let (cgroup, _) = create(tree, &pod(m));
            (cgroup.uid, cgroup.qos, cgroup.relative)
        })
        .collect();
    // A restarted agent: a new tree over the same root knows nothing but the files.
    let layout = CgroupLayout::detect().unwrap_or_else(|e| panic!("{e}"));
    let restarted = CgroupTree::new(&layout, &format!("{}/adopt", parent_name()))
        .unwrap_or_else(|e| panic!("{e}"));
    let adopted: Vec<PodCgroup> = restarted.existing_pods();
    assert_eq!(
        adopted
            .iter()
            .map(|p| (p.uid.clone(), p.qos, p.relative.clone()))
            .collect::<BTreeSet<_>>(),
        created
    );
    for pod in &adopted {
        restarted.remove_pod(pod).unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(
        tree.existing_pods().is_empty(),
        "removed through the adopter"
    );
}
