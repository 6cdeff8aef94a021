//! A node laid out as a kubelet lays it out (the cgroupfs driver's naming), for the agent
//! beside a kubelet (`runPods: false` with `monitor.podList`): a `kubepods` cgroup with a
//! memory limit under a root of the caller's own, pod cgroups by UID in their QoS tier,
//! processes joined to them before they exec, and a PodList as `kubectl get pods -o json`
//! writes it. Shared by the integration tests and the benchmark's shadow race.
use std::path::PathBuf;
use std::process::Command;

use crate::util::{cgroup_mounts, remove_cgroup_tree};

/// One pod of the tree.
#[derive(Clone, Debug)]
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

/// How the kubelet names its cgroups (its `cgroupDriver`), written out from the kubelet's
/// rules: cgroupfs joins the components with '/'; systemd makes each a slice named by
/// every component up to it joined by '-', with '-' inside a component written '_'.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    Cgroupfs,
    Systemd,
}

impl Driver {
    pub fn name(self) -> &'static str {
        match self {
            Driver::Cgroupfs => "cgroupfs",
            Driver::Systemd => "systemd",
        }
    }

    /// The path of `components` (cgroupRoot's, then kubepods, tier, pod).
    fn path(self, components: &[&str]) -> String {
        match self {
            Driver::Cgroupfs => components.join("/"),
            Driver::Systemd => {
                let escaped: Vec<String> = components.iter().map(|c| c.replace('-', "_")).collect();
                (1..=escaped.len())
                    .map(|n| format!("{}.slice", escaped[..n].join("-")))
                    .collect::<Vec<_>>()
                    .join("/")
            }
        }
    }
}

/// The kubelet's tree under `root` in the memory hierarchy (and the cgroup2 one beside it
/// on a v1 host, where `cgroup.kill` lives); removed, with whatever runs in it, on drop.
#[derive(Debug)]
pub struct KubeletTree {
    /// The KubeletConfiguration's cgroupRoot, relative (no leading '/').
    pub root: String,
    pub driver: Driver,
    pub memory_root: PathBuf,
    pub v1: bool,
    unified: Option<PathBuf>,
    pub pods: Vec<LaidPod>,
}

impl KubeletTree {
    /// `<root>/kubepods` (and its QoS tiers) with `allocatable_mib` of memory, named as
    /// the cgroupfs driver names them.
    pub fn new(root: &str, allocatable_mib: u64) -> std::io::Result<KubeletTree> {
        KubeletTree::with_driver(root, allocatable_mib, Driver::Cgroupfs)
    }

    /// The same, named as `driver` names them.
    pub fn with_driver(
        root: &str,
        allocatable_mib: u64,
        driver: Driver,
    ) -> std::io::Result<KubeletTree> {
        let (mounts, memory, v1) = cgroup_mounts();
        let memory_root = memory.ok_or_else(|| {
            std::io::Error::other("no cgroup hierarchy has the memory controller")
        })?;
        let unified = if v1 {
            mounts
                .into_iter()
                .find(|m| m.join("cgroup.controllers").exists())
        } else {
            Some(memory_root.clone())
        };
        let tree = KubeletTree {
            root: root.trim_matches('/').to_string(),
            driver,
            memory_root,
            v1,
            unified,
            pods: Vec::new(),
        };
        let kubepods = tree.kubepods();
        tree.make(&kubepods)?;
        for tier in ["Burstable", "BestEffort"] {
            tree.make(&tree.tier(tier))?;
        }
        let limit = (allocatable_mib << 20).to_string();
        tree.write(
            &kubepods,
            if v1 {
                "memory.limit_in_bytes"
            } else {
                "memory.max"
            },
            &limit,
        )?;
        Ok(tree)
    }

    /// The pods cgroup, relative to a hierarchy's mount.
    pub fn kubepods(&self) -> String {
        self.named(&["kubepods"])
    }

    /// The cgroup of the pods of class `qos` (Guaranteed pods sit in `kubepods`).
    pub fn tier(&self, qos: &str) -> String {
        match qos {
            "Burstable" => self.named(&["kubepods", "burstable"]),
            "BestEffort" => self.named(&["kubepods", "besteffort"]),
            _ => self.kubepods(),
        }
    }

    fn named(&self, components: &[&str]) -> String {
        let all: Vec<&str> = self
            .root
            .split('/')
            .filter(|c| !c.is_empty())
            .chain(components.iter().copied())
            .collect();
        self.driver.path(&all)
    }

    fn mounts(&self) -> Vec<PathBuf> {
        let mut mounts = vec![self.memory_root.clone()];
        if let Some(unified) = &self.unified
            && *unified != self.memory_root
        {
            mounts.push(unified.clone());
        }
        mounts
    }

    /// Creates `relative` and its parents in each hierarchy; on cgroup v2 each level hands
    /// the memory and pids controllers down.
    fn make(&self, relative: &str) -> std::io::Result<()> {
        for mount in self.mounts() {
            let mut dir = mount.clone();
            for component in relative.split('/') {
                if !self.v1 && mount == self.memory_root {
                    let _ = std::fs::write(dir.join("cgroup.subtree_control"), "+memory +pids");
                }
                dir = dir.join(component);
                if !dir.exists() {
                    std::fs::create_dir(&dir).map_err(|e| {
                        std::io::Error::new(e.kind(), format!("creating {}: {e}", dir.display()))
                    })?;
                }
            }
        }
        Ok(())
    }

    /// The memory hierarchy's directory of `relative`.
    pub fn memory_dir(&self, relative: &str) -> PathBuf {
        self.memory_root.join(relative)
    }

    pub fn write(&self, relative: &str, file: &str, value: &str) -> std::io::Result<()> {
        let path = self.memory_dir(relative).join(file);
        std::fs::write(&path, value).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("writing {value:?} to {}: {e}", path.display()),
            )
        })
    }

    /// Lays out a pod's cgroup (created only when `with_cgroup`), listed in the pod list
    /// when `listed`; returns its index.
    pub fn pod(
        &mut self,
        name: &str,
        qos: &'static str,
        listed: bool,
        with_cgroup: bool,
    ) -> std::io::Result<usize> {
        let uid = format!(
            "{:08x}-0000-4000-8000-{:012x}",
            std::process::id(),
            self.pods.len() + 1
        );
        let pod = format!("pod{uid}");
        let relative = match qos {
            "Burstable" => self.named(&["kubepods", "burstable", &pod]),
            "BestEffort" => self.named(&["kubepods", "besteffort", &pod]),
            _ => self.named(&["kubepods", &pod]),
        };
        if with_cgroup {
            self.make(&relative)?;
        }
        self.pods.push(LaidPod {
            name: name.to_string(),
            uid,
            qos,
            relative,
            listed,
        });
        Ok(self.pods.len() - 1)
    }

    /// Makes `command` join pod `index`'s cgroups before it execs.
    pub fn join(&self, index: usize, command: &mut Command) {
        let files: Vec<PathBuf> = self
            .mounts()
            .iter()
            .map(|m| m.join(&self.pods[index].relative).join("cgroup.procs"))
            .collect();
        crate::util::join_before_exec(command, &files);
    }

    /// The listed pods as `kubectl get pods -o json` writes them (namespace "shop"; a
    /// Guaranteed pod asks for `guaranteed_mib`).
    pub fn pod_list(&self, guaranteed_mib: u64) -> String {
        let items: Vec<serde_json::Value> = self
            .pods
            .iter()
            .filter(|p| p.listed)
            .map(|p| {
                let memory = format!("{guaranteed_mib}Mi");
                let resources = match p.qos {
                    "Guaranteed" => serde_json::json!({
                        "requests": {"cpu": "100m", "memory": memory},
                        "limits": {"cpu": "100m", "memory": memory}}),
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
        serde_json::to_string_pretty(&list).unwrap_or_default()
    }

    /// The settings a kubelet (or an operator) writes to the pods' cgroups, file by file,
    /// for every cgroup of the tree: what an agent beside a kubelet must leave as it
    /// found it.
    pub fn settings(&self) -> Vec<(PathBuf, String)> {
        let files: &[&str] = if self.v1 {
            &[
                "memory.limit_in_bytes",
                "memory.soft_limit_in_bytes",
                "memory.swappiness",
                "memory.oom_control",
                "memory.use_hierarchy",
            ]
        } else {
            &[
                "memory.max",
                "memory.high",
                "memory.low",
                "memory.min",
                "memory.oom.group",
                "memory.swap.max",
                "cgroup.freeze",
            ]
        };
        let mut dirs = vec![self.kubepods()];
        dirs.extend(["Burstable", "BestEffort"].map(|t| self.tier(t)));
        dirs.extend(self.pods.iter().map(|p| p.relative.clone()));
        let mut settings = Vec::new();
        for dir in dirs {
            for file in files {
                let path = self.memory_dir(&dir).join(file);
                if let Ok(text) = std::fs::read_to_string(&path) {
                    // oom_control's counters move with the workload, not with a setting.
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

    /// The tree's first directory in each hierarchy, for removal.
    fn top_dirs(&self) -> Vec<PathBuf> {
        let kubepods = self.kubepods();
        let top = kubepods.split('/').next().unwrap_or_default();
        self.mounts()
            .into_iter()
            .map(|m| m.join(top))
            .filter(|_| !top.is_empty() && top != "kubepods" && top != "kubepods.slice")
            .collect()
    }
}

impl Drop for KubeletTree {
    fn drop(&mut self) {
        for dir in self.top_dirs() {
            if dir.exists()
                && let Err(e) = remove_cgroup_tree(&dir)
            {
                eprintln!("warning: could not remove {}: {e}", dir.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drivers_name_as_the_kubelet_does() {
        let parts = ["node-a", "kubepods", "besteffort", "pod0b5e-7d2f"];
        assert_eq!(
            Driver::Cgroupfs.path(&parts),
            "node-a/kubepods/besteffort/pod0b5e-7d2f"
        );
        assert_eq!(
            Driver::Systemd.path(&parts),
            "node_a.slice/node_a-kubepods.slice/node_a-kubepods-besteffort.slice/node_a-kubepods-besteffort-pod0b5e_7d2f.slice"
        );
    }
}
