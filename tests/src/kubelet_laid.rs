//! A node laid out as a kubelet lays it out, for the agent beside a kubelet
//! (`monitor.podList`): a `kubepods` cgroup with a memory limit (node allocatable) under
//! a cgroupRoot of our own (`monitor-test-<pid>/kubelet`, the cgroupfs driver's naming),
//! pod cgroups by UID in their QoS tier, processes in them, and a PodList file written as
//! `kubectl get pods -o json` writes it. The agent under test runs with `runPods: false`
//! and starts none of these.
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use monitor::observe::{CgroupLayout, CgroupVersion};

use crate::{KillOnDrop, TestTrees, join_before_exec, monitor_run};

/// One pod of the tree.
pub struct LaidPod {
    pub name: String,
    pub uid: String,
    /// "Guaranteed", "Burstable" or "BestEffort".
    pub qos: &'static str,
    /// Relative to each hierarchy's mount.
    pub relative: String,
    /// Listed in the pod list (an unlisted one is a cgroup no listed pod claims).
    pub listed: bool,
}

/// The kubelet's tree, the pod list, and an agent's configuration beside them.
pub struct KubeletNode {
    pub dir: tempfile::TempDir,
    /// The KubeletConfiguration's cgroupRoot (relative, without a leading '/').
    pub cgroup_root: String,
    pub layout: CgroupLayout,
    pub pods: Vec<LaidPod>,
    pub processes: Vec<KillOnDrop>,
    oom: crate::OomCounter,
    // Dropped last: kills whatever runs in our cgroups and removes them.
    _trees: TestTrees,
}

impl KubeletNode {
    /// A `kubepods` cgroup limited to `allocatable_mib`.
    pub fn new(allocatable_mib: u64) -> KubeletNode {
        let _trees = TestTrees;
        let cgroup_root = TestTrees::root("kubelet");
        let layout = CgroupLayout::detect().expect("cgroup layout");
        let node = KubeletNode {
            dir: tempfile::tempdir().expect("tempdir"),
            cgroup_root: cgroup_root.clone(),
            layout,
            pods: Vec::new(),
            processes: Vec::new(),
            oom: crate::OomCounter::new(&format!("{cgroup_root}/kubepods")),
            _trees,
        };
        let kubepods = node.kubepods();
        node.make(&kubepods);
        for tier in ["burstable", "besteffort"] {
            node.make(&format!("{kubepods}/{tier}"));
        }
        let limit = allocatable_mib << 20;
        match node.layout.version {
            CgroupVersion::V1 => node.write(&kubepods, "memory.limit_in_bytes", &limit.to_string()),
            CgroupVersion::V2 => node.write(&kubepods, "memory.max", &limit.to_string()),
        }
        node
    }

    /// The pods cgroup, relative to a hierarchy's mount.
    pub fn kubepods(&self) -> String {
        format!("{}/kubepods", self.cgroup_root)
    }

    /// The hierarchies a runtime puts a pod in: the memory one, and the cgroup2 one
    /// beside it on a v1 host (where `cgroup.kill` lives).
    fn mounts(&self) -> Vec<PathBuf> {
        let mut mounts = vec![self.layout.memory_root.clone()];
        if let Some(unified) = &self.layout.unified_root
            && *unified != self.layout.memory_root
        {
            mounts.push(unified.clone());
        }
        mounts
    }

    /// Creates `relative` (and its parents) in every hierarchy of [`KubeletNode::mounts`];
    /// on cgroup v2 each level hands the memory and pids controllers down.
    fn make(&self, relative: &str) {
        for mount in self.mounts() {
            let mut dir = mount.clone();
            for component in relative.split('/') {
                if self.layout.version == CgroupVersion::V2 && mount == self.layout.memory_root {
                    let _ = std::fs::write(dir.join("cgroup.subtree_control"), "+memory +pids");
                }
                dir = dir.join(component);
                if !dir.exists() {
                    std::fs::create_dir(&dir)
                        .unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
                }
            }
        }
    }

    /// The memory hierarchy's directory of `relative`.
    pub fn memory_dir(&self, relative: &str) -> PathBuf {
        self.layout.memory_root.join(relative)
    }

    pub fn write(&self, relative: &str, file: &str, value: &str) {
        let path = self.memory_dir(relative).join(file);
        std::fs::write(&path, value)
            .unwrap_or_else(|e| panic!("writing {value:?} to {}: {e}", path.display()));
    }

    /// Lays out a pod's cgroup as the kubelet's cgroupfs driver names it (created only
    /// when `with_cgroup`), listed in the pod list when `listed`.
    pub fn pod(&mut self, name: &str, qos: &'static str, listed: bool, with_cgroup: bool) -> usize {
        let uid = format!(
            "{:08x}-0000-4000-8000-{:012x}",
            std::process::id(),
            self.pods.len() + 1
        );
        let tier = match qos {
            "Guaranteed" => String::new(),
            "Burstable" => "/burstable".to_string(),
            _ => "/besteffort".to_string(),
        };
        let relative = format!("{}{tier}/pod{uid}", self.kubepods());
        if with_cgroup {
            self.make(&relative);
        }
        self.pods.push(LaidPod {
            name: name.to_string(),
            uid,
            qos,
            relative,
            listed,
        });
        self.pods.len() - 1
    }

    /// Starts `command` in pod `index`'s cgroup (it joins before exec).
    pub fn run_in(&mut self, index: usize, mut command: Command) -> u32 {
        let files: Vec<PathBuf> = self
            .mounts()
            .iter()
            .map(|m| m.join(&self.pods[index].relative).join("cgroup.procs"))
            .collect();
        join_before_exec(&mut command, &files);
        let child: Child = command
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {command:?}: {e}"));
        let pid = child.id();
        self.processes.push(KillOnDrop(child));
        pid
    }

    /// Writes the pod list (the listed pods) as `kubectl get pods -o json` would.
    pub fn write_pod_list(&self) -> PathBuf {
        let items: Vec<serde_json::Value> = self
            .pods
            .iter()
            .filter(|p| p.listed)
            .map(|p| {
                let resources = match p.qos {
                    "Guaranteed" => serde_json::json!({
                        "requests": {"cpu": "100m", "memory": "64Mi"},
                        "limits": {"cpu": "100m", "memory": "64Mi"}}),
                    "Burstable" => serde_json::json!({"requests": {"memory": "32Mi"}}),
                    _ => serde_json::json!({}),
                };
                serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": p.name, "namespace": "shop", "uid": p.uid},
                    "spec": {"containers": [{"name": "app", "image": "registry.local/app:1",
                                             "resources": resources}],
                             "restartPolicy": "Always"},
                    "status": {"phase": "Running", "qosClass": p.qos}
                })
            })
            .collect();
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items,
                                      "metadata": {"resourceVersion": ""}});
        let path = self.dir.path().join("pods.json");
        std::fs::write(&path, serde_json::to_string_pretty(&list).unwrap()).unwrap();
        path
    }

    /// The agent's configuration: the kubelet's cgroupRoot and `eviction` keys (YAML),
    /// `runPods: false`, the pod list, and `monitor_keys` (indented by two spaces).
    pub fn config(&self, eviction: &str, monitor_keys: &str) -> PathBuf {
        let text = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             cgroupDriver: cgroupfs\ncgroupRoot: /{root}\n{eviction}\n\
             monitor:\n  runPods: false\n  podList:\n    file: {list}\n  stateDir: {state}\n  \
             socket: {sock}\n{monitor_keys}",
            root = self.cgroup_root,
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

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("agent.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The settings a kubelet (or an operator) writes to the pods' cgroups, file by file,
    /// for every cgroup of the tree: what the agent must leave as it found it.
    pub fn settings(&self) -> Vec<(PathBuf, String)> {
        let files: &[&str] = match self.layout.version {
            CgroupVersion::V1 => &[
                "memory.limit_in_bytes",
                "memory.soft_limit_in_bytes",
                "memory.swappiness",
                "memory.oom_control",
                "memory.use_hierarchy",
            ],
            CgroupVersion::V2 => &[
                "memory.max",
                "memory.high",
                "memory.low",
                "memory.min",
                "memory.oom.group",
                "memory.swap.max",
                "cgroup.freeze",
            ],
        };
        let mut dirs = vec![self.kubepods()];
        dirs.extend(["burstable", "besteffort"].map(|t| format!("{}/{t}", self.kubepods())));
        dirs.extend(self.pods.iter().map(|p| p.relative.clone()));
        let mut settings = Vec::new();
        for dir in dirs {
            for file in files {
                let path = self.memory_dir(&dir).join(file);
                if let Ok(text) = std::fs::read_to_string(&path) {
                    // oom_control's counter moves with the workload, not with a setting.
                    let text = text
                        .lines()
                        .filter(|l| !l.starts_with("oom_kill ") && !l.starts_with("under_oom"))
                        .collect::<Vec<_>>()
                        .join("\n");
                    settings.push((path, text));
                }
            }
        }
        settings
    }

    /// The kernel's OOM kills among the pods since the node was made.
    pub fn oom_kills(&self) -> u64 {
        self.oom.kills()
    }
}

/// How long the agent takes to read the pod list and arm on it at a 1 s housekeeping
/// interval.
pub const SETTLE: Duration = Duration::from_secs(3);
