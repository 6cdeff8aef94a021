//! Fresh observations of the node: memory (cgroupfs, /proc/meminfo), filesystems
//! (statvfs), pids (sysinfo, pid_max) and PSI. Nothing here caches values: every call
//! reads the kernel's files at that moment, which is what keeps decisions off stale stats
//! (kubernetes#51745). Files read at every synchronize may stay open ([`OpenFiles`]); each
//! read still asks the kernel anew.
use std::path::PathBuf;
use std::sync::Arc;

pub(crate) mod cgroup;
mod counter;
mod error;
pub mod fs;
pub(crate) mod open_files;
pub mod parse;

pub use cgroup::{CgroupLayout, CgroupReader, CgroupVersion, MemoryEvents, MemoryStats};
pub(crate) use counter::{MemoryCounter, Toward};
pub(crate) use error::ObserveError;
pub(crate) use fs::{BoundedStatvfs, FsStats};
pub(crate) use open_files::OpenFiles;
pub(crate) use parse::Psi;

/// Where to look.
#[derive(Clone, Debug)]
pub struct ObserverConfig {
    /// The cgroup holding every pod (relative to the memory root), whose usage is the
    /// allocatableMemory.available signal. `None`: no such signal.
    pub pods_cgroup: Option<String>,
    /// Memory the pods may use when the pods cgroup has no limit (node allocatable).
    pub pods_capacity_bytes: Option<u64>,
    /// A path on the node filesystem (kubelet root dir, logs).
    pub nodefs: PathBuf,
    /// A path on the image filesystem, when the runtime keeps images elsewhere.
    pub imagefs: Option<PathBuf>,
    /// procfs mount point (injectable for tests).
    pub proc_root: PathBuf,
    /// Read the node's I/O and the pods cgroup's pressure files too, for the PSI contention
    /// conditions (the kubelet's PSINodeCondition gate).
    pub contention: bool,
    /// The cgroup2 mount, where the pods cgroup's pressure files are (on a hybrid host the
    /// memory controller is on v1, yet cgroup2 still tracks stalls per cgroup).
    pub pressure_root: Option<PathBuf>,
    /// The kubelet's HugepageAwareEviction gate: memory.available leaves out the memory
    /// held as hugepages (see [`NodeMemory::hugepages_bytes`]).
    pub hugepage_aware: bool,
}

impl Default for ObserverConfig {
    fn default() -> Self {
        ObserverConfig {
            pods_cgroup: None,
            pods_capacity_bytes: None,
            nodefs: PathBuf::from("/"),
            imagefs: None,
            proc_root: PathBuf::from("/proc"),
            contention: false,
            pressure_root: None,
            hugepage_aware: true,
        }
    }
}

/// Node memory as the kubelet sees it: capacity from MemTotal, working set from the root
/// cgroup (v1) or /proc/meminfo (v2, whose root cgroup has no memory.current).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NodeMemory {
    pub capacity_bytes: u64,
    pub(crate) usage_bytes: u64,
    pub(crate) inactive_file_bytes: u64,
    pub(crate) working_set_bytes: u64,
    /// Memory set aside as hugepages, every size (meminfo's `Hugetlb`): regular pods
    /// cannot use it, and node allocatable leaves it out.
    pub(crate) hugepages_bytes: u64,
    /// The hugepages taken out of memory.available: those the working set does not hold,
    /// when the HugepageAwareEviction gate is on; otherwise 0.
    pub(crate) hugepages_left_out_bytes: u64,
    /// capacity − working set − the hugepages left out: the memory.available signal.
    pub available_bytes: u64,
}

impl NodeMemory {
    /// The capacity memory.available is measured against (thresholds in percent, the
    /// notifiers' levels): what available plus working set add up to, i.e. the capacity
    /// less the hugepages left out (the kubelet derives it from its adjusted Summary the
    /// same way).
    pub(crate) fn signal_capacity_bytes(&self) -> u64 {
        self.capacity_bytes
            .saturating_sub(self.hugepages_left_out_bytes)
    }
}

/// The pods cgroup: the allocatableMemory.available signal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AllocatableMemory {
    pub capacity_bytes: u64,
    pub stats: MemoryStats,
    pub available_bytes: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PidStats {
    /// kernel.pid_max.
    pub(crate) max: u64,
    /// Tasks currently alive (sysinfo's procs, as the kubelet's rlimit stats).
    pub current: u64,
}

/// One fresh look at the node.
#[derive(Clone, Debug, serde::Serialize)]
pub struct NodeObservation {
    /// When it was taken ([`crate::clock::monotonic_ns`]).
    pub(crate) taken_at_ns: u64,
    pub memory: NodeMemory,
    pub allocatable: Option<AllocatableMemory>,
    /// `None` when its statvfs failed or hung (see `failed`).
    pub nodefs: Option<FsStats>,
    /// `None` without an image filesystem, or when its statvfs failed or hung.
    pub(crate) imagefs: Option<FsStats>,
    /// Whether an image filesystem of its own is configured (read or not).
    pub(crate) dedicated_imagefs: bool,
    /// `None` when pid_max or the task count could not be read.
    pub pids: Option<PidStats>,
    /// Stall information (PSI), where the kernel has it.
    #[serde(skip)]
    pub(crate) pressure: NodePressure,
    /// The parts left out of this observation and why: their signals are off until they
    /// read again, and every other signal keeps acting.
    pub failed: Vec<String>,
}

/// The pressure (PSI) files of the node and of the pods cgroup; each `None` when the
/// kernel has no such file or it did not parse. The I/O and pods files are read only when
/// the PSI contention conditions are on ([`ObserverConfig::contention`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct NodePressure {
    /// `/proc/pressure/memory`.
    pub(crate) memory: Option<Psi>,
    /// `/proc/pressure/io`.
    pub(crate) io: Option<Psi>,
    /// The pods cgroup's `memory.pressure` (cgroup v2).
    pub(crate) pods_memory: Option<Psi>,
    /// The pods cgroup's `io.pressure` (cgroup v2).
    pub(crate) pods_io: Option<Psi>,
}

/// A part of the observation that may be left out: its value, or `None` with the reason
/// added to `failed`.
fn kept<T>(failed: &mut Vec<String>, what: &str, result: Result<T, ObserveError>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(err) => {
            failed.push(format!("{what}: {err}"));
            None
        }
    }
}

/// How long a filesystem's statvfs may take before it counts as hung.
pub(crate) const STATVFS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Takes [`NodeObservation`]s.
#[derive(Clone, Debug)]
pub struct Observer {
    reader: CgroupReader,
    config: ObserverConfig,
    statvfs: BoundedStatvfs,
    /// The node's own files (meminfo, the root and pods cgroups, pid counts, PSI), read
    /// at every synchronize: kept open, each read still generated afresh.
    open: Arc<OpenFiles>,
}

/// The node-level files an observation reads: a dozen, whatever the pod count.
const NODE_FILES: usize = 16;

impl Observer {
    pub fn new(reader: CgroupReader, config: ObserverConfig) -> Self {
        let open = Arc::new(OpenFiles::with_budget(NODE_FILES));
        Observer {
            reader: reader.keeping_open(open.clone()),
            config,
            statvfs: BoundedStatvfs::new(STATVFS_TIMEOUT),
            open,
        }
    }

    fn read(&self, path: &std::path::Path) -> Result<String, ObserveError> {
        self.open.read(path)
    }

    /// The node's memory counter, read as [`Observer::node_memory`] reads it (its own
    /// descriptors: the caller reads it between synchronizes, on another thread).
    pub(crate) fn node_counter(&self) -> MemoryCounter {
        MemoryCounter::node(
            self.reader.version(),
            self.reader.root(),
            &self.config.proc_root,
        )
    }

    /// Reads everything now. Memory is what every decision that protects the node from
    /// the OOM killer needs: a failure there fails the observation, naming the file. The
    /// filesystems and pid counts are read apart: one that fails or hangs (statvfs waits
    /// at most [`STATVFS_TIMEOUT`]) is left out and named in `failed`, and the rest of the
    /// observation, memory first, stands. PSI is optional.
    pub fn observe(&self) -> Result<NodeObservation, ObserveError> {
        let taken_at_ns = crate::clock::monotonic_ns();
        // The filesystems are asked first and answer while memory is read.
        // (The same path twice is asked once at a time: a second ask while the first is
        // under way would count as hung.)
        let nodefs = self.statvfs.start(&self.config.nodefs);
        let imagefs_path = self.config.imagefs.as_deref();
        let imagefs = imagefs_path
            .filter(|path| *path != self.config.nodefs)
            .map(|path| self.statvfs.start(path));
        let memory = self.node_memory()?;
        let allocatable = match &self.config.pods_cgroup {
            Some(cgroup) => Some(self.allocatable(cgroup, memory.capacity_bytes)?),
            None => None,
        };
        let mut failed = Vec::new();
        let pids = self.pids();
        let pressure = self.pressure();
        let nodefs = kept(&mut failed, "nodefs", nodefs.wait());
        let imagefs = match (imagefs_path, imagefs) {
            (Some(_), Some(pending)) => kept(&mut failed, "imagefs", pending.wait()),
            (Some(path), None) => kept(&mut failed, "imagefs", self.statvfs.statvfs(path)),
            (None, _) => None,
        };
        let pids = kept(&mut failed, "pids", pids);
        Ok(NodeObservation {
            taken_at_ns,
            memory,
            allocatable,
            nodefs,
            imagefs,
            dedicated_imagefs: self.config.imagefs.is_some(),
            pids,
            pressure,
            failed,
        })
    }

    /// The pressure files: the node's memory always, the rest for the contention
    /// conditions. A file that is missing or does not parse is `None`.
    pub(crate) fn pressure(&self) -> NodePressure {
        let psi = |path: PathBuf| self.read(&path).ok().and_then(|t| parse::psi(&t).ok());
        let proc = &self.config.proc_root;
        let mut pressure = NodePressure {
            memory: psi(proc.join("pressure/memory")),
            ..NodePressure::default()
        };
        if self.config.contention {
            pressure.io = psi(proc.join("pressure/io"));
            if let (Some(pods), Some(root)) = (&self.config.pods_cgroup, &self.config.pressure_root)
            {
                let dir = root.join(pods.trim_start_matches('/'));
                pressure.pods_memory = psi(dir.join("memory.pressure"));
                pressure.pods_io = psi(dir.join("io.pressure"));
            }
        }
        pressure
    }

    pub(crate) fn node_memory(&self) -> Result<NodeMemory, ObserveError> {
        let path = self.config.proc_root.join("meminfo");
        // The keys are picked from the text as it is read: no map of all fifty.
        let [total, free, inactive, hugetlb, huge_total, huge_size] =
            self.open.read_with(&path, |text| {
                [
                    "MemTotal",
                    "MemFree",
                    "Inactive(file)",
                    "Hugetlb",
                    "HugePages_Total",
                    "Hugepagesize",
                ]
                .map(|k| parse::flat_keyed_value(text, k))
            })?;
        let key = |value: Option<u64>, k: &str| {
            value.ok_or_else(|| ObserveError::Missing {
                path: path.clone(),
                key: k.into(),
            })
        };
        let capacity_bytes = key(total, "MemTotal")?;
        // `Hugetlb` (Linux 4.15) counts every size; before it, the default size alone.
        let hugepages_bytes = hugetlb
            .or_else(|| Some(huge_total?.saturating_mul(huge_size?)))
            .unwrap_or(0);
        let (usage_bytes, inactive_file_bytes, hugepages_outside) = match self.reader.version() {
            // The root memory cgroup does not charge hugetlb pages: its usage leaves them
            // out, so they must be taken from what is available.
            CgroupVersion::V1 => {
                let (usage, inactive_file) = self.reader.usage_and_inactive_file("")?;
                (usage, inactive_file.unwrap_or(0), hugepages_bytes)
            }
            // MemTotal − MemFree: the hugepage pool is never free memory, so the usage
            // already holds it; taking it off again would count it twice.
            CgroupVersion::V2 => (
                capacity_bytes.saturating_sub(key(free, "MemFree")?),
                key(inactive, "Inactive(file)")?,
                0,
            ),
        };
        let working_set_bytes = usage_bytes.saturating_sub(inactive_file_bytes);
        let hugepages_left_out_bytes = if self.config.hugepage_aware {
            hugepages_outside
        } else {
            0
        };
        Ok(NodeMemory {
            capacity_bytes,
            usage_bytes,
            inactive_file_bytes,
            working_set_bytes,
            hugepages_bytes,
            hugepages_left_out_bytes,
            available_bytes: capacity_bytes
                .saturating_sub(hugepages_left_out_bytes)
                .saturating_sub(working_set_bytes),
        })
    }

    pub(crate) fn allocatable(
        &self,
        cgroup: &str,
        node_capacity: u64,
    ) -> Result<AllocatableMemory, ObserveError> {
        let stats = self.reader.memory_stats(cgroup)?;
        let capacity_bytes = stats
            .limit_bytes
            .or(self.config.pods_capacity_bytes)
            .unwrap_or(node_capacity);
        Ok(AllocatableMemory {
            capacity_bytes,
            stats,
            available_bytes: capacity_bytes.saturating_sub(stats.working_set_bytes),
        })
    }

    pub(crate) fn pids(&self) -> Result<PidStats, ObserveError> {
        let path = self.config.proc_root.join("sys/kernel/pid_max");
        let max = parse::single_value(&self.read(&path)?)
            .map_err(|e| ObserveError::Parse {
                path: path.clone(),
                reason: e.to_string(),
            })?
            .unwrap_or(u64::MAX);
        // /proc/loadavg's fourth field is "runnable/total" scheduling entities: the same
        // count sysinfo(2) reports as procs, read from the injectable proc root.
        let path = self.config.proc_root.join("loadavg");
        let text = self.read(&path)?;
        let current = text
            .split_whitespace()
            .nth(3)
            .and_then(|f| f.split_once('/'))
            .and_then(|(_, total)| total.parse().ok())
            .ok_or_else(|| ObserveError::Parse {
                path,
                reason: format!("no runnable/total field in {text:?}"),
            })?;
        Ok(PidStats { max, current })
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn write(root: &std::path::Path, name: &str, text: &str) {
        let p = root.join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    #[test]
    fn observes_a_fake_v1_node() {
        let cg = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        write(cg.path(), "memory.usage_in_bytes", "6000000\n");
        write(cg.path(), "memory.stat", "total_inactive_file 1000000\n");
        write(cg.path(), "memory.limit_in_bytes", "9223372036854771712\n");
        write(cg.path(), "pods/memory.usage_in_bytes", "3000\n");
        write(cg.path(), "pods/memory.stat", "total_inactive_file 1000\n");
        write(cg.path(), "pods/memory.limit_in_bytes", "10000\n");
        write(
            proc.path(),
            "meminfo",
            "MemTotal: 10000 kB\nMemFree: 1 kB\n",
        );
        write(proc.path(), "sys/kernel/pid_max", "4194304\n");
        write(proc.path(), "loadavg", "0.00 0.01 0.05 2/345 999\n");
        let observer = Observer::new(
            CgroupReader::new(CgroupVersion::V1, cg.path()),
            ObserverConfig {
                pods_cgroup: Some("pods".into()),
                nodefs: cg.path().to_path_buf(),
                proc_root: proc.path().to_path_buf(),
                ..ObserverConfig::default()
            },
        );
        let o = observer.observe().unwrap();
        assert_eq!(o.memory.capacity_bytes, 10_240_000);
        assert_eq!(o.memory.working_set_bytes, 5_000_000);
        assert_eq!(o.memory.available_bytes, 5_240_000);
        let a = o.allocatable.unwrap();
        assert_eq!((a.capacity_bytes, a.available_bytes), (10000, 8000));
        assert_eq!(
            o.pids,
            Some(PidStats {
                max: 4194304,
                current: 345
            })
        );
        assert!(o.nodefs.is_some_and(|fs| fs.capacity_bytes > 0));
        assert!(o.failed.is_empty(), "{:?}", o.failed);
    }

    /// A cgroup v2 node of 1000 kB with 500 kB in use, whose proc root holds only meminfo.
    fn v2_node(cg: &std::path::Path, proc: &std::path::Path, config: ObserverConfig) -> Observer {
        write(
            proc,
            "meminfo",
            "MemTotal: 1000 kB\nMemFree: 400 kB\nInactive(file): 100 kB\n",
        );
        Observer::new(
            CgroupReader::new(CgroupVersion::V2, cg),
            ObserverConfig {
                proc_root: proc.to_path_buf(),
                ..config
            },
        )
    }

    #[test]
    fn a_failing_filesystem_or_pid_count_is_left_out_and_memory_stands() {
        let cg = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        let observer = v2_node(
            cg.path(),
            proc.path(),
            ObserverConfig {
                nodefs: cg.path().join("gone"),
                imagefs: Some(cg.path().join("also-gone")),
                ..ObserverConfig::default()
            },
        );
        let o = observer
            .observe()
            .expect("memory alone makes an observation");
        assert_eq!(o.memory.available_bytes, 500 * 1024);
        assert_eq!((o.nodefs, o.imagefs, o.pids), (None, None, None));
        assert!(o.dedicated_imagefs);
        assert_eq!(o.failed.len(), 3, "{:?}", o.failed);
        assert!(o.failed[0].starts_with("nodefs: ") && o.failed[0].contains("gone"));
        assert!(o.failed[2].starts_with("pids: ") && o.failed[2].contains("pid_max"));
    }

    #[test]
    fn an_image_filesystem_on_the_nodefs_path_is_read_too_not_taken_for_hung() {
        let cg = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        write(proc.path(), "sys/kernel/pid_max", "4194304\n");
        write(proc.path(), "loadavg", "0.00 0.01 0.05 2/345 999\n");
        let observer = v2_node(
            cg.path(),
            proc.path(),
            ObserverConfig {
                nodefs: cg.path().to_path_buf(),
                imagefs: Some(cg.path().to_path_buf()),
                ..ObserverConfig::default()
            },
        );
        for _ in 0..3 {
            let o = observer.observe().unwrap();
            assert!(o.failed.is_empty(), "{:?}", o.failed);
            // Read one after the other: the free space may move between them, the size not.
            let capacity = |fs: Option<FsStats>| fs.map(|fs| fs.capacity_bytes);
            assert_eq!(capacity(o.nodefs), capacity(o.imagefs));
            assert!(capacity(o.nodefs).is_some_and(|bytes| bytes > 0));
        }
    }

    #[test]
    fn v2_node_memory_comes_from_meminfo() {
        let cg = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        let observer = v2_node(cg.path(), proc.path(), ObserverConfig::default());
        let m = observer.node_memory().unwrap();
        assert_eq!(m.working_set_bytes, 500 * 1024);
        assert_eq!(m.available_bytes, 500 * 1024);
    }

    /// A v1 node of 10000 kB, 5000 kB of it in use, 2048 kB of it hugepages.
    fn v1_node_with_hugepages(
        cg: &std::path::Path,
        proc: &std::path::Path,
        meminfo_huge: &str,
        aware: bool,
    ) -> NodeMemory {
        write(cg, "memory.usage_in_bytes", "5120000\n");
        write(cg, "memory.stat", "total_inactive_file 0\n");
        write(
            proc,
            "meminfo",
            &format!("MemTotal: 10000 kB\nMemFree: 1 kB\n{meminfo_huge}"),
        );
        Observer::new(
            CgroupReader::new(CgroupVersion::V1, cg),
            ObserverConfig {
                proc_root: proc.to_path_buf(),
                hugepage_aware: aware,
                ..ObserverConfig::default()
            },
        )
        .node_memory()
        .unwrap()
    }

    // kubelet: HugepageAwareEviction (adjustForHugePages) takes every size's capacity out
    // of memory.available, clamped at zero; off, the signal is as before.
    #[rstest::rstest]
    #[case::all_sizes("Hugetlb: 2048 kB\nHugePages_Total: 1\nHugepagesize: 1024 kB\n", true, 2048 * 1024, 5_120_000 - 2048 * 1024)]
    #[case::old_kernel_default_size("HugePages_Total: 2\nHugepagesize: 1024 kB\n", true, 2048 * 1024, 5_120_000 - 2048 * 1024)]
    #[case::gate_off("Hugetlb: 2048 kB\n", false, 2048 * 1024, 5_120_000)]
    #[case::none("", true, 0, 5_120_000)]
    #[case::more_than_available("Hugetlb: 9000 kB\n", true, 9000 * 1024, 0)]
    fn v1_memory_available_leaves_out_hugepages(
        #[case] meminfo_huge: &str,
        #[case] aware: bool,
        #[case] hugepages: u64,
        #[case] available: u64,
    ) {
        let cg = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        let m = v1_node_with_hugepages(cg.path(), proc.path(), meminfo_huge, aware);
        assert_eq!(m.working_set_bytes, 5_120_000);
        assert_eq!(
            (m.hugepages_bytes, m.available_bytes),
            (hugepages, available)
        );
    }

    #[test]
    fn v2_hugepages_already_in_the_meminfo_usage_are_not_taken_twice() {
        let cg = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        write(
            proc.path(),
            "meminfo",
            "MemTotal: 1000 kB\nMemFree: 400 kB\nInactive(file): 100 kB\nHugetlb: 200 kB\n",
        );
        let m = Observer::new(
            CgroupReader::new(CgroupVersion::V2, cg.path()),
            ObserverConfig {
                proc_root: proc.path().to_path_buf(),
                ..ObserverConfig::default()
            },
        )
        .node_memory()
        .unwrap();
        // The 200 kB pool is part of the 600 kB not free.
        assert_eq!(m.hugepages_bytes, 200 * 1024);
        assert_eq!(m.available_bytes, 500 * 1024);
    }

    #[test]
    fn contention_reads_the_io_and_pods_pressure_files_only_when_asked() {
        let cg = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        let line = |avg: &str| {
            format!(
                "some avg10={avg} avg60=0.00 avg300=0.00 total=1\nfull avg10={avg} avg60=0.00 avg300=0.00 total=1\n"
            )
        };
        write(proc.path(), "pressure/memory", &line("1.00"));
        write(proc.path(), "pressure/io", &line("2.00"));
        write(cg.path(), "pods/memory.pressure", &line("3.00"));
        write(cg.path(), "pods/io.pressure", "not a pressure file\n");
        let observer = |contention| {
            v2_node(
                cg.path(),
                proc.path(),
                ObserverConfig {
                    pods_cgroup: Some("pods".into()),
                    contention,
                    pressure_root: Some(cg.path().to_path_buf()),
                    ..ObserverConfig::default()
                },
            )
        };
        let full10 = |psi: Option<Psi>| psi.and_then(|p| p.full).map(|f| f.avg10);
        let p = observer(true).pressure();
        assert_eq!(
            [
                full10(p.memory),
                full10(p.io),
                full10(p.pods_memory),
                full10(p.pods_io)
            ],
            [Some(1.0), Some(2.0), Some(3.0), None]
        );
        let p = observer(false).pressure();
        assert_eq!(
            (full10(p.memory), p.io, p.pods_memory),
            (Some(1.0), None, None)
        );
    }

    #[test]
    fn missing_meminfo_key_names_file_and_key() {
        let cg = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        write(proc.path(), "meminfo", "MemFree: 1 kB\n");
        let observer = Observer::new(
            CgroupReader::new(CgroupVersion::V2, cg.path()),
            ObserverConfig {
                proc_root: proc.path().to_path_buf(),
                ..ObserverConfig::default()
            },
        );
        let err = observer.node_memory().unwrap_err().to_string();
        assert!(err.contains("meminfo") && err.contains("MemTotal"), "{err}");
    }
}
