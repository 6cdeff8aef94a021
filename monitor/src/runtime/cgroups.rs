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
//!
//! A value whose controller or file is absent on this kernel is not an error: it is
//! recorded once in [`CgroupTree::warnings`] and logged.
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::Signal;

use crate::observe::{
    CgroupLayout, CgroupReader, CgroupVersion, MemoryStats, ObserveError, OpenFiles,
};
use crate::policy::qos::{MIN_SHARES, QosTierConfigs, ResourceConfig, milli_cpu_to_shares};
use crate::policy::types::QosClass;

mod kill;
#[cfg(test)]
mod tests;

/// The pods root's name under `<root>` (kubelet: defaultNodeAllocatableCgroupName).
pub const PODS_CGROUP: &str = "kubepods";
/// Tier names: the lower-cased QoS class (kubelet: qos container manager Start).
pub const BURSTABLE_CGROUP: &str = "burstable";
pub const BEST_EFFORT_CGROUP: &str = "besteffort";
/// Pod cgroups are `pod<uid>` (kubelet: pod container manager GetPodContainerName).
pub const POD_CGROUP_PREFIX: &str = "pod";

const MOUNTINFO: &str = "/proc/self/mountinfo";
/// Distinct warnings kept; later ones only bump the last entry's count.
const MAX_WARNINGS: usize = 64;
/// Deepest cgroup nesting walked below a pod (a process may make its own children).
const MAX_DEPTH: usize = 16;
/// rmdir of a cgroup whose last task is still exiting fails with EBUSY for a moment.
const REMOVE_ATTEMPTS: u32 = 20;
const REMOVE_PAUSE: Duration = Duration::from_millis(10);

/// The controllers whose values this tree writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Controller {
    Memory,
    Cpu,
    Pids,
}

impl Controller {
    pub const ALL: [Controller; 3] = [Controller::Memory, Controller::Cpu, Controller::Pids];

    /// The kernel's name (a v1 mount option, a v2 `cgroup.controllers` word).
    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::Pids => "pids",
        }
    }
}

/// One mounted hierarchy the tree lives in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchy {
    pub mount: PathBuf,
    pub version: CgroupVersion,
    /// Controllers this tree writes values of here; empty for the v1 host's unified mirror.
    pub controllers: Vec<Controller>,
}

impl Hierarchy {
    fn has(&self, controller: Controller) -> bool {
        self.controllers.contains(&controller)
    }
}

/// A value that could not be set because this kernel lacks the controller or file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupWarning {
    /// The file (first occurrence) or, with no hierarchy for the controller, the cgroup.
    pub path: PathBuf,
    pub value: String,
    pub reason: String,
    /// How many writes hit the same file name for the same reason.
    pub count: u64,
}

impl fmt::Display for CgroupWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {:?} not set: {} ({} time(s))",
            self.path.display(),
            self.value,
            self.reason,
            self.count
        )
    }
}

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
    pub pod_uid: String,
    pub name: String,
    pub relative: String,
}

/// One value to write: the controller, the file and its content.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ValueWrite {
    controller: Controller,
    file: &'static str,
    value: String,
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
    pub fn from_mountinfo(
        layout: &CgroupLayout,
        root: &str,
        mountinfo: &str,
        controllers_of: impl Fn(&Path) -> String,
    ) -> Result<Self, CgroupError> {
        let components: Vec<&str> = root.split('/').filter(|c| !c.is_empty()).collect();
        for component in &components {
            validate_component("root", component)?;
        }
        let hierarchies = match layout.version {
            CgroupVersion::V2 => {
                let available = controllers_of(&layout.memory_root);
                let controllers = Controller::ALL
                    .into_iter()
                    .filter(|c| available.split_whitespace().any(|w| w == c.name()))
                    .collect();
                vec![Hierarchy {
                    mount: layout.memory_root.clone(),
                    version: CgroupVersion::V2,
                    controllers,
                }]
            }
            CgroupVersion::V1 => v1_hierarchies(layout, mountinfo),
        };
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

    /// Creates kubepods and the two tiers; sets the pods-root memory limit (node
    /// allocatable, `None` = unlimited) and cpu shares of the root per the kubelet.
    ///
    /// kubelet: node container manager createNodeAllocatableCgroups / getCgroupConfig
    /// (shares from the node's CPU, memory from allocatable) and qos container manager
    /// Start (BestEffort gets the minimum shares; Burstable waits for UpdateCgroups).
    pub fn ensure_qos_hierarchy(&self, pods_memory_limit: Option<i64>) -> Result<(), CgroupError> {
        let pods = self.pods_root_relative();
        self.ensure_dirs(&pods)?;
        if let Some(limit) = pods_memory_limit.filter(|l| *l <= 0) {
            return Err(CgroupError::InvalidLimit {
                path: self.memory_root.join(&pods),
                value: limit,
            });
        }
        let root_config = ResourceConfig {
            cpu_shares: Some(milli_cpu_to_shares(self.node_cpu_milli)),
            // Written even when unlimited: a bound set earlier must go when the node
            // stops enforcing allocatable.
            memory_limit: Some(pods_memory_limit.unwrap_or(-1)),
            ..ResourceConfig::default()
        };
        self.apply(&pods, &root_config)?;
        self.ensure_dirs(&self.tier_relative(QosClass::Burstable))?;
        let best_effort = self.tier_relative(QosClass::BestEffort);
        self.ensure_dirs(&best_effort)?;
        self.apply(
            &best_effort,
            &ResourceConfig {
                cpu_shares: Some(MIN_SHARES),
                ..ResourceConfig::default()
            },
        )
    }

    /// Writes the burstable/besteffort tier values (cpu shares, qos-reserved memory limits).
    ///
    /// A tier memory limit at or below zero is refused ([`CgroupError::InvalidLimit`]).
    /// When the kernel refuses a limit below the tier's usage (v1: EBUSY), the limit is
    /// set to the usage instead, to stop further growth (kubelet: qos container manager
    /// retrySetMemoryReserve). Both tiers are attempted; the first error is returned.
    pub fn update_qos_tiers(&self, tiers: &QosTierConfigs) -> Result<(), CgroupError> {
        let mut first_error = None;
        for (qos, config) in [
            (QosClass::Burstable, &tiers.burstable),
            (QosClass::BestEffort, &tiers.best_effort),
        ] {
            let relative = self.tier_relative(qos);
            let result = self.ensure_dirs(&relative).and_then(|()| {
                let others = ResourceConfig {
                    memory_limit: None,
                    ..*config
                };
                self.apply(&relative, &others)?;
                match config.memory_limit {
                    Some(limit) => self.set_tier_memory_limit(&relative, limit),
                    None => Ok(()),
                }
            });
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn set_tier_memory_limit(&self, relative: &str, limit: i64) -> Result<(), CgroupError> {
        if limit <= 0 {
            return Err(CgroupError::InvalidLimit {
                path: self.memory_root.join(relative),
                value: limit,
            });
        }
        let config = ResourceConfig {
            memory_limit: Some(limit),
            ..ResourceConfig::default()
        };
        match self.apply(relative, &config) {
            Err(CgroupError::Write { source, .. })
                if source.raw_os_error() == Some(libc::EBUSY) =>
            {
                let usage = self
                    .reader()
                    .memory_stats(relative)
                    .map(|m| i64::try_from(m.usage_bytes).unwrap_or(i64::MAX))
                    .unwrap_or(limit);
                let config = ResourceConfig {
                    memory_limit: Some(usage.max(limit)),
                    ..ResourceConfig::default()
                };
                self.apply(relative, &config)
            }
            other => other,
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
    pub fn pod_cgroup(&self, uid: &str, qos: QosClass) -> Option<PodCgroup> {
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
    pub fn kill_container_leftovers(
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

    pub fn remove_container(&self, container: &ContainerCgroup) -> Result<(), CgroupError> {
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

    /// A reader of the pod's memory cgroup alone (its root is the pod's directory).
    pub fn pod_memory_reader(&self, pod: &PodCgroup) -> CgroupReader {
        CgroupReader::new(
            self.version,
            self.memory_root.join(pod.relative.trim_start_matches('/')),
        )
    }

    /// The pod's working set alone: two reads of files kept open.
    pub fn pod_working_set(&self, pod: &PodCgroup) -> Result<u64, ObserveError> {
        self.reader().working_set_bytes(&pod.relative)
    }

    /// Closes the kept memory files no read used since the previous call (pods and
    /// containers that went): called after every pass over the pods.
    pub fn sweep_open_files(&self) {
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
    pub fn runtime_container_working_set(&self, pod: &PodCgroup, id: &str) -> Option<u64> {
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
    pub fn container_working_set(&self, pod: &PodCgroup, name: &str) -> Option<u64> {
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

    /// Creates `relative` (and its ancestors) in every hierarchy. On v2, the wanted
    /// controllers are enabled in each ancestor's `cgroup.subtree_control` first, so the
    /// new cgroup has their files (runc does the same when it creates a path).
    fn ensure_dirs(&self, relative: &str) -> Result<(), CgroupError> {
        for h in &self.hierarchies {
            let mut dir = h.mount.clone();
            for component in relative.split('/').filter(|c| !c.is_empty()) {
                if h.version == CgroupVersion::V2 && !h.controllers.is_empty() {
                    self.enable_controllers(h, &dir);
                }
                dir.push(component);
                match std::fs::create_dir(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(source) => return Err(CgroupError::Create { path: dir, source }),
                }
            }
        }
        Ok(())
    }

    fn enable_controllers(&self, h: &Hierarchy, dir: &Path) {
        let control = dir.join("cgroup.subtree_control");
        let enabled = std::fs::read_to_string(&control).unwrap_or_default();
        let available = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
        for controller in &h.controllers {
            let name = controller.name();
            if enabled.split_whitespace().any(|w| w == name) {
                continue;
            }
            let value = format!("+{name}");
            if !available.split_whitespace().any(|w| w == name) {
                self.warn(&control, &value, "controller not available here".into());
                continue;
            }
            // Fails with EBUSY when the cgroup has processes of its own (v2's
            // no-internal-processes rule): the children then lack the controller.
            if let Err(e) = write_file(&control, &value) {
                self.warn(&control, &value, e.to_string());
            }
        }
    }

    /// Writes a config's values. EINVAL is retried once after the rest: v1 checks a CFS
    /// period against the quota already in place, so the order between them matters
    /// (runc retries the same way).
    fn apply(&self, relative: &str, config: &ResourceConfig) -> Result<(), CgroupError> {
        let mut retry = Vec::new();
        for write in resource_writes(self.version, config) {
            match self.write_value(relative, &write) {
                Err(CgroupError::Write { source, .. })
                    if source.raw_os_error() == Some(libc::EINVAL) =>
                {
                    retry.push(write)
                }
                other => other?,
            }
        }
        for write in retry {
            self.write_value(relative, &write)?;
        }
        Ok(())
    }

    fn write_value(&self, relative: &str, write: &ValueWrite) -> Result<(), CgroupError> {
        let Some(h) = self.hierarchies.iter().find(|h| h.has(write.controller)) else {
            let reason = format!("no {} hierarchy is mounted", write.controller.name());
            self.warn(
                &PathBuf::from(relative).join(write.file),
                &write.value,
                reason,
            );
            return Ok(());
        };
        let path = h.mount.join(relative).join(write.file);
        match write_file(&path, &write.value) {
            Err(CgroupError::Write { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                self.warn(&path, &write.value, "the kernel has no such file".into());
                Ok(())
            }
            other => other,
        }
    }

    fn warn(&self, path: &Path, value: &str, reason: String) {
        let mut warnings = self
            .warnings
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let same = |w: &CgroupWarning| w.path.file_name() == path.file_name() && w.reason == reason;
        if let Some(existing) = warnings.iter_mut().find(|w| same(w)) {
            existing.count = existing.count.saturating_add(1);
            return;
        }
        tracing::warn!(path = %path.display(), value, %reason, "cgroup value not set");
        let warning = CgroupWarning {
            path: path.to_path_buf(),
            value: value.to_string(),
            reason,
            count: 1,
        };
        if warnings.len() < MAX_WARNINGS {
            warnings.push(warning);
        } else if let Some(last) = warnings.last_mut() {
            last.count = last.count.saturating_add(1);
        }
    }
}

/// The files and values for `config` (runc's conversions, which the kubelet relies on).
/// `None` and 0 leave a file alone (runc treats 0 as unset); a negative memory, quota or
/// pids value means unlimited.
fn resource_writes(version: CgroupVersion, config: &ResourceConfig) -> Vec<ValueWrite> {
    let mut writes = Vec::new();
    let mut push = |controller, file, value: String| {
        writes.push(ValueWrite {
            controller,
            file,
            value,
        })
    };
    let limit = |v: i64, unlimited: &str| {
        if v < 0 {
            unlimited.to_string()
        } else {
            v.to_string()
        }
    };
    let memory = config.memory_limit.filter(|v| *v != 0);
    let pids = config.pids_limit.filter(|v| *v != 0);
    let quota = config.cpu_quota.filter(|v| *v != 0);
    let period = config.cpu_period.filter(|v| *v != 0);
    match version {
        CgroupVersion::V1 => {
            if let Some(v) = memory {
                push(Controller::Memory, "memory.limit_in_bytes", limit(v, "-1"));
            }
            if let Some(shares) = config.cpu_shares.filter(|s| *s != 0) {
                push(Controller::Cpu, "cpu.shares", shares.to_string());
            }
            if let Some(period) = period {
                push(Controller::Cpu, "cpu.cfs_period_us", period.to_string());
            }
            if let Some(quota) = quota {
                push(Controller::Cpu, "cpu.cfs_quota_us", limit(quota, "-1"));
            }
            if let Some(v) = pids {
                push(Controller::Pids, "pids.max", limit(v, "max"));
            }
        }
        CgroupVersion::V2 => {
            if let Some(v) = memory {
                push(Controller::Memory, "memory.max", limit(v, "max"));
            }
            if let Some(weight) = config.cpu_weight().filter(|w| *w != 0) {
                push(Controller::Cpu, "cpu.weight", weight.to_string());
            }
            // cpu.max is "$QUOTA $PERIOD" with "max" for no quota; the period may be left out.
            if quota.is_some() || period.is_some() {
                let mut value = match quota {
                    Some(q) if q > 0 => q.to_string(),
                    _ => "max".to_string(),
                };
                if let Some(period) = period {
                    value.push_str(&format!(" {period}"));
                }
                push(Controller::Cpu, "cpu.max", value);
            }
            if let Some(v) = pids {
                push(Controller::Pids, "pids.max", limit(v, "max"));
            }
        }
    }
    writes
}

/// The v1 hierarchies carrying memory (from the layout), cpu and pids (from mountinfo),
/// one entry per mount (co-mounted controllers share it), then the unified mirror.
fn v1_hierarchies(layout: &CgroupLayout, mountinfo: &str) -> Vec<Hierarchy> {
    let mut hierarchies = vec![Hierarchy {
        mount: layout.memory_root.clone(),
        version: CgroupVersion::V1,
        controllers: vec![Controller::Memory],
    }];
    for (mount, options) in v1_mounts(mountinfo) {
        for controller in [Controller::Cpu, Controller::Pids] {
            if !options.iter().any(|o| o == controller.name()) {
                continue;
            }
            if hierarchies.iter().any(|h| h.has(controller)) {
                continue;
            }
            match hierarchies.iter_mut().find(|h| h.mount == mount) {
                Some(h) => h.controllers.push(controller),
                None => hierarchies.push(Hierarchy {
                    mount: mount.clone(),
                    version: CgroupVersion::V1,
                    controllers: vec![controller],
                }),
            }
        }
    }
    if let Some(unified) = &layout.unified_root {
        hierarchies.push(Hierarchy {
            mount: unified.clone(),
            version: CgroupVersion::V2,
            controllers: Vec::new(),
        });
    }
    hierarchies
}

/// Mount points and super options of the cgroup v1 mounts in mountinfo text.
fn v1_mounts(mountinfo: &str) -> Vec<(PathBuf, Vec<String>)> {
    crate::observe::cgroup::cgroup_mounts(mountinfo)
        .into_iter()
        .filter(|m| !m.v2)
        .map(|m| (m.mount_point, m.options))
        .collect()
}

fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}/{child}")
    }
}

/// One path component of our own: never empty, ".", "..", nor containing '/' or NUL.
fn validate_component(field: &'static str, value: &str) -> Result<(), CgroupError> {
    let reason = if value.is_empty() {
        Some("empty")
    } else if value == "." || value == ".." {
        Some("a relative directory")
    } else if value.contains(['/', '\0']) {
        Some("contains '/' or NUL")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(CgroupError::InvalidName {
            field,
            value: value.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Pod UIDs are UUIDs (API pods) or hex hashes (static pods): letters, digits, '-', '_'.
fn validate_uid(uid: &str) -> Result<(), CgroupError> {
    validate_component("pod uid", uid)?;
    let ok = uid.len() <= 128
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(CgroupError::InvalidName {
            field: "pod uid",
            value: uid.to_string(),
            reason: "not 1-128 letters, digits, '-' or '_'",
        })
    }
}

/// Container names are DNS-1123 labels (the API's rule), which also keeps them apart
/// from every cgroup control file (those all contain '.').
fn validate_container_name(name: &str) -> Result<(), CgroupError> {
    validate_component("container name", name)?;
    let bytes = name.as_bytes();
    let edge_ok = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let ok = name.len() <= 63
        && edge_ok(bytes.first())
        && edge_ok(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    if ok {
        Ok(())
    } else {
        Err(CgroupError::InvalidName {
            field: "container name",
            value: name.to_string(),
            reason: "not a DNS-1123 label (1-63 of a-z, 0-9, '-', alphanumeric at both ends)",
        })
    }
}

fn write_file(path: &Path, value: &str) -> Result<(), CgroupError> {
    // No O_CREAT: a missing control file must read as "not supported", not be created.
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut file| file.write_all(value.as_bytes()))
        .map_err(|source| CgroupError::Write {
            path: path.to_path_buf(),
            value: value.to_string(),
            source,
        })
}

/// Adds the pids in `dir`'s cgroup.procs and its descendants'. A missing directory or
/// file adds nothing; pid 0 (a task of another pid namespace) is left out, since
/// signalling 0 would hit our own process group.
fn collect_pids(dir: &Path, depth: usize, pids: &mut BTreeSet<i32>) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(
            text.lines()
                .filter_map(|l| l.trim().parse::<i32>().ok())
                .filter(|p| *p > 0),
        );
    }
    if depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_pids(&entry.path(), depth + 1, pids);
        }
    }
}

/// Removes a cgroup directory and its child cgroups, deepest first. cgroupfs lets rmdir
/// take a directory with its control files; EBUSY (a task still exiting) is retried.
fn remove_cgroup(dir: &Path, depth: usize) -> Result<(), CgroupError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(CgroupError::Read {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    if depth < MAX_DEPTH {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup(&entry.path(), depth + 1)?;
            }
        }
    }
    let mut attempt = 0;
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && attempt < REMOVE_ATTEMPTS => {
                attempt += 1;
                std::thread::sleep(REMOVE_PAUSE);
            }
            Err(source) => {
                return Err(CgroupError::Remove {
                    path: dir.to_path_buf(),
                    source,
                });
            }
        }
    }
}
