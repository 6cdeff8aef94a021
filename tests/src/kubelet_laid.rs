//! The agent beside a kubelet, as the integration tests run it: a node laid out as a
//! kubelet lays it out ([`monitor_bench::laid::KubeletTree`], under this test process's
//! `monitor-test-<pid>/kubelet`), processes in its pod cgroups, and an agent with
//! `runPods: false` and `monitor.podList` that starts none of them.
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use monitor_bench::laid::{Driver, KubeletTree, LaidPod};

use crate::{KillOnDrop, TestTrees, monitor_run};

/// The kubelet's tree, the pod list, and an agent's configuration beside them.
pub struct KubeletNode {
    pub dir: tempfile::TempDir,
    pub tree: KubeletTree,
    pub pods: Vec<LaidPod>,
    pub processes: Vec<KillOnDrop>,
    oom: crate::OomCounter,
    // Dropped last: kills whatever runs in our cgroups and removes them.
    _trees: TestTrees,
}

impl KubeletNode {
    /// A `kubepods` cgroup limited to `allocatable_mib`, in the cgroupfs driver's naming.
    pub fn new(allocatable_mib: u64) -> KubeletNode {
        KubeletNode::with_driver(allocatable_mib, Driver::Cgroupfs)
    }

    /// The same in `driver`'s naming (systemd: under `monitor_test_<pid>.slice`, this test
    /// process's parent in that naming, removed on drop as the other).
    pub fn with_driver(allocatable_mib: u64, driver: Driver) -> KubeletNode {
        let _trees = TestTrees;
        let tree = KubeletTree::with_driver(&TestTrees::root("kubelet"), allocatable_mib, driver)
            .unwrap_or_else(|e| panic!("laying out the kubelet's tree: {e}"));
        KubeletNode {
            dir: tempfile::tempdir().expect("tempdir"),
            oom: crate::OomCounter::new(&tree.kubepods()),
            tree,
            pods: Vec::new(),
            processes: Vec::new(),
            _trees,
        }
    }

    /// Lays out a pod (see [`KubeletTree::pod`]); returns its index.
    pub fn pod(&mut self, name: &str, qos: &'static str, listed: bool, with_cgroup: bool) -> usize {
        let index = self
            .tree
            .pod(name, qos, listed, with_cgroup)
            .unwrap_or_else(|e| panic!("laying out pod {name}: {e}"));
        self.pods = self.tree.pods.clone();
        index
    }

    /// Starts `command` in pod `index`'s cgroup (it joins before exec).
    pub fn run_in(&mut self, index: usize, mut command: Command) -> u32 {
        self.tree.join(index, &mut command);
        let child: Child = command
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {command:?}: {e}"));
        let pid = child.id();
        self.processes.push(KillOnDrop(child));
        pid
    }

    /// Writes the pod list (the listed pods, as `pods` says now).
    pub fn write_pod_list(&mut self) -> PathBuf {
        self.tree.pods = self.pods.clone();
        let path = self.dir.path().join("pods.json");
        std::fs::write(&path, self.tree.pod_list(64)).unwrap();
        path
    }

    /// The agent's configuration: the kubelet's cgroupRoot and `eviction` keys (YAML),
    /// `runPods: false`, the pod list, and `monitor_keys` (indented by two spaces).
    pub fn config(&self, eviction: &str, monitor_keys: &str) -> PathBuf {
        let text = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             cgroupDriver: {driver}\ncgroupRoot: /{root}\n{eviction}\n\
             monitor:\n  runPods: false\n  podList:\n    file: {list}\n  stateDir: {state}\n  \
             socket: {sock}\n{monitor_keys}",
            root = self.tree.root,
            driver = self.tree.driver.name(),
            list = self.dir.path().join("pods.json").display(),
            state = self.dir.path().join("state").display(),
            sock = self.dir.path().join("monitor.sock").display(),
        );
        let path = self.dir.path().join("config.yaml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Starts the agent on `config` with `args`, logging to `agent.log` (RUST_LOG
    /// `filter`).
    pub fn start_agent(&self, config: &Path, args: &[&str], filter: &str) -> KillOnDrop {
        let log = std::fs::File::create(self.log_path()).unwrap();
        let mut command = monitor_run(config, &log);
        command.args(args).env("RUST_LOG", filter);
        KillOnDrop(command.spawn().expect("starting the agent"))
    }

    /// Starts the agent on `eviction` and `monitor_keys` with `args`, waits until it has
    /// read the pod list and armed on it, then creates `go` (what the hog waits for).
    pub fn race(&self, eviction: &str, monitor_keys: &str, args: &[&str], go: &Path) -> KillOnDrop {
        let config = self.config(eviction, monitor_keys);
        let agent = self.start_agent(&config, args, "info");
        // Armed only once its sources run: loading the eBPF programs takes seconds under
        // emulation, long after the pod list was read.
        crate::wait_until("the agent runs", Duration::from_secs(60), || {
            self.log().contains("agent running")
        });
        std::thread::sleep(SETTLE);
        std::fs::write(go, "").expect("the start file");
        agent
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("agent.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The cgroup settings of the tree (see [`KubeletTree::settings`]).
    pub fn settings(&self) -> Vec<(PathBuf, String)> {
        self.tree.settings()
    }

    /// The kernel's OOM kills among the pods since the node was made.
    pub fn oom_kills(&self) -> u64 {
        self.oom.kills()
    }
}

/// How long the running agent takes to synchronize on the pod list and arm on it at a 1 s
/// housekeeping interval.
pub const SETTLE: Duration = Duration::from_secs(3);
