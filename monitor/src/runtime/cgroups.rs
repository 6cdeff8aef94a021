//! The QoS cgroup tree the agent runs its pods in, on the host's cgroupfs (v1 or v2).
//!
//! Layout, with the kubelet's cgroupfs-driver names (kubelet: pkg/kubelet/cm
//! cgroup_manager_linux.go, qos_container_manager_linux.go, pod_container_manager_linux.go):
//!
//! ```text
//! <mount>/<root>/kubepods/                      pods root: node allocatable; Guaranteed pods
//! <mount>/<root>/kubepods/burstable/            Burstable tier
//! <mount>/<root>/kubepods/besteffort/           BestEffort tier
//! <mount>/<root>/kubepods/[tier/]pod<uid>/      one pod
//! <mount>/<root>/kubepods/[tier/]pod<uid>/<container-name>/
//! ```
//!
//! Container cgroups are named after the container, not a runtime's container id: the
//! agent runs processes itself and has no ids (the kubelet's runtime names them by id).
//!
//! cgroup v1: the same path exists in every hierarchy a value is written in (memory, cpu,
//! pids) and in the cgroup2 "unified" mirror when one is mounted: it has no controllers but
//! groups tasks, so eBPF cgroup ids, per-cgroup PSI and `cgroup.kill` name the pod.
//! Deviation: the kubelet creates its cgroups in every mounted v1 subsystem; this tree
//! only uses the ones it sets values in.
//!
//! cgroup v2: one tree; `+memory +cpu +pids` are enabled in `cgroup.subtree_control` of
//! each ancestor (never removed), values go to memory.max, cpu.weight, cpu.max, pids.max
//! (the runc conversions the kubelet relies on), and SIGKILL uses `cgroup.kill` (5.14+).
//! With the `MemoryQoS` gate on, memory.high / memory.min / memory.low too
//! ([`crate::policy::memory_qos`]).
//!
//! A value whose controller or file is absent on this kernel is not an error: it is
//! recorded once in [`CgroupTree::warnings`] and logged.
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::sys::signal::Signal;

use crate::observe::{
    CgroupLayout, CgroupReader, CgroupVersion, MemoryStats, ObserveError, OpenFiles,
};
use crate::policy::qos::ResourceConfig;
use crate::policy::types::QosClass;

mod files;
mod hierarchy;
mod kill;
mod names;
#[cfg(test)]
mod tests;
mod tiers;
mod values;

use files::{collect_pids, remove_cgroup};
use hierarchy::hierarchies;
pub use hierarchy::{Controller, Hierarchy};
use names::{join, validate_component, validate_container_name, validate_uid};
pub(crate) use values::CgroupWarning;
#[cfg(test)]
use values::{ValueWrite, resource_writes};

/// The pods root's name under `<root>` (kubelet: defaultNodeAllocatableCgroupName).
pub(crate) const PODS_CGROUP: &str = "kubepods";
/// Tier names: the lower-cased QoS class (kubelet: qos container manager Start).
pub(crate) const BURSTABLE_CGROUP: &str = "burstable";
pub(crate) const BEST_EFFORT_CGROUP: &str = "besteffort";
/// Pod cgroups are `pod<uid>` (kubelet: pod container manager GetPodContainerName).
pub(crate) const POD_CGROUP_PREFIX: &str = "pod";

const MOUNTINFO: &str = "/proc/self/mountinfo";

/// What went wrong with the cgroup tree. Every variant names the file or value.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("creating cgroup {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("writing {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        source: io::Error,
    },
    #[error("removing cgroup {path}: {source}")]
    Remove { path: PathBuf, source: io::Error },
    #[error("cgroup {path} still has processes {pids:?}")]
    NotEmpty { path: PathBuf, pids: Vec<i32> },
    #[error("{field} {value:?} cannot name a cgroup: {reason}")]
    InvalidName {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
    /// A tier limit at or below zero: the requests over-commit allocatable (qos_tier_configs).
    #[error("{path}: memory limit {value} is not positive; refusing to write it")]
    InvalidLimit { path: PathBuf, value: i64 },
    #[error("sending {signal} to pid {pid} of cgroup {cgroup}: {source}")]
    Signal {
        cgroup: String,
        pid: i32,
        signal: Signal,
        source: Errno,
    },
}

/// A pod's cgroup (the same relative path in every hierarchy).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodCgroup {
    pub uid: String,
    pub qos: QosClass,
    /// Relative to each hierarchy's mount, e.g. `monitor/kubepods/burstable/pod1234`.
    pub relative: String,
}

/// A container's cgroup inside its pod's.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContainerCgroup {
    pub(crate) pod_uid: String,
    pub(crate) name: String,
    pub relative: String,
}

/// The QoS cgroup hierarchy under `<root>` in every hierarchy. Holds no cgroup state of
/// its own: every call reads or writes the kernel's files at that moment, so a restarted
/// agent adopts what exists ([`CgroupTree::existing_pods`]).
#[derive(Debug)]
pub struct CgroupTree {
    version: CgroupVersion,
    /// `<root>` without leading or trailing '/' ("" is the mount itself).
    root: String,
    memory_root: PathBuf,
    /// The memory hierarchy first.
    hierarchies: Vec<Hierarchy>,
    /// CPU of the node in millicores, for the pods root's shares.
    node_cpu_milli: i64,
    warnings: Mutex<Vec<CgroupWarning>>,
    /// The memory files of pods and containers, kept open between synchronizes.
    open: Arc<OpenFiles>,
}

impl CgroupTree {
    /// Detects the hierarchies (from the given CgroupLayout + mountinfo) for root `root`.
    pub fn new(layout: &CgroupLayout, root: &str) -> Result<Self, CgroupError> {
        let mountinfo = std::fs::read_to_string(MOUNTINFO).map_err(|source| CgroupError::Read {
            path: PathBuf::from(MOUNTINFO),
            source,
        })?;
        Self::from_mountinfo(layout, root, &mountinfo, |dir| {
            std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default()
        })
    }

    /// As [`CgroupTree::new`] with mountinfo text given; `controllers_of` reads a v2
    /// directory's `cgroup.controllers` (injected for tests).
    pub(crate) fn from_mountinfo(
        layout: &CgroupLayout,
        root: &str,
        mountinfo: &str,
        controllers_of: impl Fn(&Path) -> String,
    ) -> Result<Self, CgroupError> {
        let components: Vec<&str> = root.split('/').filter(|c| !c.is_empty()).collect();
        for component in &components {
            validate_component("root", component)?;
        }
        let hierarchies = hierarchies(layout, mountinfo, controllers_of);
        let node_cpu_milli = std::thread::available_parallelism().map_or(1000, |n| {
            i64::try_from(n.get()).unwrap_or(1).saturating_mul(1000)
        });
        Ok(CgroupTree {
            version: layout.version,
            root: components.join("/"),
            memory_root: layout.memory_root.clone(),
            hierarchies,
            node_cpu_milli,
            warnings: Mutex::new(Vec::new()),
            open: Arc::new(OpenFiles::new()),
        })
    }

    /// Sets the node CPU (millicores) the pods root's shares follow; by default the CPUs
    /// this process may run on (the kubelet uses the node's allocatable CPU).
    pub fn with_node_cpu_milli(mut self, milli: i64) -> Self {
        self.node_cpu_milli = milli;
        self
    }

    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    pub fn hierarchies(&self) -> &[Hierarchy] {
        &self.hierarchies
    }

    /// The directory of `relative` in the hierarchy carrying `controller`, if mounted.
    pub fn dir(&self, controller: Controller, relative: &str) -> Option<PathBuf> {
        self.hierarchies
            .iter()
            .find(|h| h.has(controller))
            .map(|h| h.mount.join(relative))
    }

    /// Values that could not be set on this kernel so far (deduplicated by file name).
    pub fn warnings(&self) -> Vec<CgroupWarning> {
        self.warnings
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The pods root relative to the memory root (what ObserverConfig.pods_cgroup takes).
    pub fn pods_root_relative(&self) -> String {
        join(&self.root, PODS_CGROUP)
    }

    /// The tier a pod of class `qos` lives in; Guaranteed pods sit in the pods root.
    pub fn tier_relative(&self, qos: QosClass) -> String {
        let pods = self.pods_root_relative();
        match qos {
            QosClass::Guaranteed => pods,
            QosClass::Burstable => join(&pods, BURSTABLE_CGROUP),
            QosClass::BestEffort => join(&pods, BEST_EFFORT_CGROUP),
        }
    }

    pub fn create_pod(
        &self,
        uid: &str,
        qos: QosClass,
        config: &ResourceConfig,
    ) -> Result<PodCgroup, CgroupError> {
        validate_uid(uid)?;
        let relative = join(
            &self.tier_relative(qos),
            &format!("{POD_CGROUP_PREFIX}{uid}"),
        );
        self.ensure_dirs(&relative)?;
        self.apply(&relative, config)?;
        Ok(PodCgroup {
            uid: uid.to_string(),
            qos,
            relative,
        })
    }

    /// Where the cgroup of pod `uid` of class `qos` is (or would be): nothing is created
    /// or read. An eviction looks there for processes a record no longer names. `None`
    /// for a uid that cannot name a pod cgroup.
    pub(crate) fn pod_cgroup(&self, uid: &str, qos: QosClass) -> Option<PodCgroup> {
        validate_uid(uid).ok()?;
        Some(PodCgroup {
            uid: uid.to_string(),
            qos,
            relative: join(
                &self.tier_relative(qos),
                &format!("{POD_CGROUP_PREFIX}{uid}"),
            ),
        })
    }

    pub fn create_container(
        &self,
        pod: &PodCgroup,
        name: &str,
        config: &ResourceConfig,
    ) -> Result<ContainerCgroup, CgroupError> {
        validate_container_name(name)?;
        let relative = join(&pod.relative, name);
        self.ensure_dirs(&relative)?;
        self.apply(&relative, config)?;
        Ok(ContainerCgroup {
            pod_uid: pod.uid.clone(),
            name: name.to_string(),
            relative,
        })
    }

    /// Files a process writes "0" to (before exec) to join the container in every hierarchy.
    pub fn join_files(&self, container: &ContainerCgroup) -> Vec<PathBuf> {
        self.hierarchies
            .iter()
            .map(|h| h.mount.join(&container.relative).join("cgroup.procs"))
            .collect()
    }

    /// Every process in the pod's cgroups (all hierarchies, recursive), deduplicated.
    pub fn pids(&self, pod: &PodCgroup) -> Vec<i32> {
        let mut pids = BTreeSet::new();
        for h in &self.hierarchies {
            collect_pids(&h.mount.join(&pod.relative), 0, &mut pids);
        }
        pids.into_iter().collect()
    }

    /// Sends `signal` to every process of the pod and returns how many distinct processes
    /// were signalled: SIGKILL through `cgroup.kill` where the kernel has it (5.14+; the
    /// unified mirror on a v1 host has it too), else each process through a pidfd and only
    /// while the cgroup still lists it, so a reused pid is never hit, repeated while new
    /// processes appear. The strategies and their order are in [`kill`].
    pub fn signal(&self, pod: &PodCgroup, signal: Signal) -> Result<usize, CgroupError> {
        self.signal_subtree(&pod.relative, signal)
    }

    /// SIGKILLs whatever is left in a container's cgroup once its main process has
    /// exited (background children it started, which would otherwise pile up across
    /// restarts), the same way as a pod's kill. Returns how many were killed.
    pub(crate) fn kill_container_leftovers(
        &self,
        pod: &PodCgroup,
        name: &str,
    ) -> Result<usize, CgroupError> {
        validate_container_name(name)?;
        self.signal_subtree(&join(&pod.relative, name), Signal::SIGKILL)
    }

    fn pids_at(&self, relative: &str) -> Vec<i32> {
        let mut pids = BTreeSet::new();
        for h in &self.hierarchies {
            collect_pids(&h.mount.join(relative), 0, &mut pids);
        }
        pids.into_iter().collect()
    }

    pub fn is_empty(&self, pod: &PodCgroup) -> bool {
        self.pids(pod).is_empty()
    }

    /// Removes the pod's container cgroups and the pod cgroup in every hierarchy (must be empty).
    pub fn remove_pod(&self, pod: &PodCgroup) -> Result<(), CgroupError> {
        self.remove_relative(&pod.relative)
    }

    #[cfg(test)]
    pub(crate) fn remove_container(&self, container: &ContainerCgroup) -> Result<(), CgroupError> {
        self.remove_relative(&container.relative)
    }

    fn remove_relative(&self, relative: &str) -> Result<(), CgroupError> {
        let mut pids = BTreeSet::new();
        for h in &self.hierarchies {
            collect_pids(&h.mount.join(relative), 0, &mut pids);
        }
        if !pids.is_empty() {
            return Err(CgroupError::NotEmpty {
                path: self.memory_root.join(relative),
                pids: pids.into_iter().collect(),
            });
        }
        for h in &self.hierarchies {
            remove_cgroup(&h.mount.join(relative), 0)?;
        }
        Ok(())
    }

    /// Memory of one pod (CgroupReader on the memory hierarchy).
    pub fn pod_memory(&self, pod: &PodCgroup) -> Result<MemoryStats, ObserveError> {
        self.reader().memory_stats(&pod.relative)
    }

    /// The pod's directory in the memory hierarchy.
    pub(crate) fn pod_memory_dir(&self, pod: &PodCgroup) -> PathBuf {
        self.memory_root.join(pod.relative.trim_start_matches('/'))
    }

    /// A reader of the pod's memory cgroup alone (its root is the pod's directory).
    pub(crate) fn pod_memory_reader(&self, pod: &PodCgroup) -> CgroupReader {
        CgroupReader::new(self.version, self.pod_memory_dir(pod))
    }

    /// The pod's working set alone: two reads of files kept open.
    pub fn pod_working_set(&self, pod: &PodCgroup) -> Result<u64, ObserveError> {
        self.reader().working_set_bytes(&pod.relative)
    }

    /// Closes the kept memory files no read used since the previous call (pods and
    /// containers that went): called after every pass over the pods.
    pub(crate) fn sweep_open_files(&self) {
        self.open.sweep();
    }

    /// The pod's `cgroup.kill` in a cgroup v2 hierarchy (the unified mirror on a v1 host),
    /// when the kernel has it (5.14+).
    pub fn kill_file(&self, pod: &PodCgroup) -> Option<PathBuf> {
        self.hierarchies
            .iter()
            .filter(|h| h.version == CgroupVersion::V2)
            .map(|h| h.mount.join(&pod.relative).join("cgroup.kill"))
            .find(|path| path.exists())
    }

    /// The pod's task count (threads included, which is what pid_max and the pid.available
    /// signal count): one read of `pids.current` in the hierarchy that has the pids
    /// controller, or, without one, a walk of the pod's `cgroup.procs` files.
    pub fn task_count(&self, pod: &PodCgroup) -> u64 {
        let pids_current = self
            .hierarchies
            .iter()
            .filter(|h| h.has(Controller::Pids))
            .find_map(|h| {
                let text =
                    std::fs::read_to_string(h.mount.join(&pod.relative).join("pids.current"))
                        .ok()?;
                text.trim().parse::<u64>().ok()
            });
        pids_current.unwrap_or_else(|| self.pids(pod).len() as u64)
    }

    /// Working set of a container runtime's container: its cgroup is named by the
    /// container's id (64 hex digits) under the pod's.
    pub(crate) fn runtime_container_working_set(&self, pod: &PodCgroup, id: &str) -> Option<u64> {
        let valid = !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit());
        if !valid {
            return None;
        }
        self.reader()
            .working_set_bytes(&join(&pod.relative, id))
            .ok()
    }

    /// Memory working set of one container, from its own memory cgroup only (two small
    /// reads). `None` when the container has no cgroup to read (not running) or its name
    /// could not be one: no stats for it, as the kubelet has none for such a container.
    pub(crate) fn container_working_set(&self, pod: &PodCgroup, name: &str) -> Option<u64> {
        validate_container_name(name).ok()?;
        self.reader()
            .working_set_bytes(&join(&pod.relative, name))
            .ok()
    }

    fn reader(&self) -> CgroupReader {
        CgroupReader::new(self.version, self.memory_root.clone()).keeping_open(self.open.clone())
    }

    /// Pod cgroups that exist now in any hierarchy (for adoption after an agent restart
    /// and orphan cleanup), ordered by path. Directories not named `pod<valid uid>` are
    /// not pods and are left out.
    pub fn existing_pods(&self) -> Vec<PodCgroup> {
        let mut found = BTreeMap::new();
        for qos in [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ] {
            let tier = self.tier_relative(qos);
            for h in &self.hierarchies {
                let Ok(entries) = std::fs::read_dir(h.mount.join(&tier)) else {
                    continue;
                };
                for entry in entries.flatten() {
                    if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                        continue;
                    }
                    let name = entry.file_name().to_string_lossy().into_owned();
                    let Some(uid) = name.strip_prefix(POD_CGROUP_PREFIX) else {
                        continue;
                    };
                    if validate_uid(uid).is_err() {
                        continue;
                    }
                    let relative = join(&tier, &name);
                    found.entry(relative.clone()).or_insert(PodCgroup {
                        uid: uid.to_string(),
                        qos,
                        relative,
                    });
                }
            }
        }
        found.into_values().collect()
    }

    /// Removes the whole tree (tests, uninstall): kills nothing; fails if not empty. The
    /// components of `<root>` go too, each only if nothing else lives in it.
    pub fn remove_all(&self) -> Result<(), CgroupError> {
        for pod in self.existing_pods() {
            self.remove_pod(&pod)?;
        }
        self.remove_relative(&self.pods_root_relative())?;
        let components: Vec<&str> = self.root.split('/').filter(|c| !c.is_empty()).collect();
        for depth in (1..=components.len()).rev() {
            let relative = components[..depth].join("/");
            for h in &self.hierarchies {
                let dir = h.mount.join(&relative);
                match std::fs::remove_dir(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    // Shared with other cgroups or tasks: not ours to remove.
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::ENOTEMPTY | libc::EBUSY | libc::EEXIST)
                        ) => {}
                    Err(source) => return Err(CgroupError::Remove { path: dir, source }),
                }
            }
        }
        Ok(())
    }
}
